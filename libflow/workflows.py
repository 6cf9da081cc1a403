"""Workflows: definitions published as immutable versions, and the records of their runs."""

from __future__ import annotations

import asyncio
from typing import Any

from tortoise.exceptions import IntegrityError
from tortoise.transactions import in_transaction

from libflow.engine import NodeServices, RunResult, WorkflowDefinition, parse_definition
from libflow.engine import WorkflowRun as EngineRun
from libflow.errors import LibflowError, NotFound
from libflow.ids import new_id, utcnow
from libflow.models import Workflow, WorkflowRun, WorkflowVersion

MAX_RUNS_LISTED = 100


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
    if version is None:
        number = workflow.latest_version
    elif version.isascii() and version.isdigit() and str(int(version)) == version:
        number = int(version)
    else:  # int() would also read " 1", "01" or "1_0": none of them names a version
        number = -1
    found = await WorkflowVersion.get_or_none(workflow_id=workflow.id, number=number)
    if found is None:
        raise NotFound(f"workflow {workflow.id!r} has no version {version!r}")
    return found


def definition_of(version: WorkflowVersion) -> WorkflowDefinition:
    """The parsed definition of a stored version (it was valid when published)."""
    return parse_definition(version.definition)


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
    run = await WorkflowRun.get_or_none(id=run_id, project_id=project_id)
    if run is None:
        raise NotFound(f"run {run_id!r} not found")
    return run


async def run_version(
    workflow: Workflow,
    version: WorkflowVersion,
    *,
    event: str,
    inputs: dict[str, Any] | None,
    trigger: str,
    services: NodeServices,
    run_id: str | None = None,
) -> tuple[WorkflowRun, RunResult]:
    """Run one version and record it; a cancelled run (client gone) is recorded as such.

    An unknown event or invalid inputs raise before anything runs or is recorded.
    ``run_id`` lets a caller name the record before it exists (webhook deliveries do).
    """
    run = EngineRun(definition_of(version), event=event, inputs=inputs, services=services)
    record = await WorkflowRun.create(
        id=run_id or new_id(),
        workflow=workflow,
        project_id=workflow.project_id,
        version=version.number,
        event=event,
        trigger=trigger,
        status="running",
        inputs=run.inputs,
    )
    try:
        result = await run.execute()
    except asyncio.CancelledError:
        # The record must still say what happened: save it even though we are cancelled.
        await asyncio.shield(_save_result(record, run.result()))
        raise
    # Shielded too: a client leaving during this save must not leave the run "running".
    await asyncio.shield(_save_result(record, result))
    return record, result


async def record_refused_run(
    workflow: Workflow,
    version: WorkflowVersion,
    *,
    event: str,
    inputs: dict[str, Any] | None,
    trigger: str,
    error: LibflowError,
    run_id: str | None = None,
) -> WorkflowRun:
    """Record a run that never started (unknown event, invalid inputs) as failed.

    runsync answers such a caller with the error itself; a webhook delivery has
    nobody to answer, so its run record is where the error shows.
    """
    now = utcnow()
    return await WorkflowRun.create(
        id=run_id or new_id(),
        workflow=workflow,
        project_id=workflow.project_id,
        version=version.number,
        event=event,
        trigger=trigger,
        status="failed",
        status_code=error.status,
        inputs=inputs or {},
        error={"code": error.code, "node": None, "message": error.message},
        finished_at=now,
    )


async def _save_result(record: WorkflowRun, result: RunResult) -> None:
    record.status = result.status
    record.status_code = result.status_code
    record.outputs = result.outputs
    record.error = result.error.to_json() if result.error else None
    record.node_timings = result.timings_json()
    record.finished_at = result.finished_date or utcnow()
    await record.save(
        update_fields=["status", "status_code", "outputs", "error", "node_timings", "finished_at"]
    )
