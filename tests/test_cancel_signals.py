"""Cancel signals over Redis: what a process says while Redis is away."""

from __future__ import annotations

import asyncio
import logging

import pytest
from redis.asyncio import Redis

from libflow.workflows import running
from libflow.workflows.running import RunningRuns
from tests.s3server import closed_port_url


async def test_an_outage_of_redis_is_logged_once_not_every_retry(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """It logged a warning every second for as long as Redis was down."""
    monkeypatch.setattr(running, "REDIS_RETRY_SECONDS", 0.01)
    redis = Redis.from_url(closed_port_url().replace("http://", "redis://"))
    listening = asyncio.create_task(RunningRuns(30, redis).listen_forever(redis))
    with caplog.at_level(logging.WARNING, logger="libflow"):
        await asyncio.sleep(0.5)  # dozens of retries
    listening.cancel()
    await asyncio.gather(listening, return_exceptions=True)
    await redis.aclose()
    unheard = [r for r in caplog.records if "cancel signals unheard" in r.getMessage()]
    assert len(unheard) == 1
