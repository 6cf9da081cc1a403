"""Prometheus metrics of the HTTP API, in a registry of the app's own."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware
from prometheus_client import CollectorRegistry, Counter, Histogram


class HttpMetrics:
    """Request counts and latencies by route template, never by raw path."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "libflow_http_requests",
            "HTTP requests handled",
            ["method", "route", "status"],
            registry=registry,
        )
        self.latency = Histogram(
            "libflow_http_request_duration_seconds",
            "HTTP request latency",
            ["method", "route"],
            registry=registry,
        )
        # Each label set's child, found once: labels() validates and locks on every call.
        self._counts: dict[tuple[str, str, str], Counter] = {}
        self._latencies: dict[tuple[str, str], Histogram] = {}

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        """Count one request and record its latency."""
        key = (method, route, str(status))
        count = self._counts.get(key)
        if count is None:
            count = self._counts[key] = self.requests.labels(*key)
        count.inc()
        latency = self._latencies.get(key[:2])
        if latency is None:
            latency = self._latencies[key[:2]] = self.latency.labels(method, route)
        latency.observe(seconds)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def metrics_middleware(metrics: HttpMetrics) -> Middleware:
    """A middleware that counts and times each request under its route template."""

    @web.middleware
    async def record_request(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        finally:
            resource = request.match_info.route.resource
            route = resource.canonical if resource is not None else "unmatched"
            metrics.observe(request.method, route, status, time.perf_counter() - started)

    return record_request
