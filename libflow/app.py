"""``create_app(settings)``: the one place libflow's application is wired together."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import AsyncIterator
from datetime import timedelta

from aiohttp import ClientSession, ClientTimeout, web
from prometheus_client import CollectorRegistry

from libflow import appkeys
from libflow.api import library, ops, storage, webhooks, workflows
from libflow.auth import api_key_middleware
from libflow.callers import ApiKeyCache
from libflow.db import open_database
from libflow.errors import error_middleware
from libflow.file_lookup import FileLookup
from libflow.inline_reads import InlineReads
from libflow.jobs import ArqJobQueue, InProcessJobQueue, JobFunction, JobQueue, open_arq_pool
from libflow.logs import request_log_middleware
from libflow.metrics import HttpMetrics, metrics_middleware
from libflow.models import LibraryFile, ProcessingStatus, Project
from libflow.rate_limits import open_rate_limiter
from libflow.search import VectorIndex
from libflow.storage.factory import open_storage
from libflow.storage.local import LocalStorage
from settings import Settings
from workers.context import RESOURCES, JobResources
from workers.deliveries import (
    requeue_pending_deliveries,
    settle_interrupted_deliveries,
    sweep_deliveries,
)
from workers.embeddings import open_embedder
from workers.files import process_file, recover_stuck_files, remove_abandoned_uploads
from workers.reembed import reembed_stale_chunks

logger = logging.getLogger("libflow.app")

ABANDONED_SWEEP_SECONDS = 3600
RECOVERY_SWEEP_SECONDS = 60
DELIVERY_SWEEP_SECONDS = 2
SHUTDOWN_GRACE_SECONDS = 10


async def _database(app: web.Application) -> AsyncIterator[None]:
    settings = app[appkeys.SETTINGS]
    async with open_database(settings.resolved_database_url):
        if not await Project.exists():
            logger.info(
                "no projects yet: create one with `libflow projects create NAME --json`",
                extra={"databaseUrl": settings.resolved_database_url.split("@")[-1]},
            )
        reads = InlineReads(settings.resolved_database_url)
        try:
            app[appkeys.INLINE_READS] = reads
            app[appkeys.FILE_LOOKUP] = FileLookup(reads)
            yield
        finally:
            reads.close()


async def _storage(app: web.Application) -> AsyncIterator[None]:
    async with open_storage(app[appkeys.SETTINGS]) as backend:
        app[appkeys.STORAGE] = backend
        app[appkeys.LOCAL_STORAGE] = backend if isinstance(backend, LocalStorage) else None
        yield


async def _embedder(app: web.Application) -> AsyncIterator[None]:
    async with open_embedder(app[appkeys.SETTINGS]) as embedder:
        app[appkeys.EMBEDDER] = embedder
        yield


async def _jobs(app: web.Application) -> AsyncIterator[None]:
    settings = app[appkeys.SETTINGS]
    if settings.redis_url:
        async with open_arq_pool(settings.redis_url) as pool:
            app[appkeys.JOBS] = ArqJobQueue(pool)
            yield
        return
    queue = InProcessJobQueue({}, settings.job_concurrency)
    queue.context[RESOURCES] = job_resources_of(app, queue)
    app[appkeys.JOBS] = queue
    # Nothing else runs these jobs in the embedded shape: pick up what a stop interrupted.
    unfinished = LibraryFile.filter(
        finalized_at__isnull=False,
        status__in=[ProcessingStatus.PENDING, ProcessingStatus.PROCESSING],
    )
    for file_id in await unfinished.values_list("id", flat=True):
        await queue.enqueue(process_file, file_id)
    await queue.enqueue(reembed_stale_chunks)  # the embedder may have changed since
    # This process was the only one running deliveries: what it left claimed was cut off.
    await settle_interrupted_deliveries(stale_after=timedelta(0))
    await requeue_pending_deliveries(queue, older_than=timedelta(0))
    timers = [
        asyncio.create_task(_every(queue, sweep_deliveries, DELIVERY_SWEEP_SECONDS)),
        asyncio.create_task(_every(queue, remove_abandoned_uploads, ABANDONED_SWEEP_SECONDS)),
        asyncio.create_task(_every(queue, recover_stuck_files, RECOVERY_SWEEP_SECONDS)),
    ]
    try:
        yield
    finally:
        for timer in timers:
            timer.cancel()
        await asyncio.gather(*timers, return_exceptions=True)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(queue.join()), SHUTDOWN_GRACE_SECONDS)
        await queue.close()


def job_resources_of(app: web.Application, jobs: JobQueue) -> JobResources:
    """What jobs run by this process find in their context: the app's own clients."""
    return JobResources(
        settings=app[appkeys.SETTINGS],
        storage=app[appkeys.STORAGE],
        embedder=app[appkeys.EMBEDDER],
        jobs=jobs,
        http=app[appkeys.HTTP_CLIENT],
        vectors=app[appkeys.VECTOR_INDEX],
        file_lookup=app[appkeys.FILE_LOOKUP],
        reads=app[appkeys.INLINE_READS],
    )


async def _every(queue: InProcessJobQueue, job: JobFunction, seconds: float) -> None:
    """The in-process stand-in for an arq cron job."""
    while True:
        await asyncio.sleep(seconds)
        await queue.enqueue(job)


async def _rate_limiter(app: web.Application) -> AsyncIterator[None]:
    async with open_rate_limiter(app[appkeys.SETTINGS]) as limiter:
        app[appkeys.RATE_LIMITER] = limiter
        yield


async def _http_client(app: web.Application) -> AsyncIterator[None]:
    async with ClientSession(timeout=ClientTimeout(total=30)) as session:
        app[appkeys.HTTP_CLIENT] = session
        yield


async def _freeze_start_up_objects(app: web.Application) -> None:
    # What start-up loaded lives as long as the process (the embedding model alone is
    # millions of objects). Left to the cyclic GC, every full collection walks all of it and
    # pauses the loop for a quarter of a second (runsync p99: 280 ms, 23 ms frozen).
    # No gc.collect() first: a full collection at every start-up cost the test suite minutes
    # (many apps start in one process); what little garbage is frozen is freed at cleanup.
    gc.freeze()


async def _unfreeze(app: web.Application) -> None:
    # Several apps may start and stop in one process (tests): what the last one froze can
    # become garbage, which only a collection that sees it can free.
    gc.unfreeze()


def create_app(settings: Settings) -> web.Application:
    """The libflow application for ``settings``; resources open in its cleanup contexts."""
    registry = CollectorRegistry()
    metrics = HttpMetrics(registry)
    app = web.Application(
        middlewares=[
            request_log_middleware,
            metrics_middleware(metrics),
            error_middleware,
            api_key_middleware,
        ],
        client_max_size=1024 * 1024,
    )
    app[appkeys.SETTINGS] = settings
    app[appkeys.API_KEYS] = ApiKeyCache(settings.api_key_cache_seconds)
    app[appkeys.METRICS_REGISTRY] = registry
    app[appkeys.METRICS] = metrics
    app.cleanup_ctx.extend([_database, _storage, _embedder, _http_client, _rate_limiter, _jobs])
    app.on_startup.append(_freeze_start_up_objects)  # after the contexts above have opened
    app.on_cleanup.append(_unfreeze)
    app[appkeys.VECTOR_INDEX] = VectorIndex()
    app.add_routes(library.routes)
    app.add_routes(workflows.routes)
    app.add_routes(webhooks.routes)
    app.add_routes(storage.routes)
    app.add_routes(ops.routes)
    return app
