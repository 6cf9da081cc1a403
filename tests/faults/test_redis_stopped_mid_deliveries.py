"""Stop Redis during a stream of webhook deliveries: every accepted one runs exactly once."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.faults.conftest import ServerFactory
from tests.faults.processes import Server, Worker, http_json, wait_for
from tests.private_redis import PrivateRedis
from tests.webhook_helpers import echo, event_body, standard_headers

# The run list shows 100 runs: a delivery run twice would show as more than DELIVERIES.
DELIVERIES = 90
AT_ONCE = 6


@pytest.fixture
def server(start_server: ServerFactory, postgres_url: str, private_redis: PrivateRedis) -> Server:
    return start_server(LIBFLOW_DATABASE_URL=postgres_url, LIBFLOW_REDIS_URL=private_redis.url)


async def send(
    session: aiohttp.ClientSession, url: str, secret: str, n: int
) -> tuple[int, dict[str, Any]]:
    """One delivery, retried as senders retry (on anything but a 2xx or 4xx)."""
    body = event_body(n=n)
    headers = standard_headers(secret, body, msg_id=f"msg_{n}")
    for _ in range(20):
        try:
            async with session.post(url, data=io.BytesIO(body), headers=headers) as response:
                if response.status < 500:
                    return response.status, await response.json()
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.5)
    raise AssertionError(f"delivery {n} was never accepted")


def echo_webhook(server: Server) -> tuple[str, str, dict[str, Any], dict[str, Any]]:
    """A project, an echo workflow and a webhook on it: (project API URL, key, both bodies)."""
    project_id, key = server.create_project()
    api = f"{server.url}/api/publicv1/projects/{project_id}"
    status, workflow = http_json(
        "POST", f"{api}/workflows", {"name": "echo", "definition": echo()}, Authorization=key
    )
    assert status == 201, workflow
    status, webhook = http_json(
        "POST", f"{api}/workflows/{workflow['workflowId']}/webhooks", {}, Authorization=key
    )
    assert status == 201, webhook
    return api, key, workflow, webhook


async def test_deliveries_accepted_while_redis_is_away_run_exactly_once_when_it_returns(
    server: Server, tmp_path: Path, private_redis: PrivateRedis
) -> None:
    api, key, workflow, webhook = echo_webhook(server)
    worker = Worker(server, tmp_path / "worker.log")
    worker.start()
    accepted: list[int] = []
    try:
        async with aiohttp.ClientSession() as session:
            for first in range(0, DELIVERIES, AT_ONCE):
                if first == DELIVERIES // 3:
                    await asyncio.to_thread(private_redis.stop)
                if first == 2 * DELIVERIES // 3:
                    await asyncio.to_thread(private_redis.start)
                batch = range(first, min(first + AT_ONCE, DELIVERIES))
                replies = await asyncio.gather(
                    *(send(session, webhook["url"], webhook["secret"], n) for n in batch)
                )
                for n, (status, body) in zip(batch, replies, strict=True):
                    assert (status, body) == (200, {"ok": True}), (n, status, body)
                    accepted.append(n)
                # Slower while Redis is away: the outage lasts seconds, not one poll.
                await asyncio.sleep(0.5 if DELIVERIES // 3 <= first < 2 * DELIVERIES // 3 else 0.1)

        deliveries_url = f"{api}/webhooks/{webhook['webhookId']}/deliveries?limit=1000"

        def finished() -> list[dict[str, Any]] | None:
            status, found = http_json("GET", deliveries_url, Authorization=key)
            assert status == 200, found
            done = all(d["status"] in ("succeeded", "failed") for d in found)
            return found if done and len(found) == len(accepted) else None

        deliveries = await asyncio.to_thread(
            wait_for, finished, 120, f"deliveries not all run:\n{worker.output()}"
        )
        assert worker.alive, f"the worker died with Redis:\n{worker.output()}"
    finally:
        worker.stop()

    assert {d["status"] for d in deliveries} == {"succeeded"}
    status, runs = http_json(
        "GET", f"{api}/workflows/{workflow['workflowId']}/runs", Authorization=key
    )
    assert status == 200, runs
    assert sorted(r["outputs"]["payload"]["n"] for r in runs) == sorted(accepted)
    assert {d["runId"] for d in deliveries} == {r["runId"] for r in runs}


async def test_a_worker_started_while_redis_is_down_waits_for_it(
    server: Server, tmp_path: Path, private_redis: PrivateRedis
) -> None:
    api, key, _workflow, webhook = echo_webhook(server)
    await asyncio.to_thread(private_redis.stop)
    worker = Worker(server, tmp_path / "worker.log")
    worker.start()
    try:
        async with aiohttp.ClientSession() as session:
            replies = await asyncio.gather(
                *(send(session, webhook["url"], webhook["secret"], n) for n in range(5))
            )
        assert {status for status, _ in replies} == {200}
        await asyncio.to_thread(
            wait_for, lambda: "waiting for Redis" in worker.output(), 60, "worker never waited"
        )
        await asyncio.sleep(7)  # arq alone gives up after five tries a second apart, and exits
        assert worker.alive, worker.output()

        await asyncio.to_thread(private_redis.start)
        deliveries_url = f"{api}/webhooks/{webhook['webhookId']}/deliveries"

        def finished() -> list[dict[str, Any]] | None:
            status, found = http_json("GET", deliveries_url, Authorization=key)
            assert status == 200, found
            return found if {d["status"] for d in found} == {"succeeded"} else None

        delivered = await asyncio.to_thread(
            wait_for, finished, 60, f"deliveries did not run:\n{worker.output()}"
        )
    finally:
        worker.stop()
    assert len(delivered) == 5
