"""The arq worker: its settings, the resources it opens, and riding out Redis outages.

``worker_settings(settings)`` is what ``run_worker.py`` and the tests give ``arq.Worker``:
the job functions (checked against the ``Job`` names), the periodic jobs of
``libflow.schedule``, and a start-up that enters ``open_resources`` as the server does.
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import AsyncExitStack
from typing import Any

from arq.cron import CronJob, cron
from arq.worker import Function, Worker, func
from redis import Redis
from redis.exceptions import RedisError

from libflow.engine.definition import MAX_TIMEOUT_SECONDS
from libflow.garbage_collection import keep_start_up_objects, release_start_up_objects
from libflow.jobs import (
    MAX_TRIES,
    Job,
    check_job_functions,
    deserialize_job,
    redis_settings,
    serialize_job,
)
from libflow.library import reembed
from libflow.library.processing.isolation import ChildCrashed, start_preparation_server
from libflow.library.processing.pipeline import PROCESS_FILE_TIMEOUT
from libflow.resources import RESOURCES, open_resources
from libflow.schedule import PERIODIC_JOBS
from libflow.webhooks.delivery import DRAIN_SECONDS
from libflow.workflows.run_queue import DRAIN_SECONDS as RUN_DRAIN_SECONDS
from settings import Settings, settings_from_env
from workers.functions import JOB_FUNCTIONS

logger = logging.getLogger("libflow.worker")

# How often a worker that lost Redis tries it again.
REDIS_RETRY_SECONDS = 1.0
WORKER_POLL_SECONDS = 0.05
_EXIT_STACK = "exit_stack"
# arq's time limits, past the defaults, of the jobs that need them.
_TIMEOUTS: dict[Job, float] = {
    Job.PROCESS_FILE: PROCESS_FILE_TIMEOUT,
    # A job stops claiming after DRAIN_SECONDS and its runs time out by themselves after
    # MAX_TIMEOUT_SECONDS: arq's limit only backs them up.
    Job.DELIVER_WEBHOOKS: DRAIN_SECONDS + MAX_TIMEOUT_SECONDS + 60,
    Job.RUN_WORKFLOWS: RUN_DRAIN_SECONDS + MAX_TIMEOUT_SECONDS + 60,
    # Not arq's default 300 s: a stopped batch queued no next one (see reembed).
    Job.REEMBED_STALE_CHUNKS: reembed.JOB_TIMEOUT_SECONDS,
}
# Wake-up jobs: single-use ids, no result to keep.
_WAKE_UPS = frozenset({Job.DELIVER_WEBHOOKS, Job.RUN_WORKFLOWS})
# How often a polling worker writes arq's health-check key: /readyz of API processes reads
# it to tell whether any worker is taking jobs.
HEALTH_CHECK_SECONDS = 5


def functions() -> list[Function]:
    """Every job function under its Job name (a mismatch refuses to start)."""
    check_job_functions(JOB_FUNCTIONS)
    found = []
    for job, function in JOB_FUNCTIONS.items():
        keep = 0 if job in _WAKE_UPS else None
        found.append(func(function, name=job.value, timeout=_TIMEOUTS.get(job), keep_result=keep))
    return found


def cron_jobs() -> list[CronJob]:
    """Fresh cron jobs for each worker (arq keeps each one's next run time on the object)."""
    return [
        cron(
            JOB_FUNCTIONS[periodic.job],
            name=f"cron:{periodic.job.value}",
            run_at_startup=periodic.at_start,
            # The same limit as the job queued: arq's default (300 s) stopped a re-embed
            # pass started by the tick before it could queue the next.
            timeout=_TIMEOUTS.get(periodic.job),
            **periodic.cron_fields(),  # type: ignore[arg-type]
        )
        for periodic in PERIODIC_JOBS
    ]


async def startup(ctx: dict[str, Any]) -> None:
    """Open the resources once for every job of this process."""
    settings: Settings = ctx.get("settings") or settings_from_env()
    stack = AsyncExitStack()
    await stack.__aenter__()
    ctx[_EXIT_STACK] = stack
    ctx[RESOURCES] = await stack.enter_async_context(open_resources(settings))
    # Its libraries load now, not while the first file waits (about a second); should it
    # fail, the first file tries again and counts a crash, and every other job runs.
    try:
        await start_preparation_server()
    except ChildCrashed as err:
        logger.warning("the preparation server did not start: %s", err)
    # As the server does (libflow.app): keep start-up's objects, the embedding model above
    # all, out of the cyclic GC's full collections, each a pause of every running job; and
    # collect the young generation only past what the jobs in flight hold.
    keep_start_up_objects()
    logger.info("worker ready")


async def shutdown(ctx: dict[str, Any]) -> None:
    """Close what startup opened."""
    stack: AsyncExitStack | None = ctx.get(_EXIT_STACK)
    if stack is not None:
        await stack.aclose()
    release_start_up_objects()  # as the server does: burst workers come and go in tests


def worker_settings(settings: Settings) -> dict[str, Any]:
    """Keyword arguments for ``arq.Worker`` (tests and run_worker.py share them)."""
    assert settings.redis_url, "the arq worker needs LIBFLOW_REDIS_URL"
    return {
        "functions": functions(),
        "cron_jobs": cron_jobs(),
        "on_startup": startup,
        "on_shutdown": shutdown,
        "redis_settings": redis_settings(settings.redis_url),
        "job_serializer": serialize_job,
        "job_deserializer": deserialize_job,
        "max_tries": MAX_TRIES,
        # Processing is CPU-bound (extraction, embedding): a few jobs at once per process.
        "max_jobs": settings.job_concurrency,
        # arq sleeps this long between polls of the queue (0.5 s by default, which capped
        # a worker at max_jobs jobs per half second whatever their length).
        "poll_delay": WORKER_POLL_SECONDS,
        "health_check_interval": HEALTH_CHECK_SECONDS,
        "ctx": {"settings": settings},
    }


class LibflowWorker(Worker):
    """arq's Worker, except that losing Redis pauses the polling loop rather than ending it.

    arq lets a failed poll end ``main()``, and the process exits: every worker of a
    deployment would die with a Redis restart. Here the running jobs go on (those that
    reach Redis at the end fail to record a result, as they would have anyway), the
    worker waits for Redis, and takes jobs again when it is back. Whatever the outage lost
    from the queue, the sweeps find again in the database (pending deliveries, files
    stuck in processing).
    """

    _redis_down = False

    async def _poll_iteration(self) -> None:
        try:
            await super()._poll_iteration()
        except (RedisError, OSError) as err:
            if not self._redis_down:
                logger.warning("Redis is unreachable, waiting for it: %r", err)
            self._redis_down = True
            await asyncio.sleep(REDIS_RETRY_SECONDS)
            return
        if self._redis_down:
            self._redis_down = False
            logger.warning("Redis is back: taking jobs again")

    async def start_jobs(self, job_ids: list[bytes]) -> None:
        """arq's, giving back the slot of a job whose start Redis cut short.

        arq takes a slot (its semaphore and job counter) before asking Redis whether the
        job may start; a Redis error there would keep the slot for good. Only that one
        slot can be held: every Redis call in arq's start_jobs comes after taking it.
        """
        try:
            await super().start_jobs(job_ids)
        except (RedisError, OSError):
            self.job_counter -= 1
            self.sem.release()
            raise

    async def close(self) -> None:
        """arq's, carried to its end when a job cut off by the stop ends cancelled.

        arq cancels the running jobs, then gathers them without ``return_exceptions``: a
        job cancelled outside arq's own handling (a periodic sweep) re-raised its
        CancelledError there, and close() stopped before it deleted the health-check key
        (/readyz went on counting the worker) and before on_shutdown closed the database
        and the preparation server.
        """
        tasks = list(self.tasks.values())
        for task in tasks:
            task.cancel()  # as arq's handle_sig does (arq's close() logs the stop)
        for ended in await asyncio.gather(*tasks, return_exceptions=True):
            if isinstance(ended, Exception):  # not a cancel: a fault, shown
                logger.error("a job failed as the worker stopped", exc_info=ended)
        self.tasks.clear()  # all ended: how is no concern of what follows
        await super().close()


def wait_for_redis(url: str) -> None:
    """Block until Redis answers a PING: a worker started before Redis waits for it.

    arq's own start-up gives up after five tries, and the process would exit; a worker
    started with (or before) its Redis should come up when Redis does.
    """
    client = Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
    try:
        waiting = False
        while True:
            try:
                client.ping()
                break
            except (RedisError, OSError) as err:
                if not waiting:
                    logger.warning("waiting for Redis at start-up: %r", err)
                    waiting = True
                time.sleep(REDIS_RETRY_SECONDS)
        if waiting:
            logger.warning("Redis is up: starting")
    finally:
        client.close()
