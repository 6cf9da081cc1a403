"""Helpers of the processing tests: upload fixtures, read thumbnails, hold or fault jobs."""

from __future__ import annotations

import asyncio
import contextvars
import io
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from PIL import Image

from libflow import appkeys
from libflow.jobs import InProcessJobQueue, Job, JobFunction, Lane
from libflow.library.files import finalize_upload
from libflow.resources import RESOURCES
from libflow.storage import ObjectInfo, Storage, StorageError
from tests.conftest import Api, create_record, fixture_bytes, put_bytes, wait_until_processed
from tests.library_helpers import link
from workers.functions import JOB_FUNCTIONS
from workers.worker import LibflowWorker, worker_settings


def file_type_of(name: str) -> str:
    """The fileType of a fixture: its extension."""
    return name.rsplit(".", 1)[1]


async def get_record(api: Api, file_id: str) -> dict[str, Any]:
    """Get-one, as a client sees it."""
    response = await api.call("GET", f"/files/{file_id}")
    assert response.status == 200, await response.text()
    record: dict[str, Any] = await response.json()
    return record


async def search(api: Api, q: str, **params: Any) -> list[dict[str, Any]]:
    """The search route's hits for ``q``."""
    response = await api.call("GET", "/search", params={"q": q, **params})
    assert response.status == 200, await response.text()
    hits: list[dict[str, Any]] = await response.json()
    return hits


async def upload_fixture(api: Api, name: str, **kwargs: Any) -> dict[str, Any]:
    """Create, PUT and finalize a committed fixture through the public API."""
    return await api.upload(fixture_bytes(name), name=name, file_type=file_type_of(name), **kwargs)


async def process_fixture(api: Api, name: str, **kwargs: Any) -> dict[str, Any]:
    """Upload a fixture and wait until its processing ended; its get-one record."""
    record = await upload_fixture(api, name, **kwargs)
    return await wait_until_processed(api, record["id"])


async def thumbnail_image(api: Api, file_id: str) -> tuple[Image.Image, bytes]:
    """Follow the thumbnail route's redirect; the decoded image and its bytes."""
    response = await api.call("GET", f"/files/{file_id}/thumbnail", allow_redirects=False)
    assert response.status == 302, await response.text()
    async with api.client.session.get(link(response.headers["Location"])) as got:
        assert got.status == 200, await got.text()
        assert got.headers["Content-Type"] == "image/webp"
        data = await got.read()
    image = Image.open(io.BytesIO(data))
    image.load()
    return image, data


def job_context(api: Api) -> dict[str, Any]:
    """A job context as a worker of the app's shape has one (the in-process queue's own)."""
    app = api.client.app
    assert app is not None
    queue = app[appkeys.JOBS]
    if isinstance(queue, InProcessJobQueue):
        return queue.context
    return {RESOURCES: app[appkeys.RESOURCES]}


@dataclass
class HeldJobs:
    """A job queue that keeps what is enqueued instead of running it."""

    jobs: list[tuple[JobFunction, tuple[Any, ...]]] = field(default_factory=list)
    lanes: list[Lane | None] = field(default_factory=list)  # as the caller named them

    async def enqueue(
        self, job: Job, *args: Any, job_id: str | None = None, lane: Lane | None = None
    ) -> None:
        """Keep the job: the function its name stands for, to be run by the test."""
        self.jobs.append((JOB_FUNCTIONS[job], args))
        self.lanes.append(lane)

    async def check(self) -> None:
        """Always reachable."""


async def finalize_held(api: Api, name: str) -> tuple[str, HeldJobs]:
    """Upload a fixture through the public API and finalize it, holding its processing job."""
    file_id, held = await finalize_bytes_held(api, fixture_bytes(name), name)
    assert len(held.jobs) == 1
    return file_id, held


async def finalize_bytes_held(
    api: Api, data: bytes, name: str, held: HeldJobs | None = None
) -> tuple[str, HeldJobs]:
    """Create and PUT ``data`` through the public API, then finalize it with its processing
    job kept in ``held`` (a new HeldJobs if none) instead of run."""
    assert api.client.app is not None
    created = await create_record(api, name=name, file_type=file_type_of(name))
    async with put_bytes(api, created, data) as response:
        assert response.status == 200, await response.text()
    held = HeldJobs() if held is None else held
    await finalize_upload(
        api.client.app[appkeys.STORAGE],
        held,
        api.client.app[appkeys.READS],
        project_id=api.project_id,
        path=created["path"],
        prevent_search=False,
        max_bytes=api.shape.settings.max_upload_bytes,
    )
    return str(created["documentId"]), held


class FlakyStorage:
    """The app's real storage, except that ``read`` breaks off the first ``failures`` times.

    Each failed read streams the object's first chunk, then raises StorageError, as a
    connection reset in the middle of a download does.
    """

    def __init__(self, storage: Storage, failures: int) -> None:
        self.storage = storage
        self.failures = failures
        self.reads = 0

    async def upload_url(self, key: str, content_type: str, expires_in: int) -> str:
        """As the real storage."""
        return await self.storage.upload_url(key, content_type, expires_in)

    async def download_url(
        self, key: str, *, filename: str, content_type: str, expires_in: int, inline: bool = False
    ) -> str:
        """As the real storage."""
        return await self.storage.download_url(
            key, filename=filename, content_type=content_type, expires_in=expires_in, inline=inline
        )

    async def head(self, key: str) -> ObjectInfo | None:
        """As the real storage."""
        return await self.storage.head(key)

    def read(self, key: str, chunk_size: int = 1024 * 1024) -> AsyncIterator[bytes]:
        """The real stream, or, while failures remain, its first KiB and then an error."""
        self.reads += 1
        if self.reads > self.failures:
            return self.storage.read(key, chunk_size)
        return self._break_off(key)

    async def _break_off(self, key: str) -> AsyncIterator[bytes]:
        received = [chunk async for chunk in self.storage.read(key, chunk_size=1024)]
        yield received[0]
        raise StorageError(f"reading {key!r} failed: connection reset by peer")

    async def write(self, key: str, data: bytes, content_type: str) -> None:
        """As the real storage."""
        await self.storage.write(key, data, content_type)

    async def delete(self, key: str) -> None:
        """As the real storage."""
        await self.storage.delete(key)

    async def check(self) -> None:
        """As the real storage."""
        await self.storage.check()


async def process_in_order(api: Api, names: Sequence[str]) -> list[dict[str, Any]]:
    """Upload fixtures and process them one after another on one worker; their records.

    Embedded: each file is processed by the app's in-process queue before the next is
    uploaded. Scaled: all are queued, then one arq worker runs them one at a time (max_jobs=1)
    and none of its jobs may have raised.
    """
    if not api.shape.uses_worker:
        return [await process_fixture(api, name) for name in names]
    uploaded = [await upload_fixture(api, name) for name in names]
    options = {**worker_settings(api.shape.settings), "max_jobs": 1, "poll_delay": 0}
    worker = LibflowWorker(**options, burst=True, handle_signals=False)
    try:
        await asyncio.create_task(worker.main(), context=contextvars.Context())
    finally:
        await asyncio.create_task(worker.close(), context=contextvars.Context())
    assert (worker.jobs_failed, worker.jobs_retried) == (0, 0)
    assert worker.jobs_complete >= len(names)
    return [await get_record(api, record["id"]) for record in uploaded]
