"""Handlers of runs as resources: start one, find them, cancel one, watch one's events."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from libflow import appkeys
from libflow.api.bodies import RunBody, parse_body, query_limit
from libflow.api.responses import json_response, page_response
from libflow.api.sse import stream_events
from libflow.errors import ValidationFailed
from libflow.ids import iso, version_number
from libflow.json_text import utf8_json
from libflow.models import WorkflowRun
from libflow.workflows import cancel, run_history, run_queue, versions
from libflow.workflows.run_events import parse_last_event_id
from libflow.workflows.run_history import RUN_STATUSES, RUN_TRIGGERS, RunFilter
from libflow.workflows.run_watch import watch_run

routes = web.RouteTableDef()
PROJECT = "/api/publicv1/projects/{projectId}"
WORKFLOW = f"{PROJECT}/workflows/{{workflowId}}"
RUN = f"{PROJECT}/runs/{{runId}}"


def _project(request: web.Request) -> str:
    return request.match_info["projectId"]


def run_json(run: WorkflowRun) -> dict[str, Any]:
    """A run record."""
    return {
        "runId": run.id,
        "workflowId": run.workflow_id,
        "version": str(run.version),
        "event": run.event,
        "trigger": run.trigger,
        "status": run.status,
        "statusCode": run.status_code,
        "inputs": run.inputs,
        "outputs": run.outputs,
        "error": run.error,
        "nodeTimings": run.node_timings,
        "parentRunId": run.parent_run_id,
        "startedDate": iso(run.started_at),
        "finishedDate": iso(run.finished_at),
    }


def run_location(run: WorkflowRun) -> str:
    """Where a run record lives."""
    return f"/api/publicv1/projects/{run.project_id}/runs/{run.id}"


def accepted(run: WorkflowRun) -> web.Response:
    """202 with the run record and its Location: the answer of every way to queue a run."""
    response = json_response(run_json(run), status=202)
    response.headers["Location"] = run_location(run)
    return response


@routes.post(f"{WORKFLOW}/runs")
async def start_run(request: web.Request) -> web.Response:
    """Queue a run; 202 once it is committed. A worker (or this server) runs it."""
    body = await parse_body(request, RunBody, allow_empty=True)
    project_id = _project(request)
    target = await versions.find_run_target(
        project_id, request.match_info["workflowId"], body.version, request.app[appkeys.READS]
    )
    resources = request.app[appkeys.RESOURCES]
    run = await run_queue.queue_run(
        target,
        event=body.runEvent,
        inputs=body.inputs,
        trigger="api_async",
        control=resources.runs,
        jobs=resources.jobs,
    )
    return accepted(run)


@routes.get(f"{PROJECT}/runs")
async def list_project_runs(request: web.Request) -> web.Response:
    """The project's runs, newest first, filtered; a Link header points at the next page."""
    return await _page(request, request.query.get("workflowId") or None)


@routes.get(f"{WORKFLOW}/runs")
async def list_workflow_runs(request: web.Request) -> web.Response:
    """The workflow's runs, as the project's runs filtered by it."""
    return await _page(request, request.match_info["workflowId"])


async def _page(request: web.Request, workflow_id: str | None) -> web.Response:
    limit = query_limit(request, default=run_history.DEFAULT_PAGE, maximum=run_history.MAX_PAGE)
    runs_filter = _filter(request, workflow_id)
    page, next_cursor = await run_history.list_runs(
        _project(request), runs_filter, limit=limit, cursor=request.query.get("cursor")
    )
    return page_response(
        request, [run_json(run) for run in page], limit=limit, next_cursor=next_cursor
    )


def _filter(request: web.Request, workflow_id: str | None) -> RunFilter:
    """The filters of the query string; VALIDATION_ERROR naming each bad one."""
    query = request.query
    problems: list[dict[str, str]] = []

    def choice(name: str, allowed: tuple[str, ...]) -> str | None:
        value = query.get(name)
        if value is not None and value not in allowed:
            problems.append({"field": name, "problem": f"must be one of {', '.join(allowed)}"})
            return None
        return value

    def moment(name: str) -> datetime | None:
        value = query.get(name)
        if value is None:
            return None
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
            # In UTC here: a moment that has no UTC date (year 1 east of Greenwich) would
            # fail in the database driver's conversion instead.
            return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).astimezone(UTC)
        except (ValueError, OverflowError):
            problems.append({"field": name, "problem": "must be an ISO 8601 date and time"})
            return None

    version: int | None = None
    raw_version = query.get("version")
    if raw_version is not None:
        version = version_number(raw_version)
        if version is None:
            problems.append({"field": "version", "problem": "must be a version number"})
    runs_filter = RunFilter(
        workflow_id=workflow_id,
        status=choice("status", RUN_STATUSES),
        trigger=choice("trigger", RUN_TRIGGERS),
        version=version,
        started_after=moment("startedAfter"),
        started_before=moment("startedBefore"),
    )
    if problems:
        fields = ", ".join(problem["field"] for problem in problems)
        raise ValidationFailed(f"invalid query: {fields}", details=problems)
    return runs_filter


@routes.get(RUN)
async def get_run(request: web.Request) -> web.Response:
    """One run record."""
    run = await run_history.get_run(_project(request), request.match_info["runId"])
    return json_response(run_json(run))


@routes.post(f"{RUN}/cancel")
async def cancel_run(request: web.Request) -> web.Response:
    """Cancel a run: 202 with its record; it ends "cancelled" within a second."""
    run = await cancel.cancel_run(
        _project(request), request.match_info["runId"], request.app[appkeys.RESOURCES].runs
    )
    return json_response(run_json(run), status=202)


@routes.get(f"{RUN}/events")
async def run_events(request: web.Request) -> web.StreamResponse:
    """The run's events as server-sent events, from after ``Last-Event-ID``, to its end."""
    project_id = _project(request)
    run = await run_history.get_run(project_id, request.match_info["runId"])
    after = parse_last_event_id(
        request.headers.get("Last-Event-ID") or request.query.get("lastEventId")
    )
    events = watch_run(run.id, after, request.app[appkeys.RESOURCES].runs.events)
    return await stream_events(request, events, finished_record(project_id, run.id))


def finished_record(project_id: str, run_id: str) -> Any:
    """What ``run.finished`` carries: the run record as it is now (its end is written)."""

    async def data() -> str:
        run = await run_history.get_run(project_id, run_id)
        return utf8_json(run_json(run))

    return data
