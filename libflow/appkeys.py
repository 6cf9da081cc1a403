"""Typed keys for everything the application holds for its lifetime."""

from __future__ import annotations

from aiohttp import ClientSession, web
from prometheus_client import CollectorRegistry

from libflow.callers import ApiKeyCache
from libflow.file_lookup import FileLookup
from libflow.inline_reads import InlineReads
from libflow.jobs import JobQueue
from libflow.metrics import HttpMetrics
from libflow.rate_limits import RateLimiter
from libflow.search import VectorIndex
from libflow.storage import Storage
from libflow.storage.local import LocalStorage
from settings import Settings
from workers.embeddings import Embedder

SETTINGS = web.AppKey("settings", Settings)
STORAGE = web.AppKey("storage", Storage)
# Set only when the local backend is in use: the app then serves its signed URLs.
LOCAL_STORAGE = web.AppKey[LocalStorage | None]("local_storage")
JOBS = web.AppKey("jobs", JobQueue)
API_KEYS = web.AppKey("api_keys", ApiKeyCache)
RATE_LIMITER = web.AppKey[RateLimiter]("rate_limiter")
METRICS = web.AppKey("metrics", HttpMetrics)
METRICS_REGISTRY = web.AppKey("metrics_registry", CollectorRegistry)
FILE_LOOKUP = web.AppKey("file_lookup", FileLookup)
# Inline SQLite reads of the hottest routes (nothing on PostgreSQL).
INLINE_READS = web.AppKey("inline_reads", InlineReads)
EMBEDDER = web.AppKey[Embedder | None]("embedder")
VECTOR_INDEX = web.AppKey("vector_index", VectorIndex)
HTTP_CLIENT = web.AppKey("http_client", ClientSession)
