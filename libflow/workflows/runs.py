"""Runs of a workflow's version, and their records: written at the end, or early when long.

A run is recorded once, at its end, unless it is watched (runsync with events), was queued
(its record exists from the start), or runs past RECORD_RUNNING_AFTER: then its record says
"running", carries a lease, and the run is registered with ``RunControl`` so a cancel can
reach it and its events reach watchers on any process.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import Any, cast

from tortoise.backends.base.client import BaseDBAsyncClient

from libflow.db.group_commit import commit_together, insert_together
from libflow.db.new_rows import new_instance
from libflow.engine import InvalidInputs, NodeServices, RunError, RunResult, UnknownEvent
from libflow.engine import WorkflowRun as EngineRun
from libflow.engine.runner import RunStatus
from libflow.errors import LibflowError
from libflow.ids import new_ordered_id, utcnow
from libflow.logs import log_redactor
from libflow.models import WorkflowRun
from libflow.workflows.run_events import RUN_FINISHED, RUN_STARTED, RunEventLog
from libflow.workflows.running import RunControl
from libflow.workflows.versions import RunTarget

logger = logging.getLogger("libflow.workflows")

RECORD_RUNNING_AFTER = 1.0  # seconds
_END_FIELDS = ("status", "status_code", "outputs", "error", "node_timings", "finished_at")
# A write committed in the same transaction as a run's final record.
RecordWith = Callable[[BaseDBAsyncClient, WorkflowRun], Awaitable[None]]
CANCELLED = RunError("CANCELLED", None, "the run was cancelled")
INTERRUPTED = RunError("INTERRUPTED", None, "the process running it stopped mid-run")


def new_record(target: RunTarget, run_id: str | None, **fields: Any) -> WorkflowRun:
    """A run record of ``target``'s version, started now unless told (not saved)."""
    fields.setdefault("started_at", utcnow())
    return new_instance(
        WorkflowRun,
        id=run_id or new_ordered_id(),
        workflow_id=target.workflow_id,
        project_id=target.project_id,
        version=target.version,
        **fields,
    )


async def run_version(
    target: RunTarget,
    *,
    event: str,
    inputs: dict[str, Any] | None,
    trigger: str,
    services: NodeServices,
    control: RunControl | None = None,
    run_id: str | None = None,
    record_with: RecordWith | None = None,
    claimed: WorkflowRun | None = None,
    watched: asyncio.Event | None = None,
    parent_run_id: str | None = None,
    depth: int = 0,
    interrupted_when_stopped: bool = False,
) -> tuple[WorkflowRun, RunResult]:
    """Run one version and record it; a cancelled run is recorded as such.

    An unknown event or invalid inputs raise before anything runs; the refused run is
    recorded as failed.
    ``run_id`` lets a caller name the record before it exists, and ``record_with``
    commits a write of its own with the final record (webhook deliveries do both).
    ``claimed`` is a queued run's record this process claimed; ``watched`` records the
    run as running at once, publishes its events from the start (runsync with events),
    and is set once the record is written (watchers may look for it from then on).
    ``parent_run_id`` and ``depth`` place a sub-run (call_workflow, map) under its parent.
    A cancel (``control``) ends the run "cancelled" and returns normally; a stop of the
    calling task for another reason (a client gone, a shutdown) is recorded and re-raised:
    "cancelled" for a caller that left (runsync), failed INTERRUPTED for a run that is
    nobody's request (a claimed run; a delivery's, with ``interrupted_when_stopped``).
    """
    if claimed is not None:
        run_id = claimed.id
    secrets = services.secrets
    log = RunEventLog(
        run_id or new_ordered_id(),
        first_id=2 if claimed is not None else 1,
        redact=None if secrets is None else secrets.redact,
    )
    if secrets is not None:
        # Not reset: what this task logs after the run (its answer) hides the values too.
        log_redactor.set(secrets.redact_text)
    try:
        run = EngineRun(
            target.definition,
            event=event,
            inputs=inputs,
            services=services,
            listener=log.emit,
            run_id=log.run_id,
            depth=depth,
        )
    except (UnknownEvent, InvalidInputs) as refused:
        # Refused before anything ran: recorded as failed all the same (a caller hears the
        # error; a delivery has nobody to hear it). A claimed run's record exists already:
        # its claimer ends it.
        if claimed is None:
            await record_refused_run(
                target,
                event=event,
                inputs=inputs,
                trigger=trigger,
                error=refused,
                run_id=log.run_id,
                record_with=record_with,
            )
        raise
    recorder = _RunRecorder(target, run, trigger, record_with, control, log, claimed, parent_run_id)
    log.emit(RUN_STARTED, {"runId": log.run_id})
    timer: asyncio.TimerHandle | None = None
    if claimed is not None:
        recorder.watch()
    elif watched is not None:
        await recorder.record_running_now()
        watched.set()
    else:
        # Most runs end within milliseconds: their record is written once, when they end.
        # A longer run shows as "running" from RECORD_RUNNING_AFTER on.
        timer = asyncio.get_running_loop().call_later(RECORD_RUNNING_AFTER, recorder.record_running)
    try:
        result = await run.execute()
    except asyncio.CancelledError:
        recorder.unwatch()
        if timer is not None:
            timer.cancel()
        result = run.result()
        task = asyncio.current_task()
        if control is not None and control.running.cancel_requested(log.run_id) and task:
            # Stopped by a cancel: the caller is still there to hear how the run ended.
            task.uncancel()
            result = dataclasses.replace(result, error=CANCELLED)
        else:
            if claimed is not None or interrupted_when_stopped:
                # A shutdown: nobody cancelled it, and it is not run again.
                result = dataclasses.replace(
                    result, status="failed", status_code=500, error=INTERRUPTED
                )
            # The record must still say what happened: save it even though we are cancelled.
            await asyncio.shield(recorder.record_end(result))
            raise
    except Exception:
        # A bug of the runner: it ended the run as failed (INTERNAL), which the record and
        # the caller's answer say like any other failure.
        logger.exception("run %s: the runner failed", log.run_id)
        result = run.result()
    # No await since the run ended: a cancel can no longer reach this task.
    recorder.unwatch()
    if timer is not None:
        timer.cancel()
    # A client leaving during this save must not leave the run unrecorded, or "running".
    if recorder.ends_with_one_insert:
        return await recorder.record_end(result), result
    # A task of its own, which a cancel of this one does not stop.
    record = await asyncio.shield(recorder.record_end(result))
    return record, _as_recorded(result, record)


def _as_recorded(result: RunResult, record: WorkflowRun) -> RunResult:
    """``result``, or the end the record kept when another hand ended the run first (the
    sweep, past its lease): a caller (runsync, a calling node) hears what is stored."""
    if record.status == result.status:
        return result
    error = record.error
    return dataclasses.replace(
        result,
        status=cast(RunStatus, record.status),
        status_code=record.status_code or 500,
        outputs=record.outputs or {},
        error=None
        if error is None
        else RunError(error["code"], error.get("node"), error["message"]),
    )


class _RunRecorder:
    """Writes a run's record: at its end, and before that too if it runs for long.

    The record is built when it is first written: most runs are written once, at their
    end, and building a model costs more than the small run it records.
    """

    def __init__(
        self,
        target: RunTarget,
        run: EngineRun,
        trigger: str,
        record_with: RecordWith | None,
        control: RunControl | None,
        log: RunEventLog,
        claimed: WorkflowRun | None,
        parent_run_id: str | None,
    ) -> None:
        self._target = target
        self.run_id = log.run_id
        self._run = run
        self._trigger = trigger
        self._started_at = claimed.started_at if claimed is not None else utcnow()
        self._record_with = record_with
        self._control = control
        self._log = log
        self._task = asyncio.current_task()
        self._running: asyncio.Task[None] | None = None
        self._record: WorkflowRun | None = claimed
        self._saved = claimed is not None  # the record is in the database already
        self._parent_run_id = parent_run_id

    def _new(self, **fields: Any) -> WorkflowRun:
        run = self._run
        inputs = run.inputs
        secrets = run.state.services.secrets
        if secrets is not None:
            # A sub-run's inputs are values its parent built, secrets included: the record
            # never shows a secret's value (the run and its sub-runs share what is redacted).
            inputs = secrets.redact(inputs)
        return new_record(
            self._target,
            self.run_id,
            started_at=self._started_at,
            event=run.event,
            trigger=self._trigger,
            inputs=inputs,
            parent_run_id=self._parent_run_id,
            **fields,
        )

    def _running_record(self) -> WorkflowRun:
        lease = self._control.running.lease_until() if self._control else None
        record = self._record = self._new(
            status="running", lease_until=utcnow() + lease if lease else None
        )
        return record

    def record_running(self) -> None:
        """Write the record as "running" now (called by the loop's timer)."""
        record = self._running_record()
        self._running = asyncio.create_task(
            commit_together(lambda db: record.save(using_db=db, force_create=True))
        )
        self.watch()

    async def record_running_now(self) -> None:
        """Write the record as "running" before the run starts (it is watched)."""
        record = self._running_record()
        await commit_together(lambda db: record.save(using_db=db, force_create=True))
        self._saved = True
        self.watch()

    def watch(self) -> None:
        """From now on, cancels reach this run and its events are published."""
        if self._control is None:
            return
        if self._task is not None:
            self._control.running.add(self.run_id, self._task)
        self._log.attach(self._control.events)

    def unwatch(self) -> None:
        """The run ended: cancels no longer reach it."""
        if self._control is not None:
            self._control.running.discard(self.run_id)

    @property
    def ends_with_one_insert(self) -> bool:
        """Whether the run's end is its only write: its row, handed to the group commit
        before ``record_end`` first awaits, is written even if the caller is cancelled then
        (a write is never taken back), so the end needs no shield, and no task of its own
        (about 10 us, on every runsync)."""
        return self._record is None and self._record_with is None and not self._log.attached

    async def record_end(self, result: RunResult) -> WorkflowRun:
        """Write how the run ended, then tell its watchers."""
        record = await self._write_end(result)
        if self._log.attached:
            self._log.emit(RUN_FINISHED, {})
        return record

    async def _write_end(self, result: RunResult) -> WorkflowRun:
        """An update of the running record, or the only insert."""
        end = {
            "status": result.status,
            "status_code": result.status_code,
            "outputs": result.outputs,
            "error": result.error.to_json() if result.error else None,
            "node_timings": result.timings_json(),
            "finished_at": result.finished_date or utcnow(),
        }
        secrets = self._run.state.services.secrets
        if secrets is not None:  # outputs, error and timings, never the secrets' values
            end = secrets.redact(end)
        record = self._record
        if record is None:
            record = self._record = self._new(**end)
            if self._record_with is None:
                await insert_together(record)  # the common case: one row, batched with others
                return record
            await commit_together(lambda db: self._write(db, record, insert=True))
            return record
        insert = not self._saved
        if self._running is not None:
            # The "running" insert may still wait in a group commit: it must write "running",
            # not this end. The end is written only below, in one transaction with the
            # caller's own write (a delivery's state), so a crash between the two commits
            # can never leave a finished run beside a delivery that never finished.
            try:
                await self._running
                insert = False
            except Exception:
                logger.exception("run %s: its running record was not written", record.id)
        record.update_from_dict(end)
        await commit_together(lambda db: self._write(db, record, insert=insert))
        return record

    async def _write(self, db: BaseDBAsyncClient, record: WorkflowRun, *, insert: bool) -> None:
        if insert:
            await record.save(using_db=db, force_create=True)
        elif not await (
            WorkflowRun.filter(id=record.id, status="running")
            .using_db(db)
            .update(**{name: getattr(record, name) for name in _END_FIELDS})
        ):
            # Ended meanwhile by another hand: this process stopped (SIGSTOP, a long pause)
            # past its lease and the sweep failed the run INTERRUPTED. That end is final: a
            # run seen failed must not turn succeeded later. The record (and whatever the
            # caller writes with it) says what is stored.
            logger.warning("run %s ended after it had been recorded ended: kept", record.id)
            stored = await WorkflowRun.get_or_none(id=record.id, using_db=db)
            if stored is not None:  # None: deleted with its project meanwhile
                record.update_from_dict({name: getattr(stored, name) for name in _END_FIELDS})
        if self._record_with is not None:
            await self._record_with(db, record)


async def record_refused_run(
    target: RunTarget,
    *,
    event: str,
    inputs: dict[str, Any] | None,
    trigger: str,
    error: LibflowError,
    run_id: str | None = None,
    record_with: RecordWith | None = None,
) -> WorkflowRun:
    """Record a run that never started (unknown event, invalid inputs) as failed.

    runsync answers such a caller with the error itself; a webhook delivery has
    nobody to answer, so its run record is where the error shows.
    """
    record = new_record(
        target,
        run_id,
        event=event,
        trigger=trigger,
        status="failed",
        status_code=error.status,
        inputs=inputs or {},
        error={"code": error.code, "node": None, "message": error.message},
    )
    record.finished_at = record.started_at

    async def write(db: BaseDBAsyncClient) -> None:
        await record.save(using_db=db, force_create=True)
        if record_with is not None:
            await record_with(db, record)

    await commit_together(write)
    return record
