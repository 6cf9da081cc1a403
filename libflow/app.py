"""``create_app(settings)``: the one place libflow's application is wired together."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from aiohttp import ClientSession, ClientTimeout, web
from prometheus_client import CollectorRegistry

from libflow import appkeys
from libflow.api import library, ops, storage
from libflow.auth import api_key_middleware
from libflow.callers import ApiKeyCache
from libflow.db import open_database
from libflow.errors import error_middleware
from libflow.file_lookup import open_file_lookup
from libflow.jobs import ArqJobQueue, InProcessJobQueue, open_arq_pool
from libflow.logs import request_log_middleware
from libflow.metrics import HttpMetrics, metrics_middleware
from libflow.models import LibraryFile, ProcessingStatus, Project
from libflow.storage.factory import open_storage
from libflow.storage.local import LocalStorage
from settings import Settings
from workers.context import RESOURCES, JobResources
from workers.files import process_file, remove_abandoned_uploads

logger = logging.getLogger("libflow.app")

SWEEP_INTERVAL_SECONDS = 3600
SHUTDOWN_GRACE_SECONDS = 10


async def _database(app: web.Application) -> AsyncIterator[None]:
    settings = app[appkeys.SETTINGS]
    async with open_database(settings.resolved_database_url):
        if not await Project.exists():
            logger.info(
                "no projects yet: create one with `libflow projects create NAME --json`",
                extra={"databaseUrl": settings.resolved_database_url.split("@")[-1]},
            )
        with open_file_lookup(settings.resolved_database_url) as lookup:
            app[appkeys.FILE_LOOKUP] = lookup
            yield


async def _storage(app: web.Application) -> AsyncIterator[None]:
    async with open_storage(app[appkeys.SETTINGS]) as backend:
        app[appkeys.STORAGE] = backend
        app[appkeys.LOCAL_STORAGE] = backend if isinstance(backend, LocalStorage) else None
        yield


async def _jobs(app: web.Application) -> AsyncIterator[None]:
    settings = app[appkeys.SETTINGS]
    if settings.redis_url:
        async with open_arq_pool(settings.redis_url) as pool:
            app[appkeys.JOBS] = ArqJobQueue(pool)
            yield
        return
    resources = JobResources(settings=settings, storage=app[appkeys.STORAGE])
    queue = InProcessJobQueue({RESOURCES: resources}, settings.job_concurrency)
    app[appkeys.JOBS] = queue
    # Nothing else runs these jobs in the embedded shape: pick up what a stop interrupted.
    unfinished = LibraryFile.filter(
        finalized_at__isnull=False,
        status__in=[ProcessingStatus.PENDING, ProcessingStatus.PROCESSING],
    )
    for file_id in await unfinished.values_list("id", flat=True):
        await queue.enqueue(process_file, file_id)
    sweeper = asyncio.create_task(_sweep_abandoned(queue))
    try:
        yield
    finally:
        sweeper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sweeper
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(queue.join()), SHUTDOWN_GRACE_SECONDS)
        await queue.close()


async def _sweep_abandoned(queue: InProcessJobQueue) -> None:
    while True:
        await queue.enqueue(remove_abandoned_uploads)
        await asyncio.sleep(SWEEP_INTERVAL_SECONDS)


async def _http_client(app: web.Application) -> AsyncIterator[None]:
    async with ClientSession(timeout=ClientTimeout(total=30)) as session:
        app[appkeys.HTTP_CLIENT] = session
        yield


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
    app.cleanup_ctx.extend([_database, _storage, _jobs, _http_client])
    app.add_routes(library.routes)
    app.add_routes(storage.routes)
    app.add_routes(ops.routes)
    return app
