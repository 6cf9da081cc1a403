"""Changes to a file after its creation: its name, folder and metadata, and reprocessing."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from tortoise.transactions import in_transaction

from libflow.errors import LibflowError, NotFound, NotReady
from libflow.ids import iso, possible_id, utcnow
from libflow.jobs import Job, JobQueue
from libflow.library.folders import find_folder, into_folder
from libflow.library.search_index import bump_index_version
from libflow.library.vectors import MetadataValue
from libflow.models import Chunk, LibraryFile, ProcessingStatus

_FINISHED = (ProcessingStatus.DONE, ProcessingStatus.FAILED)


async def update_file(
    project_id: str,
    file_id: str,
    *,
    name: str | None = None,
    folder_id: str | None = None,
    metadata: Mapping[str, MetadataValue] | None = None,
) -> LibraryFile:
    """Rename, move or relabel a file (``metadata`` replaces the whole object).

    The index's copies (each chunk's folder and metadata) change in the same transaction,
    so a search after the answer filters on the new values.
    """
    file = await _project_file(project_id, file_id)
    changes: dict[str, Any] = {}
    if name is not None:
        changes["name"] = name
    if folder_id is not None:
        folder = await find_folder(project_id, folder_id)
        changes["folder_id"] = folder.id if folder else None
    if metadata is not None:
        changes["metadata"] = dict(metadata)
    if not changes:
        return file
    changes["updated_at"] = utcnow()
    index_changes = {k: v for k, v in changes.items() if k in ("folder_id", "metadata")}
    # Only a move can meet a folder removed meanwhile (its foreign key refuses it).
    moving = into_folder(folder_id) if folder_id is not None else contextlib.nullcontext()
    async with moving, in_transaction() as connection:
        if not await LibraryFile.filter(id=file.id).using_db(connection).update(**changes):
            raise NotFound(f"file {file_id!r} not found")  # deleted meanwhile
        if index_changes and await Chunk.filter(file_id=file.id).using_db(connection).update(
            **index_changes
        ):
            # The vector caches hold folders and metadata: they read this file's rows again.
            await bump_index_version(project_id, file.id, connection)
    updated = await LibraryFile.get_or_none(id=file.id)
    if updated is None:
        raise NotFound(f"file {file_id!r} not found")
    return updated


async def reprocess_file(jobs: JobQueue, project_id: str, file_id: str) -> LibraryFile:
    """Run a finalized file through processing again; its passages stay searchable meanwhile.

    A file not finalized is NOT_READY; one already pending or processing is left to the
    job it has (nothing new is queued).
    """
    file = await _project_file(project_id, file_id)
    if file.finalized_at is None:
        raise NotReady("the upload of this file is not finalized yet: finalize it first")
    if file.status not in _FINISHED:
        return file
    now = utcnow()
    stamp = iso(now) or ""
    changes: dict[str, Any] = {
        "status": ProcessingStatus.PENDING,
        "error": None,
        "updating": True,
        "steps": {"queued": stamp},
        "updated_at": now,
        "attempts_before": file.attempts,  # a new round: the limits count from here
    }
    # Conditional: of two concurrent calls, one claims the file and queues its job.
    if await LibraryFile.filter(id=file.id, status=file.status, attempts=file.attempts).update(
        **changes
    ):
        try:
            # A fresh job id: arq skips an id it already ran.
            await jobs.enqueue(
                Job.PROCESS_FILE, file.id, job_id=f"process_file:{file.id}:reprocess:{stamp}"
            )
        except LibflowError:
            await LibraryFile.filter(id=file.id).update(**{f: getattr(file, f) for f in changes})
            raise
    reprocessing = await LibraryFile.get_or_none(id=file.id)
    if reprocessing is None:
        raise NotFound(f"file {file_id!r} not found")  # deleted meanwhile
    return reprocessing


async def _project_file(project_id: str, file_id: str) -> LibraryFile:
    """The file ``file_id`` of the project; NotFound for any other id, one too long included."""
    file = (
        await LibraryFile.get_or_none(id=file_id, project_id=project_id)
        if possible_id(file_id)
        else None
    )
    if file is None:
        raise NotFound(f"file {file_id!r} not found")
    return file
