"""Handlers of schedules: a workflow's cron ticks, each of which queues one run."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from libflow import appkeys
from libflow.api.bodies import CreateScheduleBody, parse_body
from libflow.api.responses import json_response
from libflow.ids import iso
from libflow.models import Schedule
from libflow.workflows import schedules

routes = web.RouteTableDef()
SCHEDULES = "/api/publicv1/projects/{projectId}/workflows/{workflowId}/schedules"
SCHEDULE = f"{SCHEDULES}/{{scheduleId}}"


def schedule_json(schedule: Schedule) -> dict[str, Any]:
    """A schedule record; ``nextRunDate`` is its next tick, in UTC."""
    return {
        "scheduleId": schedule.id,
        "workflowId": schedule.workflow_id,
        "cron": schedule.cron,
        "timezone": schedule.timezone,
        "event": schedule.event,
        "inputs": schedule.inputs,
        "nextRunDate": iso(schedule.next_run_at),
        "createdDate": iso(schedule.created_at),
    }


@routes.post(SCHEDULES)
async def create_schedule(request: web.Request) -> web.Response:
    """Schedule runs of a workflow's latest version."""
    body = await parse_body(request, CreateScheduleBody)
    schedule = await schedules.create_schedule(
        request.match_info["projectId"],
        request.match_info["workflowId"],
        cron=body.cron,
        timezone=body.timezone,
        event=body.event,
        inputs=body.inputs or {},
        reads=request.app[appkeys.READS],
    )
    return json_response(schedule_json(schedule), status=201)


@routes.get(SCHEDULES)
async def list_schedules(request: web.Request) -> web.Response:
    """The workflow's schedules."""
    found = await schedules.list_schedules(
        request.match_info["projectId"], request.match_info["workflowId"]
    )
    return json_response([schedule_json(schedule) for schedule in found])


@routes.get(SCHEDULE)
async def get_schedule(request: web.Request) -> web.Response:
    """One schedule."""
    schedule = await schedules.get_schedule(
        request.match_info["projectId"],
        request.match_info["workflowId"],
        request.match_info["scheduleId"],
    )
    return json_response(schedule_json(schedule))


@routes.delete(SCHEDULE)
async def delete_schedule(request: web.Request) -> web.Response:
    """Stop a schedule: no tick of it fires after this."""
    await schedules.delete_schedule(
        request.match_info["projectId"],
        request.match_info["workflowId"],
        request.match_info["scheduleId"],
    )
    return web.Response(status=204)
