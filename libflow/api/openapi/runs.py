"""The run parts of the OpenAPI document: run records, queued runs, cancels and events."""

from __future__ import annotations

from typing import Any

from libflow.api.bodies import Body, RunBody
from libflow.api.openapi.common import (
    AUTH_ERRORS,
    DATE,
    LINK_NEXT,
    NULLABLE_DATE,
    NULLABLE_STR,
    OBJECT,
    PROJECT,
    STR,
    WF,
    body,
    errors,
    json_response,
    limit_param,
    path_params,
    query_param,
    ref,
)
from libflow.api.sse import KEEPALIVE_SECONDS, RETRY_MILLISECONDS
from libflow.engine.runner import CANCELLED_STATUS_CODE
from libflow.workflows.run_events import (
    EVENTS_KEPT_SECONDS,
    MAX_EVENT_VALUE_CHARS,
    MAX_MEMORY_EVENT_CHARS,
    MAX_RUN_EVENT_CHARS,
)
from libflow.workflows.run_history import DEFAULT_PAGE, MAX_PAGE, RUN_STATUSES, RUN_TRIGGERS

RUN = f"{PROJECT}/runs/{{runId}}"
RUN_BODIES: tuple[type[Body], ...] = (RunBody,)
_VALUE_KIB = MAX_EVENT_VALUE_CHARS // 1024
_RUN_EVENTS_MIB = MAX_RUN_EVENT_CHARS // (1024 * 1024)
_KEPT_HOURS = EVENTS_KEPT_SECONDS // 3600
_MEMORY_MIB = MAX_MEMORY_EVENT_CHARS // (1024 * 1024)

RUN_SCHEMAS: dict[str, Any] = {
    "RunError": {
        "type": "object",
        "required": ["code", "node", "message"],
        "properties": {
            "code": {
                "type": "string",
                "description": "NODE_FAILED, RUN_TIMEOUT, a fail node's code, UNKNOWN_EVENT "
                "or INVALID_INPUTS (a refused run), CANCELLED (the cancel route), "
                "INTERRUPTED (the process running it stopped), INTERNAL",
            },
            "node": NULLABLE_STR,
            "message": STR,
        },
    },
    "Run": {
        "type": "object",
        "required": [
            "runId",
            "workflowId",
            "version",
            "event",
            "trigger",
            "status",
            "statusCode",
            "inputs",
            "outputs",
            "error",
            "nodeTimings",
            "parentRunId",
            "startedDate",
            "finishedDate",
        ],
        "properties": {
            "runId": STR,
            "workflowId": STR,
            "version": STR,
            "event": {"type": "string", "description": "The runEvent it started at"},
            "trigger": {
                "enum": list(RUN_TRIGGERS),
                "description": "api: runsync; api_async: POST runs; webhook: a delivery; "
                "replay: a delivery replayed; schedule: a schedule's tick; call: a "
                "call_workflow or map node of another run",
            },
            "status": {"enum": list(RUN_STATUSES)},
            "statusCode": {
                "type": ["integer", "null"],
                "description": "The HTTP status of the runsync answer it ended with; null "
                f"until it ends; {CANCELLED_STATUS_CODE} when cancelled",
            },
            "inputs": OBJECT,
            "outputs": {
                "type": "object",
                "description": "The outputs set so far (all of them once it ended)",
            },
            "error": {"oneOf": [ref("RunError"), {"type": "null"}]},
            "nodeTimings": OBJECT,
            "parentRunId": {
                "type": ["string", "null"],
                "description": "The run whose call_workflow or map node started this one "
                "(trigger call); null otherwise",
            },
            "startedDate": {**DATE, "description": "When it was started (or queued)"},
            "finishedDate": NULLABLE_DATE,
        },
    },
}

EVENTS_DESCRIPTION = f"""\
Each event has an `id` (1, 2, 3... within the run), a name and one `data:` line of JSON:

| event | data |
|---|---|
| `run.queued` | `{{runId}}`: the first event of a queued run (not sent by runsync) |
| `run.started` | `{{runId}}` (a runsync client learns its run's id here) |
| `node.started` | `{{node}}` |
| `node.finished` | `{{node, output, ms}}` |
| `node.failed` | `{{node, error}}`, `error` being the message |
| `output` | `{{name, value}}`, each output as it is set |
| `llm.delta` | `{{node, text}}`, text as a node streaming a model's answer receives it |
| `run.finished` | the whole run record, as `GET .../runs/{{runId}}` answers it; the stream \
then closes |

An `output` or `value` over {_VALUE_KIB} KiB as JSON (or once the run's events hold \
{_RUN_EVENTS_MIB} MiB) is sent as `null` with `"truncated": true` (the run record's \
`outputs` hold every output whole). The stream starts with `retry: {RETRY_MILLISECONDS}`; \
a `: keep-alive` comment line comes when {KEEPALIVE_SECONDS:g} s pass without an event."""

_EVENTS_DESCRIPTION = f"""\
The run's events as server-sent events, from its first (or after `Last-Event-ID`) to \
`run.finished`, live while it runs: a late or returning watcher first gets what it \
missed. Events are kept {_KEPT_HOURS} h after a run's last one (the embedded server keeps \
them in its memory, dropping the oldest finished runs' first past {_MEMORY_MIB} MiB); a run \
whose events are gone, or that published none (a runsync run that ended within a second), \
gets `run.finished` alone. An unknown run is a JSON 404 before the stream starts.

{EVENTS_DESCRIPTION}"""


# The content of a response that streams a run's events.
EVENT_STREAM = {
    "text/event-stream": {
        "schema": STR,
        "example": (
            f"retry: {RETRY_MILLISECONDS}\n\n"
            'id: 1\nevent: run.started\ndata: {"runId":"r1"}\n\n'
            'id: 2\nevent: node.started\ndata: {"node":"greet"}\n\n'
            'id: 3\nevent: node.finished\ndata: {"node":"greet","output":{"text":"Hi"},'
            '"ms":0.2}\n\n'
            'id: 4\nevent: run.finished\ndata: {"runId":"r1","status":"succeeded",...}\n\n'
        ),
    }
}


def accepted_run(description: str) -> dict[str, Any]:
    """202 with a queued run's record and its Location."""
    return {
        **json_response(ref("Run"), description),
        "headers": {
            "Location": {
                "schema": STR,
                "description": "The run's record: /api/publicv1/projects/{projectId}/runs/{runId}",
            }
        },
    }


def _filters(*, by_workflow: bool) -> list[dict[str, Any]]:
    workflow = [query_param("workflowId", STR, "Only this workflow's runs")] if by_workflow else []
    return [
        *workflow,
        query_param("status", {"enum": list(RUN_STATUSES)}, "Only runs in this status"),
        query_param("trigger", {"enum": list(RUN_TRIGGERS)}, "Only runs started this way"),
        query_param(
            "version",
            {"type": "integer", "minimum": 1, "maximum": 999_999_999},
            "Only runs of this version",
        ),
        query_param("startedAfter", DATE, "Only runs started after this (ISO 8601)"),
        query_param("startedBefore", DATE, "Only runs started before this (ISO 8601)"),
        limit_param(MAX_PAGE, default=DEFAULT_PAGE),
        query_param("cursor", STR, "From the `Link` header of the previous page"),
    ]


def _page(summary: str, parameters: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "summary": summary,
        "description": "Newest first. A bad filter, limit or cursor is 400 VALIDATION_ERROR "
        "naming each bad one in `details`.",
        "parameters": parameters,
        "responses": {
            "200": {
                **json_response({"type": "array", "items": ref("Run")}, "one page of runs"),
                "headers": LINK_NEXT,
            },
            **errors(400, *AUTH_ERRORS, 404),
        },
    }


def run_operations() -> dict[str, dict[str, Any]]:
    """The paths of runs: queue one, list them, get one, cancel one, watch its events."""
    workflow = path_params("projectId", "workflowId")
    run = path_params("projectId", "runId")
    return {
        f"{WF}/{{workflowId}}/runs": {
            "post": {
                "summary": "Queue a run (trigger api_async); 202 once it is committed",
                "description": "The body is runsync's, and may be empty (`{}`: event `run`, "
                "no inputs, the latest version). An unknown event or invalid inputs are "
                "answered at once (400, and recorded as a failed run), an unknown version "
                "404. A worker, or the embedded server, runs the queued run once.",
                "parameters": workflow,
                "requestBody": body(RunBody, required=False),
                "responses": {
                    "202": accepted_run("the queued run"),
                    **errors(400, *AUTH_ERRORS, 404),
                },
            },
            "get": _page("The workflow's runs", [*workflow, *_filters(by_workflow=False)]),
        },
        f"{PROJECT}/runs": {
            "get": _page(
                "The project's runs",
                [*path_params("projectId"), *_filters(by_workflow=True)],
            ),
        },
        RUN: {
            "get": {
                "summary": "One run record",
                "parameters": run,
                "responses": {
                    "200": json_response(ref("Run"), "the run"),
                    **errors(*AUTH_ERRORS, 404),
                },
            },
        },
        f"{RUN}/cancel": {
            "post": {
                "summary": "Cancel a queued or running run",
                "description": "A queued run ends at once; a running one stops within a "
                "second wherever it runs, and ends `cancelled` with the outputs set so far, "
                f"statusCode {CANCELLED_STATUS_CODE} and error code CANCELLED. A run that "
                "has already ended is 409 RUN_FINISHED.",
                "parameters": run,
                "responses": {
                    "202": json_response(ref("Run"), "the run's record as it stands"),
                    **errors(*AUTH_ERRORS, 404, 409),
                },
            },
        },
        f"{RUN}/events": {
            "get": {
                "summary": "Watch a run's events (server-sent events)",
                "description": _EVENTS_DESCRIPTION,
                "parameters": [
                    *run,
                    {
                        "name": "Last-Event-ID",
                        "in": "header",
                        "required": False,
                        "schema": {"type": "integer", "minimum": 0},
                        "description": "Resume after this event id (EventSource sends it "
                        "when it reconnects)",
                    },
                    query_param(
                        "lastEventId",
                        {"type": "integer", "minimum": 0},
                        "As `Last-Event-ID`, for clients that cannot set headers",
                    ),
                ],
                "responses": {
                    "200": {
                        "description": "the events, until run.finished",
                        "content": EVENT_STREAM,
                    },
                    **errors(*AUTH_ERRORS, 404),
                },
            },
        },
    }
