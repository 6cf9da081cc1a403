"""``open_resources(settings)``: what a libflow process opens once, for the app and the worker.

The server's cleanup context and the worker's start-up both enter it, so the two shapes
open the same database, storage, job queue, HTTP session and embedder the same way. Jobs
find the resources in their context under ``RESOURCES`` (``job_resources(ctx)``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

from aiohttp import ClientSession, ClientTimeout
from redis.asyncio import Redis

from libflow.db.connection import open_database
from libflow.db.fast_reads import FastReads
from libflow.engine import NodeServices
from libflow.freed_memory import releasing_freed_memory
from libflow.jobs import (
    REDIS_CONNECTION_OPTIONS,
    ArqJobQueue,
    InProcessJobQueue,
    JobFunctions,
    JobQueue,
    check_job_functions,
    open_arq_pool,
)
from libflow.library.embeddings import open_embedder, with_agreed_backend
from libflow.library.embeddings.interface import Embedder
from libflow.library.pgvector import open_vector_search
from libflow.library.vectors import VectorSearch
from libflow.secrets.crypto import box_of, use_secret_box
from libflow.storage import Storage
from libflow.storage.factory import open_storage
from libflow.workflows.run_services import run_services
from libflow.workflows.running import RunControl, open_run_control
from settings import Settings

RESOURCES = "libflow"
# How long a stopping server lets its in-process jobs finish before cancelling them.
SHUTDOWN_GRACE_SECONDS = 10
HTTP_TIMEOUT_SECONDS = 30


@dataclass(frozen=True, slots=True)
class Resources:
    """The process-wide clients that handlers and jobs use."""

    settings: Settings
    storage: Storage
    embedder: Embedder | None
    jobs: JobQueue
    http: ClientSession
    # pgvector in the database where PostgreSQL has it, else exact search in memory.
    vectors: VectorSearch
    reads: FastReads
    # Runs' events and cancels: through Redis when configured, else within this process.
    runs: RunControl
    # Redis (when configured) for what is not a job: run events, cancels, worker liveness.
    redis: Redis | None

    def node_services(self, project_id: str) -> NodeServices:
        """What the nodes of a workflow run of ``project_id`` may reach."""
        return run_services(
            project_id,
            settings=self.settings,
            http=self.http,
            storage=self.storage,
            embedder=self.embedder,
            vectors=self.vectors,
            reads=self.reads,
            control=self.runs,
        )


@asynccontextmanager
async def open_resources(
    settings: Settings, *, job_functions: JobFunctions | None = None
) -> AsyncIterator[Resources]:
    """Open everything once; close it in reverse order on exit.

    Jobs go to Redis when ``settings.redis_url`` is set; otherwise they run in this
    process, which then needs ``job_functions`` (only ``workers/`` knows them).
    """
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(releasing_freed_memory())
        # Before the database: a migration seals webhook secrets with it.
        use_secret_box(box_of(settings))
        await stack.enter_async_context(open_database(settings.resolved_database_url))
        reads = FastReads(settings.resolved_database_url)
        stack.callback(reads.close)
        storage = await stack.enter_async_context(open_storage(settings))
        embedder = await stack.enter_async_context(
            open_embedder(await with_agreed_backend(settings))
        )
        vectors = await open_vector_search(embedder)
        http = await stack.enter_async_context(
            ClientSession(timeout=ClientTimeout(total=HTTP_TIMEOUT_SECONDS))
        )
        redis: Redis | None = None
        if settings.redis_url:
            redis = Redis.from_url(settings.redis_url, **REDIS_CONNECTION_OPTIONS)
            stack.push_async_callback(redis.aclose)
        # A group of API processes (--workers) without Redis shares run events in the data dir.
        group_dir = settings.data_dir if settings.workers > 1 else None
        runs = await stack.enter_async_context(
            open_run_control(settings.run_lease_seconds, redis, group_dir)
        )
        in_process: InProcessJobQueue | None = None
        jobs: JobQueue
        if settings.redis_url:
            jobs = ArqJobQueue(await stack.enter_async_context(open_arq_pool(settings.redis_url)))
        else:
            if job_functions is None:
                raise RuntimeError("without LIBFLOW_REDIS_URL jobs run in-process: pass them")
            check_job_functions(job_functions)
            jobs = in_process = InProcessJobQueue(
                job_functions, {}, settings.job_concurrency, sole_runner=settings.workers == 1
            )
        resources = Resources(
            settings=settings,
            storage=storage,
            embedder=embedder,
            jobs=jobs,
            http=http,
            vectors=vectors,
            reads=reads,
            runs=runs,
            redis=redis,
        )
        if in_process is None:
            yield resources
            return
        in_process.context[RESOURCES] = resources
        try:
            yield resources
        finally:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(in_process.join()), SHUTDOWN_GRACE_SECONDS)
            await in_process.close()


def job_resources(ctx: dict[str, Any]) -> Resources:
    """The resources the worker or the server put in the job context at start-up."""
    resources = ctx[RESOURCES]
    assert isinstance(resources, Resources)
    return resources
