"""``create_app(settings)``: the one place libflow's application is wired together.

The only module of ``libflow`` that imports ``workers``: in the embedded shape the
server runs the job functions itself.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import AsyncIterator

from aiohttp import web
from prometheus_client import CollectorRegistry

from libflow import appkeys
from libflow.api import (
    console,
    docs_page,
    library,
    ops,
    runs,
    schedules,
    secrets,
    storage,
    webhooks,
    workflows,
)
from libflow.api.errors import serve_json_errors
from libflow.api.middleware import api_middleware
from libflow.api.routing import RouteTree
from libflow.jobs import InProcessJobQueue
from libflow.library.processing.isolation import ChildCrashed, start_preparation_server
from libflow.metrics import HttpMetrics
from libflow.models import Project
from libflow.projects import ApiKeyCache
from libflow.rate_limits import open_rate_limiter
from libflow.resources import open_resources
from libflow.schedule import periodic_jobs_in_process
from libflow.storage.local import LocalStorage
from settings import Settings
from workers.functions import JOB_FUNCTIONS

logger = logging.getLogger("libflow.app")

# The young generation's threshold of the cyclic GC in a process serving the app (Python's
# default: 700 new objects).
YOUNG_GC_THRESHOLD = 20_000
# Every route of the API, in the order aiohttp tries those of one shape.
ROUTE_TABLES = (
    library.routes,
    workflows.routes,
    runs.routes,
    schedules.routes,
    webhooks.routes,
    secrets.routes,
    storage.routes,
    ops.routes,
    console.routes,
    docs_page.routes,
)


async def _resources(app: web.Application) -> AsyncIterator[None]:
    settings = app[appkeys.SETTINGS]
    async with open_resources(settings, job_functions=JOB_FUNCTIONS) as resources:
        if not await Project.exists():
            logger.info(
                "no projects yet: create one with `libflow projects create NAME --json`",
                extra={"databaseUrl": settings.resolved_database_url.split("@")[-1]},
            )
        app[appkeys.RESOURCES] = resources
        app[appkeys.STORAGE] = resources.storage
        local = resources.storage if isinstance(resources.storage, LocalStorage) else None
        app[appkeys.LOCAL_STORAGE] = local
        app[appkeys.JOBS] = resources.jobs
        app[appkeys.READS] = resources.reads
        app[appkeys.EMBEDDER] = resources.embedder
        app[appkeys.VECTOR_INDEX] = resources.vectors
        app[appkeys.HTTP_CLIENT] = resources.http
        yield


async def _periodic_jobs(app: web.Application) -> AsyncIterator[None]:
    """In the embedded shape, the timers that stand in for the workers' arq cron, and the
    preparation server started now, as a worker does, rather than by the first file."""
    queue = app[appkeys.JOBS]
    if not isinstance(queue, InProcessJobQueue):
        yield  # workers run the periodic jobs
        return
    try:
        await start_preparation_server()
    except ChildCrashed as err:  # the first file tries again (and counts a crash)
        logger.warning("the preparation server did not start: %s", err)
    async with periodic_jobs_in_process(queue, app[appkeys.SETTINGS]):
        yield


async def _rate_limiter(app: web.Application) -> AsyncIterator[None]:
    async with open_rate_limiter(app[appkeys.SETTINGS]) as limiter:
        app[appkeys.RATE_LIMITER] = limiter
        yield


async def _freeze_start_up_objects(app: web.Application) -> None:
    # What start-up loaded lives as long as the process (the embedding model alone is
    # millions of objects). Left to the cyclic GC, every full collection walks all of it and
    # pauses the loop for a quarter of a second (runsync p99: 280 ms, 23 ms frozen).
    # No gc.collect() first: a full collection at every start-up cost the test suite minutes
    # (many apps start in one process); what little garbage is frozen is freed at cleanup.
    gc.freeze()
    # A request's objects are freed by their reference counts (a test keeps runsync free
    # of cycles), but while 32 requests are in flight several thousand of them are alive
    # at once: at Python's default of 700 new objects the young generation was collected
    # every few requests, walking the live ones each time for nothing (4% of runsync's
    # CPU). Above what requests in flight hold, a collection comes only with real growth.
    # Process-wide and left so at cleanup: it suits any process that serves the app.
    gc.set_threshold(YOUNG_GC_THRESHOLD, *gc.get_threshold()[1:])


async def _unfreeze(app: web.Application) -> None:
    # Several apps may start and stop in one process (tests): what the last one froze can
    # become garbage, which only a collection that sees it can free.
    gc.unfreeze()


def create_app(settings: Settings) -> web.Application:
    """The libflow application for ``settings``; resources open in its cleanup contexts."""
    registry = CollectorRegistry()
    metrics = HttpMetrics(registry)
    app = web.Application(
        middlewares=[api_middleware(metrics)],
        client_max_size=1024 * 1024,
    )
    serve_json_errors(app)  # aiohttp's own errors (its HTTP parser's) are JSON too
    app[appkeys.SETTINGS] = settings
    app[appkeys.API_KEYS] = ApiKeyCache(settings.api_key_cache_seconds)
    app[appkeys.METRICS_REGISTRY] = registry
    app[appkeys.METRICS] = metrics
    app.cleanup_ctx.extend([_resources, _rate_limiter, _periodic_jobs])
    app.on_startup.append(_freeze_start_up_objects)  # after the contexts above have opened
    app.on_cleanup.append(_unfreeze)
    routes = RouteTree()
    for table in ROUTE_TABLES:
        routes.add_routes(table)
    app.router.register_resource(routes)
    return app
