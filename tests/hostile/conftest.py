"""Helpers of the hostile-input tests: the server stays responsive, memory stays bounded."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web
from aiohttp.test_utils import TestClient

# How long /healthz may take to answer while a hostile request is being handled.
HEALTHZ_BOUND_SECONDS = 1.0
_PROBE_EVERY_SECONDS = 0.05


@dataclass
class HealthProbe:
    """What the probe saw: the slowest /healthz answer and the longest gap between answers."""

    answers: int = 0
    slowest: float = 0.0
    longest_gap: float = 0.0
    failures: list[str] = field(default_factory=list)


@contextlib.asynccontextmanager
async def healthz_stays_responsive(
    client: TestClient[web.Request, web.Application], bound: float = HEALTHZ_BOUND_SECONDS
) -> AsyncIterator[HealthProbe]:
    """Poll /healthz while the block runs; fail if the loop stalled or an answer was slow.

    The probe runs on the server's own loop (the test client serves in-process), so a
    blocked loop shows both as a slow answer and as a gap between answers.
    """
    probe = HealthProbe()
    stop = asyncio.Event()

    async def poll() -> None:
        last = time.monotonic()
        while not stop.is_set():
            started = time.monotonic()
            async with client.get("/healthz") as response:
                if response.status != 200:
                    probe.failures.append(f"/healthz answered {response.status}")
            now = time.monotonic()
            probe.answers += 1
            probe.slowest = max(probe.slowest, now - started)
            probe.longest_gap = max(probe.longest_gap, now - last)
            last = now
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), _PROBE_EVERY_SECONDS)

    task = asyncio.create_task(poll())
    try:
        yield probe
    finally:
        stop.set()
        await task
    assert not probe.failures, probe.failures
    assert probe.answers > 0
    assert probe.slowest < bound, f"/healthz took {probe.slowest:.2f} s"
    assert probe.longest_gap < bound + _PROBE_EVERY_SECONDS, (
        f"the loop stalled {probe.longest_gap:.2f} s"
    )


def _status_kib(name: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{name}:"):
            return int(line.split()[1])
    raise LookupError(name)


@dataclass
class MemoryGrowth:
    """How far this process's peak RSS rose above its RSS when the block began (MiB)."""

    mib: float = 0.0


@contextlib.contextmanager
def peak_rss_growth() -> Iterator[MemoryGrowth]:
    """Measure the peak RSS growth of this process (the in-process server's) over the block."""
    # Writing 5 resets the peak (VmHWM) to the current RSS (Linux, proc(5)).
    Path("/proc/self/clear_refs").write_text("5")
    before = _status_kib("VmRSS")
    growth = MemoryGrowth()
    try:
        yield growth
    finally:
        growth.mib = (_status_kib("VmHWM") - before) / 1024
