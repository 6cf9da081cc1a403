"""Helpers of the run tests: start runs, wait for them, and read their event streams."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from aiohttp import ClientResponse

from tests.conftest import Api
from tests.workflow_helpers import API, call, get_run, ok_json

FINISHED = {"succeeded", "failed", "timed_out", "cancelled"}


def runs_url(api: Api, path: str = "") -> str:
    """A path under the project's runs."""
    return f"{API}/projects/{api.project_id}/runs{path}"


async def start(api: Api, workflow_id: str, **body: Any) -> dict[str, Any]:
    """POST runs: the 202 record (its Location checked)."""
    response = await call(api, "POST", f"/{workflow_id}/runs", json=body)
    run: dict[str, Any] = await ok_json(response, 202)
    assert response.headers["Location"] == f"{API}/projects/{api.project_id}/runs/{run['runId']}"
    return run


async def wait_for_status(
    api: Api, run_id: str, statuses: set[str] = FINISHED, timeout: float = 30
) -> dict[str, Any]:
    """Poll the run until its status is one of ``statuses``."""
    deadline = time.monotonic() + timeout
    while True:
        run = await get_run(api, run_id)
        if run["status"] in statuses:
            return run
        assert time.monotonic() < deadline, f"run {run_id} still {run['status']}"
        await asyncio.sleep(0.05)


async def cancel(api: Api, run_id: str) -> ClientResponse:
    """POST cancel."""
    return await api.client.post(runs_url(api, f"/{run_id}/cancel"), headers=api.headers)


@dataclass(frozen=True)
class Event:
    """One server-sent event as a client reads it."""

    id: int | None
    name: str
    data: Any


async def stream_events(response: ClientResponse) -> AsyncIterator[Event]:
    """Each event of an SSE stream as it arrives, until the stream ends."""
    assert response.status == 200, await response.text()
    assert response.headers["Content-Type"].startswith("text/event-stream")
    fields: dict[str, str] = {}
    async for raw in response.content:
        line = raw.decode().rstrip("\r\n")
        if line.startswith(":"):
            continue
        if line:
            name, _, value = line.partition(": ")
            fields[name] = value
            continue
        if "event" in fields:
            ident = fields.get("id")
            yield Event(int(ident) if ident else None, fields["event"], json.loads(fields["data"]))
        fields = {}


async def read_events(response: ClientResponse, limit: int | None = None) -> list[Event]:
    """Parse an SSE stream until it ends (or ``limit`` events were read)."""
    events: list[Event] = []
    async for event in stream_events(response):
        events.append(event)
        if limit is not None and len(events) >= limit:
            break
    return events


async def events_of(
    api: Api, run_id: str, last_event_id: int | None = None, limit: int | None = None
) -> list[Event]:
    """GET events of a run, from after ``last_event_id``."""
    headers = dict(api.headers)
    if last_event_id is not None:
        headers["Last-Event-ID"] = str(last_event_id)
    async with api.client.get(runs_url(api, f"/{run_id}/events"), headers=headers) as response:
        return await read_events(response, limit)
