"""Jobs of the file library: process a finalized upload, sweep abandoned records."""

from __future__ import annotations

import hashlib
import logging
from datetime import timedelta
from typing import Any

from arq.worker import Retry

from libflow.ids import iso, utcnow
from libflow.models import LibraryFile, ProcessingStatus
from libflow.storage import StorageError
from workers.context import job_resources

logger = logging.getLogger("libflow.workers.files")

ABANDONED_AFTER = timedelta(hours=24)
_RETRY_TRIES = 4


async def process_file(ctx: dict[str, Any], file_id: str) -> None:
    """Read the stored object, record its sha256, and mark the file processed."""
    resources = job_resources(ctx)
    file = await LibraryFile.get_or_none(id=file_id)
    if file is None or file.finalized_at is None or file.status == ProcessingStatus.DONE:
        return  # deleted, never finalized, or already processed: nothing to do
    file.status = ProcessingStatus.PROCESSING
    file.attempts += 1
    file.steps = {**file.steps, "started": iso(utcnow()) or ""}
    await file.save(update_fields=["status", "attempts", "steps", "updated_at"])
    try:
        sha256 = hashlib.sha256()
        size = 0
        async for chunk in resources.storage.read(file.storage_key):
            sha256.update(chunk)
            size += len(chunk)
    except FileNotFoundError:
        await _finish(file, error="the stored object is gone")
        return
    except StorageError as err:
        job_try = int(ctx.get("job_try", 1))
        if job_try < _RETRY_TRIES:
            logger.warning("file %s: storage error, retrying: %s", file_id, err)
            raise Retry(defer=job_try * 5) from err
        await _finish(file, error=f"could not read the stored object: {err}")
        return
    except Exception as err:
        logger.exception("file %s: processing failed", file_id)
        await _finish(file, error=f"processing failed: {type(err).__name__}")
        return
    file.sha256 = sha256.hexdigest()
    file.size = size
    await _finish(file, error=None)


async def _finish(file: LibraryFile, *, error: str | None) -> None:
    """End processing either way: ``updating`` is cleared so no file stays busy forever."""
    file.status = ProcessingStatus.FAILED if error else ProcessingStatus.DONE
    file.error = error
    file.updating = False
    file.steps = {**file.steps, "finished": iso(utcnow()) or ""}
    await file.save(
        update_fields=["status", "error", "updating", "steps", "sha256", "size", "updated_at"]
    )


async def remove_abandoned_uploads(ctx: dict[str, Any]) -> int:
    """Delete records whose upload was never finalized within 24 hours, and their bytes."""
    resources = job_resources(ctx)
    cutoff = utcnow() - ABANDONED_AFTER
    abandoned = await LibraryFile.filter(finalized_at=None, created_at__lt=cutoff)
    for file in abandoned:
        await file.delete()
        try:
            await resources.storage.delete(file.storage_key)
        except StorageError:
            logger.warning("could not delete the object of abandoned file %s", file.id)
    if abandoned:
        logger.info("removed %d abandoned uploads", len(abandoned))
    return len(abandoned)
