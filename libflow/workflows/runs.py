"""Runs of a workflow's version, and their records: written at the end, or early when long."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from tortoise.backends.base.client import BaseDBAsyncClient

from libflow.db.group_commit import commit_together, insert_together
from libflow.engine import NodeServices, RunResult
from libflow.engine import WorkflowRun as EngineRun
from libflow.errors import LibflowError, NotFound
from libflow.ids import new_id, possible_id, utcnow
from libflow.models import WorkflowRun
from libflow.workflows.versions import RunTarget, get_workflow

logger = logging.getLogger("libflow.workflows")

MAX_RUNS_LISTED = 100
RECORD_RUNNING_AFTER = 1.0  # seconds
_END_FIELDS = ("status", "status_code", "outputs", "error", "node_timings", "finished_at")
# A write committed in the same transaction as a run's final record.
RecordWith = Callable[[BaseDBAsyncClient, WorkflowRun], Awaitable[None]]


async def list_runs(project_id: str, workflow_id: str) -> list[WorkflowRun]:
    """The workflow's latest runs, newest first."""
    workflow = await get_workflow(project_id, workflow_id)
    return (
        await WorkflowRun.filter(workflow_id=workflow.id)
        .order_by("-started_at", "-id")
        .limit(MAX_RUNS_LISTED)
    )


async def get_run(project_id: str, run_id: str) -> WorkflowRun:
    """One run of the project."""
    run = None
    if possible_id(run_id):
        run = await WorkflowRun.get_or_none(id=run_id, project_id=project_id)
    if run is None:
        raise NotFound(f"run {run_id!r} not found")
    return run


def _new_record(target: RunTarget, run_id: str | None, **fields: Any) -> WorkflowRun:
    """A run record of ``target``'s version, started now unless told (not saved)."""
    fields.setdefault("started_at", utcnow())
    return WorkflowRun(
        id=run_id or new_id(),
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
    run_id: str | None = None,
    record_with: RecordWith | None = None,
) -> tuple[WorkflowRun, RunResult]:
    """Run one version and record it; a cancelled run (client gone) is recorded as such.

    An unknown event or invalid inputs raise before anything runs or is recorded.
    ``run_id`` lets a caller name the record before it exists, and ``record_with``
    commits a write of its own with the final record (webhook deliveries do both).
    """
    run = EngineRun(target.definition, event=event, inputs=inputs, services=services)
    recorder = _RunRecorder(target, run_id, run, trigger, record_with)
    # Most runs end within milliseconds: their record is written once, when they end.
    # A longer run shows as "running" from RECORD_RUNNING_AFTER on.
    timer = asyncio.get_running_loop().call_later(RECORD_RUNNING_AFTER, recorder.record_running)
    try:
        result = await run.execute()
    except asyncio.CancelledError:
        timer.cancel()
        # The record must still say what happened: save it even though we are cancelled.
        await asyncio.shield(recorder.record_end(run.result()))
        raise
    except Exception:
        # A bug of the runner: it ended the run as failed (INTERNAL), which the record and
        # the caller's answer say like any other failure.
        logger.exception("run %s: the runner failed", recorder.run_id)
        result = run.result()
    timer.cancel()
    # Shielded too: a client leaving during this save must not leave the run "running".
    return await asyncio.shield(recorder.record_end(result)), result


class _RunRecorder:
    """Writes a run's record: at its end, and before that too if it runs for long.

    The record is built when it is first written: most runs are written once, at their
    end, and building a model costs more than the small run it records.
    """

    def __init__(
        self,
        target: RunTarget,
        run_id: str | None,
        run: EngineRun,
        trigger: str,
        record_with: RecordWith | None,
    ) -> None:
        self._target = target
        self.run_id = run_id or new_id()
        self._run = run
        self._trigger = trigger
        self._started_at = utcnow()
        self._record_with = record_with
        self._running: asyncio.Task[None] | None = None
        self._record: WorkflowRun | None = None

    def _new(self, **fields: Any) -> WorkflowRun:
        run = self._run
        return _new_record(
            self._target,
            self.run_id,
            started_at=self._started_at,
            event=run.event,
            trigger=self._trigger,
            inputs=run.inputs,
            **fields,
        )

    def record_running(self) -> None:
        """Write the record as "running" now (called by the loop's timer)."""
        record = self._record = self._new(status="running")
        self._running = asyncio.create_task(
            commit_together(lambda db: record.save(using_db=db, force_create=True))
        )

    async def record_end(self, result: RunResult) -> WorkflowRun:
        """Write how the run ended: an update of the running record, or the only insert."""
        end = {
            "status": result.status,
            "status_code": result.status_code,
            "outputs": result.outputs,
            "error": result.error.to_json() if result.error else None,
            "node_timings": result.timings_json(),
            "finished_at": result.finished_date or utcnow(),
        }
        record = self._record
        if record is None:
            record = self._record = self._new(**end)
            if self._record_with is None:
                await insert_together(record)  # the common case: one row, batched with others
                return record
            await commit_together(lambda db: self._write_end(db, record, insert=True))
            return record
        insert = True
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
        await commit_together(lambda db: self._write_end(db, record, insert=insert))
        return record

    async def _write_end(self, db: BaseDBAsyncClient, record: WorkflowRun, *, insert: bool) -> None:
        if insert:
            await record.save(using_db=db, force_create=True)
        else:
            await record.save(update_fields=_END_FIELDS, using_db=db)
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
    record = _new_record(
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
