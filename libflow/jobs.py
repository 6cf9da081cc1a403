"""Background jobs: arq on Redis when it is configured, the server's own loop otherwise.

Jobs are queued by a name from ``Job``; the functions behind the names live in
``workers/`` (the one package that may import them), and ``workers.worker`` checks at
start that every name has its function. In-process jobs wait for a slot in their ``Lane``,
so a long job (a large file) never holds up a short one (a webhook delivery, a small file).
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final, Generic, Protocol, TypeVar

from arq.connections import ArqRedis, RedisSettings
from arq.worker import Retry
from redis.exceptions import RedisError

from libflow.db.outages import dependency_down
from libflow.errors import Unavailable

logger = logging.getLogger("libflow.jobs")

JobContext = dict[str, Any]
JobFunction = Callable[..., Coroutine[Any, Any, Any]]
MAX_TRIES = 5


class Job(StrEnum):
    """Every job a libflow process can queue, by the name its function is registered under."""

    PROCESS_FILE = "process_file"
    RECOVER_STUCK_FILES = "recover_stuck_files"
    REMOVE_ABANDONED_UPLOADS = "remove_abandoned_uploads"
    REEMBED_STALE_CHUNKS = "reembed_stale_chunks"
    DELIVER_WEBHOOKS = "deliver_webhooks"
    SWEEP_DELIVERIES = "sweep_deliveries"
    RUN_WORKFLOWS = "run_workflows"
    SWEEP_RUNS = "sweep_runs"
    FIRE_SCHEDULES = "fire_schedules"


JobFunctions = Mapping[Job, JobFunction]


class Lane(StrEnum):
    """Where an in-process job waits for a slot: each lane has slots of its own."""

    # Webhook deliveries, queued runs and the periodic sweeps: someone is waiting for them.
    DELIVERIES = "deliveries"
    # Queued workflow runs: a drain holds its slot while its runs run (up to minutes), so
    # they have slots of their own, apart from deliveries and the sweeps.
    RUNS = "runs"
    # Processing of small files.
    FILES = "files"
    # Processing of large files, and re-embedding: long, CPU-bound, one at a time.
    LARGE_FILES = "large_files"


# The lane of each job, unless its function chooses one per call (``chooses_lane``).
LANE_OF_JOB: Final[Mapping[Job, Lane]] = {
    Job.PROCESS_FILE: Lane.FILES,
    Job.RECOVER_STUCK_FILES: Lane.DELIVERIES,
    Job.REMOVE_ABANDONED_UPLOADS: Lane.DELIVERIES,
    Job.REEMBED_STALE_CHUNKS: Lane.LARGE_FILES,
    Job.DELIVER_WEBHOOKS: Lane.DELIVERIES,
    Job.SWEEP_DELIVERIES: Lane.DELIVERIES,
    Job.RUN_WORKFLOWS: Lane.RUNS,
    Job.SWEEP_RUNS: Lane.DELIVERIES,
    Job.FIRE_SCHEDULES: Lane.DELIVERIES,
}
# Slots of the large-files lane; the others have LIBFLOW_JOB_CONCURRENCY each.
LARGE_FILE_SLOTS: Final = 1

LaneChooser = Callable[..., Awaitable[Lane]]
_LANE_CHOOSER = "__libflow_lane_chooser__"
_Function = TypeVar("_Function", bound=JobFunction)


def chooses_lane(chooser: LaneChooser) -> Callable[[_Function], _Function]:
    """Run the decorated job function in the lane ``chooser(*args)`` picks (in-process jobs).

    The function itself is returned unchanged (arq and the Job checks see it as it is).
    """

    def mark(function: _Function) -> _Function:
        setattr(function, _LANE_CHOOSER, chooser)
        return function

    return mark


def check_job_functions(functions: JobFunctions) -> None:
    """Refuse to start with a job name that has no function, or a function under another name."""
    missing = [job.value for job in Job if job not in functions]
    misnamed = [job.value for job, function in functions.items() if function.__name__ != job.value]
    if missing or misnamed:
        raise RuntimeError(f"job functions do not match the Job names: {missing=} {misnamed=}")


def serialize_job(data: dict[str, Any]) -> bytes:
    """Jobs carry ids only: JSON keeps the queue readable and free of pickle."""
    return json.dumps(data, separators=(",", ":")).encode()


def deserialize_job(data: bytes) -> dict[str, Any]:
    """The inverse of serialize_job."""
    result: dict[str, Any] = json.loads(data)
    return result


def redis_settings(url: str) -> RedisSettings:
    """arq's connection settings for a ``redis://`` URL."""
    return RedisSettings.from_dsn(url)


class JobQueue(Protocol):
    """Where the API hands work to workers."""

    async def enqueue(
        self, job: Job, *args: Any, job_id: str | None = None, lane: Lane | None = None
    ) -> None:
        """Queue ``job(ctx, *args)``; raise Unavailable when the queue cannot take it.

        ``lane``: where in-process jobs wait, when the caller knows it (else the job's own
        choice); arq's workers have one pool for every job and ignore it.
        """
        ...

    async def check(self) -> None:
        """Raise when the queue cannot be reached."""
        ...


class ArqJobQueue:
    """Jobs go to Redis; ``python run_worker.py`` processes run them."""

    def __init__(self, pool: ArqRedis) -> None:
        self.pool = pool

    async def enqueue(
        self, job: Job, *args: Any, job_id: str | None = None, lane: Lane | None = None
    ) -> None:
        """Queue by name; workers check at start that each name has its function."""
        try:
            await self.pool.enqueue_job(job.value, *args, _job_id=job_id)
        except (RedisError, OSError) as err:
            raise Unavailable("the job queue is unavailable, retry later") from err

    async def check(self) -> None:
        """Ping Redis."""
        await self.pool.ping()


class InProcessJobQueue:
    """Jobs run as tasks on the server's loop, with arq's retry semantics, in lanes.

    Each lane has its own slots (``concurrency`` each, LARGE_FILE_SLOTS for large files), so
    four large files take one slot of their lane and deliveries and small files go on. In a
    group of API processes each runs its own; claims in the database decide which one runs
    a given delivery, run or file.
    """

    def __init__(
        self,
        functions: JobFunctions,
        context: JobContext,
        concurrency: int,
        *,
        sole_runner: bool = True,
    ) -> None:
        self._functions = functions
        self.context = context
        # No other process runs jobs on this database (one server, not a group of them):
        # what no job of this process holds has lost its job, however fresh its lease.
        self.sole_runner = sole_runner
        self._lanes = {
            Lane.DELIVERIES: asyncio.Semaphore(concurrency),
            Lane.RUNS: asyncio.Semaphore(concurrency),
            Lane.FILES: asyncio.Semaphore(concurrency),
            Lane.LARGE_FILES: asyncio.Semaphore(LARGE_FILE_SLOTS),
        }
        self._tasks: set[asyncio.Task[None]] = set()
        self._queued_ids: set[str] = set()

    async def enqueue(
        self, job: Job, *args: Any, job_id: str | None = None, lane: Lane | None = None
    ) -> None:
        """Start the job now; it waits for a free slot (in ``lane``, else the job's choice).

        As with arq, a job whose ``job_id`` is already queued is not queued again.
        """
        if job_id is not None:
            if job_id in self._queued_ids:
                return
            self._queued_ids.add(job_id)
        task = asyncio.create_task(self._run(job, args, job_id or job.value, lane))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def lane_of(self, job: Job, args: tuple[Any, ...]) -> Lane:
        """The lane ``job(*args)`` waits in: its function's choice, else LANE_OF_JOB."""
        chooser: LaneChooser | None = getattr(self._functions[job], _LANE_CHOOSER, None)
        if chooser is None:
            return LANE_OF_JOB[job]
        try:
            return await chooser(*args)
        except Exception as err:
            # The job itself meets the same fault (a database away) and reports it.
            logger.warning("job %s: could not choose its lane: %r", job.value, err)
            return LANE_OF_JOB[job]

    async def _run(self, name: Job, args: tuple[Any, ...], job_id: str, lane: Lane | None) -> None:
        # Once started, the same id may be queued again: what it was queued for may
        # already be behind this job (a delivery committed after its last claim).
        self._queued_ids.discard(job_id)
        job = self._functions[name]
        # A caller that names the lane saves the job's choice a read of the database.
        slots = self._lanes[lane or await self.lane_of(name, args)]
        for job_try in range(1, MAX_TRIES + 1):
            async with slots:
                try:
                    await job({**self.context, "job_try": job_try, "job_id": job_id}, *args)
                    return
                except Retry as retry:
                    defer = (retry.defer_score or 0) / 1000
                except Exception as err:
                    if dependency_down(err):
                        # The database is away: the next run of the job (or its sweep) will do.
                        logger.warning("job %s: a dependency is unavailable: %r", job_id, err)
                    else:
                        logger.exception("job %s failed", job_id)
                    return
            logger.info("job %s retries in %.1fs (try %d)", job_id, defer, job_try)
            await asyncio.sleep(defer)
        logger.error("job %s gave up after %d tries", job_id, MAX_TRIES)

    async def check(self) -> None:
        """In-process jobs are always reachable."""

    async def join(self) -> None:
        """Wait for every queued job to end (shutdown, tests)."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def close(self) -> None:
        """Cancel what is still running; the recovery job picks it up after a restart."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


# Wake-up jobs (the drains of the webhook inbox and of the run queue) are queued once per
# window under an id naming it: a burst of deliveries or runs wakes a few jobs, not one each
# (arq spends about ten Redis round trips on a job).
WAKE_UP_WINDOW_SECONDS = 0.05
# How long after its window a drain makes its last claim: clocks of API and worker hosts
# differ a little (a larger gap leaves the work to a sweep, never loses it).
WINDOW_MARGIN_SECONDS = 0.05
WINDOW_CAP_SECONDS = WAKE_UP_WINDOW_SECONDS + WINDOW_MARGIN_SECONDS
_WOKEN: weakref.WeakKeyDictionary[JobQueue, dict[Job, int]] = weakref.WeakKeyDictionary()


async def wake_job(jobs: JobQueue, job: Job, stays: str) -> bool:
    """Queue ``job`` for this window; False (and ``stays`` logged) when the queue is down.

    One job per window: this process asks Redis only once in each (queueing costs several
    round trips even when arq refuses a job it already has).
    """
    window = int(time.time() / WAKE_UP_WINDOW_SECONDS)
    woken = _WOKEN.setdefault(jobs, {})
    if woken.get(job) == window:
        return True
    try:
        await jobs.enqueue(job, job_id=f"{job.value}:{window}")
    except Unavailable:
        logger.warning("%s until the job queue is back", stays)
        return False
    woken[job] = window
    return True


def window_end(job_id: str) -> float:
    """When the wake-up window a job was queued for ends, plus the margin (0: unknown)."""
    _, _, window = job_id.rpartition(":")
    if not (window.isascii() and window.isdigit()):
        return 0.0
    return (int(window) + 1) * WAKE_UP_WINDOW_SECONDS + WINDOW_MARGIN_SECONDS


_Claimed = TypeVar("_Claimed")


@dataclass(frozen=True, slots=True)
class Drain(Generic[_Claimed]):
    """How a drain job takes work from a table that is a queue (the inbox, queued runs).

    ``claim(n)`` takes up to n rows for this process alone; ``run`` does one; ``wake``
    queues a drain again; ``transient`` tells a dependency away for a moment (the job is
    retried) from a bug.
    """

    claim: Callable[[int], Awaitable[list[_Claimed]]]
    run: Callable[[_Claimed], Coroutine[Any, Any, None]]
    wake: Callable[[], Awaitable[bool]]
    transient: Callable[[BaseException], bool]
    at_once: int
    seconds: float
    what: str


async def drain(queue: Drain[_Claimed], *, job_id: str, job_try: int) -> None:
    """Claim and run until the queue is empty: the body of every drain job.

    At most ``at_once`` run concurrently; more are claimed as they end. After ``seconds``
    nothing more is claimed (arq bounds a job's time) and a successor is woken. An empty
    queue is looked at once more at the end of the job's wake-up window: API processes do
    not queue another job within it, so what they commit meanwhile is this job's.
    """
    running: set[asyncio.Task[None]] = set()
    stop_claiming = time.monotonic() + queue.seconds
    waited = False
    try:
        while True:
            claimed: list[_Claimed] = []
            if len(running) < queue.at_once and time.monotonic() < stop_claiming:
                claimed = await queue.claim(queue.at_once - len(running))
            for item in claimed:
                running.add(asyncio.create_task(queue.run(item)))
            if not claimed and not running:
                if time.monotonic() >= stop_claiming:
                    await queue.wake()  # the queue may still hold some
                    return
                # Once, and capped: a clock far ahead on an API host must not park this job.
                wait = min(window_end(job_id) - time.time(), WINDOW_CAP_SECONDS)
                if waited or wait <= 0:
                    return
                waited = True
                await asyncio.sleep(wait)
                continue
            if running and (not claimed or len(running) >= queue.at_once):
                done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                running -= done
                for task in done:
                    if not task.cancelled() and task.exception() is not None:
                        logger.error("%s failed", queue.what, exc_info=task.exception())
    except Exception as err:
        if not queue.transient(err):
            raise
        # What was claimed and had not begun goes back to the queue (or, with the database
        # still away, the sweep gives it back once stale).
        await asyncio.gather(*running, return_exceptions=True)
        raise Retry(defer=job_try * 2) from err
    finally:
        if running:  # cancelled (shutdown): let each record itself
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)


def _keepalive_options() -> dict[int, int]:
    """TCP keepalive timings: the first probe after 10 s idle, then 3 every 5 s (Linux)."""
    wanted = {"TCP_KEEPIDLE": 10, "TCP_KEEPINTVL": 5, "TCP_KEEPCNT": 3}
    return {getattr(socket, name): value for name, value in wanted.items() if hasattr(socket, name)}


# The connection options of the long-lived Redis clients (the event bus, cancels, the job
# queue). redis-py sets no read timeout by default, and one would break the long reads
# (an event stream's XREAD BLOCK, the cancel channel's subscription): a Redis host that
# vanishes without a reset (a failover, a lost VM) left such a read waiting for good.
# Keepalive probes find the dead peer in about 25 s, and the read fails as an outage.
REDIS_CONNECTION_OPTIONS: Final[dict[str, Any]] = {
    "socket_connect_timeout": 2,
    "socket_keepalive": True,
    "socket_keepalive_options": _keepalive_options(),
}


@asynccontextmanager
async def open_arq_pool(url: str) -> AsyncIterator[ArqRedis]:
    """An arq pool with libflow's JSON serializer, closed on exit.

    It connects lazily (arq's create_pool pings and gives up after its retries): the
    API starts while Redis is down, answers 503 where it needs the queue, reports it in
    /readyz, and recovers by itself when Redis is back.
    """
    pool = ArqRedis.from_url(url, **REDIS_CONNECTION_OPTIONS)
    pool.job_serializer = serialize_job
    pool.job_deserializer = deserialize_job
    try:
        try:
            await pool.ping()
        except (RedisError, OSError) as err:
            logger.warning("Redis is unreachable at start-up, jobs wait for it: %r", err)
        yield pool
    finally:
        await pool.aclose()
