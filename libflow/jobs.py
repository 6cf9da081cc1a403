"""Background jobs: arq on Redis when it is configured, the server's own loop otherwise.

Jobs are queued by a name from ``Job``; the functions behind the names live in
``workers/`` (the one package that may import them), and ``workers.worker`` checks at
start that every name has its function.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from contextlib import asynccontextmanager
from enum import StrEnum
from typing import Any, Protocol

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


JobFunctions = Mapping[Job, JobFunction]


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

    async def enqueue(self, job: Job, *args: Any, job_id: str | None = None) -> None:
        """Queue ``job(ctx, *args)``; raise Unavailable when the queue cannot take it."""
        ...

    async def check(self) -> None:
        """Raise when the queue cannot be reached."""
        ...


class ArqJobQueue:
    """Jobs go to Redis; ``python run_worker.py`` processes run them."""

    def __init__(self, pool: ArqRedis) -> None:
        self.pool = pool

    async def enqueue(self, job: Job, *args: Any, job_id: str | None = None) -> None:
        """Queue by name; workers check at start that each name has its function."""
        try:
            await self.pool.enqueue_job(job.value, *args, _job_id=job_id)
        except (RedisError, OSError) as err:
            raise Unavailable("the job queue is unavailable, retry later") from err

    async def check(self) -> None:
        """Ping Redis."""
        await self.pool.ping()


class InProcessJobQueue:
    """Jobs run as tasks on the server's loop, with arq's retry semantics."""

    def __init__(self, functions: JobFunctions, context: JobContext, concurrency: int) -> None:
        self._functions = functions
        self.context = context
        self._slots = asyncio.Semaphore(concurrency)
        self._tasks: set[asyncio.Task[None]] = set()
        self._queued_ids: set[str] = set()

    async def enqueue(self, job: Job, *args: Any, job_id: str | None = None) -> None:
        """Start the job now; it waits for a free slot.

        As with arq, a job whose ``job_id`` is already queued is not queued again.
        """
        if job_id is not None:
            if job_id in self._queued_ids:
                return
            self._queued_ids.add(job_id)
        task = asyncio.create_task(self._run(self._functions[job], args, job_id or job.value))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, job: JobFunction, args: tuple[Any, ...], job_id: str) -> None:
        # Once started, the same id may be queued again: what it was queued for may
        # already be behind this job (a delivery committed after its last claim).
        self._queued_ids.discard(job_id)
        for job_try in range(1, MAX_TRIES + 1):
            async with self._slots:
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


@asynccontextmanager
async def open_arq_pool(url: str) -> AsyncIterator[ArqRedis]:
    """An arq pool with libflow's JSON serializer, closed on exit.

    It connects lazily (arq's create_pool pings and gives up after its retries): the
    API starts while Redis is down, answers 503 where it needs the queue, reports it in
    /readyz, and recovers by itself when Redis is back.
    """
    pool = ArqRedis.from_url(url, socket_connect_timeout=2)
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
