"""Operations endpoints: liveness, readiness, metrics and the OpenAPI document."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web
from arq.constants import default_queue_name, health_check_key_suffix
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from redis.asyncio import Redis
from tortoise.connection import get_connection

from libflow import appkeys
from libflow.api.errors import error_response
from libflow.api.openapi import openapi_document
from libflow.api.responses import json_response

routes = web.RouteTableDef()
logger = logging.getLogger("libflow.ops")
CHECK_TIMEOUT = 3.0
# arq's health-check key of the default queue: workers rewrite it every few seconds as they
# poll, and it expires a second after that (workers/worker.py HEALTH_CHECK_SECONDS).
WORKER_HEALTH_KEY = f"{default_queue_name}{health_check_key_suffix}"


@routes.get("/healthz")
async def healthz(request: web.Request) -> web.Response:
    """The process is up and its loop answers."""
    return json_response({"status": "ok"})


async def _database_ready() -> None:
    await get_connection("default").execute_query("SELECT 1")


async def _workers_polling(redis: Redis) -> str:
    """Whether an arq worker wrote its health-check key lately (each one does as it polls)."""
    try:
        seen = await asyncio.wait_for(redis.exists(WORKER_HEALTH_KEY), CHECK_TIMEOUT)
    except Exception as err:
        return f"unknown: {type(err).__name__}"
    return "ok" if seen else "no worker has polled the job queue lately"


@routes.get("/readyz")
async def readyz(request: web.Request) -> web.Response:
    """Every dependency answers: database, storage, and Redis when configured."""
    checks: dict[str, Callable[[], Awaitable[None]]] = {
        "database": _database_ready,
        "storage": request.app[appkeys.STORAGE].check,
    }
    if request.app[appkeys.SETTINGS].redis_url:
        checks["redis"] = request.app[appkeys.JOBS].check
    results: dict[str, str] = {}
    for name, check in checks.items():
        try:
            await asyncio.wait_for(check(), CHECK_TIMEOUT)
            results[name] = "ok"
        except Exception as err:
            logger.warning("readiness check %s failed: %r", name, err)
            results[name] = f"unavailable: {type(err).__name__}"
    failed = [name for name, result in results.items() if result != "ok"]
    redis = request.app[appkeys.RESOURCES].redis
    if redis is not None and "redis" not in failed:
        # Reported, not required: API processes serve (and queue work) without workers.
        results["workers"] = await _workers_polling(redis)
    if failed:
        return error_response(
            "UNAVAILABLE", f"not ready: {', '.join(failed)} unavailable", details=results
        )
    return json_response({"status": "ok", "checks": results})


@routes.get("/metrics")
async def metrics(request: web.Request) -> web.Response:
    """Prometheus text exposition of this process's metrics."""
    body = generate_latest(request.app[appkeys.METRICS_REGISTRY])
    response = web.Response(body=body)
    response.headers["Content-Type"] = CONTENT_TYPE_LATEST
    return response


@routes.get("/api/publicv1/openapi.json")
async def openapi(request: web.Request) -> web.Response:
    """The OpenAPI 3.1 document of every public route."""
    base = request.app[appkeys.SETTINGS].resolved_public_base_url
    return json_response(openapi_document(base))
