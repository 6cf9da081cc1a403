"""Watching async runs from outside, as a client would: the SSE stream, and cancels timed.

Used by ``bench.async_runs``: node.finished latency seen by many subscribers at once, and the
time from a cancel to the end of the run it stops.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import aiohttp

from bench._common import BenchError

FINISHED_STATUSES = frozenset({"succeeded", "failed", "timed_out", "cancelled"})
# A stream quiet this long is broken (the runs here send an event at least every second).
STREAM_READ_TIMEOUT = 40.0
CANCEL_POLL_SECONDS = 0.01
CANCEL_TIMEOUT = 10.0
RUNNING_TIMEOUT = 30.0


@dataclass(frozen=True, slots=True)
class Received:
    """One server-sent event, and when the client had it whole (``time.time()``)."""

    at: float
    name: str
    data: str


@dataclass(frozen=True)
class Api:
    """A project's API root and key."""

    base: str
    project: str
    key: str

    @property
    def root(self) -> str:
        """``.../projects/:projectId``."""
        return f"{self.base}/api/publicv1/projects/{self.project}"

    @property
    def headers(self) -> dict[str, str]:
        """The key, as every call sends it."""
        return {"Authorization": self.key}


def unlimited_session() -> aiohttp.ClientSession:
    """A client session without aiohttp's default cap of 100 connections."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0),
        timeout=aiohttp.ClientTimeout(total=None, sock_read=STREAM_READ_TIMEOUT),
    )


async def post_json(session: aiohttp.ClientSession, api: Api, path: str, status: int) -> Any:
    """POST ``{}`` to ``api.root + path``; its JSON answer, which must have ``status``."""
    async with session.post(api.root + path, json={}, headers=api.headers) as response:
        body = await response.read()
        if response.status != status:
            raise BenchError(f"POST {path} -> {response.status}: {body[:300]!r}")
        return json.loads(body)


async def get_json(session: aiohttp.ClientSession, api: Api, path: str) -> Any:
    """GET ``api.root + path``; its JSON answer (200 only)."""
    async with session.get(api.root + path, headers=api.headers) as response:
        body = await response.read()
        if response.status != 200:
            raise BenchError(f"GET {path} -> {response.status}: {body[:300]!r}")
        return json.loads(body)


async def queue_runs(
    session: aiohttp.ClientSession, api: Api, workflow_id: str, count: int
) -> list[str]:
    """POST ``count`` runs of the workflow at once: their ids."""
    answers = await asyncio.gather(
        *(post_json(session, api, f"/workflows/{workflow_id}/runs", 202) for _ in range(count))
    )
    return [answer["runId"] for answer in answers]


async def _events(response: aiohttp.ClientResponse) -> AsyncIterator[Received]:
    """The events of an open ``text/event-stream`` response, each timed as it completes."""
    name: str | None = None
    data: list[str] = []
    async for raw in response.content:
        line = raw.decode().rstrip("\r\n")
        if not line:
            if name is not None:
                yield Received(time.time(), name, "\n".join(data))
            name, data = None, []
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
        # id:, retry: and comment lines carry nothing measured here


@dataclass
class Subscriber:
    """One watcher of a run: when its stream opened, and everything it received."""

    run_id: str
    opened_at: float = 0.0
    received: list[Received] = field(default_factory=list)
    running: asyncio.Event = field(default_factory=asyncio.Event)
    finished: asyncio.Event = field(default_factory=asyncio.Event)

    async def watch(self, session: aiohttp.ClientSession, api: Api, running_node: str) -> None:
        """Read the run's stream to its end; ``running`` is set at ``running_node``'s start."""
        url = f"{api.root}/runs/{self.run_id}/events"
        async with session.get(url, headers=api.headers) as response:
            if response.status != 200:
                raise BenchError(f"GET {url} -> {response.status}: {await response.text()}")
            self.opened_at = time.time()
            async for event in _events(response):
                self.received.append(event)
                if event.name == "node.started" and json.loads(event.data)["node"] == running_node:
                    self.running.set()
                if event.name == "run.finished":
                    self.finished.set()
                    return
        raise BenchError(f"the stream of run {self.run_id} ended before run.finished")


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


@dataclass(frozen=True)
class SseLatencies:
    """node.finished latencies (ms) over every (subscriber, live event) pair."""

    samples: list[float]
    subscribers: int
    replayed: int  # node.finished events of nodes that ended before their stream opened


async def sse_latencies(
    api: Api, workflow_id: str, runs: int, per_run: int, first_node: str
) -> SseLatencies:
    """Queue ``runs`` runs, watch each with ``per_run`` subscribers, time each node.finished.

    A node's finish time is its ``nodeTimings[node].finishedDate`` in the record, read after
    the run. Events of nodes that finished before a subscriber's stream opened are replayed
    history, not live, and left out; ``first_node`` (the first one measured) must finish
    after every stream opened, or the figures would not be of ``per_run`` live watchers.
    """
    async with unlimited_session() as session:
        run_ids = await queue_runs(session, api, workflow_id, runs)
        subscribers = [Subscriber(run_id) for run_id in run_ids for _ in range(per_run)]
        await asyncio.gather(*(s.watch(session, api, first_node) for s in subscribers))
        records = {run_id: await get_json(session, api, f"/runs/{run_id}") for run_id in run_ids}
    samples: list[float] = []
    replayed = 0
    for subscriber in subscribers:
        record = records[subscriber.run_id]
        if record["status"] != "succeeded":
            raise BenchError(f"run {subscriber.run_id} ended {record['status']}: {record['error']}")
        timings = record["nodeTimings"]
        if _epoch(timings[first_node]["finishedDate"]) < subscriber.opened_at:
            raise BenchError(f"a stream opened after {first_node!r} finished: too slow to measure")
        finished_nodes = [
            json.loads(event.data)["node"]
            for event in subscriber.received
            if event.name == "node.finished"
        ]
        if sorted(finished_nodes) != sorted(timings):
            raise BenchError(f"a subscriber saw {finished_nodes} finish, the run {list(timings)}")
        for event in subscriber.received:
            if event.name != "node.finished":
                continue
            finished = _epoch(timings[json.loads(event.data)["node"]]["finishedDate"])
            if finished < subscriber.opened_at:
                replayed += 1
                continue
            samples.append((event.at - finished) * 1000)
    return SseLatencies(samples, len(subscribers), replayed)


@dataclass(frozen=True)
class CancelLatencies:
    """Per run (ms): cancel POST sent -> its 202, -> run.finished on SSE, -> GET shows it."""

    answered: list[float]
    streamed: list[float]
    polled: list[float]


async def _poll_until_ended(session: aiohttp.ClientSession, api: Api, run_id: str) -> float:
    """GET the run every CANCEL_POLL_SECONDS until it ended: when it first showed it."""
    deadline = time.time() + CANCEL_TIMEOUT
    while time.time() < deadline:
        record = await get_json(session, api, f"/runs/{run_id}")
        if record["status"] in FINISHED_STATUSES:
            if record["status"] != "cancelled":
                raise BenchError(f"run {run_id} ended {record['status']}, not cancelled")
            return time.time()
        await asyncio.sleep(CANCEL_POLL_SECONDS)
    raise BenchError(f"run {run_id} had not ended {CANCEL_TIMEOUT}s after its cancel")


async def _until_running(subscribers: list[Subscriber], watching: list[asyncio.Task[None]]) -> None:
    """Wait until every subscriber saw its run reach the node it is to be cancelled in."""
    deadline = time.monotonic() + RUNNING_TIMEOUT
    while not all(subscriber.running.is_set() for subscriber in subscribers):
        for watcher in watching:
            if watcher.done():
                watcher.result()  # its error, if it failed
                raise BenchError("a run ended before it was cancelled")
        if time.monotonic() > deadline:
            waiting = sum(not subscriber.running.is_set() for subscriber in subscribers)
            raise BenchError(f"{waiting} runs were not running after {RUNNING_TIMEOUT:.0f}s")
        await asyncio.sleep(0.05)


async def cancel_latencies(
    api: Api, workflow_id: str, runs: int, waiting_node: str
) -> CancelLatencies:
    """Queue ``runs`` long runs, wait until each is in ``waiting_node``, cancel one at a time.

    Every run is watched from before its cancel, so the stream's ``run.finished`` is timed
    as it arrives; a GET loop polls the record meanwhile.
    """
    answered: list[float] = []
    streamed: list[float] = []
    polled: list[float] = []
    async with unlimited_session() as session:
        run_ids = await queue_runs(session, api, workflow_id, runs)
        subscribers = [Subscriber(run_id) for run_id in run_ids]
        watching = [asyncio.create_task(s.watch(session, api, waiting_node)) for s in subscribers]
        try:
            await _until_running(subscribers, watching)
            for subscriber, watcher in zip(subscribers, watching, strict=True):
                sent = time.time()
                poller = asyncio.create_task(_poll_until_ended(session, api, subscriber.run_id))
                await post_json(session, api, f"/runs/{subscriber.run_id}/cancel", 202)
                answered.append((time.time() - sent) * 1000)
                await asyncio.wait_for(watcher, CANCEL_TIMEOUT)
                streamed.append((subscriber.received[-1].at - sent) * 1000)
                polled.append((await poller - sent) * 1000)
                record = json.loads(subscriber.received[-1].data)
                if record.get("status") != "cancelled":
                    raise BenchError(f"run.finished of a cancelled run carried {record}")
        finally:
            for watcher in watching:
                watcher.cancel()
            await asyncio.gather(*watching, return_exceptions=True)
    return CancelLatencies(answered, streamed, polled)
