"""Per-API-key rate limits: a token bucket kept in memory, or in Redis for several processes.

Both limiters run GCRA (the generic cell rate algorithm): one timestamp per key, the
"theoretical arrival time" of its next request, instead of a counter and a refill job.
A key may send ``burst`` requests at once and ``rate`` a second after that.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Protocol

from redis.asyncio import Redis
from redis.exceptions import RedisError

from settings import Settings

logger = logging.getLogger("libflow.rate_limits")

REDIS_PREFIX = "libflow:rate:"


class RateLimiter(Protocol):
    """Charges one request to a key."""

    async def charge(self, key: str) -> float:
        """0 when the request may go ahead, else the seconds until it may."""
        ...


class Unlimited:
    """Rate limiting is off (``LIBFLOW_RATE_LIMIT=0``)."""

    async def charge(self, key: str) -> float:
        """Every request goes ahead."""
        return 0.0


class MemoryRateLimiter:
    """GCRA in this process's memory: the embedded shape, or one API process."""

    # Keys idle for longer than a full bucket's refill are forgotten past this many.
    MAX_KEYS = 10_000

    def __init__(
        self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._interval = 1.0 / rate
        self._tolerance = self._interval * (burst - 1)
        self._clock = clock
        self._arrivals: dict[str, float] = {}

    async def charge(self, key: str) -> float:
        """0 when ``key`` has a token left, else the seconds until its next one."""
        now = self._clock()
        arrival = max(self._arrivals.get(key, now), now)
        if arrival - now > self._tolerance:
            return arrival - now - self._tolerance
        if len(self._arrivals) >= self.MAX_KEYS:
            self._forget_idle(now)
        self._arrivals[key] = arrival + self._interval
        return 0.0

    def _forget_idle(self, now: float) -> None:
        # A key whose arrival time has passed has a full bucket: forgetting it changes nothing.
        self._arrivals = {k: t for k, t in self._arrivals.items() if t > now}


# Redis's own clock, so API processes on hosts whose clocks differ share one bucket.
# Times are integer microseconds (Lua numbers are doubles: exact below 2**53).
_GCRA_SCRIPT = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local interval = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local arrival = tonumber(redis.call('GET', KEYS[1]) or now)
if arrival < now then arrival = now end
if arrival - now > tolerance then
    return arrival - now - tolerance
end
local next_arrival = arrival + interval
local ttl_ms = math.ceil((next_arrival - now) / 1000) + 1
redis.call('SET', KEYS[1], string.format('%.0f', next_arrival), 'PX', ttl_ms)
return 0
"""


class RedisRateLimiter:
    """GCRA in Redis: every API process charges the same bucket, in one round trip.

    When Redis cannot be reached the request goes ahead: a limiter outage should not
    take the API down with it (the job queue reports Redis in /readyz).
    """

    # After a failure Redis is left alone this long: a Redis that hangs rather than refuses
    # would otherwise add its timeout to every request.
    RETRY_AFTER_FAILURE = 5.0

    def __init__(self, redis: Redis, rate: float, burst: int) -> None:
        interval = 1.0 / rate
        self._args = (round(interval * 1e6), round(interval * (burst - 1) * 1e6))
        self._script = redis.register_script(_GCRA_SCRIPT)
        self._skip_until = 0.0

    async def charge(self, key: str) -> float:
        """0 when ``key`` has a token left, else the seconds until its next one."""
        if time.monotonic() < self._skip_until:
            return 0.0
        try:
            wait = await self._script(keys=[REDIS_PREFIX + key], args=self._args)
        except (RedisError, OSError) as err:
            self._skip_until = time.monotonic() + self.RETRY_AFTER_FAILURE
            logger.warning(
                "rate limits are not enforced for %.0fs: Redis failed: %r",
                self.RETRY_AFTER_FAILURE,
                err,
            )
            return 0.0
        return int(wait) / 1e6


@asynccontextmanager
async def open_rate_limiter(settings: Settings) -> AsyncIterator[RateLimiter]:
    """The limiter the settings ask for: in Redis when configured, closed on exit."""
    if settings.rate_limit <= 0:
        yield Unlimited()
        return
    if not settings.redis_url:
        yield MemoryRateLimiter(settings.rate_limit, settings.rate_limit_burst)
        return
    # Short timeouts: the limiter is in every request's path (and fails open).
    redis = Redis.from_url(settings.redis_url, socket_connect_timeout=0.5, socket_timeout=0.5)
    try:
        yield RedisRateLimiter(redis, settings.rate_limit, settings.rate_limit_burst)
    finally:
        await redis.aclose()
