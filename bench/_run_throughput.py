"""Async runs queued and executed: runs a second with K workers, end to end and drained.

Used by ``bench.async_runs``. The runs are runsync's small workflow; counts and ends come
from the run table of the benchmark's own PostgreSQL database.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg

from bench import webhooks
from bench._common import BenchError, request_json
from bench._run_watchers import Api
from bench.runsync import BODY, DEFINITION
from bench.webhooks import Workers

RUNS = 2000
WARMUP_RUNS = 50
POST_CONCURRENCY = 32
DRAIN_TIMEOUT = 60.0
POLL_SECONDS = 0.05
EXPECTED_OUTPUTS = {"greeting": "Hello, Ada!"}


def workers(
    count: int, env: Mapping[str, str], log_dir: Path, phase: str
) -> contextlib.AbstractContextManager[Workers]:
    """``count`` ``run_worker.py`` processes, not pinned (they share both cores); stopped after."""
    return webhooks.workers(count, env, log_dir, pin=False, phase=phase)


@dataclasses.dataclass(frozen=True)
class Tally:
    """The runs of one workflow: how many ended, how many succeeded, and the last end."""

    ended: int
    succeeded: int
    last_finished: float | None


async def _tally(connection: Any, workflow_id: str) -> Tally:
    row = await connection.fetchrow(
        "SELECT count(*) FILTER (WHERE status NOT IN ('queued', 'running')), "
        "count(*) FILTER (WHERE status = 'succeeded'), EXTRACT(EPOCH FROM max(finished_at)) "
        "FROM workflow_runs WHERE workflow_id = $1",
        workflow_id,
    )
    last = None if row[2] is None else float(row[2])
    return Tally(int(row[0]), int(row[1]), last)


async def _wait_until_ended(
    database_url: str, workflow_id: str, expected: int, started: Workers
) -> Tally:
    """Poll the database until ``expected`` runs of the workflow ended."""
    connection = await asyncpg.connect(database_url)
    try:
        deadline = time.monotonic() + DRAIN_TIMEOUT
        while True:
            started.check_alive()
            tally = await _tally(connection, workflow_id)
            if tally.ended >= expected:
                return tally
            if time.monotonic() > deadline:
                raise BenchError(
                    f"{len(started.procs)} worker(s) ended {tally.ended} of {expected} runs "
                    f"in the {DRAIN_TIMEOUT:.0f}s allowed"
                )
            await asyncio.sleep(POLL_SECONDS)
    finally:
        await connection.close()


def create_workflow(api: Api, name: str, definition: dict[str, Any]) -> str:
    """A new workflow: its id."""
    created = request_json(
        "POST",
        f"{api.root}/workflows",
        body={"name": name, "definition": definition},
        api_key=api.key,
    )
    return str(created["workflowId"])


async def _post_runs(url: str, key: str, count: int) -> tuple[float, float]:
    """POST ``count`` runs, POST_CONCURRENCY at a time: (first sent, last 202) as epoch seconds."""
    headers = {"Authorization": key}
    left = iter(range(count))
    connector = aiohttp.TCPConnector(limit=POST_CONCURRENCY)
    async with aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=60)
    ) as session:

        async def sender() -> None:
            for _ in left:
                async with session.post(url, json=BODY, headers=headers) as response:
                    answer = await response.read()
                    if response.status != 202:
                        raise BenchError(f"POST {url} -> {response.status}: {answer[:300]!r}")

        first = time.time()
        await asyncio.gather(*(sender() for _ in range(POST_CONCURRENCY)))
        return first, time.time()


@dataclasses.dataclass(frozen=True)
class CpuUse:
    """CPU time of the machine (busy, all) and of the worker processes, in clock ticks."""

    busy: int
    total: int
    workers: int

    @classmethod
    def now(cls, started: Workers) -> CpuUse:
        """The counters as they are: /proc/stat's first line and each worker's stat."""
        ticks = [int(t) for t in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        idle = ticks[3] + ticks[4]  # idle + iowait
        used = 0
        for proc in started.procs:
            # utime and stime: fields 14 and 15, counted after the ")" that ends the name
            fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            used += int(fields[11]) + int(fields[12])
        return cls(sum(ticks) - idle, sum(ticks), used)

    def since(self, before: CpuUse) -> tuple[float, float]:
        """(share of the machine's CPU that was busy, CPU seconds the workers used) since."""
        total = self.total - before.total
        busy = (self.busy - before.busy) / total if total else 0.0
        return busy, (self.workers - before.workers) / os.sysconf("SC_CLK_TCK")


@dataclasses.dataclass(frozen=True)
class Executed:
    """One phase: RUNS runs executed by ``workers`` worker processes in ``seconds``."""

    workers: int
    seconds: float
    posting_seconds: float  # e2e: first POST -> last 202; drain: queueing them beforehand
    machine_busy: float  # share of all cores' time busy (anything) during the phase
    worker_cpu_seconds: float

    @property
    def per_second(self) -> float:
        """Runs executed a second."""
        return RUNS / self.seconds


@dataclasses.dataclass(frozen=True)
class Throughput:
    """Runs queued while the workers run them (e2e), and a queue drained by them."""

    e2e: Executed
    drain: Executed


def _signal_all(started: Workers, signum: signal.Signals) -> None:
    for proc in started.procs:
        with contextlib.suppress(ProcessLookupError):  # it exited: check_alive will say so
            os.killpg(proc.pid, signum)


def _check_succeeded(api: Api, tally: Tally, workflow_id: str) -> float:
    """Every run succeeded with the expected outputs: the last one's finished_at."""
    if tally.succeeded != RUNS or tally.last_finished is None:
        raise BenchError(f"{tally.succeeded} of {RUNS} runs succeeded ({tally.ended} ended)")
    sample = request_json(
        "GET", f"{api.root}/workflows/{workflow_id}/runs?limit=1", api_key=api.key
    )
    if sample[0]["outputs"] != EXPECTED_OUTPUTS:
        raise BenchError(f"unexpected run outputs: {sample[0]['outputs']}")
    return tally.last_finished


def execute(api: Api, env: Mapping[str, str], work: Path, count: int) -> Throughput:
    """Start ``count`` workers and warm them up; then e2e, then a drain of a queue they find.

    For the drain the workers are stopped (SIGSTOP) while RUNS runs are queued, then all
    continued at once (SIGCONT): worker start-up is not measured, and every worker starts
    draining at the same moment.
    """
    database_url = env["LIBFLOW_DATABASE_URL"]
    warm_id = create_workflow(api, f"warm-up x{count}", DEFINITION)
    e2e_id = create_workflow(api, f"e2e x{count}", DEFINITION)
    drain_id = create_workflow(api, f"drain x{count}", DEFINITION)
    url = f"{api.root}/workflows/{{}}/runs"
    with workers(count, env, work, f"x{count}") as started:
        asyncio.run(_post_runs(url.format(warm_id), api.key, WARMUP_RUNS))
        asyncio.run(_wait_until_ended(database_url, warm_id, WARMUP_RUNS, started))
        time.sleep(1.5)  # every worker is polling by now, not just the first to start

        before = CpuUse.now(started)
        first, posted = asyncio.run(_post_runs(url.format(e2e_id), api.key, RUNS))
        tally = asyncio.run(_wait_until_ended(database_url, e2e_id, RUNS, started))
        e2e = Executed(
            count,
            _check_succeeded(api, tally, e2e_id) - first,
            posted - first,
            *CpuUse.now(started).since(before),
        )

        _signal_all(started, signal.SIGSTOP)
        try:
            queued_from, queued_until = asyncio.run(_post_runs(url.format(drain_id), api.key, RUNS))
            ran = asyncio.run(_wait_until_ended(database_url, drain_id, 0, started)).ended
            if ran:
                raise BenchError(f"{ran} runs ended while every worker was stopped")
            before = CpuUse.now(started)
            resumed = time.time()
        finally:
            _signal_all(started, signal.SIGCONT)
        tally = asyncio.run(_wait_until_ended(database_url, drain_id, RUNS, started))
        used = CpuUse.now(started).since(before)
        drain = Executed(
            count,
            _check_succeeded(api, tally, drain_id) - resumed,
            queued_until - queued_from,
            *used,
        )
    return Throughput(e2e, drain)
