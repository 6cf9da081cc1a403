"""The arq worker: which jobs it runs and the resources it opens once per process."""

from __future__ import annotations

import gc
import logging
from contextlib import AsyncExitStack
from typing import Any

from aiohttp import ClientSession, ClientTimeout
from arq.cron import CronJob, cron
from arq.worker import func

from libflow.db import open_database
from libflow.engine.definition import MAX_TIMEOUT_SECONDS
from libflow.file_lookup import FileLookup
from libflow.inline_reads import InlineReads
from libflow.jobs import MAX_TRIES, ArqJobQueue, deserialize_job, redis_settings, serialize_job
from libflow.search import VectorIndex
from libflow.storage.factory import open_storage
from settings import Settings, settings_from_env
from workers.context import RESOURCES, JobResources
from workers.deliveries import DRAIN_SECONDS, deliver_webhooks, sweep_deliveries
from workers.embeddings import open_embedder
from workers.files import (
    PROCESS_FILE_TIMEOUT,
    process_file,
    recover_stuck_files,
    remove_abandoned_uploads,
)
from workers.reembed import reembed_stale_chunks

logger = logging.getLogger("libflow.worker")

FUNCTIONS = [
    func(process_file, timeout=PROCESS_FILE_TIMEOUT),
    # A job stops claiming after DRAIN_SECONDS and its runs time out by themselves after
    # MAX_TIMEOUT_SECONDS: arq's limit only backs them up. Its ids are single-use.
    func(deliver_webhooks, timeout=DRAIN_SECONDS + MAX_TIMEOUT_SECONDS + 60, keep_result=0),
    # Also a cron job; queued by name it takes a shorter idle time, for an operator who
    # knows a worker died and will not wait the 20 minutes.
    func(recover_stuck_files),
]
_EXIT_STACK = "exit_stack"
WORKER_POLL_SECONDS = 0.05


async def startup(ctx: dict[str, Any]) -> None:
    """Open the database and storage once for every job of this process."""
    settings: Settings = ctx.get("settings") or settings_from_env()
    stack = AsyncExitStack()
    await stack.__aenter__()
    ctx[_EXIT_STACK] = stack
    await stack.enter_async_context(open_database(settings.resolved_database_url))
    storage = await stack.enter_async_context(open_storage(settings))
    embedder = await stack.enter_async_context(open_embedder(settings))
    reads = InlineReads(settings.resolved_database_url)
    stack.callback(reads.close)
    http = await stack.enter_async_context(ClientSession(timeout=ClientTimeout(total=30)))
    ctx[RESOURCES] = JobResources(
        settings=settings,
        storage=storage,
        embedder=embedder,
        jobs=ArqJobQueue(ctx["redis"]),
        http=http,
        vectors=VectorIndex(),
        file_lookup=FileLookup(reads),
        reads=reads,
    )
    # As the server does (libflow.app): keep start-up's objects, the embedding model above
    # all, out of the cyclic GC's full collections, each a pause of every running job.
    gc.freeze()
    logger.info("worker ready")


async def shutdown(ctx: dict[str, Any]) -> None:
    """Close what startup opened."""
    stack: AsyncExitStack | None = ctx.get(_EXIT_STACK)
    if stack is not None:
        await stack.aclose()
    gc.unfreeze()  # as the server does at cleanup: burst workers come and go in tests


def cron_jobs() -> list[CronJob]:
    """Fresh cron jobs for each worker: arq keeps each one's next run time on the object."""
    return [
        cron(remove_abandoned_uploads, minute=17),
        cron(recover_stuck_files),  # every minute; arq runs each tick once across workers
        # At start-up too: a worker starting with a new embedder re-embeds the index.
        cron(reembed_stale_chunks, minute={7, 37}, run_at_startup=True),
        # Deliveries accepted while Redis was down wait in the inbox for this sweep.
        cron(sweep_deliveries, second=set(range(0, 60, 2)), run_at_startup=True),
    ]


def worker_settings(settings: Settings) -> dict[str, Any]:
    """Keyword arguments for ``arq.Worker`` (tests and run_worker.py share them)."""
    assert settings.redis_url, "the arq worker needs LIBFLOW_REDIS_URL"
    return {
        "functions": FUNCTIONS,
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
        "ctx": {"settings": settings},
    }
