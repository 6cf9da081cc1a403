"""The workflow parts of the OpenAPI document, runsync too (merged by libflow.api.openapi)."""

from __future__ import annotations

from typing import Any

from libflow.api.bodies import (
    Body,
    CreateWorkflowBody,
    PublishVersionBody,
    RenameWorkflowBody,
    RunSyncBody,
)
from libflow.api.openapi.common import (
    AUTH_ERRORS,
    DATE,
    ERROR,
    LINK_NEXT,
    OBJECT,
    STR,
    WF,
    body,
    errors,
    json_response,
    limit_param,
    path_params,
    ref,
)
from libflow.api.openapi.definition import EDGE_SCHEMA, definition_schema, node_schemas
from libflow.api.openapi.runs import EVENT_STREAM, EVENTS_DESCRIPTION
from libflow.engine.runner import CANCELLED_STATUS_CODE

WORKFLOW_BODIES: tuple[type[Body], ...] = (
    CreateWorkflowBody,
    RenameWorkflowBody,
    PublishVersionBody,
    RunSyncBody,
)
WORKFLOW_SCHEMAS: dict[str, Any] = {
    "Workflow": {
        "type": "object",
        "description": "A workflow: a name and its versions' definitions.",
        "required": ["workflowId", "name", "version", "createdDate"],
        "properties": {
            "workflowId": {**STR, "description": "The workflow's id."},
            "name": {**STR, "description": "Its name (given at creation, or by a rename)."},
            "version": {
                **STR,
                "description": 'Its latest version: "1", "2", ... (a new one with each publish).',
            },
            "createdDate": {**DATE, "description": "When it was created."},
            "updatedDate": {**DATE, "description": "When its latest version was published."},
        },
    },
    "WorkflowVersion": {
        "type": "object",
        "description": "One published version; versions never change once published.",
        "required": ["version", "createdDate"],
        "properties": {
            "version": {**STR, "description": 'The version\'s number: "1", "2", ...'},
            "createdDate": {**DATE, "description": "When it was published."},
        },
    },
    "WorkflowVersionDetail": {
        "allOf": [
            ref("WorkflowVersion"),
            {
                "type": "object",
                "required": ["definition"],
                "properties": {
                    "definition": {
                        **ref("WorkflowDefinition"),
                        "description": "The version's definition, as it was published.",
                    },
                },
            },
        ]
    },
    "WorkflowDetail": {
        "allOf": [
            ref("Workflow"),
            {
                "type": "object",
                "properties": {
                    "definition": {
                        **ref("WorkflowDefinition"),
                        "description": "The latest version's definition, as it was published.",
                    },
                    "versions": {
                        "type": "array",
                        "items": ref("WorkflowVersion"),
                        "description": "Every version, oldest first.",
                    },
                },
            },
        ]
    },
    "WorkflowDefinition": definition_schema(ref),
    "WorkflowEdge": EDGE_SCHEMA,
    **node_schemas(),
    "RunSyncResult": {
        "type": "object",
        "description": "runsync's answer; the HTTP status is `statusCode`.",
        "required": ["success", "result", "statusCode"],
        "properties": {
            "success": {"type": "boolean", "description": "Whether the run succeeded."},
            "statusCode": {
                "type": "integer",
                "description": "200, a respond node's status, 500 (a node failed, or a fail "
                "node's status), 504 (the run timed out) or 499 (cancelled).",
            },
            "result": {
                "type": "object",
                "required": ["outputs"],
                "properties": {
                    "outputs": {
                        **OBJECT,
                        "description": "The outputs set by set_output nodes (so far, when "
                        "the run failed).",
                    },
                    "error": {
                        **ref("RunError"),
                        "description": "Why the run failed; absent when it succeeded.",
                    },
                },
            },
        },
    },
}


def _definition_body(model: type[Body]) -> dict[str, Any]:
    """A request body of ``model`` whose ``definition`` is a workflow definition."""
    return {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "allOf": [
                        ref(model.__name__),
                        {"properties": {"definition": ref("WorkflowDefinition")}},
                    ]
                }
            }
        },
    }


_RUNSYNC_DESCRIPTION = f"""\
The body may be empty: `{{}}` runs event `run` with no inputs on the latest version. Every \
run is recorded (trigger `api`); an unknown event or invalid inputs are answered 400 and \
recorded as a failed run. A client that disconnects cancels its run (recorded `cancelled`). \
A run still going after a second is recorded `running` and can be cancelled through \
`POST .../runs/{{runId}}/cancel`: its answer is then {CANCELLED_STATUS_CODE} with error \
CANCELLED.

With `Accept: text/event-stream` the answer is the run's events instead, as \
`GET .../runs/{{runId}}/events` streams them (without `run.queued`), ending with \
`run.finished`; errors before the run starts are still JSON. That run goes on if the client \
leaves: it can be watched or cancelled with the `runId` of `run.started`.

{EVENTS_DESCRIPTION}"""


_DEFINITION_DESCRIPTION = """\
The definition is checked whole before anything is stored: unknown node types and fields, \
missing or out-of-range fields, duplicate ids, dangling edges, cycles, expression syntax, a \
`code` node's JavaScript, a called workflow that is not the project's, and a graph without \
an event node. Any problem is answered 400 INVALID_WORKFLOW, with every problem in \
`details` as `{node, problem}` (`node` null for the definition itself).

The `WorkflowDefinition` schema describes every node type, field by field; the same schema \
as one JSON Schema document, for editors, is at \
`GET /api/publicv1/workflow-definition.schema.json`."""


def workflow_operations() -> dict[str, dict[str, Any]]:
    """The paths of workflows, their versions and runsync."""
    project = path_params("projectId")
    workflow = path_params("projectId", "workflowId")
    return {
        WF: {
            "get": {
                "summary": "List the project's workflows, newest first",
                "parameters": [
                    *project,
                    limit_param(1000),
                    {"name": "cursor", "in": "query", "required": False, "schema": STR},
                ],
                "responses": {
                    "200": {
                        **json_response({"type": "array", "items": ref("Workflow")}, "workflows"),
                        "headers": LINK_NEXT,
                    },
                    **errors(400, *AUTH_ERRORS),
                },
            },
            "post": {
                "summary": "Create a workflow: its definition becomes version 1",
                "description": _DEFINITION_DESCRIPTION,
                "parameters": project,
                "requestBody": _definition_body(CreateWorkflowBody),
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
            "patch": {
                "summary": "Rename a workflow",
                "parameters": workflow,
                "requestBody": body(RenameWorkflowBody),
                "responses": {
                    "200": json_response(ref("Workflow"), "the renamed workflow"),
                    **errors(400, *AUTH_ERRORS, 404),
                },
            },
        },
        f"{WF}/{{workflowId}}/versions/{{version}}": {
            "get": {
                "summary": "One version of a workflow with its definition",
                "parameters": path_params("projectId", "workflowId", "version"),
                "responses": {
                    "200": json_response(ref("WorkflowVersionDetail"), "the version"),
                    **errors(*AUTH_ERRORS, 404),
                },
            },
        },
        f"{WF}/{{workflowId}}/versions": {
            "post": {
                "summary": "Publish a new definition as the next version (versions never change)",
                "description": _DEFINITION_DESCRIPTION,
                "parameters": workflow,
                "requestBody": _definition_body(PublishVersionBody),
                "responses": {
                    "201": json_response(ref("WorkflowVersion"), "the version"),
                    **errors(400, *AUTH_ERRORS, 404),
                },
            },
        },
        f"{WF}/{{workflowId}}/runsync": {
            "post": {
                "summary": "Run a workflow and answer with its outputs (status = statusCode)",
                "description": _RUNSYNC_DESCRIPTION,
                "parameters": workflow,
                "requestBody": body(RunSyncBody, required=False),
                "responses": {
                    "200": {
                        "description": "the run succeeded; or, asked for with `Accept: "
                        "text/event-stream`, the run's events until run.finished",
                        "content": {
                            "application/json": {"schema": ref("RunSyncResult")},
                            **EVENT_STREAM,
                        },
                    },
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
    }
