"""Run history: one run, or a page of runs, newest first, found by what users filter on.

Pages are cut by a cursor (the last run's start and id), not an offset: a page costs the
same at the millionth run as at the first. The indexes of ``WorkflowRun`` serve each filter
combination users ask for most (project or workflow, with or without a status).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from libflow.errors import NotFound
from libflow.ids import possible_id
from libflow.models import WorkflowRun
from libflow.paging import after_cursor, page_and_cursor
from libflow.workflows.versions import get_workflow

RUN_STATUSES = ("queued", "running", "succeeded", "failed", "timed_out", "cancelled")
RUN_TRIGGERS = ("api", "api_async", "webhook", "replay", "schedule", "call")
DEFAULT_PAGE = 100
MAX_PAGE = 1000


@dataclass(frozen=True, slots=True)
class RunFilter:
    """What a page of runs is narrowed to; None is "any"."""

    workflow_id: str | None = None
    status: str | None = None
    trigger: str | None = None
    version: int | None = None
    started_after: datetime | None = None
    started_before: datetime | None = None


async def get_run(project_id: str, run_id: str) -> WorkflowRun:
    """One run of the project."""
    run = None
    if possible_id(run_id):
        run = await WorkflowRun.get_or_none(id=run_id, project_id=project_id)
    if run is None:
        raise NotFound(f"run {run_id!r} not found")
    return run


async def list_runs(
    project_id: str, runs: RunFilter, *, limit: int, cursor: str | None
) -> tuple[list[WorkflowRun], str | None]:
    """One page of the project's runs, newest first, and the next page's cursor if any."""
    query = WorkflowRun.filter(project_id=project_id)
    if runs.workflow_id is not None:
        workflow = await get_workflow(project_id, runs.workflow_id)
        query = query.filter(workflow_id=workflow.id)
    if runs.status is not None:
        query = query.filter(status=runs.status)
    if runs.trigger is not None:
        query = query.filter(trigger=runs.trigger)
    if runs.version is not None:
        query = query.filter(version=runs.version)
    if runs.started_after is not None:
        query = query.filter(started_at__gt=runs.started_after)
    if runs.started_before is not None:
        query = query.filter(started_at__lt=runs.started_before)
    if cursor:
        query = after_cursor(query, cursor, "started_at")
    found = await query.order_by("-started_at", "-id").limit(limit + 1)
    return page_and_cursor(found, limit, lambda run: run.started_at)
