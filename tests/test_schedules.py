"""Schedules: five-field cron in a time zone; each tick queues exactly one run."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from libflow import appkeys
from libflow.ids import utcnow
from libflow.workflows.schedules import fire_due_schedules
from tests.conftest import Api, new_project
from tests.workflow_helpers import call, chain, create, ok_json, output, publish, runs_of

# An input with a default, so a tick's run shows both what the schedule gave and the default.
ECHO = chain(
    {"id": "who", "type": "input", "name": "name", "valueType": "string", "required": True},
    {"id": "how", "type": "input", "name": "greeting", "valueType": "string", "default": "Hi"},
    output("text", "{{ inputs.greeting }}, {{ inputs.name }}"),
    event="schedule",
)


def far_month() -> int:
    """A month two months from now: its ticks never come while a test runs on the real clock."""
    return (utcnow().month + 1) % 12 + 1


def every_minute_of_far_month() -> str:
    """A cron that ticks every minute, but only in ``far_month()``."""
    return f"* * * {far_month()} *"


def moment(iso_date: str) -> datetime:
    """A ``...Z`` date of the API as a datetime."""
    return datetime.fromisoformat(iso_date.replace("Z", "+00:00"))


async def add_schedule(api: Api, workflow_id: str, **body: Any) -> dict[str, Any]:
    """Create a schedule; its 201 body."""
    response = await call(api, "POST", f"/{workflow_id}/schedules", json=body)
    created: dict[str, Any] = await ok_json(response, 201)
    return created


async def refused(api: Api, workflow_id: str, body: dict[str, Any], status: int = 400) -> Any:
    """The error body of a create that must fail with ``status``."""
    response = await call(api, "POST", f"/{workflow_id}/schedules", json=body)
    return await ok_json(response, status)


async def fire(api: Api, now: datetime) -> int:
    """The fire_schedules job with the clock at ``now``, on the app's own resources."""
    assert api.client.app is not None
    resources = api.client.app[appkeys.RESOURCES]
    return await fire_due_schedules(resources.runs, resources.jobs, resources.reads, now=now)


async def scheduled_runs(api: Api, workflow_id: str) -> list[dict[str, Any]]:
    """Run what the ticks queued; the workflow's run records, newest first."""
    await api.run_jobs()
    return await runs_of(api, workflow_id)


# Create, list, get, delete


async def test_a_schedule_is_created_with_its_defaults(shaped_api: Api) -> None:
    workflow = await create(shaped_api, ECHO)
    schedule = await add_schedule(
        shaped_api, workflow["workflowId"], cron="*/5 * * * *", inputs={"name": "Ada"}
    )
    assert set(schedule) == {
        "scheduleId",
        "workflowId",
        "cron",
        "timezone",
        "event",
        "inputs",
        "nextRunDate",
        "createdDate",
    }
    assert schedule["workflowId"] == workflow["workflowId"]
    assert (schedule["cron"], schedule["timezone"], schedule["event"]) == (
        "*/5 * * * *",
        "UTC",
        "schedule",
    )
    assert schedule["inputs"] == {"name": "Ada"}
    next_run = moment(schedule["nextRunDate"])
    assert schedule["nextRunDate"].endswith("Z")
    assert next_run.minute % 5 == 0 and next_run.second == 0
    assert utcnow() < next_run <= utcnow() + timedelta(minutes=5)


async def test_schedules_are_listed_and_read_back(shaped_api: Api) -> None:
    workflow_id = (await create(shaped_api, ECHO))["workflowId"]
    first = await add_schedule(shaped_api, workflow_id, cron="0 9 * * *", inputs={"name": "a"})
    second = await add_schedule(shaped_api, workflow_id, cron="0 17 * * 1-5", inputs={"name": "b"})
    listed = await ok_json(await call(shaped_api, "GET", f"/{workflow_id}/schedules"))
    assert listed == [first, second]
    path = f"/{workflow_id}/schedules/{second['scheduleId']}"
    assert await ok_json(await call(shaped_api, "GET", path)) == second


async def test_a_deleted_schedule_is_gone(shaped_api: Api) -> None:
    workflow_id = (await create(shaped_api, ECHO))["workflowId"]
    schedule = await add_schedule(shaped_api, workflow_id, cron="0 9 * * *", inputs={"name": "a"})
    path = f"/{workflow_id}/schedules/{schedule['scheduleId']}"
    response = await call(shaped_api, "DELETE", path)
    assert response.status == 204, await response.text()
    assert (await ok_json(await call(shaped_api, "GET", path), 404))["error"] == "NOT_FOUND"
    assert await ok_json(await call(shaped_api, "GET", f"/{workflow_id}/schedules")) == []


async def test_next_run_date_is_the_next_tick_in_the_schedules_time_zone(api: Api) -> None:
    workflow_id = (await create(api, ECHO))["workflowId"]
    before = utcnow()
    schedule = await add_schedule(
        api, workflow_id, cron="0 9 * * *", timezone="Europe/Paris", inputs={"name": "a"}
    )
    # 09:00 on the Paris wall clock: 08:00Z in winter, 07:00Z in summer.
    paris = before.astimezone(ZoneInfo("Europe/Paris"))
    nine = paris.replace(hour=9, minute=0, second=0, microsecond=0)
    if nine <= paris:
        nine = (paris + timedelta(days=1)).replace(hour=9, minute=0, second=0, microsecond=0)
    assert moment(schedule["nextRunDate"]) == nine.astimezone(UTC)
    assert schedule["timezone"] == "Europe/Paris"


# Refused


@pytest.mark.parametrize(
    "cron",
    ["* * * *", "0 0 * * * *", "61 * * * *", "0 0 31 2 *", "@daily", "*/0 * * * *", "x y z a b"],
    ids=["four fields", "six fields", "minute 61", "february 31", "macro", "step 0", "words"],
)
async def test_a_bad_cron_is_a_validation_error_naming_it(api: Api, cron: str) -> None:
    workflow_id = (await create(api, ECHO))["workflowId"]
    error = await refused(api, workflow_id, {"cron": cron, "inputs": {"name": "a"}})
    assert error["error"] == "VALIDATION_ERROR", error
    assert [detail["field"] for detail in error["details"]] == ["cron"]


@pytest.mark.parametrize("timezone", ["Mars/Olympus", "Europe", "../../etc/passwd", "utc"])
async def test_an_unknown_time_zone_is_a_validation_error_naming_it(
    api: Api, timezone: str
) -> None:
    workflow_id = (await create(api, ECHO))["workflowId"]
    body = {"cron": "0 9 * * *", "timezone": timezone, "inputs": {"name": "a"}}
    error = await refused(api, workflow_id, body)
    assert error["error"] == "VALIDATION_ERROR", error
    assert [detail["field"] for detail in error["details"]] == ["timezone"]


async def test_a_missing_cron_is_a_validation_error_naming_it(api: Api) -> None:
    workflow_id = (await create(api, ECHO))["workflowId"]
    error = await refused(api, workflow_id, {"inputs": {"name": "a"}})
    assert error["error"] == "VALIDATION_ERROR"
    assert [detail["field"] for detail in error["details"]] == ["cron"]


async def test_an_event_the_latest_version_has_no_node_for_is_refused(api: Api) -> None:
    workflow_id = (await create(api, ECHO))["workflowId"]
    await publish(api, workflow_id, chain(output("x", 1), event="nightly"))
    body = {"cron": "0 9 * * *", "event": "schedule", "inputs": {"name": "a"}}
    error = await refused(api, workflow_id, body)
    assert error["error"] == "UNKNOWN_EVENT", error
    assert await ok_json(await call(api, "GET", f"/{workflow_id}/schedules")) == []


async def test_inputs_the_latest_version_refuses_are_invalid(api: Api) -> None:
    workflow_id = (await create(api, ECHO))["workflowId"]
    error = await refused(api, workflow_id, {"cron": "0 9 * * *", "inputs": {"name": 42}})
    assert error["error"] == "INVALID_INPUTS", error
    error = await refused(api, workflow_id, {"cron": "0 9 * * *"})  # "name" is required
    assert error["error"] == "INVALID_INPUTS", error


async def test_an_unknown_workflow_has_no_schedules(api: Api) -> None:
    body = {"cron": "0 9 * * *"}
    assert (await refused(api, "nope", body, 404))["error"] == "NOT_FOUND"
    response = await call(api, "GET", "/nope/schedules")
    assert (await ok_json(response, 404))["error"] == "NOT_FOUND"


async def test_an_unknown_schedule_is_not_found(api: Api) -> None:
    workflow_id = (await create(api, ECHO))["workflowId"]
    for method in ("GET", "DELETE"):
        response = await call(api, method, f"/{workflow_id}/schedules/nope")
        assert (await ok_json(response, 404))["error"] == "NOT_FOUND"


async def test_a_schedule_is_found_only_under_its_own_workflow(api: Api) -> None:
    workflow_id = (await create(api, ECHO))["workflowId"]
    other_id = (await create(api, ECHO, name="other"))["workflowId"]
    schedule = await add_schedule(api, workflow_id, cron="0 9 * * *", inputs={"name": "a"})
    for method in ("GET", "DELETE"):
        response = await call(api, method, f"/{other_id}/schedules/{schedule['scheduleId']}")
        assert (await ok_json(response, 404))["error"] == "NOT_FOUND"


async def test_another_projects_schedules_are_not_found(api: Api) -> None:
    workflow_id = (await create(api, ECHO))["workflowId"]
    schedule = await add_schedule(api, workflow_id, cron="0 9 * * *", inputs={"name": "a"})
    other_project, other_key = await new_project("other")
    base = f"/api/publicv1/projects/{other_project}/workflows/{workflow_id}/schedules"
    headers = {"Authorization": other_key}
    for method, path in [
        ("GET", base),
        ("POST", base),
        ("GET", f"{base}/{schedule['scheduleId']}"),
        ("DELETE", f"{base}/{schedule['scheduleId']}"),
    ]:
        body = {"cron": "0 9 * * *", "inputs": {"name": "a"}} if method == "POST" else None
        response = await api.client.request(method, path, headers=headers, json=body)
        assert (await ok_json(response, 404))["error"] == "NOT_FOUND", (method, path)
    mine = f"/{workflow_id}/schedules/{schedule['scheduleId']}"
    assert await ok_json(await call(api, "GET", mine)) == schedule  # untouched


# Firing


async def test_a_due_tick_queues_one_run_of_the_schedules_event_and_inputs(
    shaped_api: Api,
) -> None:
    workflow_id = (await create(shaped_api, ECHO))["workflowId"]
    schedule = await add_schedule(
        shaped_api, workflow_id, cron=every_minute_of_far_month(), inputs={"name": "Ada"}
    )
    tick = moment(schedule["nextRunDate"])
    assert await fire(shaped_api, tick + timedelta(seconds=1)) >= 1
    runs = await scheduled_runs(shaped_api, workflow_id)
    assert len(runs) == 1
    run = runs[0]
    assert (run["trigger"], run["event"], run["status"]) == ("schedule", "schedule", "succeeded")
    assert run["inputs"] == {"name": "Ada", "greeting": "Hi"}
    assert run["outputs"] == {"text": "Hi, Ada"}
    path = f"/{workflow_id}/schedules/{schedule['scheduleId']}"
    moved = await ok_json(await call(shaped_api, "GET", path))
    assert moment(moved["nextRunDate"]) == tick + timedelta(minutes=1)


async def test_a_tick_not_yet_due_queues_nothing(api: Api) -> None:
    workflow_id = (await create(api, ECHO))["workflowId"]
    schedule = await add_schedule(
        api, workflow_id, cron=every_minute_of_far_month(), inputs={"name": "Ada"}
    )
    await fire(api, moment(schedule["nextRunDate"]) - timedelta(seconds=1))
    assert await scheduled_runs(api, workflow_id) == []


async def test_firing_the_same_tick_twice_queues_one_run(shaped_api: Api) -> None:
    workflow_id = (await create(shaped_api, ECHO))["workflowId"]
    schedule = await add_schedule(
        shaped_api, workflow_id, cron=every_minute_of_far_month(), inputs={"name": "Ada"}
    )
    now = moment(schedule["nextRunDate"]) + timedelta(seconds=1)
    await fire(shaped_api, now)
    await fire(shaped_api, now)
    assert len(await scheduled_runs(shaped_api, workflow_id)) == 1


async def test_concurrent_firings_of_one_tick_queue_one_run(shaped_api: Api) -> None:
    workflow_id = (await create(shaped_api, ECHO))["workflowId"]
    schedule = await add_schedule(
        shaped_api, workflow_id, cron=every_minute_of_far_month(), inputs={"name": "Ada"}
    )
    now = moment(schedule["nextRunDate"]) + timedelta(seconds=1)
    await asyncio.gather(*(fire(shaped_api, now) for _ in range(4)))
    assert len(await scheduled_runs(shaped_api, workflow_id)) == 1


async def test_each_tick_fires_once_as_the_clock_moves(api: Api) -> None:
    workflow_id = (await create(api, ECHO))["workflowId"]
    schedule = await add_schedule(
        api, workflow_id, cron=every_minute_of_far_month(), inputs={"name": "Ada"}
    )
    tick = moment(schedule["nextRunDate"])
    for minute in range(3):
        now = tick + timedelta(minutes=minute, seconds=1)
        await fire(api, now)
        await fire(api, now)
    assert len(await scheduled_runs(api, workflow_id)) == 3


async def test_ticks_missed_in_a_long_outage_queue_one_run(shaped_api: Api) -> None:
    workflow_id = (await create(shaped_api, ECHO))["workflowId"]
    schedule = await add_schedule(
        shaped_api, workflow_id, cron=every_minute_of_far_month(), inputs={"name": "Ada"}
    )
    # Three days of minutes (4,320 ticks) went by with nothing running.
    now = moment(schedule["nextRunDate"]) + timedelta(days=3, seconds=30)
    await fire(shaped_api, now)
    await fire(shaped_api, now + timedelta(seconds=1))
    assert len(await scheduled_runs(shaped_api, workflow_id)) == 1
    path = f"/{workflow_id}/schedules/{schedule['scheduleId']}"
    moved = await ok_json(await call(shaped_api, "GET", path))
    # The next tick is counted from now, not from the missed ones.
    assert moment(moved["nextRunDate"]) == now.replace(second=0) + timedelta(minutes=1)


async def test_a_tick_in_the_hour_clocks_go_back_fires_once(api: Api) -> None:
    workflow_id = (await create(api, ECHO))["workflowId"]
    schedule = await add_schedule(
        api, workflow_id, cron="30 1 * * *", timezone="America/New_York", inputs={"name": "A"}
    )
    # New York's clocks go back at 06:00 UTC on 2027-11-07: 06:10 UTC is 01:10 for the
    # second time that night, after the first 01:30 (05:30 UTC) went by.
    now = datetime(2027, 11, 7, 6, 10, tzinfo=UTC)
    await fire(api, now)
    await fire(api, now + timedelta(seconds=2))
    assert len(await scheduled_runs(api, workflow_id)) == 1
    path = f"/{workflow_id}/schedules/{schedule['scheduleId']}"
    moved = await ok_json(await call(api, "GET", path))
    assert moment(moved["nextRunDate"]) == datetime(2027, 11, 8, 6, 30, tzinfo=UTC)


async def test_a_deleted_schedule_fires_nothing(shaped_api: Api) -> None:
    workflow_id = (await create(shaped_api, ECHO))["workflowId"]
    schedule = await add_schedule(
        shaped_api, workflow_id, cron=every_minute_of_far_month(), inputs={"name": "Ada"}
    )
    path = f"/{workflow_id}/schedules/{schedule['scheduleId']}"
    assert (await call(shaped_api, "DELETE", path)).status == 204
    await fire(shaped_api, moment(schedule["nextRunDate"]) + timedelta(seconds=1))
    assert await scheduled_runs(shaped_api, workflow_id) == []


async def test_a_tick_the_changed_workflow_refuses_is_a_failed_run(api: Api) -> None:
    workflow_id = (await create(api, ECHO))["workflowId"]
    schedule = await add_schedule(
        api, workflow_id, cron=every_minute_of_far_month(), inputs={"name": "Ada"}
    )
    await publish(api, workflow_id, chain(output("x", 1), event="nightly"))
    now = moment(schedule["nextRunDate"]) + timedelta(seconds=1)
    await asyncio.gather(*(fire(api, now) for _ in range(4)))
    await fire(api, now)  # the tick moved on all the same
    runs = await scheduled_runs(api, workflow_id)
    assert len(runs) == 1
    run = runs[0]
    assert (run["trigger"], run["status"], run["version"]) == ("schedule", "failed", "2")
    assert run["error"]["code"] == "UNKNOWN_EVENT"
    assert run["inputs"] == {"name": "Ada"}
    path = f"/{workflow_id}/schedules/{schedule['scheduleId']}"
    moved = await ok_json(await call(api, "GET", path))
    assert moment(moved["nextRunDate"]) > now


async def test_a_tick_runs_the_latest_version(api: Api) -> None:
    workflow_id = (await create(api, ECHO))["workflowId"]
    schedule = await add_schedule(
        api, workflow_id, cron=every_minute_of_far_month(), inputs={"name": "Ada"}
    )
    await publish(api, workflow_id, chain(output("v", "two"), event="schedule"))
    await fire(api, moment(schedule["nextRunDate"]) + timedelta(seconds=1))
    [run] = await scheduled_runs(api, workflow_id)
    assert (run["version"], run["status"], run["outputs"]) == ("2", "succeeded", {"v": "two"})
