"""Per-API-key rate limits: 429 RATE_LIMITED with Retry-After, shared through Redis."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from pathlib import Path

from aiohttp import ClientResponse, web
from aiohttp.test_utils import TestClient
from redis.asyncio import Redis

from libflow.models import Project
from libflow.projects import create_api_key
from libflow.rate_limits import MemoryRateLimiter, RedisRateLimiter
from tests.conftest import ClientFactory, base_settings, new_project
from tests.private_redis import PrivateRedis


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_a_key_may_send_its_burst_at_once_then_waits_one_interval() -> None:
    clock = FakeClock()
    limiter = MemoryRateLimiter(rate=2, burst=3, clock=clock)

    assert [await limiter.charge("k") for _ in range(3)] == [0, 0, 0]
    assert await limiter.charge("k") == 0.5

    clock.now += 0.5
    assert await limiter.charge("k") == 0
    assert await limiter.charge("k") == 0.5


async def test_an_idle_key_gets_its_whole_burst_back() -> None:
    clock = FakeClock()
    limiter = MemoryRateLimiter(rate=10, burst=2, clock=clock)
    for _ in range(2):
        await limiter.charge("k")

    clock.now += 60
    assert [await limiter.charge("k") for _ in range(2)] == [0, 0]


async def test_keys_have_buckets_of_their_own() -> None:
    limiter = MemoryRateLimiter(rate=1, burst=1, clock=FakeClock())
    assert await limiter.charge("a") == 0
    assert await limiter.charge("b") == 0
    assert await limiter.charge("a") > 0


async def test_a_refused_request_does_not_use_a_token() -> None:
    clock = FakeClock()
    limiter = MemoryRateLimiter(rate=1, burst=1, clock=clock)
    await limiter.charge("k")
    for _ in range(5):
        assert await limiter.charge("k") == 1.0  # hammering does not push the wait out

    clock.now += 1
    assert await limiter.charge("k") == 0


@dataclass
class Limited:
    """A server with a rate limit, a project on it, and a GET of that project's files."""

    client: TestClient[web.Request, web.Application]
    project_id: str
    key: str

    async def list_files(self, key: str | None = None) -> ClientResponse:
        url = f"/api/publicv1/projects/{self.project_id}/library/files"
        return await self.client.get(url, headers={"Authorization": key or self.key})


async def limited(start_app: ClientFactory, tmp_path: Path, rate: float, burst: int) -> Limited:
    client = await start_app(base_settings(tmp_path, rate_limit=rate, rate_limit_burst=burst))
    return Limited(client, *await new_project())


async def test_over_the_limit_is_429_rate_limited_with_retry_after(
    start_app: ClientFactory, tmp_path: Path
) -> None:
    server = await limited(start_app, tmp_path, rate=0.5, burst=2)

    statuses = [(await server.list_files()).status for _ in range(2)]
    refused = await server.list_files()

    assert statuses == [200, 200]
    assert refused.status == 429
    assert refused.headers["Retry-After"] in {"1", "2"}  # whole seconds, rounded up
    body = await refused.json()
    assert body["error"] == "RATE_LIMITED"
    assert "retry" in body["message"].lower()


async def test_another_key_of_the_same_project_has_its_own_limit(
    start_app: ClientFactory, tmp_path: Path
) -> None:
    server = await limited(start_app, tmp_path, rate=0.5, burst=1)
    _key, second = await create_api_key(await Project.get(id=server.project_id), name="second")

    assert (await server.list_files()).status == 200
    assert (await server.list_files()).status == 429
    assert (await server.list_files(second)).status == 200


async def test_a_request_without_a_valid_key_is_401_whatever_the_rate(
    start_app: ClientFactory, tmp_path: Path
) -> None:
    server = await limited(start_app, tmp_path, rate=0.5, burst=1)
    for _ in range(3):
        assert (await server.list_files("not-a-key")).status == 401


async def test_zero_turns_the_limit_off(start_app: ClientFactory, tmp_path: Path) -> None:
    server = await limited(start_app, tmp_path, rate=0, burst=1)
    for _ in range(20):
        assert (await server.list_files()).status == 200


async def test_api_processes_sharing_redis_share_each_keys_limit(
    start_app: ClientFactory, tmp_path: Path, redis_url: str
) -> None:
    # Two API processes (two apps here) behind one load balancer, one Redis.
    settings = [
        base_settings(tmp_path / name, redis_url=redis_url, rate_limit=0.5, rate_limit_burst=2)
        for name in ("a", "b")
    ]
    first = await start_app(settings[0])
    second = await start_app(settings[1])
    project_id, key = await new_project()
    url = f"/api/publicv1/projects/{project_id}/library/files"
    headers = {"Authorization": key}

    assert (await first.get(url, headers=headers)).status == 200
    assert (await second.get(url, headers=headers)).status == 200
    refused = await first.get(url, headers=headers)
    assert refused.status == 429
    assert (await second.get(url, headers=headers)).status == 429
    assert refused.headers["Retry-After"] in {"1", "2"}


async def test_the_redis_limiter_keeps_one_bucket_per_key(redis_url: str) -> None:
    redis: Redis = Redis.from_url(redis_url)
    key, other = uuid.uuid4().hex, uuid.uuid4().hex
    try:
        limiter = RedisRateLimiter(redis, rate=4, burst=2)
        assert [await limiter.charge(key) for _ in range(2)] == [0, 0]
        wait = await limiter.charge(key)
        assert 0 < wait <= 0.25  # one interval at most (less as Redis's clock moves on)
        assert await limiter.charge(other) == 0
        assert 0 < await redis.pttl(f"libflow:rate:{key}") <= 502  # idle buckets expire
    finally:
        await redis.aclose()


async def test_requests_go_ahead_while_the_limiters_redis_is_down(
    start_app: ClientFactory, tmp_path: Path, private_redis: PrivateRedis
) -> None:
    settings = base_settings(
        tmp_path, redis_url=private_redis.url, rate_limit=0.5, rate_limit_burst=1
    )
    client = await start_app(settings)
    project_id, key = await new_project()
    url = f"/api/publicv1/projects/{project_id}/library/files"
    assert (await client.get(url, headers={"Authorization": key})).status == 200
    assert (await client.get(url, headers={"Authorization": key})).status == 429  # enforced

    await asyncio.to_thread(private_redis.stop)

    for _ in range(3):
        assert (await client.get(url, headers={"Authorization": key})).status == 200


async def test_after_a_redis_failure_the_limiter_leaves_redis_alone_for_a_while() -> None:
    # A Redis that accepts and never answers: each call would cost the full timeout.
    received: list[bytes] = []
    done = asyncio.Event()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received.append(await reader.read(65536))
        await done.wait()
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    redis: Redis = Redis.from_url(f"redis://127.0.0.1:{port}", socket_timeout=0.2)
    try:
        limiter = RedisRateLimiter(redis, rate=1, burst=1)
        assert [await limiter.charge("k") for _ in range(3)] == [0, 0, 0]  # fails open
        assert len(received) == 1  # the second and third did not ask
    finally:
        await redis.aclose()
        done.set()
        server.close()
        await server.wait_closed()
