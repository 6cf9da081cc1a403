"""``create_app(settings)``: the one place libflow's application is wired together.

The only module of ``libflow`` that imports ``workers``: in the embedded shape the
server runs the job functions itself.
"""

from __future__ import annotations

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
from libflow.garbage_collection import keep_start_up_objects, release_start_up_objects
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


async def _keep_start_up_objects(app: web.Application) -> None:
    keep_start_up_objects()


async def _release_start_up_objects(app: web.Application) -> None:
    release_start_up_objects()


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
    app.on_startup.append(_keep_start_up_objects)  # after the contexts above have opened
    app.on_cleanup.append(_release_start_up_objects)
    routes = RouteTree()
    for table in ROUTE_TABLES:
        routes.add_routes(table)
    app.router.register_resource(routes)
    return app
