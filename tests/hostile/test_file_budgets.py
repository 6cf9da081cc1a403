"""Every file has a budget: hostile files fail clearly, and the server and workers stay well.

The attacks of issue "Bounded by design" (items 4 and 9) rebuilt at full size in the tests:
a docx bomb under the zip limits, a text file far over the text budget, a pdf of more pages
than the budget, big files filling the job slots, long jobs that recovery must leave alone,
and library_file_text, which reads the stored text instead of extracting in the API process.

Memory: while a hostile file is processed, this process (the in-process server and, on the
scaled shape, the in-process arq worker) grows by less than RSS_BOUND_MIB: the parsing
happens in the file's child process, under CHILD_MEMORY_BYTES.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from arq.worker import Retry

from libflow import appkeys
from libflow.ids import utcnow
from libflow.library.processing import extract, isolation, pipeline
from libflow.library.processing.budgets import (
    MAX_CHUNKS,
    MAX_FILE_TEXT_CHARS,
    MAX_PAGES,
    MAX_TEXT_CHARS,
    MAX_TEXT_FILE_BYTES,
    MAX_XML_TAGS,
)
from libflow.library.processing.isolation import ChildCrashed
from libflow.models import Chunk, LibraryFile
from libflow.resources import RESOURCES, Resources
from libflow.storage import Storage, StorageError
from libflow.storage.keys import text_key
from tests.conftest import (
    Api,
    ClientFactory,
    fixture_bytes,
    wait_until_processed,
)
from tests.hostile.conftest import healthz_stays_responsive, peak_rss_growth
from tests.hostile.hostile_files import blank_pdf, empty_paragraphs_docx
from tests.library_helpers import eventually
from tests.processing_helpers import (
    finalize_bytes_held,
    finalize_held,
    get_record,
    job_context,
    process_fixture,
)
from tests.webhook_helpers import create_webhook, deliver, deliveries_of, standard_headers
from tests.workflow_helpers import chain, output, run_definition
from workers.library import process_file, recover_stuck_files

# How far this process's RSS may grow while a hostile file is processed (MiB).
RSS_BOUND_MIB = 64
MIB = 1024 * 1024
_ZYGOTE = isolation.zygote.__name__

# --- helpers ----------------------------------------------------------------------------------


async def process(api: Api, data: bytes, name: str) -> dict[str, Any]:
    """Upload ``data`` through the public API and wait until its processing ended."""
    record = await api.upload(data, name=name, file_type=name.rsplit(".", 1)[1])
    return await wait_until_processed(api, record["id"], timeout=120)


def storage_of(api: Api) -> Storage:
    """The app's storage."""
    assert api.client.app is not None
    storage: Storage = api.client.app[appkeys.STORAGE]
    return storage


async def assert_failed_cleanly(api: Api, record: dict[str, Any], message: str) -> None:
    """Failed with ``message``, and nothing of the file is indexed or stored as its text."""
    processing = record["processing"]
    assert processing["status"] == "failed", record
    assert message in processing["error"], record
    assert record["updating"] is None
    assert record["searchable"] is False
    assert await Chunk.filter(file_id=record["id"]).count() == 0
    assert await storage_of(api).head(text_key(api.project_id, record["id"])) is None


def _processes() -> dict[int, tuple[int, str]]:
    """Every process: its parent and command line."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        found[int(entry.name)] = (parent, cmdline)
    return found


def preparing_children() -> list[int]:
    """The children this process's preparation server has forked and not yet reaped."""
    processes = _processes()
    servers = {
        pid for pid, (parent, cmd) in processes.items() if parent == os.getpid() and _ZYGOTE in cmd
    }
    return [pid for pid, (parent, _) in processes.items() if parent in servers]


class GatedStorage:
    """The app's storage, except that reading a gated key waits until ``gate`` is set."""

    def __init__(self, storage: Storage, gated: Callable[[str], bool]) -> None:
        self.storage = storage
        self.gated = gated
        self.gate = asyncio.Event()
        self.waiting: list[str] = []

    def read(self, key: str, chunk_size: int = MIB) -> AsyncIterator[bytes]:
        """The real stream, once the gate is open for a gated key."""
        if not self.gated(key):
            return self.storage.read(key, chunk_size)
        return self._after_gate(key, chunk_size)

    async def _after_gate(self, key: str, chunk_size: int) -> AsyncIterator[bytes]:
        self.waiting.append(key)
        await self.gate.wait()
        async for piece in self.storage.read(key, chunk_size):
            yield piece

    def __getattr__(self, name: str) -> Any:
        return getattr(self.storage, name)


def gated_context(api: Api, gated: Callable[[str], bool]) -> tuple[dict[str, Any], GatedStorage]:
    """A job context of the app's shape whose storage reads ``gated`` keys behind a gate."""
    resources = job_context(api)[RESOURCES]
    assert isinstance(resources, Resources)
    storage = GatedStorage(resources.storage, gated)
    return {RESOURCES: replace(resources, storage=storage), "job_try": 1}, storage


async def file_text_run(api: Api, file_id: str) -> tuple[int, dict[str, Any]]:
    """Run a workflow whose library_file_text node reads ``file_id``."""
    definition = chain(
        {"id": "read", "type": "library_file_text", "fileId": file_id},
        output("text", "{{ nodes.read.text }}"),
        output("name", "{{ nodes.read.name }}"),
        output("type", "{{ nodes.read.type }}"),
    )
    return await run_definition(api, definition)


def node_failure(body: dict[str, Any]) -> str:
    """The message of the library_file_text node's failure."""
    error = body["result"]["error"]
    assert error["code"] == "NODE_FAILED", body
    assert error["node"] == "read", body
    message: str = error["message"]
    return message


# --- the budgets ------------------------------------------------------------------------------


async def test_a_docx_bomb_under_the_zip_limits_fails_and_the_server_stays_well(
    shaped_api: Api,
) -> None:
    api = shaped_api
    # The attack: 1.4 MB, 262 MB of document.xml at under 200:1 (6.4 GB RSS for one file).
    bomb = empty_paragraphs_docx(262_000_000)
    assert len(bomb) < 2 * MIB

    async with healthz_stays_responsive(api.client):
        with peak_rss_growth() as growth:
            failed = await process(api, bomb, "bomb.docx")
    assert growth.mib < RSS_BOUND_MIB, growth

    await assert_failed_cleanly(
        api, failed, f"looks like a zip bomb: its XML holds more than {MAX_XML_TAGS:,} tags"
    )
    assert failed["sha256"] is not None  # downloaded and hashed; refused while inflating
    done = await process_fixture(api, "report.docx")
    assert done["processing"]["status"] == "done", done


async def test_a_text_file_far_over_the_text_budget_fails(api: Api) -> None:
    # The attack: a 60 MB txt, under the 64 MiB read limit (20 minutes of embedding).
    text = b"ledger entry reconciled against invoice\n" * (60_000_000 // 40)
    assert len(text) > MAX_TEXT_CHARS

    async with healthz_stays_responsive(api.client):
        with peak_rss_growth() as growth:
            failed = await process(api, text, "ledger.txt")
    assert growth.mib < RSS_BOUND_MIB, growth

    await assert_failed_cleanly(
        api, failed, f"more than {MAX_TEXT_CHARS:,} characters of text, more than one file"
    )


async def test_a_text_file_over_the_read_limit_fails_before_it_is_downloaded(api: Api) -> None:
    text = b"x" * (MAX_TEXT_FILE_BYTES + 1)

    async with healthz_stays_responsive(api.client):
        failed = await process(api, text, "huge.txt")

    await assert_failed_cleanly(api, failed, "the text file is larger than 64 MiB")
    assert "downloaded" not in failed["processing"]["steps"]


async def test_a_pdf_over_the_page_budget_fails(api: Api) -> None:
    pdf = blank_pdf(MAX_PAGES + 1)

    async with healthz_stays_responsive(api.client):
        with peak_rss_growth() as growth:
            failed = await process(api, pdf, "pages.pdf")
    assert growth.mib < RSS_BOUND_MIB, growth

    await assert_failed_cleanly(api, failed, f"the pdf has more than {MAX_PAGES:,} pages")


async def test_text_over_the_passage_budget_fails(api: Api) -> None:
    # CJK: a token a character, so 2.6 million characters (well within the text budget)
    # make more than MAX_CHUNKS passages.
    text = ("東京の図書館で本を読む。" * 220_000).encode()

    async with healthz_stays_responsive(api.client):
        failed = await process(api, text, "cjk.txt")

    await assert_failed_cleanly(api, failed, f"more than {MAX_CHUNKS:,} passages")


async def test_small_text_of_random_bytes_is_prepared_in_process_and_the_server_stays_well(
    api: Api,
) -> None:
    # The costliest input the in-process path takes (charset detection of noise, at the size
    # limit): prepared on a thread of the server, which keeps answering. Noise without the
    # control bytes text never holds: with them it is refused as binary before detection.
    printable = bytes(b + 64 if b < 32 and b not in (9, 10, 13) else b for b in range(256))
    noise = random.Random(7).randbytes(isolation.IN_PROCESS_BYTES).translate(printable)

    async with healthz_stays_responsive(api.client):
        record = await process(api, noise, "noise.txt")

    assert record["processing"]["status"] == "done", record
    assert record["processing"]["error"] is None


async def test_random_bytes_as_text_fail_as_binary_and_the_server_stays_well(
    api: Api,
) -> None:
    # Raw noise at the in-process size limit: refused from its first 8 KiB, never decoded.
    noise = random.Random(7).randbytes(isolation.IN_PROCESS_BYTES)

    async with healthz_stays_responsive(api.client):
        record = await process(api, noise, "noise.txt")

    assert record["processing"]["status"] == "failed", record
    assert record["processing"]["error"] == "not a text file: its bytes are binary, not characters"


async def test_a_parse_over_the_memory_budget_ends_only_its_child(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A million empty paragraphs: within every XML budget, about 150 MB to parse.
    heavy = empty_paragraphs_docx(6_000_000)
    monkeypatch.setattr(isolation, "CHILD_MEMORY_BYTES", 64 * MIB)

    async with healthz_stays_responsive(api.client):
        with peak_rss_growth() as growth:
            failed = await process(api, heavy, "heavy.docx")
    assert growth.mib < RSS_BOUND_MIB, growth

    await assert_failed_cleanly(api, failed, "needs more than 64 MiB of memory")
    done = await process_fixture(api, "report.docx")
    assert done["processing"]["status"] == "done", done


async def test_preparing_past_the_time_budget_fails_and_its_child_is_killed(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow = empty_paragraphs_docx(6_000_000)  # seconds of parsing
    monkeypatch.setattr(isolation, "EXTRACTION_SECONDS", 0.5)

    async with healthz_stays_responsive(api.client):
        failed = await process(api, slow, "slow.docx")

    await assert_failed_cleanly(api, failed, "preparing the file took longer than 0.5 s")
    assert preparing_children() == []


async def test_processing_past_its_time_budget_fails(
    shaped_api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = shaped_api
    file_id, _held = await finalize_held(api, "report.docx")
    context, _storage = gated_context(api, lambda key: True)  # the download never ends
    monkeypatch.setattr(pipeline, "PROCESSING_SECONDS", 0.3)

    await process_file(context, file_id)

    failed = await get_record(api, file_id)
    await assert_failed_cleanly(api, failed, "processing took longer than 0.3 s")


# --- crashes ----------------------------------------------------------------------------------


async def test_a_child_that_dies_is_a_crash_and_its_file_is_tried_again(api: Api) -> None:
    file_id, _held = await finalize_bytes_held(api, empty_paragraphs_docx(6_000_000), "slow.docx")
    job = asyncio.create_task(process_file({**job_context(api), "job_try": 1}, file_id))

    deadline = time.monotonic() + 30
    while not (children := preparing_children()):
        assert time.monotonic() < deadline, "no child started"
        await asyncio.sleep(0.01)
    os.kill(children[0], signal.SIGKILL)  # as the kernel's OOM killer would
    with pytest.raises(Retry):
        await job

    waiting = await get_record(api, file_id)
    assert waiting["processing"]["status"] == "pending", waiting
    assert waiting["processing"]["error"] is None
    assert waiting["updating"] is True
    assert (await LibraryFile.get(id=file_id)).attempts == 1
    done = await process_fixture(api, "report.docx")  # the server goes on
    assert done["processing"]["status"] == "done", done


async def test_a_file_that_crashed_three_times_fails_and_stays_failed_after_a_restart(
    api: Api, start_app: ClientFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def crash(*args: Any, **kwargs: Any) -> None:
        raise ChildCrashed("the process preparing the file was killed by SIGSEGV")

    monkeypatch.setattr(pipeline, "prepare", crash)
    file_id, _held = await finalize_held(api, "report.docx")
    for job_try in (1, 2):
        with pytest.raises(Retry):
            await process_file({**job_context(api), "job_try": job_try}, file_id)
    await process_file({**job_context(api), "job_try": 3}, file_id)

    failed = await get_record(api, file_id)
    assert failed["processing"]["status"] == "failed", failed
    assert "processing crashed 3 times" in failed["processing"]["error"]
    assert failed["updating"] is None

    assert api.client.app is not None
    await api.client.close()
    client = await start_app(api.client.app[appkeys.SETTINGS])
    restarted = Api(client, api.shape, api.project_id, api.api_key)
    await restarted.run_jobs()
    after = await get_record(restarted, file_id)
    assert after["processing"] == failed["processing"]
    assert (await LibraryFile.get(id=file_id)).attempts == 3


# --- leases -----------------------------------------------------------------------------------


async def test_a_running_job_heartbeats_and_recovery_leaves_it_alone(
    shaped_api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = shaped_api
    monkeypatch.setattr(pipeline, "HEARTBEAT_SECONDS", 0.05)
    file_id, _held = await finalize_held(api, "report.docx")
    context, storage = gated_context(api, lambda key: True)
    job = asyncio.create_task(process_file(context, file_id))
    await eventually(lambda: bool(storage.waiting), "the job is downloading")

    # A job running for an hour, as far as its record's age says.
    an_hour_ago = utcnow() - timedelta(hours=1)
    await LibraryFile.filter(id=file_id).update(updated_at=an_hour_ago)
    deadline = time.monotonic() + 10
    while (await LibraryFile.get(id=file_id)).updated_at <= an_hour_ago:
        assert time.monotonic() < deadline, "no heartbeat"
        await asyncio.sleep(0.02)

    assert await recover_stuck_files(job_context(api)) == 0
    storage.gate.set()
    await job

    done = await get_record(api, file_id)
    assert done["processing"]["status"] == "done", done
    assert "requeued" not in done["processing"]["steps"]
    assert (await LibraryFile.get(id=file_id)).attempts == 1


async def test_a_job_whose_file_was_taken_over_stops_without_writing(shaped_api: Api) -> None:
    api = shaped_api
    file_id, _held = await finalize_held(api, "report.docx")
    context, storage = gated_context(api, lambda key: True)
    hung = asyncio.create_task(process_file(context, file_id))
    await eventually(lambda: bool(storage.waiting), "the job is downloading")
    # Its worker hangs for longer than the lease: recovery gives the file to another job.
    await LibraryFile.filter(id=file_id).update(updated_at=utcnow() - timedelta(hours=1))
    assert await recover_stuck_files(job_context(api)) == 1
    done = await wait_until_processed(api, file_id)
    assert done["processing"]["status"] == "done", done

    storage.gate.set()
    await hung  # it finds its lease gone at its next write, and stops

    after = await get_record(api, file_id)
    assert after["processing"] == done["processing"]
    assert after["sha256"] == done["sha256"]
    assert (await LibraryFile.get(id=file_id)).attempts == 2


# --- lanes ------------------------------------------------------------------------------------


async def test_large_files_do_not_starve_deliveries_or_small_files(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pipeline, "LARGE_DOCUMENT_BYTES", 10_000)  # report.pdf: 21 KB
    context = job_context(api)
    resources = context[RESOURCES]
    assert isinstance(resources, Resources)
    storage = GatedStorage(resources.storage, lambda key: key.endswith(".pdf"))
    context[RESOURCES] = replace(resources, storage=storage)
    webhook = await create_webhook(api)

    # More large files than the queue has slots in any lane, all held mid-download.
    large = [(await api.upload(fixture_bytes("report.pdf")))["id"] for _ in range(5)]
    await eventually(lambda: len(storage.waiting) == 1, "a large file is downloading")
    small = await api.upload(
        b"a small note about a lilac narwhal\n", name="note.txt", file_type="txt"
    )
    body = b'{"type": "order.paid"}'
    response = await deliver(
        api, webhook["webhookId"], body, standard_headers(webhook["secret"], body)
    )
    assert response.status == 200

    deadline = time.monotonic() + 30
    while (await get_record(api, small["id"]))["updating"] is not None or [
        d["status"] for d in await deliveries_of(api, webhook["webhookId"])
    ] != ["succeeded"]:
        assert time.monotonic() < deadline, "the small file or the delivery waited"
        await asyncio.sleep(0.05)
    assert (await get_record(api, small["id"]))["processing"]["status"] == "done"
    statuses = [(await get_record(api, file_id))["processing"]["status"] for file_id in large]
    assert sorted(statuses) == ["pending"] * 4 + ["processing"]  # one large file at a time

    storage.gate.set()
    for file_id in large:
        record = await wait_until_processed(api, file_id)
        assert record["processing"]["status"] == "done", record


# --- library_file_text ------------------------------------------------------------------------


async def test_library_file_text_reads_the_stored_text_and_never_extracts(
    shaped_api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = shaped_api
    record = await process_fixture(api, "report.docx")

    def no_extraction(*args: Any) -> None:
        raise AssertionError("text extracted in the API process")

    monkeypatch.setattr(extract, "extract_text", no_extraction)
    status, body = await file_text_run(api, record["id"])

    assert status == 200, body
    outputs = body["result"]["outputs"]
    assert "zephyr quokka alignment" in outputs["text"]
    assert "Header velvet heron almanac" in outputs["text"]  # headers are text too
    assert outputs["name"] == "report.docx"
    assert outputs["type"] == record["mimeType"]


async def test_library_file_text_answers_at_most_its_budget(api: Api) -> None:
    text = "x" * (MAX_FILE_TEXT_CHARS + 500_000)
    record = await process(api, text.encode(), "long.txt")
    assert record["processing"]["status"] == "done", record

    status, body = await file_text_run(api, record["id"])

    assert status == 200, body
    assert body["result"]["outputs"]["text"] == "x" * MAX_FILE_TEXT_CHARS


async def test_a_file_processed_before_texts_were_stored_answers_from_its_passages(
    shaped_api: Api,
) -> None:
    api = shaped_api
    words = [f"w{n:04}" for n in range(3_000)]  # a token each: passages overlap by 50
    record = await process(api, " ".join(words).encode(), "words.txt")
    assert await Chunk.filter(file_id=record["id"]).count() > 1
    await storage_of(api).delete(text_key(api.project_id, record["id"]))  # as before

    status, body = await file_text_run(api, record["id"])

    assert status == 200, body
    assert body["result"]["outputs"]["text"].split() == words


async def test_library_file_text_of_a_legacy_unindexed_file_is_not_ready(api: Api) -> None:
    record = await process_fixture(api, "report.docx", prevent_search=True)
    await storage_of(api).delete(text_key(api.project_id, record["id"]))

    status, body = await file_text_run(api, record["id"])

    assert status == 500, body
    assert "processed before libflow kept extracted text" in node_failure(body)


async def test_library_file_text_of_a_file_being_processed_is_not_ready(api: Api) -> None:
    file_id, _held = await finalize_held(api, "report.docx")

    status, body = await file_text_run(api, file_id)

    assert status == 500, body
    assert "not extracted yet" in node_failure(body)


async def test_library_file_text_of_a_failed_file_says_why(api: Api) -> None:
    record = await process_fixture(api, "corrupt.docx")

    status, body = await file_text_run(api, record["id"])

    assert status == 500, body
    assert node_failure(body) == "the text of 'corrupt.docx' cannot be read: not a valid docx file"


async def test_library_file_text_while_storage_is_down_is_unavailable(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = await process_fixture(api, "report.docx")

    async def broken(key: str, chunk_size: int = MIB) -> AsyncIterator[bytes]:
        raise StorageError(f"reading {key!r} failed: connection refused")
        yield b""

    monkeypatch.setattr(storage_of(api), "read", broken)
    status, body = await file_text_run(api, record["id"])

    assert status == 500, body
    assert "storage is unavailable" in node_failure(body)
