"""Handlers of workflows: definitions, versions, and runsync (runs: ``api/runs.py``)."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from libflow import appkeys
from libflow.api.bodies import (
    CreateWorkflowBody,
    PublishVersionBody,
    RenameWorkflowBody,
    RunSyncBody,
    parse_body,
    query_limit,
)
from libflow.api.responses import json_response, page_response
from libflow.api.runs import finished_record
from libflow.api.sse import stream_events, wants_events
from libflow.engine import NodeServices
from libflow.ids import iso, new_ordered_id
from libflow.models import Workflow, WorkflowVersion
from libflow.paging import MAX_PAGE
from libflow.workflows import runs, versions
from libflow.workflows.run_watch import watch_run
from libflow.workflows.versions import RunTarget, VersionSummary

routes = web.RouteTableDef()
PROJECT = "/api/publicv1/projects/{projectId}"
PREFIX = f"{PROJECT}/workflows"


def _project(request: web.Request) -> str:
    return request.match_info["projectId"]


def workflow_json(workflow: Workflow) -> dict[str, Any]:
    """A workflow record."""
    return {
        "workflowId": workflow.id,
        "name": workflow.name,
        "version": str(workflow.latest_version),
        "createdDate": iso(workflow.created_at),
        "updatedDate": iso(workflow.updated_at),
    }


def version_json(version: WorkflowVersion | VersionSummary) -> dict[str, Any]:
    """A version record, without its definition."""
    return {"version": str(version.number), "createdDate": iso(version.created_at)}


@routes.post(PREFIX)
async def create_workflow(request: web.Request) -> web.Response:
    """Create a workflow and publish its first version."""
    body = await parse_body(request, CreateWorkflowBody)
    workflow, _ = await versions.create_workflow(_project(request), body.name, body.definition)
    return json_response(
        {
            "workflowId": workflow.id,
            "name": workflow.name,
            "version": "1",
            "createdDate": iso(workflow.created_at),
        },
        status=201,
    )


@routes.get(PREFIX)
async def list_workflows(request: web.Request) -> web.Response:
    """The project's workflows, newest first; a Link header points at the next page."""
    limit = query_limit(request, default=MAX_PAGE, maximum=MAX_PAGE)
    page, next_cursor = await versions.list_workflows(
        _project(request), limit=limit, cursor=request.query.get("cursor")
    )
    return page_response(
        request, [workflow_json(w) for w in page], limit=limit, next_cursor=next_cursor
    )


@routes.get(f"{PREFIX}/{{workflowId}}")
async def get_workflow(request: web.Request) -> web.Response:
    """A workflow with its latest definition and every version."""
    workflow = await versions.get_workflow(_project(request), request.match_info["workflowId"])
    latest = await versions.find_version(workflow, None)
    found = await versions.list_versions(workflow)
    return json_response(
        {
            **workflow_json(workflow),
            "definition": latest.definition,
            "versions": [version_json(v) for v in found],
        }
    )


@routes.patch(f"{PREFIX}/{{workflowId}}")
async def rename_workflow(request: web.Request) -> web.Response:
    """Rename a workflow."""
    body = await parse_body(request, RenameWorkflowBody)
    workflow = await versions.rename_workflow(
        _project(request), request.match_info["workflowId"], body.name
    )
    return json_response(workflow_json(workflow))


@routes.get(f"{PREFIX}/{{workflowId}}/versions/{{version}}")
async def get_version(request: web.Request) -> web.Response:
    """One version with its definition, as published."""
    workflow = await versions.get_workflow(_project(request), request.match_info["workflowId"])
    version = await versions.find_version(workflow, request.match_info["version"])
    return json_response({**version_json(version), "definition": version.definition})


@routes.post(f"{PREFIX}/{{workflowId}}/versions")
async def publish_version(request: web.Request) -> web.Response:
    """Publish the next immutable version."""
    body = await parse_body(request, PublishVersionBody)
    version = await versions.publish_version(
        _project(request), request.match_info["workflowId"], body.definition
    )
    return json_response(version_json(version), status=201)


@routes.post(f"{PREFIX}/{{workflowId}}/runsync")
async def run_sync(request: web.Request) -> web.StreamResponse:
    """Run a version now and answer with its outputs; the HTTP status is its statusCode.

    With ``Accept: text/event-stream`` the answer is the run's events instead, ending with
    ``run.finished`` (the run goes on if the client leaves: it can watch or cancel it).
    """
    body = await parse_body(request, RunSyncBody, allow_empty=True)
    project_id = _project(request)
    target = await versions.find_run_target(
        project_id,
        request.match_info["workflowId"],
        body.version,
        request.app[appkeys.READS],
    )
    resources = request.app[appkeys.RESOURCES]
    services = resources.node_services(project_id)
    if wants_events(request):
        return await _run_streamed(request, target, body, services)
    # A refused run (unknown event, invalid inputs) is answered with the error, and recorded.
    _, result = await runs.run_version(
        target,
        event=body.runEvent,
        inputs=body.inputs,
        trigger="api",
        services=services,
        control=resources.runs,
    )
    answer = result.response_body()
    if services.secrets is not None:  # the answer is a record of the run too
        answer = services.secrets.redact(answer)
    return json_response(answer, status=result.status_code)


async def _run_streamed(
    request: web.Request, target: RunTarget, body: RunSyncBody, services: NodeServices
) -> web.StreamResponse:
    """runsync with events: the run goes on in a task of its own, the answer follows it."""
    control = request.app[appkeys.RESOURCES].runs
    run_id = new_ordered_id()
    recorded = asyncio.Event()
    task = control.start(
        runs.run_version(
            target,
            event=body.runEvent,
            inputs=body.inputs,
            trigger="api",
            services=services,
            control=control,
            run_id=run_id,
            watched=recorded,
        )
    )
    # The stream starts once the run's record exists: until then a watcher could not tell
    # the run from one that never was. A run that could not be recorded is an error answer.
    waiting = asyncio.ensure_future(recorded.wait())
    await asyncio.wait({waiting, task}, return_when=asyncio.FIRST_COMPLETED)
    waiting.cancel()
    if not recorded.is_set():
        task.result()  # raises what stopped it (a refused run: 400; the database away: 503)
    events = watch_run(run_id, 0, control.events)
    return await stream_events(request, events, finished_record(target.project_id, run_id))
