"""kill -9 the worker while files are processing: after recovery every file is done or failed."""

from __future__ import annotations

import asyncio
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from libflow.jobs import ArqJobQueue, Job, open_arq_pool
from tests.faults.conftest import ServerFactory
from tests.faults.processes import Server, Worker, http_json, wait_for
from tests.private_redis import PrivateRedis

FILES = 8
FINAL = {"done", "failed"}


@pytest.fixture
def server(start_server: ServerFactory, postgres_url: str, private_redis: PrivateRedis) -> Server:
    # The local embedder makes processing take seconds, long enough to be cut.
    return start_server(
        LIBFLOW_DATABASE_URL=postgres_url,
        LIBFLOW_REDIS_URL=private_redis.url,
        LIBFLOW_EMBEDDER="local",
    )


def statuses(server: Server, files_url: str, key: str, ids: list[str]) -> dict[str, str]:
    found = {}
    for file_id in ids:
        status, body = http_json("GET", f"{files_url}/{file_id}", Authorization=key)
        assert status == 200, body
        found[file_id] = body["processing"]["status"]
    return found


def text(n: int) -> bytes:
    """About 40 passages of distinct prose: several seconds of embedding."""
    words = " ".join(f"ledger{n} entry{i} reconciled against invoice{i * n}" for i in range(800))
    return words.encode()


def put_sync(record: dict[str, Any], data: bytes) -> int:
    request = urllib.request.Request(
        record["storageLink"], data=data, method="PUT", headers={"Content-Type": record["mimeType"]}
    )
    with urllib.request.urlopen(request, timeout=60) as reply:
        return int(reply.status)


async def test_files_cut_off_by_a_killed_worker_end_done_after_recovery(
    server: Server, tmp_path: Path, private_redis: PrivateRedis, semantic_search: None
) -> None:
    project_id, key = server.create_project()
    files_url = f"{server.url}/api/publicv1/projects/{project_id}/library/files"
    ids = []
    for n in range(FILES):
        status, record = http_json(
            "POST",
            files_url,
            {"originalname": f"ledger{n}.txt", "fileType": "txt", "dir": "root"},
            Authorization=key,
        )
        assert status == 201, record
        put_status = await asyncio.to_thread(put_sync, record, text(n))
        assert put_status == 200
        status, done = http_json(
            "POST", f"{files_url}:complete", {"path": record["path"]}, Authorization=key
        )
        assert status == 200, done
        ids.append(record["documentId"])

    worker = Worker(server, tmp_path / "worker.log")
    worker.start()
    try:
        await asyncio.to_thread(
            wait_for,
            lambda: "processing" in statuses(server, files_url, key, ids).values(),
            120,
            f"no file started processing:\n{worker.output()}",
        )
        worker.kill()
        cut = [i for i, s in statuses(server, files_url, key, ids).items() if s not in FINAL]
        assert cut, "every file finished before the kill: nothing was cut off"

        worker.start()

        # What the new worker can run, it runs; the cut-off files stay "processing".
        def settled() -> dict[str, str] | None:
            before = statuses(server, files_url, key, ids)
            time.sleep(3)
            after = statuses(server, files_url, key, ids)
            return after if after == before else None

        await asyncio.to_thread(wait_for, settled, 120, "files kept changing")
        # The recovery cron (every minute, for files idle 20 minutes), run now for files
        # idle 2 seconds.
        async with open_arq_pool(private_redis.url) as pool:
            await ArqJobQueue(pool).enqueue(Job.RECOVER_STUCK_FILES, 2.0, job_id="recover-now")
        final = await asyncio.to_thread(
            wait_for,
            lambda: (
                (s := statuses(server, files_url, key, ids))
                and all(v in FINAL for v in s.values())
                and s
            ),
            180,
            f"files still stuck:\n{worker.output()}",
        )
    finally:
        worker.stop()

    assert set(final.values()) == {"done"}, final
