"""The schedule parts of the OpenAPI document: cron schedules that queue runs."""

from __future__ import annotations

from typing import Any

from libflow.api.bodies import Body, CreateScheduleBody
from libflow.api.openapi.common import (
    AUTH_ERRORS,
    DATE,
    OBJECT,
    STR,
    WF,
    body,
    errors,
    json_response,
    path_params,
    ref,
)

SCHEDULES = f"{WF}/{{workflowId}}/schedules"
SCHEDULE = f"{SCHEDULES}/{{scheduleId}}"
SCHEDULE_BODIES: tuple[type[Body], ...] = (CreateScheduleBody,)
SCHEDULE_SCHEMAS: dict[str, Any] = {
    "Schedule": {
        "type": "object",
        "required": [
            "scheduleId",
            "workflowId",
            "cron",
            "timezone",
            "event",
            "inputs",
            "nextRunDate",
            "createdDate",
        ],
        "properties": {
            "scheduleId": STR,
            "workflowId": STR,
            "cron": STR,
            "timezone": STR,
            "event": STR,
            "inputs": OBJECT,
            "nextRunDate": {**DATE, "description": "The next tick, in UTC"},
            "createdDate": DATE,
        },
    },
}


_CREATE_DESCRIPTION = """\
`cron` has five fields (minute hour day-of-month month day-of-week) read in `timezone`, an \
IANA name (default `UTC`). Each tick queues one run of the workflow's latest version with \
`event` (default `schedule`) and `inputs` (default `{}`), trigger `schedule`: once, across \
every API and worker process. Ticks missed while nothing ran are not caught up (one run \
after an outage, at most). A bad cron or time zone is 400 VALIDATION_ERROR; an event the \
latest version has no event node for is UNKNOWN_EVENT, inputs it refuses INVALID_INPUTS. \
If the workflow changes so that a tick's run is refused, that tick records a failed run."""


def schedule_operations() -> dict[str, dict[str, Any]]:
    """The paths that add, list, show and delete schedules."""
    workflow = path_params("projectId", "workflowId")
    schedule = path_params("projectId", "workflowId", "scheduleId")
    return {
        SCHEDULES: {
            "post": {
                "summary": "Run a workflow on a cron schedule",
                "description": _CREATE_DESCRIPTION,
                "parameters": workflow,
                "requestBody": body(CreateScheduleBody),
                "responses": {
                    "201": json_response(ref("Schedule"), "the schedule"),
                    **errors(400, *AUTH_ERRORS, 404),
                },
            },
            "get": {
                "summary": "The workflow's schedules, oldest first",
                "parameters": workflow,
                "responses": {
                    "200": json_response({"type": "array", "items": ref("Schedule")}, "schedules"),
                    **errors(*AUTH_ERRORS, 404),
                },
            },
        },
        SCHEDULE: {
            "get": {
                "summary": "One schedule",
                "parameters": schedule,
                "responses": {
                    "200": json_response(ref("Schedule"), "the schedule"),
                    **errors(*AUTH_ERRORS, 404),
                },
            },
            "delete": {
                "summary": "Delete a schedule: no tick of it fires after the answer",
                "parameters": schedule,
                "responses": {"204": {"description": "deleted"}, **errors(*AUTH_ERRORS, 404)},
            },
        },
    }
