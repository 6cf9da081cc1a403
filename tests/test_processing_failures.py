"""Processing that goes wrong: hostile files, transient storage faults, lost workers."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from datetime import timedelta

import pytest
from arq.worker import Retry

from libflow import appkeys
from libflow.ids import utcnow
from libflow.library.processing.pipeline import _RETRY_TRIES, MAX_ATTEMPTS
from libflow.models import Chunk, LibraryFile, ProcessingStatus
from libflow.resources import RESOURCES, Resources
from libflow.storage import Storage
from libflow.storage.keys import text_key
from tests.conftest import (
    Api,
    ClientFactory,
    create_record,
    fixture_bytes,
    put_bytes,
    wait_until_processed,
)
from tests.processing_helpers import (
    FlakyStorage,
    finalize_held,
    get_record,
    job_context,
    process_fixture,
    process_in_order,
    search,
)
from workers.library import process_file, recover_stuck_files

DAY = 24 * 3600.0

# (bad fixture, what its error says, a good file of the same type processed after it)
BAD_FILES = [
    ("corrupt.docx", "not a valid docx file", "report.docx"),
    ("truncated.pptx", "not a valid pptx file", "deck.pptx"),
    ("encrypted.pdf", "the pdf is encrypted", "pages.pdf"),
    ("zip_bomb.docx", "looks like a zip bomb: it unpacks to more than 256 MiB", "report.docx"),
    ("ratio_bomb.pptx", "looks like a zip bomb", "deck.pptx"),
    ("thumb_bomb_100mp.png", "a decompression bomb is refused", "thumb_small.png"),
    ("thumb_truncated.jpg", "the image is corrupt or truncated", "thumb_photo.jpg"),
]


@pytest.mark.parametrize(("bad", "message", "good"), BAD_FILES, ids=[b for b, _, _ in BAD_FILES])
async def test_a_bad_file_fails_clearly_and_the_worker_goes_on(
    shaped_api: Api, bad: str, message: str, good: str
) -> None:
    failed, done = await process_in_order(shaped_api, [bad, good])

    assert failed["processing"]["status"] == "failed", failed
    assert message in failed["processing"]["error"], failed
    assert failed["updating"] is None
    assert failed["searchable"] is False
    assert failed["thumbnail"] is False
    assert failed["processing"]["steps"]["finished"].endswith("Z")
    assert await Chunk.filter(file_id=failed["id"]).count() == 0

    assert done["processing"]["status"] == "done", done
    assert done["processing"]["error"] is None
    assert done["updating"] is None


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            fixture_bytes("thumb_small.png"),
            "its bytes are a PNG image; upload it with fileType 'png'",
        ),
        (bytes(range(256)) * 64, "its bytes are binary, not characters"),
    ],
    ids=["png", "unknown binary"],
)
async def test_binary_bytes_uploaded_as_text_fail_and_index_nothing(
    api: Api, data: bytes, message: str
) -> None:
    record = await api.upload(data, name="notes.txt", file_type="txt")
    failed = await wait_until_processed(api, record["id"])

    assert failed["processing"]["status"] == "failed", failed
    assert failed["processing"]["error"] == f"not a text file: {message}"
    assert failed["searchable"] is False
    assert await Chunk.filter(file_id=failed["id"]).count() == 0


async def test_refinalizing_a_failed_file_processes_its_sealed_bytes_again(
    shaped_api: Api,
) -> None:
    # The bytes were sealed at the first finalize: new bytes need a new record, but a
    # failed file may be finalized again (a fault may have been passing).
    api = shaped_api
    created = await create_record(api, name="report.docx", file_type="docx")
    file_id = created["documentId"]
    async with put_bytes(api, created, fixture_bytes("corrupt.docx")) as response:
        assert response.status == 200
    response = await api.call("POST", "/files:complete", json={"path": created["path"]})
    assert response.status == 200, await response.text()
    failed = await wait_until_processed(api, file_id)
    assert failed["processing"]["status"] == "failed", failed
    assert (await LibraryFile.get(id=file_id)).attempts == 1

    if api.shape.settings.storage == "local":  # S3 cannot refuse a presigned PUT (harmless)
        async with put_bytes(api, created, fixture_bytes("report.docx")) as response:
            assert response.status == 403
    response = await api.call("POST", "/files:complete", json={"path": created["path"]})
    assert response.status == 200, await response.text()
    assert (await response.json())["updating"] is True
    again = await wait_until_processed(api, file_id)

    assert again["processing"]["status"] == "failed", again
    assert again["sha256"] == hashlib.sha256(fixture_bytes("corrupt.docx")).hexdigest()
    assert (await LibraryFile.get(id=file_id)).attempts == 2


# --- transient storage faults ------------------------------------------------------------------


def install_flaky_storage(api: Api, failures: int) -> tuple[dict[str, object], FlakyStorage]:
    """Make the in-process jobs' storage break off its first ``failures`` reads."""
    context = job_context(api)
    resources = context[RESOURCES]
    assert isinstance(resources, Resources)
    flaky = FlakyStorage(resources.storage, failures)
    context[RESOURCES] = replace(resources, storage=flaky)
    return context, flaky


async def test_a_transient_storage_error_retries_and_then_processes(api: Api) -> None:
    file_id, held = await finalize_held(api, "report.docx")
    [(job, args)] = held.jobs
    assert job is process_file
    context, flaky = install_flaky_storage(api, failures=1)

    with pytest.raises(Retry) as retry:
        await job({**context, "job_try": 1}, *args)
    assert retry.value.defer_score == 5_000  # backoff: job_try * 5 s
    waiting = await get_record(api, file_id)
    assert waiting["updating"] is True
    assert waiting["processing"]["status"] == "pending"
    assert waiting["processing"]["error"] is None

    await job({**context, "job_try": 2}, *args)
    done = await get_record(api, file_id)
    assert done["processing"]["status"] == "done", done
    assert done["updating"] is None
    assert done["sha256"] == hashlib.sha256(fixture_bytes("report.docx")).hexdigest()
    assert flaky.reads == 2
    assert (await LibraryFile.get(id=file_id)).attempts == 2
    assert [hit["fileId"] for hit in await search(api, "zephyr quokka alignment")] == [file_id]


async def test_storage_errors_past_the_retry_limit_fail_the_file(api: Api) -> None:
    file_id, held = await finalize_held(api, "report.docx")
    [(job, args)] = held.jobs
    context, flaky = install_flaky_storage(api, failures=1_000)

    for job_try in range(1, _RETRY_TRIES):
        with pytest.raises(Retry) as retry:
            await job({**context, "job_try": job_try}, *args)
        assert retry.value.defer_score == job_try * 5_000
        assert (await get_record(api, file_id))["updating"] is True
    await job({**context, "job_try": _RETRY_TRIES}, *args)

    failed = await get_record(api, file_id)
    assert failed["processing"]["status"] == "failed", failed
    assert failed["updating"] is None
    error = failed["processing"]["error"]
    assert error.startswith("processing failed: ") and "connection reset by peer" in error
    assert flaky.reads == _RETRY_TRIES


class DeletedMidway(FlakyStorage):
    """The real storage; the file is DELETEd through the API just before its text is stored."""

    def __init__(self, storage: Storage, api: Api, file_id: str) -> None:
        super().__init__(storage, failures=0)
        self.api, self.file_id = api, file_id

    async def write(self, key: str, data: bytes, content_type: str) -> None:
        if key == text_key(self.api.project_id, self.file_id):
            response = await self.api.call("DELETE", f"/files/{self.file_id}")
            assert response.status == 204, await response.text()
        await super().write(key, data, content_type)


async def test_a_file_deleted_while_it_is_processed_leaves_nothing_behind(
    shaped_api: Api,
) -> None:
    api = shaped_api
    file_id, held = await finalize_held(api, "report.docx")
    [(job, args)] = held.jobs
    context = job_context(api)
    resources = context[RESOURCES]
    assert isinstance(resources, Resources)
    storage = DeletedMidway(resources.storage, api, file_id)

    await job({**context, RESOURCES: replace(resources, storage=storage), "job_try": 1}, *args)

    assert not await LibraryFile.exists(id=file_id)
    assert await storage.head(text_key(api.project_id, file_id)) is None
    assert await Chunk.filter(file_id=file_id).count() == 0


# --- files a dead worker left behind -----------------------------------------------------------


async def test_a_file_stuck_in_processing_is_requeued_and_processed(shaped_api: Api) -> None:
    api = shaped_api
    stuck_id, _lost = await finalize_held(api, "report.docx")
    # A worker took it, then died: "processing" for longer than any job may run.
    await LibraryFile.filter(id=stuck_id).update(
        status=ProcessingStatus.PROCESSING, attempts=1, updated_at=utcnow() - timedelta(hours=1)
    )
    busy_id, _running = await finalize_held(api, "pages.pdf")
    await LibraryFile.filter(id=busy_id).update(status=ProcessingStatus.PROCESSING, attempts=1)

    assert await recover_stuck_files(job_context(api)) == 1
    done = await wait_until_processed(api, stuck_id)

    assert done["processing"]["status"] == "done", done
    assert done["processing"]["steps"]["requeued"].endswith("Z")
    assert (await LibraryFile.get(id=stuck_id)).attempts == 2
    busy = await get_record(api, busy_id)  # a job still within its time is left alone
    assert busy["updating"] is True
    assert busy["processing"]["status"] == "processing"


async def test_a_pending_file_whose_job_was_lost_is_requeued(shaped_api: Api) -> None:
    api = shaped_api
    file_id, _lost = await finalize_held(api, "deck.pptx")
    # Far older than what other tests leave behind in the session's PostgreSQL database.
    await LibraryFile.filter(id=file_id).update(updated_at=utcnow() - timedelta(days=2))

    assert await recover_stuck_files(job_context(api), stuck_after=DAY) == 1
    done = await wait_until_processed(api, file_id)

    assert done["processing"]["status"] == "done", done
    assert done["processing"]["pages"] == 3
    assert (await LibraryFile.get(id=file_id)).attempts == 1


async def test_a_file_reprocessed_many_times_is_still_requeued_when_interrupted(
    shaped_api: Api,
) -> None:
    api = shaped_api
    file_id = (await api.upload(b"The vermilion otter almanac.", name="a.txt", file_type="txt"))[
        "id"
    ]
    await wait_until_processed(api, file_id)
    for _ in range(MAX_ATTEMPTS):
        response = await api.call("POST", f"/files/{file_id}/reprocess")
        assert response.status == 202, await response.text()
        assert (await wait_until_processed(api, file_id))["processing"]["status"] == "done"
    assert (await LibraryFile.get(id=file_id)).attempts > MAX_ATTEMPTS
    # The next round's first job dies with its worker: one interruption of this round.
    response = await api.call("POST", f"/files/{file_id}/reprocess")
    await wait_until_processed(api, file_id)
    await LibraryFile.filter(id=file_id).update(
        status=ProcessingStatus.PROCESSING, updating=True, updated_at=utcnow() - timedelta(hours=1)
    )

    assert await recover_stuck_files(job_context(api)) == 1
    done = await wait_until_processed(api, file_id)

    assert done["processing"]["status"] == "done", done


async def test_a_file_interrupted_too_often_fails(shaped_api: Api) -> None:
    api = shaped_api
    file_id, _lost = await finalize_held(api, "report.docx")
    await LibraryFile.filter(id=file_id).update(
        status=ProcessingStatus.PROCESSING,
        attempts=MAX_ATTEMPTS,
        updated_at=utcnow() - timedelta(days=2),
    )

    assert await recover_stuck_files(job_context(api), stuck_after=DAY) == 1
    await api.run_jobs()

    failed = await get_record(api, file_id)
    assert failed["processing"]["status"] == "failed", failed
    assert failed["updating"] is None
    assert "interrupted" in failed["processing"]["error"]
    assert (await LibraryFile.get(id=file_id)).attempts == MAX_ATTEMPTS


async def test_a_restart_fails_a_file_interrupted_too_often_instead_of_retrying(
    api: Api, start_app: ClientFactory
) -> None:
    file_id, _lost = await finalize_held(api, "report.docx")
    # The last worker to take it died while processing it, for the MAX_ATTEMPTS-th time.
    await LibraryFile.filter(id=file_id).update(
        status=ProcessingStatus.PROCESSING, attempts=MAX_ATTEMPTS
    )
    assert api.client.app is not None
    await api.client.close()

    # The embedded server queues unfinished files at start-up.
    client = await start_app(api.client.app[appkeys.SETTINGS])
    restarted = Api(client, api.shape, api.project_id, api.api_key)
    failed = await wait_until_processed(restarted, file_id)

    assert failed["processing"]["status"] == "failed", failed
    assert "interrupted" in failed["processing"]["error"]
    assert (await LibraryFile.get(id=file_id)).attempts == MAX_ATTEMPTS


async def test_a_later_failed_attempt_leaves_no_index_rows_behind(shaped_api: Api) -> None:
    api = shaped_api
    record = await process_fixture(api, "report.docx")
    assert await Chunk.filter(file_id=record["id"]).count() > 0
    # A worker wrote the index, then died before finishing; meanwhile the object went away.
    await LibraryFile.filter(id=record["id"]).update(
        status=ProcessingStatus.PROCESSING, updating=True, updated_at=utcnow() - timedelta(hours=1)
    )
    assert api.client.app is not None
    await api.client.app[appkeys.STORAGE].delete(record["path"])

    assert await recover_stuck_files(job_context(api)) == 1
    failed = await wait_until_processed(api, record["id"])

    assert failed["processing"]["status"] == "failed", failed
    assert failed["processing"]["error"] == "the stored object is gone"
    assert failed["searchable"] is False
    assert await Chunk.filter(file_id=record["id"]).count() == 0
    assert await search(api, "zephyr quokka alignment") == []
