"""Helpers of the hostile-input tests: the server stays responsive, memory stays bounded."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import time
import traceback
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
    # Where the loop's thread was in the longest stall the watchdog saw: a stalled loop's
    # own stack is the one clue that outlives the stall.
    stalled_in: str = ""


class _Watchdog(threading.Thread):
    """Samples the loop thread while the probe has gone quiet for too long.

    It notes the thread's stack and how much CPU the thread used while quiet: a loop busy
    in code shows that code and about as much CPU as the quiet lasted; a stack ending in
    the loop's own run call with little CPU means it waited. The kernel's view says on
    what: the thread's state and wait channel (``futex_wait_queue``: a lock such as the
    GIL; ``do_epoll_wait``: idle; ``balance_dirty_pages``: held back for the disk) and the
    machine's CPU and IO pressure (a starved machine).
    """

    def __init__(self, loop_thread: int, loop_native_id: int, quiet_after: float) -> None:
        super().__init__(daemon=True, name="healthz-watchdog")
        self.loop_thread = loop_thread
        self.loop_task = Path(f"/proc/self/task/{loop_native_id}")
        self.loop_clock = time.pthread_getcpuclockid(loop_thread)
        self.quiet_after = quiet_after
        self.last_answer = time.monotonic()
        self.cpu_at_answer = time.clock_gettime(self.loop_clock)
        self.done = threading.Event()
        self.longest_quiet = 0.0
        self.report = ""

    def answered(self) -> None:
        self.last_answer = time.monotonic()
        self.cpu_at_answer = time.clock_gettime(self.loop_clock)

    def run(self) -> None:
        while not self.done.wait(0.1):
            quiet = time.monotonic() - self.last_answer
            if quiet < self.quiet_after or quiet <= self.longest_quiet:
                continue
            frame = sys._current_frames().get(self.loop_thread)
            if frame is None:
                continue
            cpu = time.clock_gettime(self.loop_clock) - self.cpu_at_answer
            self.longest_quiet = quiet
            self.report = (
                f"after {quiet:.2f} s quiet, the loop's thread had used {cpu:.2f} s of CPU;"
                f" {self._kernel_view()}; in:\n"
                f"{''.join(traceback.format_stack(frame, limit=12))}"
            )

    def _kernel_view(self) -> str:
        seen = []
        with contextlib.suppress(OSError, IndexError):
            state = (self.loop_task / "stat").read_text().rsplit(")", 1)[1].split()[0]
            wchan = (self.loop_task / "wchan").read_text()
            seen.append(f"state {state}" + (f", waiting in {wchan}" if wchan != "0" else ""))
        for kind in ("cpu", "io"):
            with contextlib.suppress(OSError):
                some = Path(f"/proc/pressure/{kind}").read_text().splitlines()[0]
                seen.append(f"{kind} pressure {some.split()[1]}")
        return ", ".join(seen) or "no kernel view"


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
    watchdog = _Watchdog(threading.get_ident(), threading.get_native_id(), quiet_after=bound / 2)

    async def poll() -> None:
        last = time.monotonic()
        while not stop.is_set():
            started = time.monotonic()
            async with client.get("/healthz") as response:
                if response.status != 200:
                    probe.failures.append(f"/healthz answered {response.status}")
            now = time.monotonic()
            watchdog.answered()
            probe.answers += 1
            probe.slowest = max(probe.slowest, now - started)
            probe.longest_gap = max(probe.longest_gap, now - last)
            last = now
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), _PROBE_EVERY_SECONDS)

    task = asyncio.create_task(poll())
    watchdog.start()
    try:
        yield probe
    finally:
        stop.set()
        await task
        watchdog.done.set()
        watchdog.join()
        probe.stalled_in = watchdog.report
    assert not probe.failures, probe.failures
    assert probe.answers > 0
    assert probe.slowest < bound, f"/healthz took {probe.slowest:.2f} s\n{probe.stalled_in}"
    assert probe.longest_gap < bound + _PROBE_EVERY_SECONDS, (
        f"the loop stalled {probe.longest_gap:.2f} s; {probe.stalled_in}"
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
