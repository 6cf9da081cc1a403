"""Processing a finalized file: download, extract, chunk, embed, index, thumbnail; and recovery.

The job functions in ``workers.library`` call these. The CPU-bound steps run in a child
process under the file's budgets, small plain text on a thread (``isolation``); the job
holds a lease on its file (its ``updated_at``, refreshed every HEARTBEAT_SECONDS, with
``attempts`` as the fencing token), so recovery never hands a running file to a second job.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import tempfile
from collections import Counter
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

from arq.worker import Retry

from libflow.ids import iso, utcnow
from libflow.jobs import Job, JobQueue, Lane
from libflow.library.embeddings.interface import (
    ESTIMATED_SIZING,
    Embedder,
    EmbeddingError,
    PassageSizing,
)
from libflow.library.file_objects import delete_objects
from libflow.library.filetypes import DOCUMENT_TYPES, TEXT_TYPES
from libflow.library.processing.budgets import (
    HEARTBEAT_SECONDS,
    LARGE_DOCUMENT_BYTES,
    LOST_JOB_AFTER,
    MAX_TEXT_FILE_BYTES,
    MIB,
    PROCESSING_SECONDS,
    STUCK_AFTER,
    BudgetExceeded,
)
from libflow.library.processing.budgets import MAX_ATTEMPTS as MAX_ATTEMPTS
from libflow.library.processing.extracted import ExtractionError
from libflow.library.processing.isolation import (
    IN_PROCESS_BYTES,
    ChildCrashed,
    PreparationFailed,
    prepare,
    prepare_small_text,
    prepared_here,
)
from libflow.library.processing.prepare import Prepared
from libflow.library.processing.thumbnails import ThumbnailError
from libflow.library.search_index import remove_file_index, write_file_index
from libflow.models import LibraryFile, ProcessingStatus
from libflow.storage import Storage, StorageError, read_start
from libflow.storage.keys import text_key, thumbnail_key

logger = logging.getLogger("libflow.workers.files")

# arq's time limit of the job: the pipeline's own PROCESSING_SECONDS ends it first.
PROCESS_FILE_TIMEOUT = PROCESSING_SECONDS + 60
_RETRY_TRIES = 4
# Read whole as text: one over MAX_TEXT_FILE_BYTES is refused before it is downloaded.
_TEXT_FILE_TYPES = frozenset({"txt", "csv", "md", "html"})
TEXT_CONTENT_TYPE = "text/plain; charset=utf-8"
# The warning of a file done without any text to search (a scan without the `ocr` extra, or
# one where OCR found nothing, a photo, an empty document).
NO_TEXT = "NO_TEXT"

# Files this process is processing right now (and how many of its jobs are at each: two,
# briefly, when one took a file over from another): a second job for one of them (a
# start-up resume, a duplicate queue entry) leaves it alone.
_RUNNING_HERE: Counter[str] = Counter()


class _Failed(Exception):
    """Processing ends as failed with this user-facing message."""


class _LeaseLost(Exception):
    """Another job took the file over (this one's lease expired), or the file was deleted."""


def processing_lane(file_type: str, size: int) -> Lane:
    """The in-process lane a file's processing waits in: large documents have their own."""
    if file_type in DOCUMENT_TYPES and size >= LARGE_DOCUMENT_BYTES:
        return Lane.LARGE_FILES
    return Lane.FILES


async def lane_of_file(file_id: str) -> Lane:
    """processing_lane of a file queued by a caller that did not name the lane."""
    row = await LibraryFile.filter(id=file_id).first().values("file_type", "size")
    return Lane.FILES if row is None else processing_lane(row["file_type"], row["size"])


def _stamp(file: LibraryFile, *steps: str) -> None:
    """Time the named steps now; the next ``_save`` writes them (a step a few milliseconds
    before the next is not worth a write of its own)."""
    now = iso(utcnow()) or ""
    file.steps = {**file.steps, **dict.fromkeys(steps, now)}


async def _save(file: LibraryFile, *fields: str, **steps: bool) -> None:
    """Record progress (fields, a timestamp per named step), fenced by the file's lease.

    Only the job whose claim set ``attempts`` may write: _LeaseLost once another job has
    claimed the file (or it was deleted). The steps stamped since the last save go too.
    """
    if steps:
        _stamp(file, *steps)
    fields = (*fields, "steps")
    file.updated_at = utcnow()
    changes = {name: getattr(file, name) for name in (*fields, "updated_at")}
    if not await LibraryFile.filter(id=file.id, attempts=file.attempts).update(**changes):
        raise _LeaseLost(file.id)


@contextlib.asynccontextmanager
async def _heartbeat(file: LibraryFile) -> AsyncIterator[None]:
    """Refresh the file's lease every HEARTBEAT_SECONDS while the block runs."""

    async def beat() -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_SECONDS)
            try:
                await _save(file)
            except _LeaseLost:
                return  # the pipeline's next save finds out too, and stops
            except Exception as err:
                # The database is away for a moment: the lease has STUCK_AFTER to spare.
                logger.warning("file %s: heartbeat failed: %r", file.id, err)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        await asyncio.wait([task])  # unlike awaiting it, never swallows our own cancellation


async def _download(storage: Storage, key: str, target: Path) -> tuple[str, int]:
    """Stream the object to a local file; its sha256 and size."""
    digest = hashlib.sha256()
    size = 0
    out = await asyncio.to_thread(target.open, "wb")
    try:
        async for chunk in storage.read(key):
            digest.update(chunk)
            size += len(chunk)
            await asyncio.to_thread(out.write, chunk)
    finally:
        out.close()
    return digest.hexdigest(), size


async def process_file(
    file_id: str,
    *,
    storage: Storage,
    embedder: Embedder | None,
    job_try: int,
    sole_runner: bool = False,
) -> None:
    """Download, extract, chunk, embed, index and thumbnail one finalized file.

    ``sole_runner``: no other process runs jobs (the embedded server), so a file left
    "processing" by no job of this process lost its job, however fresh its lease.
    Raises arq's Retry (both job shapes honour it) after a transient fault or a crash.
    """
    file = await _claim(file_id, sole_runner=sole_runner)
    if file is None:
        return
    _RUNNING_HERE[file.id] += 1
    try:
        async with _heartbeat(file):
            await _process_claimed(file, storage, embedder, job_try)
    except _LeaseLost:
        if await LibraryFile.exists(id=file.id):
            logger.warning("file %s: another job took it over; this one stops", file_id)
        else:
            # Deleted while this job ran: what the job stored after the delete removed
            # the file's objects (its text, its thumbnail) would be kept by nothing.
            await delete_objects(
                storage,
                file.id,
                (text_key(file.project_id, file.id), thumbnail_key(file.project_id, file.id)),
            )
    finally:
        _RUNNING_HERE[file.id] -= 1
        if _RUNNING_HERE[file.id] <= 0:
            del _RUNNING_HERE[file.id]


async def _claim(file_id: str, *, sole_runner: bool) -> LibraryFile | None:
    """Take the file for this job (attempts + 1), or None when it is not this job's to do."""
    file = await LibraryFile.get_or_none(id=file_id)
    if file is None or file.finalized_at is None:
        return None  # deleted, or never finalized
    if file.status in (ProcessingStatus.DONE, ProcessingStatus.FAILED):
        return None  # processed already: a finalize of a failed file resets it to pending
    if file.status == ProcessingStatus.PROCESSING:
        if file.id in _RUNNING_HERE:
            return None  # a job of this process is at it
        if not sole_runner and file.updated_at > utcnow() - STUCK_AFTER:
            return None  # a job of another worker holds a live lease on it
        if round_attempts(file) >= MAX_ATTEMPTS:
            # Each earlier attempt died with its worker (a start-up or a redelivery brings it
            # back): the file itself may be what kills workers, so it is not tried again.
            with contextlib.suppress(_LeaseLost):
                await _finish(file, error=_interrupted(round_attempts(file)))
            return None
    now = utcnow()
    steps = {**file.steps, "started": iso(now) or ""}
    claimed = await LibraryFile.filter(
        id=file.id, status=file.status, attempts=file.attempts
    ).update(
        status=ProcessingStatus.PROCESSING, attempts=file.attempts + 1, steps=steps, updated_at=now
    )
    if not claimed:
        return None  # another job claimed it first
    file.status = ProcessingStatus.PROCESSING
    file.attempts += 1
    file.steps = steps
    file.updated_at = now
    return file


async def _process_claimed(
    file: LibraryFile, storage: Storage, embedder: Embedder | None, job_try: int
) -> None:
    """Run the pipeline within its time budget and record how it ended."""
    try:
        async with asyncio.timeout(PROCESSING_SECONDS) as clock:
            await _run_pipeline(file, storage, embedder)
    except TimeoutError as err:
        if clock.expired():
            await _fail(file, storage, f"processing took longer than {PROCESSING_SECONDS} s")
            return
        logger.exception("file %s: processing failed", file.id)
        await _fail(file, storage, f"processing failed unexpectedly ({type(err).__name__})")
        return
    except (_Failed, BudgetExceeded) as err:
        await _fail(file, storage, str(err))
        return
    except ChildCrashed as err:
        if round_attempts(file) >= MAX_ATTEMPTS:
            await _fail(file, storage, f"processing crashed {round_attempts(file)} times ({err})")
            return
        logger.warning("file %s: processing crashed, trying again: %s", file.id, err)
        await _back_to_pending(file)
        raise Retry(defer=job_try * 5) from err
    except (StorageError, EmbeddingError) as err:
        transient = getattr(err, "transient", True)
        if transient and job_try < _RETRY_TRIES:
            logger.warning("file %s: transient error, retrying: %s", file.id, err)
            await _back_to_pending(file)
            raise Retry(defer=job_try * 5) from err
        await _fail(file, storage, f"processing failed: {err}")
        return
    except _LeaseLost:
        raise
    except Exception as err:
        logger.exception("file %s: processing failed", file.id)
        await _fail(file, storage, f"processing failed unexpectedly ({type(err).__name__})")
        return
    await _finish(file, error=None)


async def _back_to_pending(file: LibraryFile) -> None:
    """Give the file back to the queue (a retry follows): pending, lease released."""
    file.status = ProcessingStatus.PENDING
    await _save(file, "status")


async def _run_pipeline(file: LibraryFile, storage: Storage, embedder: Embedder | None) -> None:
    document = file.file_type in TEXT_TYPES
    searchable = document and not file.prevent_search
    if file.file_type in _TEXT_FILE_TYPES and file.size > MAX_TEXT_FILE_BYTES:
        # Known from finalize: refused before a byte is downloaded.
        raise _Failed(
            f"the text file is larger than {MAX_TEXT_FILE_BYTES // MIB} MiB, too large to index"
        )
    sizing = ESTIMATED_SIZING if embedder is None else embedder.passage_sizing
    try:
        prepared = await _download_and_prepare(file, storage, chunk=searchable, sizing=sizing)
    except FileNotFoundError as err:
        raise _Failed("the stored object is gone") from err
    except (ExtractionError, ThumbnailError) as err:
        raise _Failed(str(err)) from err
    except PreparationFailed as err:
        raise _Failed(f"processing failed unexpectedly ({err})") from err
    if document:
        # Stored whole (within MAX_TEXT_CHARS) for library_file_text, which never extracts.
        text = (
            prepared.text.encode()  # a thread hop costs more than encoding a few KiB
            if len(prepared.text) <= IN_PROCESS_BYTES
            else await asyncio.to_thread(prepared.text.encode, "utf-8")
        )
        await storage.write(text_key(file.project_id, file.id), text, TEXT_CONTENT_TYPE)
    file.pages = prepared.pages
    file.chunks = len(prepared.chunks) if searchable else None
    file.ocr_pages = prepared.ocr_pages
    file.warning = NO_TEXT if document and not prepared.text.strip() else None
    await _save(file, "sha256", "size", "pages", "chunks", "ocr_pages", "warning", extracted=True)

    if searchable:
        vectors = None
        if embedder is not None and prepared.chunks:
            vectors = await embedder.embed([chunk.text for chunk in prepared.chunks])
            _stamp(file, "embedded")  # written with "indexed", a few milliseconds later
        await write_file_index(
            file, prepared.chunks, vectors, embedder.name if embedder is not None else None
        )
        file.indexed = True
        if prepared.thumbnail is None:
            _stamp(file, "indexed")  # the finish, next, writes both (one write fewer a file)
        else:
            await _save(file, "indexed", indexed=True)
    elif file.indexed:
        await remove_file_index(file.id, file.project_id)
        file.indexed = False
        await _save(file, "indexed")

    if prepared.thumbnail is not None:
        key = thumbnail_key(file.project_id, file.id)
        await storage.write(key, prepared.thumbnail, "image/webp")
        file.thumbnail_key = key
        await _save(file, "thumbnail_key", thumbnailed=True)


async def _download_and_prepare(
    file: LibraryFile, storage: Storage, *, chunk: bool, sizing: PassageSizing
) -> Prepared:
    """The file's bytes (their sha256 and size recorded) extracted, chunked, thumbnailed.

    Small plain text is read into memory and prepared from there; anything else is
    downloaded to a temporary directory, where a child process may prepare it.
    """
    if prepared_here(file.file_type, file.size):
        data = await _read_whole(storage, file.storage_key, IN_PROCESS_BYTES)
        if data is not None:
            file.sha256, file.size = hashlib.sha256(data).hexdigest(), len(data)
            _stamp(file, "downloaded")  # written with the next step, as below
            return await prepare_small_text(data, chunk=chunk, sizing=sizing)
    with tempfile.TemporaryDirectory(prefix="libflow-") as tmp:
        local = Path(tmp) / f"object.{file.file_type}"
        file.sha256, file.size = await _download(storage, file.storage_key, local)
        # Written with the next step: the download of a short file takes milliseconds.
        _stamp(file, "downloaded")
        return await prepare(
            local, file.file_type, size=file.size, chunk=chunk, work_dir=Path(tmp), sizing=sizing
        )


async def _read_whole(storage: Storage, key: str, limit: int) -> bytes | None:
    """The object's bytes, or None if it holds more than ``limit`` (sealed bytes never
    differ from the size recorded, which chose this way in: a guard, not a path)."""
    data = await read_start(storage, key, limit + 1)
    return None if len(data) > limit else data


async def _fail(file: LibraryFile, storage: Storage, error: str) -> None:
    """End as failed, without the stored text an earlier attempt may have left."""
    await _finish(file, error=error)
    if file.file_type in TEXT_TYPES:
        await delete_objects(storage, file.id, [text_key(file.project_id, file.id)])


async def _finish(file: LibraryFile, *, error: str | None) -> None:
    """End processing either way: ``updating`` is cleared so no file stays busy forever."""
    if error:
        # An interrupted earlier attempt may have indexed the file: a failed file is not
        # searchable, so those rows go too.
        await remove_file_index(file.id, file.project_id)
        file.indexed = False
        file.chunks = None
        file.warning = None  # the error says what went wrong
    file.status = ProcessingStatus.FAILED if error else ProcessingStatus.DONE
    file.error = error
    file.updating = False
    await _save(
        file,
        "status",
        "error",
        "updating",
        "indexed",
        "chunks",
        "warning",
        # What the download found, when preparing the file failed before its save.
        "sha256",
        "size",
        finished=True,
    )


def round_attempts(file: LibraryFile) -> int:
    """The file's attempts since its round of processing began (a finalize, a reprocess)."""
    return file.attempts - file.attempts_before


def _interrupted(attempts: int) -> str:
    """The error of a file whose processing died with its worker too many times."""
    return f"processing was interrupted {attempts} times; giving up"


async def recover_stuck_files(jobs: JobQueue, stuck_after: float | None = None) -> int:
    """Re-queue files whose job was lost (a worker died); fail them after MAX_ATTEMPTS.

    A file "processing" is stuck once its lease is STUCK_AFTER old (a running job refreshes
    it every HEARTBEAT_SECONDS), one "pending" once LOST_JOB_AFTER passed without a job
    taking it; ``stuck_after`` (seconds) stands for both.
    """
    now = utcnow()
    leases = now - (timedelta(seconds=stuck_after) if stuck_after else STUCK_AFTER)
    queued = now - (timedelta(seconds=stuck_after) if stuck_after else LOST_JOB_AFTER)
    stuck = await LibraryFile.filter(
        finalized_at__isnull=False, status=ProcessingStatus.PROCESSING, updated_at__lt=leases
    ) + await LibraryFile.filter(
        finalized_at__isnull=False, status=ProcessingStatus.PENDING, updated_at__lt=queued
    )
    recovered = 0
    for file in stuck:
        cutoff = leases if file.status == ProcessingStatus.PROCESSING else queued
        if round_attempts(file) >= MAX_ATTEMPTS:
            with contextlib.suppress(_LeaseLost):
                await _finish(file, error=_interrupted(round_attempts(file)))
                recovered += 1
            continue
        stamp = iso(utcnow()) or ""
        changes: dict[str, Any] = {
            "status": ProcessingStatus.PENDING,
            "steps": {**file.steps, "requeued": stamp},
            "updated_at": utcnow(),
        }
        # Only if no heartbeat came in meanwhile: a live job keeps its file.
        if not await LibraryFile.filter(
            id=file.id, status=file.status, attempts=file.attempts, updated_at__lt=cutoff
        ).update(**changes):
            continue
        recovered += 1
        # A fresh job id: arq keeps finished jobs' ids and would skip a reused one.
        await jobs.enqueue(
            Job.PROCESS_FILE, file.id, job_id=f"process_file:{file.id}:recover:{stamp}"
        )
    if recovered:
        logger.info("re-queued or failed %d stuck files", recovered)
    return recovered
