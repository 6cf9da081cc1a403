"""The workflow parts of the OpenAPI document, runsync too (merged by libflow.api.openapi)."""

from __future__ import annotations

from typing import Any

from libflow.api.bodies import Body, CreateWorkflowBody, PublishVersionBody, RunSyncBody
from libflow.api.openapi.common import (
    AUTH_ERRORS,
    DATE,
    ERROR,
    OBJECT,
    STR,
    WF,
    body,
    errors,
    json_response,
    path_params,
    ref,
)
from libflow.api.openapi.runs import EVENT_STREAM, EVENTS_DESCRIPTION
from libflow.engine.runner import CANCELLED_STATUS_CODE

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
                    "error": ref("RunError"),
                },
            },
        },
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
A definition is `{timeoutSeconds?, nodes: [{id, type, ...fields}], edges: [{from, to, when?}]}`. \
Node types: `event`, `input`, `set_output`, `template`, `condition`, `http_request`, \
`library_search`, `library_file_text`, `llm`, `code`, `call_workflow`, `map`, `delay`, \
`respond`, `fail`. `call_workflow {workflowId, version?, inputs}` runs another workflow of the \
project as a sub-run (trigger `call`, `parentRunId`) and results in `{outputs}`; `map {items, \
workflowId, version?, concurrency?: 4}` runs it once per item (inputs `{item, index}`) and \
results in `{results}` in item order. A `workflowId` of another project is refused; calls \
nest at most 5 deep. An `llm` node \
`{model?, messages: [{role, content}], temperature?, maxTokens?, responseFormat?: "text" | \
"json", apiKey?}` asks the server's OpenAI-compatible chat completions API \
(`LIBFLOW_LLM_BASE_URL`) and results in `{text, json, usage: {promptTokens, \
completionTokens}, model, finishReason}`; its text streams as `llm.delta` run events and its \
usage is kept in the run's `nodeTimings`. A `code` node `{source, timeoutMs?: 1000, \
memoryMb?: 64}` runs `source`, a JavaScript function body, in a fresh V8 isolate with no \
file, network or process access: it sees `inputs`, `nodes` and `event` and its return value \
is the node's output (an object as it is, anything else as `{result}`); a thrown error \
fails the node with `<message> (line N)`, and so do `timeoutMs` (1 to 30000, never past \
the run's timeout) and `memoryMb` (8 to 512) when passed. Every problem of a definition is \
answered 400 `INVALID_WORKFLOW` with `details` naming its node."""


def workflow_operations() -> dict[str, dict[str, Any]]:
    """The paths of workflows, their versions and runsync."""
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
                "description": _DEFINITION_DESCRIPTION,
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
                "description": _DEFINITION_DESCRIPTION,
                "parameters": workflow,
                "requestBody": body(PublishVersionBody),
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
