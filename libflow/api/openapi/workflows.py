"""The workflow and run parts of the OpenAPI document (merged by libflow.api.openapi)."""

from __future__ import annotations

from typing import Any

from libflow.api.bodies import Body, CreateWorkflowBody, PublishVersionBody, RunSyncBody
from libflow.api.openapi.common import (
    AUTH_ERRORS,
    DATE,
    ERROR,
    NULLABLE_DATE,
    NULLABLE_STR,
    OBJECT,
    PROJECT,
    STR,
    body,
    errors,
    json_response,
    path_params,
    ref,
)

WF = f"{PROJECT}/workflows"
WORKFLOW_BODIES: tuple[type[Body], ...] = (CreateWorkflowBody, PublishVersionBody, RunSyncBody)
WORKFLOW_SCHEMAS: dict[str, Any] = {
    "Workflow": {
        "type": "object",
        "required": ["workflowId", "name", "version", "createdDate"],
        "properties": {
            "workflowId": STR,
            "name": STR,
            "version": STR,
            "createdDate": DATE,
            "updatedDate": DATE,
        },
    },
    "WorkflowVersion": {
        "type": "object",
        "required": ["version", "createdDate"],
        "properties": {"version": STR, "createdDate": DATE},
    },
    "WorkflowDetail": {
        "allOf": [
            ref("Workflow"),
            {
                "type": "object",
                "properties": {
                    "definition": OBJECT,
                    "versions": {"type": "array", "items": ref("WorkflowVersion")},
                },
            },
        ]
    },
    "RunSyncResult": {
        "type": "object",
        "required": ["success", "result", "statusCode"],
        "properties": {
            "success": {"type": "boolean"},
            "statusCode": {"type": "integer"},
            "result": {
                "type": "object",
                "required": ["outputs"],
                "properties": {
                    "outputs": OBJECT,
                    "error": {
                        "type": "object",
                        "properties": {"code": STR, "node": NULLABLE_STR, "message": STR},
                    },
                },
            },
        },
    },
    "Run": {
        "type": "object",
        "required": ["runId", "workflowId", "version", "event", "trigger", "status"],
        "properties": {
            "runId": STR,
            "workflowId": STR,
            "version": STR,
            "event": STR,
            "trigger": {"enum": ["api", "webhook"]},
            "status": {"enum": ["running", "succeeded", "failed", "timed_out", "cancelled"]},
            "statusCode": {"type": ["integer", "null"]},
            "inputs": OBJECT,
            "outputs": OBJECT,
            "error": {"type": ["object", "null"]},
            "nodeTimings": OBJECT,
            "startedDate": DATE,
            "finishedDate": NULLABLE_DATE,
        },
    },
}


def workflow_operations() -> dict[str, dict[str, Any]]:
    """The paths of workflows, their versions and their runs."""
    project = path_params("projectId")
    workflow = path_params("projectId", "workflowId")
    return {
        WF: {
            "get": {
                "summary": "List workflows",
                "parameters": project,
                "responses": {
                    "200": json_response({"type": "array", "items": ref("Workflow")}, "workflows"),
                    **errors(*AUTH_ERRORS),
                },
            },
            "post": {
                "summary": "Create a workflow (publishes version 1)",
                "parameters": project,
                "requestBody": body(CreateWorkflowBody),
                "responses": {
                    "201": json_response(ref("Workflow"), "the workflow"),
                    **errors(400, *AUTH_ERRORS),
                },
            },
        },
        f"{WF}/{{workflowId}}": {
            "get": {
                "summary": "A workflow with its latest definition and versions",
                "parameters": workflow,
                "responses": {
                    "200": json_response(ref("WorkflowDetail"), "the workflow"),
                    **errors(*AUTH_ERRORS, 404),
                },
            },
        },
        f"{WF}/{{workflowId}}/versions": {
            "post": {
                "summary": "Publish the next immutable version",
                "parameters": workflow,
                "requestBody": body(PublishVersionBody),
                "responses": {
                    "201": json_response(ref("WorkflowVersion"), "the version"),
                    **errors(400, *AUTH_ERRORS, 404),
                },
            },
        },
        f"{WF}/{{workflowId}}/runs": {
            "get": {
                "summary": "The workflow's runs, newest first",
                "parameters": workflow,
                "responses": {
                    "200": json_response({"type": "array", "items": ref("Run")}, "runs"),
                    **errors(*AUTH_ERRORS, 404),
                },
            },
        },
        f"{WF}/{{workflowId}}/runsync": {
            "post": {
                "summary": "Run a workflow and answer with its outputs (status = statusCode)",
                "parameters": workflow,
                "requestBody": body(RunSyncBody),
                "responses": {
                    "200": json_response(ref("RunSyncResult"), "the run succeeded"),
                    "500": json_response(ref("RunSyncResult"), "a node failed (NODE_FAILED)"),
                    "504": json_response(ref("RunSyncResult"), "the run timed out (RUN_TIMEOUT)"),
                    "default": json_response(
                        {"oneOf": [ref("RunSyncResult"), ERROR]},
                        "a respond or fail node's status, or an error",
                    ),
                    **errors(400, *AUTH_ERRORS, 404),
                },
            },
        },
        f"{PROJECT}/runs/{{runId}}": {
            "get": {
                "summary": "One run record",
                "parameters": path_params("projectId", "runId"),
                "responses": {
                    "200": json_response(ref("Run"), "the run"),
                    **errors(*AUTH_ERRORS, 404),
                },
            },
        },
    }
