"""Two API processes and two workers on PostgreSQL and Redis: each schedule tick runs once.

The workers fire schedules every second, but arq lets only one of them run each second's
job. So that the claim of a tick is raced for real, firers of the test's own (each with its
own database connection, as a process has) fire at the very moment the tick comes due.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from libflow.db.connection import open_database
from libflow.ids import utcnow
from libflow.models import Schedule
from libflow.resources import open_resources
from libflow.workflows.schedules import fire_due_schedules
from settings import Settings
from tests.conftest import base_settings
from tests.faults.processes import Process, Server, Worker, http_json, wait_for
from tests.workflow_helpers import chain, output

TICKS = 3
RACERS = 2
# Several fire_schedules jobs (one a second) after the last tick: room for a second run.
SETTLE_SECONDS = 4
# How long the test and its racers wait for one another.
BARRIER_SECONDS = 60
# The test moves the clock within one minute: the real tick at its end must not come.
MINUTE_NEEDED = 30


@pytest.fixture
def processes() -> Iterator[list[Process]]:
    """The processes a test starts; stopped after it."""
    started: list[Process] = []
    try:
        yield started
    finally:
        for process in reversed(started):
            process.stop()


def start_fleet(
    tmp_path: Path, processes: list[Process], postgres_url: str, redis_url: str
) -> tuple[Server, Server]:
    """Two API processes and two workers, in the scaled shape."""
    settings = {"LIBFLOW_DATABASE_URL": postgres_url, "LIBFLOW_REDIS_URL": redis_url}
    servers = [Server(tmp_path / "data", tmp_path / f"server{n}.log", **settings) for n in (1, 2)]
    for server in servers:
        server.start()
        processes.append(server)
    for n in (1, 2):
        worker = Worker(servers[0], tmp_path / f"worker{n}.log")
        worker.start()
        processes.append(worker)
    return servers[0], servers[1]


async def race(settings: Settings, due: asyncio.Barrier) -> None:
    """Fire schedules as a process would, each time the barrier says a tick came due."""
    async with open_resources(settings) as resources:
        await due.wait()  # ready
        for _ in range(TICKS):
            await due.wait()
            await fire_due_schedules(resources.runs, resources.jobs, resources.reads)


def wait_for_room_in_the_minute() -> None:
    """Return at least MINUTE_NEEDED seconds before the next minute begins."""
    second = utcnow().second
    if second > 60 - MINUTE_NEEDED:
        time.sleep(60 - second + 0.5)


def logs(processes: list[Process]) -> str:
    """What every process wrote, for a failure's message."""
    return "\n".join(f"--- {p.log.name}\n{p.output()[-3000:]}" for p in processes)


async def test_each_tick_runs_once_across_api_processes_and_workers(
    tmp_path: Path, processes: list[Process], postgres_url: str, redis_url: str
) -> None:
    first, second = start_fleet(tmp_path, processes, postgres_url, redis_url)
    project_id, key = first.create_project()
    definition = chain(output("tick", "{{ inputs.n }}"), event="schedule")
    status, workflow = http_json(
        "POST",
        f"{first.url}/api/publicv1/projects/{project_id}/workflows",
        {"name": "ticks", "definition": definition},
        Authorization=key,
    )
    assert status == 201, workflow
    workflow_url = f"/api/publicv1/projects/{project_id}/workflows/{workflow['workflowId']}"

    def runs() -> list[dict[str, Any]]:
        status, found = http_json("GET", f"{first.url}{workflow_url}/runs", Authorization=key)
        assert status == 200, found
        return list(found)

    def at_least(count: int) -> Callable[[], bool]:
        return lambda: len(runs()) >= count

    due = asyncio.Barrier(RACERS + 1)
    racer_settings = base_settings(
        tmp_path / "racers", database_url=postgres_url, redis_url=redis_url, embedder="none"
    )
    # Each in a context of its own: Tortoise keeps its connection per context.
    racers = [
        asyncio.create_task(race(racer_settings, due), context=contextvars.Context())
        for _ in range(RACERS)
    ]
    try:
        await asyncio.wait_for(due.wait(), BARRIER_SECONDS)  # the racers are ready
        await asyncio.to_thread(wait_for_room_in_the_minute)
        status, schedule = http_json(
            "POST",
            f"{second.url}{workflow_url}/schedules",
            {"cron": "* * * * *", "inputs": {"n": 1}},
            Authorization=key,
        )
        assert status == 201, schedule
        async with open_database(postgres_url):
            for tick in range(1, TICKS + 1):
                # The tick is due now: rather than wait a minute for it, move the clock.
                moved = await Schedule.filter(id=schedule["scheduleId"]).update(
                    next_run_at=utcnow() - timedelta(seconds=1)
                )
                assert moved == 1
                # The racers fire at once, and the workers within a second.
                await asyncio.wait_for(due.wait(), BARRIER_SECONDS)
                await asyncio.to_thread(
                    wait_for, at_least(tick), 30, f"tick {tick} queued no run:\n{logs(processes)}"
                )
        await asyncio.wait_for(asyncio.gather(*racers), BARRIER_SECONDS)
    finally:
        for racer in racers:
            racer.cancel()
        await asyncio.gather(*racers, return_exceptions=True)
    await asyncio.sleep(SETTLE_SECONDS)

    def all_finished() -> list[dict[str, Any]] | None:
        found = runs()
        return found if all(run["finishedDate"] for run in found) else None

    found = await asyncio.to_thread(wait_for, all_finished, 30, f"runs stuck:\n{logs(processes)}")
    status, now_schedule = http_json(
        "GET", f"{first.url}{workflow_url}/schedules/{schedule['scheduleId']}", Authorization=key
    )
    assert status == 200, now_schedule
    # The real minute's tick has not come (it would be a run of its own).
    assert now_schedule["nextRunDate"] == schedule["nextRunDate"], "the test overran its minute"
    assert len(found) == TICKS, found
    assert {(run["trigger"], run["status"]) for run in found} == {("schedule", "succeeded")}
    assert [run["outputs"] for run in found] == [{"tick": 1}] * TICKS
