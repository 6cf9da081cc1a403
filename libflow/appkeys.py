"""Typed keys for everything the application holds for its lifetime."""

from __future__ import annotations

from aiohttp import ClientSession, web
from prometheus_client import CollectorRegistry

from libflow.db.fast_reads import FastReads
from libflow.jobs import JobQueue
from libflow.library.embeddings.interface import Embedder
from libflow.library.vectors import VectorSearch
from libflow.metrics import HttpMetrics
from libflow.projects import ApiKeyCache
from libflow.rate_limits import RateLimiter
from libflow.resources import Resources
from libflow.storage import Storage
from libflow.storage.local import LocalStorage
from settings import Settings

SETTINGS = web.AppKey("settings", Settings)
# Everything open_resources() opened; the keys below are its parts, for handlers' brevity.
RESOURCES = web.AppKey("resources", Resources)
STORAGE = web.AppKey("storage", Storage)
# Set only when the local backend is in use: the app then serves its signed URLs.
LOCAL_STORAGE = web.AppKey[LocalStorage | None]("local_storage")
JOBS = web.AppKey("jobs", JobQueue)
# The hottest reads: inline on SQLite (nothing inline on PostgreSQL).
READS = web.AppKey("reads", FastReads)
EMBEDDER = web.AppKey[Embedder | None]("embedder")
VECTOR_INDEX = web.AppKey[VectorSearch]("vector_index")
HTTP_CLIENT = web.AppKey("http_client", ClientSession)
API_KEYS = web.AppKey("api_keys", ApiKeyCache)
RATE_LIMITER = web.AppKey[RateLimiter]("rate_limiter")
METRICS = web.AppKey("metrics", HttpMetrics)
METRICS_REGISTRY = web.AppKey("metrics_registry", CollectorRegistry)
