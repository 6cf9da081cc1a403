"""Jobs: in-process retries, the abandoned-upload sweep, and a queue that goes away."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

from arq.worker import Retry

from libflow import appkeys
from libflow.ids import utcnow
from libflow.jobs import LANE_OF_JOB, InProcessJobQueue, Job, Lane, chooses_lane
from libflow.models import LibraryFile
from libflow.resources import RESOURCES
from tests.conftest import (
    Api,
    ClientFactory,
    Shape,
    base_settings,
    create_record,
    fixture_bytes,
    new_project,
    put_bytes,
    wait_until_processed,
)
from tests.library_helpers import eventually
from tests.private_redis import PrivateRedis
from workers.library import remove_abandoned_uploads


async def test_in_process_jobs_retry_like_arq() -> None:
    tries: list[int] = []

    async def flaky(ctx: dict[str, Any], value: str) -> None:
        tries.append(ctx["job_try"])
        if len(tries) < 3:
            raise Retry(defer=0)

    queue = InProcessJobQueue({Job.PROCESS_FILE: flaky}, {}, concurrency=1)
    await queue.enqueue(Job.PROCESS_FILE, "x")
    await queue.join()
    assert tries == [1, 2, 3]


async def test_uploads_never_finalized_are_removed_after_a_day(api: Api) -> None:
    stale = await create_record(api, name="stale.txt", file_type="txt")
    async with put_bytes(api, stale, b"never finalized") as response:
        assert response.status == 200
    fresh = await create_record(api, name="fresh.txt", file_type="txt")
    await LibraryFile.filter(id=stale["documentId"]).update(
        created_at=utcnow() - timedelta(hours=25)
    )
    from libflow import appkeys

    queue = api.client.app[appkeys.JOBS] if api.client.app else None
    assert isinstance(queue, InProcessJobQueue)
    removed = await remove_abandoned_uploads(queue.context)  # the job as the sweeper runs it
    assert removed == 1
    assert await LibraryFile.get_or_none(id=stale["documentId"]) is None
    assert await LibraryFile.get_or_none(id=fresh["documentId"]) is not None
    storage = queue.context[RESOURCES].storage
    assert await storage.head(stale["path"]) is None


async def test_finalize_while_the_queue_is_down_is_503_and_loses_nothing(
    start_app: ClientFactory, tmp_path: Path, private_redis: PrivateRedis
) -> None:
    settings = base_settings(tmp_path, redis_url=private_redis.url)
    client = await start_app(settings)
    project_id, key = await new_project()
    api = Api(client, Shape("redis", settings), project_id, key)
    created = await create_record(api, name="a.txt", file_type="txt")
    async with put_bytes(api, created, b"some text") as response:
        assert response.status == 200

    private_redis.stop()
    response = await api.call("POST", "/files:complete", json={"path": created["path"]})
    assert response.status == 503
    assert (await response.json())["error"] == "UNAVAILABLE"
    assert "Retry-After" in response.headers
    record = await LibraryFile.get(id=created["documentId"])
    assert record.finalized_at is None  # the failed finalize left no trace

    await asyncio.to_thread(private_redis.start)
    response = await api.call("POST", "/files:complete", json={"path": created["path"]})
    assert response.status == 200
    processed = await wait_until_processed(api, created["documentId"])
    assert processed["processing"]["status"] == "done"


async def test_the_server_starts_while_redis_is_down_and_recovers(
    start_app: ClientFactory, tmp_path: Path, private_redis: PrivateRedis
) -> None:
    await asyncio.to_thread(private_redis.stop)
    settings = base_settings(tmp_path, redis_url=private_redis.url)
    client = await start_app(settings)
    project_id, key = await new_project()
    api = Api(client, Shape("redis", settings), project_id, key)

    ready = await client.get("/readyz")
    assert ready.status == 503
    assert (await ready.json())["details"]["redis"].startswith("unavailable")
    created = await create_record(api, name="a.txt", file_type="txt")
    async with put_bytes(api, created, b"some text") as response:
        assert response.status == 200
    response = await api.call("POST", "/files:complete", json={"path": created["path"]})
    assert response.status == 503
    assert (await response.json())["error"] == "UNAVAILABLE"

    await asyncio.to_thread(private_redis.start)
    assert (await client.get("/readyz")).status == 200
    response = await api.call("POST", "/files:complete", json={"path": created["path"]})
    assert response.status == 200
    processed = await wait_until_processed(api, created["documentId"])
    assert processed["processing"]["status"] == "done"


async def test_a_long_job_in_its_lane_holds_up_no_other_lane() -> None:
    gate = asyncio.Event()
    ran: list[str] = []

    async def large_lane(*args: Any) -> Lane:
        return Lane.LARGE_FILES

    @chooses_lane(large_lane)
    async def process_file(ctx: dict[str, Any], name: str) -> None:
        ran.append(name)
        await gate.wait()

    async def deliver_webhooks(ctx: dict[str, Any]) -> None:
        ran.append("delivery")

    async def remove_abandoned_uploads(ctx: dict[str, Any]) -> None:
        ran.append("sweep")

    functions = {
        Job.PROCESS_FILE: process_file,
        Job.DELIVER_WEBHOOKS: deliver_webhooks,
        Job.REMOVE_ABANDONED_UPLOADS: remove_abandoned_uploads,
    }
    queue = InProcessJobQueue(functions, {}, concurrency=4)
    for name in ("big1", "big2", "big3"):
        await queue.enqueue(Job.PROCESS_FILE, name)
    await queue.enqueue(Job.DELIVER_WEBHOOKS)
    await queue.enqueue(Job.REMOVE_ABANDONED_UPLOADS)

    await eventually(lambda: {"delivery", "sweep"} <= set(ran), "the short jobs ran")
    assert [name for name in ran if name.startswith("big")] == ["big1"]  # one slot
    gate.set()
    await queue.join()
    assert [name for name in ran if name.startswith("big")] == ["big1", "big2", "big3"]


async def test_a_lane_that_cannot_be_chosen_is_the_jobs_default() -> None:
    async def broken(*args: Any) -> Lane:
        raise ConnectionError("the database is away")

    ran: list[str] = []

    @chooses_lane(broken)
    async def process_file(ctx: dict[str, Any], name: str) -> None:
        ran.append(name)

    queue = InProcessJobQueue({Job.PROCESS_FILE: process_file}, {}, concurrency=1)
    assert await queue.lane_of(Job.PROCESS_FILE, ("a",)) == LANE_OF_JOB[Job.PROCESS_FILE]
    await queue.enqueue(Job.PROCESS_FILE, "a")
    await queue.join()
    assert ran == ["a"]


async def test_a_lane_named_when_queued_is_used_without_asking_the_job() -> None:
    gate = asyncio.Event()
    ran: list[str] = []
    asked: list[tuple[Any, ...]] = []

    async def files_lane(*args: Any) -> Lane:
        asked.append(args)
        return Lane.FILES

    @chooses_lane(files_lane)
    async def process_file(ctx: dict[str, Any], name: str) -> None:
        ran.append(name)
        if name.startswith("big"):
            await gate.wait()

    queue = InProcessJobQueue({Job.PROCESS_FILE: process_file}, {}, concurrency=4)
    for name in ("big1", "big2"):
        await queue.enqueue(Job.PROCESS_FILE, name, lane=Lane.LARGE_FILES)
    await queue.enqueue(Job.PROCESS_FILE, "small")

    await eventually(lambda: "small" in ran, "the job of the files lane ran")
    assert [name for name in ran if name.startswith("big")] == ["big1"]  # the lane's one slot
    gate.set()
    await queue.join()
    assert sorted(ran) == ["big1", "big2", "small"]
    assert asked == [("small",)]


async def test_finalize_names_the_lane_of_the_file_it_queues(api: Api) -> None:
    from libflow.library.processing.budgets import LARGE_DOCUMENT_BYTES
    from tests.processing_helpers import HeldJobs, finalize_bytes_held

    held = HeldJobs()
    await finalize_bytes_held(api, b"x " * (LARGE_DOCUMENT_BYTES // 2), "big.txt", held)
    await finalize_bytes_held(api, b"x " * 9, "a.txt", held)
    assert held.lanes == [Lane.LARGE_FILES, Lane.FILES]


async def test_large_documents_are_processed_in_the_large_files_lane(api: Api) -> None:
    from libflow.library.processing.budgets import LARGE_DOCUMENT_BYTES
    from libflow.library.processing.pipeline import lane_of_file

    queue = api.client.app[appkeys.JOBS] if api.client.app else None
    assert isinstance(queue, InProcessJobQueue)
    big = await api.upload(
        b"x " * (LARGE_DOCUMENT_BYTES // 2), name="big.txt", file_type="txt", prevent_search=True
    )
    small = await api.upload(b"x " * 100, name="small.txt", file_type="txt")
    photo = await api.upload(
        fixture_bytes("thumb_photo.jpg") + b"\0" * LARGE_DOCUMENT_BYTES,
        name="photo.jpg",
        file_type="jpg",
    )
    assert await lane_of_file(big["id"]) is Lane.LARGE_FILES
    assert await lane_of_file(small["id"]) is Lane.FILES
    assert await lane_of_file(photo["id"]) is Lane.FILES  # images: thumbnails only
    assert await queue.lane_of(Job.PROCESS_FILE, (big["id"],)) is Lane.LARGE_FILES
    await api.run_jobs()
