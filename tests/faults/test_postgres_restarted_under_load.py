"""Restart PostgreSQL under load: 503 JSON while it is down, /readyz says so, then recovery."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from tests.conftest import unavailable
from tests.faults.conftest import ServerFactory
from tests.faults.processes import PrivatePostgres, Server, http_json
from tests.workflow_helpers import chain, output


@pytest.fixture
def postgres() -> Iterator[PrivatePostgres]:
    try:
        cluster = PrivatePostgres()
    except (RuntimeError, OSError, subprocess.CalledProcessError) as err:
        unavailable("a PostgreSQL cluster of the test's own", "apt-get install postgresql", err)
        raise
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.remove()


@pytest.fixture
def server(start_server: ServerFactory, postgres: PrivatePostgres) -> Server:
    return start_server(
        LIBFLOW_DATABASE_URL=postgres.url,
        LIBFLOW_RATE_LIMIT="0",  # load from one key: the limit is tested elsewhere
    )


class Load:
    """Clients listing files and running a workflow in a loop; every answer is kept."""

    def __init__(self, session: aiohttp.ClientSession, urls: list[tuple[str, str]], key: str):
        self.session = session
        self.urls = urls
        self.key = key
        self.answers: list[tuple[float, int, Any, str | None]] = []
        self.running = True

    async def client(self, method: str, url: str) -> None:
        body = {"inputs": {}} if method == "POST" else None
        while self.running:
            try:
                async with self.session.request(
                    method, url, json=body, headers={"Authorization": self.key}
                ) as response:
                    payload = await response.json(content_type=None)
                    retry = response.headers.get("Retry-After")
                    self.answers.append((time.monotonic(), response.status, payload, retry))
            except aiohttp.ClientError as err:  # the server itself must never drop us
                self.answers.append((time.monotonic(), 0, repr(err), None))
            await asyncio.sleep(0.02)


@pytest.mark.flaky(reruns=1)
async def test_a_postgres_restart_is_503_while_down_and_the_service_recovers_by_itself(
    server: Server, postgres: PrivatePostgres
) -> None:
    project_id, key = server.create_project()
    api = f"{server.url}/api/publicv1/projects/{project_id}"
    definition = chain(output("greeting", "hello"))
    status, workflow = http_json(
        "POST", f"{api}/workflows", {"name": "w", "definition": definition}, Authorization=key
    )
    assert status == 201, workflow
    targets = [
        ("GET", f"{api}/library/files"),
        ("POST", f"{api}/workflows/{workflow['workflowId']}/runsync"),
    ] * 2

    async with aiohttp.ClientSession() as session:
        load = Load(session, targets, key)
        clients = [asyncio.create_task(load.client(m, u)) for m, u in targets]
        await asyncio.sleep(1)

        await asyncio.to_thread(postgres.stop, "fast")
        stopped_at = time.monotonic()
        await asyncio.sleep(3)
        async with session.get(f"{server.url}/readyz") as response:
            ready_while_down = (response.status, await response.json())
        restarting_at = time.monotonic()
        await asyncio.to_thread(postgres.start)

        async def healthy() -> None:
            while True:
                async with session.get(f"{server.url}/readyz") as response:
                    if response.status == 200:
                        return
                await asyncio.sleep(0.2)

        await asyncio.wait_for(healthy(), 30)
        healthy_at = time.monotonic()
        await asyncio.sleep(2)
        load.running = False
        await asyncio.gather(*clients)

    status, body = ready_while_down
    assert status == 503
    assert body["error"] == "UNAVAILABLE"
    assert body["details"]["database"].startswith("unavailable")

    during = [a for a in load.answers if stopped_at + 0.5 < a[0] < restarting_at]
    assert during, "no requests were made while PostgreSQL was down"
    for _, status, payload, retry in during:
        assert status == 503, payload
        assert payload["error"] == "UNAVAILABLE"
        assert retry is not None and retry.isdigit()
    assert all(status in (200, 503) for _, status, _, _ in load.answers), Counter(
        status for _, status, _, _ in load.answers
    )
    after = [a for a in load.answers if a[0] > healthy_at + 0.5]
    assert after and all(status == 200 for _, status, _, _ in after), Counter(
        (status, str(payload)[:80]) for _, status, payload, _ in after
    )
    assert server.alive
    assert '"level": "error"' not in server.output()  # an outage is not a crash
