"""The application's one middleware: every request observed, its API key checked and its
errors rendered.

One coroutine for the three rather than a layer of middleware each: aiohttp runs every
layer as a coroutine of its own, on every request. The order is the one the layers had:
the observation wraps everything (an error's answer carries the request id and is
counted with its status); the key is checked inside the error handling (its refusals
are error answers).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

from libflow.api.auth import authorize, needs_api_key
from libflow.api.errors import render_error
from libflow.api.observing import observed, request_id_of
from libflow.logs import request_id_var
from libflow.metrics import HttpMetrics

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# nginx's "client closed request": the request was cancelled before it was answered (its
# client went away), so nothing was sent; counted as such rather than as a server error.
CLIENT_CLOSED_REQUEST = 499
SHUT_DOWN = 503  # cancelled by the server's shutdown, its client still there


def api_middleware(metrics: HttpMetrics) -> Middleware:
    """The middleware of ``create_app``."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        request_id = request_id_of(request)
        token = request_id_var.set(request_id)
        started = time.perf_counter()
        status = 500
        try:
            try:
                if needs_api_key(request.path):
                    await authorize(request)
                response = await handler(request)
            except asyncio.CancelledError:
                # Its client went away (aiohttp cancels the handler), or the server is
                # shutting down while the client waits.
                transport = request.transport
                gone = transport is None or transport.is_closing()
                status = CLIENT_CLOSED_REQUEST if gone else SHUT_DOWN
                raise
            except Exception as err:
                if isinstance(err, web.HTTPException) and err.status < 400:
                    # A redirect is raised, not an error: aiohttp answers it.
                    status = err.status
                    err.headers["X-Request-Id"] = request_id
                    raise
                response = render_error(request, err)
            status = response.status
            response.headers["X-Request-Id"] = request_id
            return response
        finally:
            observed(metrics, request, status, time.perf_counter() - started)
            request_id_var.reset(token)

    return middleware
