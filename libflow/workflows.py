"""Workflows: definitions published as immutable versions, and the records of their runs."""

from __future__ import annotations

import asyncio
import json
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from tortoise.backends.base.client import BaseDBAsyncClient
from tortoise.exceptions import IntegrityError
from tortoise.transactions import in_transaction

from libflow.engine import NodeServices, RunResult, WorkflowDefinition, parse_definition
from libflow.engine import WorkflowRun as EngineRun
from libflow.errors import LibflowError, NotFound
from libflow.group_commit import commit_together, insert_together
from libflow.ids import new_id, possible_id, utcnow
from libflow.inline_reads import InlineReads, InlineReadUnavailable
from libflow.models import Workflow, WorkflowRun, WorkflowVersion

logger = logging.getLogger("libflow.workflows")

MAX_RUNS_LISTED = 100
RECORD_RUNNING_AFTER = 1.0  # seconds
_END_FIELDS = ("status", "status_code", "outputs", "error", "node_timings", "finished_at")
# A write committed in the same transaction as a run's final record.
RecordWith = Callable[[BaseDBAsyncClient, WorkflowRun], Awaitable[None]]


async def create_workflow(
    project_id: str, name: str, definition: dict[str, Any]
) -> tuple[Workflow, WorkflowVersion]:
    """A workflow with its first version; the definition is validated first."""
    parse_definition(definition)
    async with in_transaction() as connection:
        workflow = await Workflow.create(project_id=project_id, name=name, using_db=connection)
        version = await WorkflowVersion.create(
            workflow=workflow, number=1, definition=definition, using_db=connection
        )
    return workflow, version


async def get_workflow(project_id: str, workflow_id: str) -> Workflow:
    """One workflow of the project."""
    workflow = None
    if possible_id(workflow_id):
        workflow = await Workflow.get_or_none(id=workflow_id, project_id=project_id)
    if workflow is None:
        raise NotFound(f"workflow {workflow_id!r} not found")
    return workflow


async def publish_version(
    project_id: str, workflow_id: str, definition: dict[str, Any]
) -> WorkflowVersion:
    """The next numbered version; two concurrent publishes get two numbers."""
    parse_definition(definition)
    workflow = await get_workflow(project_id, workflow_id)
    for _ in range(5):
        number = workflow.latest_version + 1
        try:
            async with in_transaction() as connection:
                version = await WorkflowVersion.create(
                    workflow=workflow, number=number, definition=definition, using_db=connection
                )
                await (
                    Workflow.filter(id=workflow.id, latest_version__lt=number)
                    .using_db(connection)
                    .update(latest_version=number)
                )
            return version
        except IntegrityError:
            # Someone published this number first: take the next one.
            await workflow.refresh_from_db(fields=["latest_version"])
    raise IntegrityError("could not allocate a version number")


async def list_workflows(project_id: str) -> list[Workflow]:
    """The project's workflows, newest first."""
    return await Workflow.filter(project_id=project_id).order_by("-created_at", "-id")


async def list_versions(workflow: Workflow) -> list[WorkflowVersion]:
    """Every version of a workflow, oldest first."""
    return await WorkflowVersion.filter(workflow_id=workflow.id).order_by("number")


async def find_version(workflow: Workflow, version: str | None) -> WorkflowVersion:
    """The version named ``version`` ("1", "2", ...), or the latest when None."""
    number = workflow.latest_version if version is None else _version_number(version)
    found = await WorkflowVersion.get_or_none(workflow_id=workflow.id, number=number)
    if found is None:
        raise NotFound(f"workflow {workflow.id!r} has no version {version!r}")
    return found


_PARSED: OrderedDict[tuple[str, int], WorkflowDefinition] = OrderedDict()
_PARSED_KEPT = 256


def _version_number(version: str) -> int:
    """The number a version string names, or -1 (no version has it)."""
    if version.isascii() and version.isdigit() and str(int(version)) == version:
        return int(version)
    return -1  # int() would also read " 1", "01" or "1_0": none of them names a version


def definition_of(version: WorkflowVersion) -> WorkflowDefinition:
    """The parsed definition of a stored version (it was valid when published).

    Versions never change, so each is parsed once per process (the most recent few
    hundred are kept): parsing costs more than running a small workflow.
    """
    key = (version.workflow_id, version.number)  # workflow ids are random: unique anywhere
    parsed = _PARSED.get(key)
    if parsed is None:
        return _parse_once(key, version.definition)
    _PARSED.move_to_end(key)
    return parsed


def _parse_once(key: tuple[str, int], definition: dict[str, Any]) -> WorkflowDefinition:
    parsed = _PARSED[key] = parse_definition(definition)
    if len(_PARSED) > _PARSED_KEPT:
        _PARSED.popitem(last=False)
    return parsed


@dataclass(frozen=True, slots=True)
class RunTarget:
    """What a run needs of its workflow: ids, the version's number and its definition."""

    workflow_id: str
    project_id: str
    version: int
    definition: WorkflowDefinition


# One read for the workflow and its version ("latest" when the number is NULL).
_TARGET_SQL = (
    'SELECT w."latest_version" AS latest, v."number" AS number, v."definition" AS definition'
    ' FROM "workflows" w LEFT JOIN "workflow_versions" v ON v."workflow_id" = w."id"'
    ' AND v."number" = COALESCE(?, w."latest_version")'
    ' WHERE w."id" = ? AND w."project_id" = ?'
)


async def find_run_target(
    project_id: str, workflow_id: str, version: str | None, reads: InlineReads
) -> RunTarget:
    """The version to run (the latest when None); NotFound for the workflow or the version.

    runsync's hottest read: on SQLite it is one inline query, and a version parsed
    before is not parsed again.
    """
    if not possible_id(workflow_id):
        raise NotFound(f"workflow {workflow_id!r} not found")
    number = None if version is None else _version_number(version)
    try:
        row = reads.row(_TARGET_SQL, (number, workflow_id, project_id))
    except InlineReadUnavailable:
        return await _find_run_target_in_orm(project_id, workflow_id, version, number)
    if row is None:
        raise NotFound(f"workflow {workflow_id!r} not found")
    if row["number"] is None:
        raise NotFound(f"workflow {workflow_id!r} has no version {version!r}")
    key = (workflow_id, row["number"])
    parsed = _PARSED.get(key)
    if parsed is None:
        parsed = _parse_once(key, json.loads(row["definition"]))
    return RunTarget(workflow_id, project_id, row["number"], parsed)


async def _find_run_target_in_orm(
    project_id: str, workflow_id: str, version: str | None, number: int | None
) -> RunTarget:
    """find_run_target through Tortoise: one read, and one more for an unparsed version."""
    versions = WorkflowVersion.filter(workflow_id=workflow_id, workflow__project_id=project_id)
    # The latest version is the highest number (publish only ever raises latest_version).
    versions = versions.order_by("-number") if number is None else versions.filter(number=number)
    found: list[int] = await versions.limit(1).values_list("number", flat=True)  # type: ignore[assignment]
    if not found:
        if await Workflow.exists(id=workflow_id, project_id=project_id):
            raise NotFound(f"workflow {workflow_id!r} has no version {version!r}")
        raise NotFound(f"workflow {workflow_id!r} not found")
    key = (workflow_id, found[0])
    parsed = _PARSED.get(key)
    if parsed is None:
        stored = await WorkflowVersion.get(workflow_id=workflow_id, number=key[1])
        parsed = _parse_once(key, stored.definition)
    return RunTarget(workflow_id, project_id, key[1], parsed)


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
        record.update_from_dict(end)
        insert = True
        if self._running is not None:
            try:
                await self._running
                insert = False
            except Exception:
                logger.exception("run %s: its running record was not written", record.id)
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
