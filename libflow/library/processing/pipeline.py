"""Processing a finalized file: download, extract, chunk, embed, index, thumbnail; and recovery.

The job functions in ``workers.library`` call these; the CPU-bound steps run off the loop.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import tempfile
from datetime import timedelta
from pathlib import Path

from arq.worker import Retry

from libflow.ids import iso, utcnow
from libflow.jobs import Job, JobQueue
from libflow.library.embeddings.interface import Embedder, EmbeddingError
from libflow.library.filetypes import DOCUMENT_TYPES
from libflow.library.processing.extract import ExtractionError
from libflow.library.processing.prepare import prepare_file
from libflow.library.processing.thumbnails import ThumbnailError
from libflow.library.search import remove_file_index, write_file_index
from libflow.models import LibraryFile, ProcessingStatus
from libflow.storage import Storage, StorageError
from libflow.storage.keys import thumbnail_key

logger = logging.getLogger("libflow.workers.files")

# Longer than a job may run (PROCESS_FILE_TIMEOUT): a file still "processing" after this
# lost its worker.
STUCK_AFTER = timedelta(minutes=20)
PROCESS_FILE_TIMEOUT = 15 * 60
MAX_ATTEMPTS = 3
_RETRY_TRIES = 4


class _Failed(Exception):
    """Processing ends as failed with this user-facing message."""


async def _save(file: LibraryFile, *fields: str, **steps: bool) -> None:
    """Record progress: the given fields plus a timestamp for each named step."""
    if steps:
        now = iso(utcnow()) or ""
        file.steps = {**file.steps, **dict.fromkeys(steps, now)}
        fields = (*fields, "steps")
    await file.save(update_fields=[*fields, "updated_at"])


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
    file_id: str, *, storage: Storage, embedder: Embedder | None, job_try: int
) -> None:
    """Download, extract, chunk, embed, index and thumbnail one finalized file.

    Raises arq's Retry (both job shapes honour it) after a transient fault.
    """
    file = await LibraryFile.get_or_none(id=file_id)
    if file is None or file.finalized_at is None or file.status == ProcessingStatus.DONE:
        return  # deleted, never finalized, or already processed: nothing to do
    if file.status == ProcessingStatus.PROCESSING and file.attempts >= MAX_ATTEMPTS:
        # Each earlier attempt died with its worker (a start-up or a redelivery brings it
        # back): the file itself may be what kills workers, so it is not tried again.
        await _finish(file, error=_interrupted(file.attempts))
        return
    file.status = ProcessingStatus.PROCESSING
    file.attempts += 1
    await _save(file, "status", "attempts", started=True)
    try:
        await _run_pipeline(file, storage, embedder)
    except _Failed as err:
        await _finish(file, error=str(err))
        return
    except (StorageError, EmbeddingError) as err:
        transient = getattr(err, "transient", True)
        if transient and job_try < _RETRY_TRIES:
            logger.warning("file %s: transient error, retrying: %s", file_id, err)
            file.status = ProcessingStatus.PENDING
            await _save(file, "status")
            raise Retry(defer=job_try * 5) from err
        await _finish(file, error=f"processing failed: {err}")
        return
    except Exception as err:
        logger.exception("file %s: processing failed", file_id)
        await _finish(file, error=f"processing failed unexpectedly ({type(err).__name__})")
        return
    await _finish(file, error=None)


async def _run_pipeline(file: LibraryFile, storage: Storage, embedder: Embedder | None) -> None:
    searchable = not file.prevent_search and file.file_type in DOCUMENT_TYPES
    with tempfile.TemporaryDirectory(prefix="libflow-") as tmp:
        local = Path(tmp) / f"object.{file.file_type}"
        try:
            file.sha256, file.size = await _download(storage, file.storage_key, local)
        except FileNotFoundError as err:
            raise _Failed("the stored object is gone") from err
        await _save(file, "sha256", "size", downloaded=True)
        try:
            prepared = await asyncio.to_thread(
                prepare_file, local, file.file_type, extract=searchable
            )
        except (ExtractionError, ThumbnailError) as err:
            raise _Failed(str(err)) from err
    file.pages = prepared.pages
    file.chunks = len(prepared.chunks) if searchable else None
    await _save(file, "pages", "chunks", extracted=True)

    if searchable:
        vectors = None
        if embedder is not None and prepared.chunks:
            vectors = await embedder.embed([chunk.text for chunk in prepared.chunks])
            await _save(file, embedded=True)
        await write_file_index(
            file, prepared.chunks, vectors, embedder.name if embedder is not None else None
        )
        file.indexed = True
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


async def _finish(file: LibraryFile, *, error: str | None) -> None:
    """End processing either way: ``updating`` is cleared so no file stays busy forever."""
    if error:
        # An interrupted earlier attempt may have indexed the file: a failed file is not
        # searchable, so those rows go too.
        await remove_file_index(file.id, file.project_id)
        file.indexed = False
        file.chunks = None
    file.status = ProcessingStatus.FAILED if error else ProcessingStatus.DONE
    file.error = error
    file.updating = False
    await _save(file, "status", "error", "updating", "indexed", "chunks", finished=True)


def _interrupted(attempts: int) -> str:
    """The error of a file whose processing died with its worker too many times."""
    return f"processing was interrupted {attempts} times; giving up"


async def recover_stuck_files(jobs: JobQueue, stuck_after: float | None = None) -> int:
    """Re-queue files whose processing was interrupted (a worker died); fail them after N tries."""
    cutoff = utcnow() - (timedelta(seconds=stuck_after) if stuck_after else STUCK_AFTER)
    stuck = await LibraryFile.filter(
        finalized_at__isnull=False,
        status__in=[ProcessingStatus.PROCESSING, ProcessingStatus.PENDING],
        updated_at__lt=cutoff,
    )
    for file in stuck:
        if file.attempts >= MAX_ATTEMPTS:
            await _finish(file, error=_interrupted(file.attempts))
            continue
        file.status = ProcessingStatus.PENDING
        await _save(file, "status", requeued=True)
        # A fresh job id: arq keeps finished jobs' ids and would skip a reused one.
        await jobs.enqueue(
            Job.PROCESS_FILE,
            file.id,
            job_id=f"process_file:{file.id}:recover:{file.steps['requeued']}",
        )
    if stuck:
        logger.info("re-queued or failed %d stuck files", len(stuck))
    return len(stuck)
