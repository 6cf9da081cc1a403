"""The arq worker: how it starts, what it was given, and the jobs it reads from Redis."""

from __future__ import annotations

import asyncio
import contextvars
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from arq.connections import ArqRedis
from arq.constants import default_queue_name, job_key_prefix, result_key_prefix
from redis.asyncio import Redis
from redis.exceptions import RedisError

from libflow.jobs import (
    MAX_TRIES,
    ArqJobQueue,
    Job,
    deserialize_job,
    open_arq_pool,
    serialize_job,
)
from settings import Settings
from tests.conftest import base_settings
from tests.private_redis import PrivateRedis
from workers.library import process_file, remove_abandoned_uploads
from workers.worker import LibflowWorker, shutdown, startup, worker_settings

ROOT = Path(__file__).resolve().parents[1]


def _run_worker_script(
    data_dir: Path, **env: str
) -> tuple[subprocess.CompletedProcess[str], float]:
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("LIBFLOW_") or k == "LIBFLOW_MODEL_CACHE_DIR"
    }
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "run_worker.py"],
        cwd=ROOT,
        env={**clean, "LIBFLOW_DATA_DIR": str(data_dir), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    return result, time.monotonic() - started


def _worker(settings: Settings) -> LibflowWorker:
    options = {**worker_settings(settings), "poll_delay": 0}
    return LibflowWorker(**options, burst=True, handle_signals=False)


async def _run_burst(worker: LibflowWorker) -> None:
    """Drain the queue in a context of its own, as a separate worker process would."""
    try:
        await asyncio.create_task(worker.main(), context=contextvars.Context())
    finally:
        await asyncio.create_task(worker.close(), context=contextvars.Context())


def test_worker_without_redis_exits_fast_with_a_clear_message(tmp_path: Path) -> None:
    result, elapsed = _run_worker_script(tmp_path)
    assert result.returncode != 0
    assert "LIBFLOW_REDIS_URL is not set" in result.stderr
    assert "Traceback" not in result.stderr
    assert elapsed < 30


def test_worker_with_invalid_settings_names_the_variable(tmp_path: Path) -> None:
    result, _ = _run_worker_script(
        tmp_path, LIBFLOW_REDIS_URL="redis://127.0.0.1:6379/9", LIBFLOW_JOB_CONCURRENCY="many"
    )
    assert result.returncode != 0
    assert "LIBFLOW_JOB_CONCURRENCY" in result.stderr
    assert "Traceback" not in result.stderr


async def test_worker_gets_our_functions_serializer_and_retries(tmp_path: Path) -> None:
    settings = base_settings(tmp_path, redis_url="redis://127.0.0.1:6379/5")
    worker = _worker(settings)

    assert worker.functions["process_file"].coroutine is process_file
    assert any(job.coroutine is remove_abandoned_uploads for job in worker.cron_jobs), (
        worker.cron_jobs
    )
    assert worker.job_serializer is serialize_job
    assert worker.job_deserializer is deserialize_job
    assert worker.max_tries == MAX_TRIES
    assert worker.on_startup is startup
    assert worker.on_shutdown is shutdown
    assert worker.ctx["settings"] is settings
    assert worker.redis_settings is not None
    assert (worker.redis_settings.host, worker.redis_settings.port) == ("127.0.0.1", 6379)
    assert worker.redis_settings.database == 5


async def test_jobs_are_enqueued_by_name_as_json(tmp_path: Path, redis_url: str) -> None:
    async with open_arq_pool(redis_url) as pool:
        await ArqJobQueue(pool).enqueue(
            Job.PROCESS_FILE, "file123", job_id="process_file:file123:0"
        )

    redis: Redis = Redis.from_url(redis_url)
    try:
        raw = await redis.get(job_key_prefix + "process_file:file123:0")
        queued = await redis.zrange(default_queue_name, 0, -1)
    finally:
        await redis.aclose()
    assert raw is not None
    assert not raw.startswith(b"\x80"), "the job was pickled"
    job = json.loads(raw)
    assert job["f"] == process_file.__name__
    assert job["a"] == ["file123"]
    assert queued == [b"process_file:file123:0"]


async def test_worker_runs_a_json_job_and_stores_a_json_result(
    tmp_path: Path, redis_url: str
) -> None:
    settings = base_settings(tmp_path, redis_url=redis_url)
    async with open_arq_pool(redis_url) as pool:
        # A file that does not exist: the job has nothing to do and ends well.
        await ArqJobQueue(pool).enqueue(Job.PROCESS_FILE, "gone", job_id="process_file:gone:0")

    worker = _worker(settings)
    await _run_burst(worker)
    # This job, and the crons that run at every worker's start-up (re-embedding, the
    # delivery sweep, which may tick once more during the burst).
    assert worker.jobs_complete >= 3
    assert (worker.jobs_failed, worker.jobs_retried) == (0, 0)

    redis: Redis = Redis.from_url(redis_url)
    try:
        raw = await redis.get(result_key_prefix + "process_file:gone:0")
    finally:
        await redis.aclose()
    assert raw is not None
    result = json.loads(raw)
    assert result["s"] is True
    assert result["f"] == "process_file"


async def test_a_job_start_cut_by_redis_gives_its_slot_back(
    tmp_path: Path, private_redis: PrivateRedis
) -> None:
    worker = _worker(base_settings(tmp_path, redis_url=private_redis.url))
    pool = ArqRedis.from_url(private_redis.url, socket_connect_timeout=1)
    worker._pool = pool
    try:
        await asyncio.to_thread(private_redis.stop)
        for _ in range(worker.max_jobs + 1):  # more than it has slots
            with pytest.raises((RedisError, OSError)):
                await worker.start_jobs([b"some-job"])

        assert worker.job_counter == 0
        assert not worker.sem.locked()
    finally:
        await pool.aclose()


async def test_a_worker_stopped_with_a_job_cut_off_closes_all_the_same(
    tmp_path: Path, redis_url: str
) -> None:
    options = worker_settings(base_settings(tmp_path, redis_url=redis_url))
    closed: list[bool] = []

    async def closing(ctx: dict[str, Any]) -> None:
        await shutdown(ctx)
        closed.append(True)

    worker = LibflowWorker(**{**options, "on_shutdown": closing}, handle_signals=False)
    polling = asyncio.create_task(worker.main(), context=contextvars.Context())
    pool = ArqRedis.from_url(redis_url)
    try:
        while not await pool.exists(worker.health_check_key):
            await asyncio.sleep(0.05)
        # A job whose task ends cancelled, not through arq's handling of a cancelled job.
        worker.tasks["cut-off"] = asyncio.create_task(asyncio.sleep(60))
        polling.cancel()
        await asyncio.gather(polling, return_exceptions=True)
        await asyncio.create_task(worker.close(), context=contextvars.Context())
        assert not await pool.exists(worker.health_check_key)  # /readyz counts it no more
        assert closed == [True]  # the database and the preparation server closed
    finally:
        await pool.aclose()
