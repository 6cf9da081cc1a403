"""Workflows and their versions: immutable, numbered, parsed once per process."""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tortoise.exceptions import IntegrityError
from tortoise.transactions import in_transaction

from libflow.db.fast_reads import FastReads
from libflow.engine import InvalidWorkflow, WorkflowDefinition, parse_definition_off_loop
from libflow.errors import NotFound
from libflow.ids import possible_id, version_number
from libflow.models import Workflow, WorkflowVersion
from libflow.paging import after_cursor, page_and_cursor

# Node types that run another workflow of the project.
CALL_TYPES = frozenset({"call_workflow", "map"})


async def create_workflow(
    project_id: str, name: str, definition: dict[str, Any]
) -> tuple[Workflow, WorkflowVersion]:
    """A workflow with its first version; the definition is validated first."""
    # Compiling a definition is CPU work (up to about a second at the compile budget).
    await _check_calls(project_id, await parse_definition_off_loop(definition))
    async with in_transaction() as connection:
        workflow = await Workflow.create(project_id=project_id, name=name, using_db=connection)
        version = await WorkflowVersion.create(
            workflow=workflow, number=1, definition=definition, using_db=connection
        )
    return workflow, version


async def _check_calls(project_id: str, definition: WorkflowDefinition) -> None:
    """InvalidWorkflow when a call_workflow or map node names no workflow of the project.

    Checked at publish as the engine cannot (it knows no projects): another project's
    workflow, or none at all, is refused. A version named by a node is checked at run
    time: it may be published later.
    """
    calls = {n.id: n.config["workflowId"] for n in definition.nodes if n.type in CALL_TYPES}
    if not calls:
        return
    named = [workflow_id for workflow_id in calls.values() if possible_id(workflow_id)]
    known = set(
        await Workflow.filter(project_id=project_id, id__in=named).values_list("id", flat=True)
    )
    problems = [
        {"node": node_id, "problem": f"workflow {workflow_id!r} is not a workflow of this project"}
        for node_id, workflow_id in calls.items()
        if workflow_id not in known
    ]
    if problems:
        first = problems[0]
        raise InvalidWorkflow(
            f"invalid workflow: node {first['node']!r}: {first['problem']}", details=problems
        )


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
    await _check_calls(project_id, await parse_definition_off_loop(definition))
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
                    # A queryset update leaves auto_now alone: the workflow changed when
                    # its latest version was published.
                    .update(latest_version=number, updated_at=version.created_at)
                )
            return version
        except IntegrityError:
            # Someone published this number first: take the next one.
            await workflow.refresh_from_db(fields=["latest_version"])
    raise IntegrityError("could not allocate a version number")


async def list_workflows(
    project_id: str, *, limit: int, cursor: str | None = None
) -> tuple[list[Workflow], str | None]:
    """One page of the project's workflows, newest first, and the next page's cursor."""
    query = Workflow.filter(project_id=project_id)
    if cursor:
        query = after_cursor(query, cursor, "created_at")
    found = await query.order_by("-created_at", "-id").limit(limit + 1)
    return page_and_cursor(found, limit, lambda workflow: workflow.created_at)


@dataclass(frozen=True, slots=True)
class VersionSummary:
    """A version without its definition."""

    number: int
    created_at: datetime


async def list_versions(workflow: Workflow) -> list[VersionSummary]:
    """Every version of a workflow, oldest first, without their definitions: a definition
    may be 1 MiB and a workflow has as many versions as were published."""
    rows = await (
        WorkflowVersion.filter(workflow_id=workflow.id)
        .order_by("number")
        .values_list("number", "created_at")
    )
    return [VersionSummary(number, created_at) for number, created_at in rows]


async def rename_workflow(project_id: str, workflow_id: str, name: str) -> Workflow:
    """Give the workflow another name (its versions and runs are unchanged)."""
    workflow = await get_workflow(project_id, workflow_id)
    if name != workflow.name:
        workflow.name = name
        await workflow.save(update_fields=["name", "updated_at"])
    return workflow


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
    number = version_number(version)
    return -1 if number is None else number


async def _parse_once(key: tuple[str, int], definition: dict[str, Any]) -> WorkflowDefinition:
    """Parse a stored version (it was valid when published) and keep it: versions never
    change, and parsing costs more than running a small workflow."""
    parsed = _PARSED[key] = await parse_definition_off_loop(definition)
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


async def find_run_target(
    project_id: str, workflow_id: str, version: str | None, reads: FastReads
) -> RunTarget:
    """The version to run (the latest when None); NotFound for the workflow or the version.

    runsync's hottest read: on SQLite it is one inline query, and a version parsed
    before is not parsed again.
    """
    if not possible_id(workflow_id):
        raise NotFound(f"workflow {workflow_id!r} not found")
    number = None if version is None else _version_number(version)
    found = await reads.workflow_version(project_id, workflow_id, number)
    if found is None:
        raise NotFound(f"workflow {workflow_id!r} not found")
    if found.number is None:
        raise NotFound(f"workflow {workflow_id!r} has no version {version!r}")
    key = (workflow_id, found.number)
    parsed = _PARSED.get(key)
    if parsed is None:
        if found.definition is not None:
            definition = json.loads(found.definition)
        else:
            stored = await WorkflowVersion.get(workflow_id=workflow_id, number=found.number)
            definition = stored.definition
        parsed = await _parse_once(key, definition)
    return RunTarget(workflow_id, project_id, found.number, parsed)
