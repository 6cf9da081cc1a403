"""Handlers of workflows: definitions, versions, runs, and runsync."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from libflow import appkeys
from libflow.api.bodies import CreateWorkflowBody, PublishVersionBody, RunSyncBody, parse_body
from libflow.ids import iso
from libflow.models import Workflow, WorkflowRun, WorkflowVersion
from libflow.workflows import runs, versions

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


def version_json(version: WorkflowVersion) -> dict[str, Any]:
    """A version record, without its definition."""
    return {"version": str(version.number), "createdDate": iso(version.created_at)}


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
        "startedDate": iso(run.started_at),
        "finishedDate": iso(run.finished_at),
    }


@routes.post(PREFIX)
async def create_workflow(request: web.Request) -> web.Response:
    """Create a workflow and publish its first version."""
    body = await parse_body(request, CreateWorkflowBody)
    workflow, _ = await versions.create_workflow(_project(request), body.name, body.definition)
    return web.json_response(
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
    """The project's workflows, newest first."""
    return web.json_response(
        [workflow_json(w) for w in await versions.list_workflows(_project(request))]
    )


@routes.get(f"{PREFIX}/{{workflowId}}")
async def get_workflow(request: web.Request) -> web.Response:
    """A workflow with its latest definition and every version."""
    workflow = await versions.get_workflow(_project(request), request.match_info["workflowId"])
    found = await versions.list_versions(workflow)
    latest = found[-1]
    return web.json_response(
        {
            **workflow_json(workflow),
            "definition": latest.definition,
            "versions": [version_json(v) for v in found],
        }
    )


@routes.post(f"{PREFIX}/{{workflowId}}/versions")
async def publish_version(request: web.Request) -> web.Response:
    """Publish the next immutable version."""
    body = await parse_body(request, PublishVersionBody)
    version = await versions.publish_version(
        _project(request), request.match_info["workflowId"], body.definition
    )
    return web.json_response(version_json(version), status=201)


@routes.get(f"{PREFIX}/{{workflowId}}/runs")
async def list_runs(request: web.Request) -> web.Response:
    """The workflow's runs, newest first."""
    found_runs = await runs.list_runs(_project(request), request.match_info["workflowId"])
    return web.json_response([run_json(r) for r in found_runs])


@routes.get(f"{PROJECT}/runs/{{runId}}")
async def get_run(request: web.Request) -> web.Response:
    """One run record."""
    run = await runs.get_run(_project(request), request.match_info["runId"])
    return web.json_response(run_json(run))


@routes.post(f"{PREFIX}/{{workflowId}}/runsync")
async def run_sync(request: web.Request) -> web.Response:
    """Run a version now and answer with its outputs; the HTTP status is its statusCode."""
    body = await parse_body(request, RunSyncBody)
    project_id = _project(request)
    target = await versions.find_run_target(
        project_id,
        request.match_info["workflowId"],
        body.version,
        request.app[appkeys.READS],
    )
    _, result = await runs.run_version(
        target,
        event=body.runEvent,
        inputs=body.inputs,
        trigger="api",
        services=request.app[appkeys.RESOURCES].node_services(project_id),
    )
    return web.json_response(result.response_body(), status=result.status_code)
