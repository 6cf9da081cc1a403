"""Prometheus metrics of the HTTP API, in a registry of the app's own."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

BUCKETS = Histogram.DEFAULT_BUCKETS  # up to 10 s, then +Inf
# Each bound as Prometheus writes it ("0.005", "1.0", "+Inf").
_BOUNDS = tuple("+Inf" if bound == float("inf") else repr(float(bound)) for bound in BUCKETS)


@dataclass(slots=True)
class _Latencies:
    """One route's histogram: the count of each bucket (not cumulative) and the sum."""

    counts: list[int] = field(default_factory=lambda: [0] * len(BUCKETS))
    total: float = 0.0


class HttpMetrics(Collector):
    """Request counts and latencies by route template, never by raw path.

    Plain numbers, turned into samples when scraped: prometheus_client's Counter and
    Histogram take a lock on each increment, which the one thread of an event loop does
    not need, and cost every request more than its routing does.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self._counts: dict[tuple[str, str, int], int] = {}
        self._latencies: dict[tuple[str, str], _Latencies] = {}
        registry.register(self)

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        """Count one request and record its latency."""
        key = (method, route, status)
        self._counts[key] = self._counts.get(key, 0) + 1
        latencies = self._latencies.get(key[:2])
        if latencies is None:
            latencies = self._latencies[key[:2]] = _Latencies()
        # The first bucket whose bound is at least ``seconds`` (Prometheus' "le").
        latencies.counts[bisect_left(BUCKETS, seconds)] += 1
        latencies.total += seconds

    def collect(self) -> Iterator[Metric]:
        """The samples of the request counter and the latency histogram."""
        requests = CounterMetricFamily(
            "libflow_http_requests", "HTTP requests handled", labels=["method", "route", "status"]
        )
        for (method, route, status), count in list(self._counts.items()):
            requests.add_metric([method, route, str(status)], count)
        yield requests
        latency = HistogramMetricFamily(
            "libflow_http_request_duration_seconds",
            "HTTP request latency",
            labels=["method", "route"],
        )
        for (method, route), latencies in list(self._latencies.items()):
            cumulative, buckets = 0, []
            for bound, count in zip(_BOUNDS, latencies.counts, strict=True):
                cumulative += count
                buckets.append((bound, cumulative))
            latency.add_metric([method, route], buckets, sum_value=latencies.total)
        yield latency
