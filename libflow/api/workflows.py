"""Handlers of workflows: definitions, versions, runs, and runsync."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from libflow import appkeys, workflows
from libflow.api.bodies import CreateWorkflowBody, PublishVersionBody, RunSyncBody, parse_body
from libflow.engine import NodeServices
from libflow.ids import iso
from libflow.models import Workflow, WorkflowRun, WorkflowVersion
from libflow.node_services import node_services

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
    workflow, _ = await workflows.create_workflow(_project(request), body.name, body.definition)
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
        [workflow_json(w) for w in await workflows.list_workflows(_project(request))]
    )


@routes.get(f"{PREFIX}/{{workflowId}}")
async def get_workflow(request: web.Request) -> web.Response:
    """A workflow with its latest definition and every version."""
    workflow = await workflows.get_workflow(_project(request), request.match_info["workflowId"])
    versions = await workflows.list_versions(workflow)
    latest = versions[-1]
    return web.json_response(
        {
            **workflow_json(workflow),
            "definition": latest.definition,
            "versions": [version_json(v) for v in versions],
        }
    )


@routes.post(f"{PREFIX}/{{workflowId}}/versions")
async def publish_version(request: web.Request) -> web.Response:
    """Publish the next immutable version."""
    body = await parse_body(request, PublishVersionBody)
    version = await workflows.publish_version(
        _project(request), request.match_info["workflowId"], body.definition
    )
    return web.json_response(version_json(version), status=201)


@routes.get(f"{PREFIX}/{{workflowId}}/runs")
async def list_runs(request: web.Request) -> web.Response:
    """The workflow's runs, newest first."""
    runs = await workflows.list_runs(_project(request), request.match_info["workflowId"])
    return web.json_response([run_json(r) for r in runs])


@routes.get(f"{PROJECT}/runs/{{runId}}")
async def get_run(request: web.Request) -> web.Response:
    """One run record."""
    run = await workflows.get_run(_project(request), request.match_info["runId"])
    return web.json_response(run_json(run))


def run_services(app: web.Application, project_id: str) -> NodeServices:
    """The node services of a run in this process."""
    return node_services(
        project_id,
        settings=app[appkeys.SETTINGS],
        http=app[appkeys.HTTP_CLIENT],
        storage=app[appkeys.STORAGE],
        embedder=app[appkeys.EMBEDDER],
        vectors=app[appkeys.VECTOR_INDEX],
        file_lookup=app[appkeys.FILE_LOOKUP],
    )


@routes.post(f"{PREFIX}/{{workflowId}}/runsync")
async def run_sync(request: web.Request) -> web.Response:
    """Run a version now and answer with its outputs; the HTTP status is its statusCode."""
    body = await parse_body(request, RunSyncBody)
    project_id = _project(request)
    target = await workflows.find_run_target(
        project_id,
        request.match_info["workflowId"],
        body.version,
        request.app[appkeys.INLINE_READS],
    )
    _, result = await workflows.run_version(
        target,
        event=body.runEvent,
        inputs=body.inputs,
        trigger="api",
        services=run_services(request.app, project_id),
    )
    return web.json_response(result.response_body(), status=result.status_code)
