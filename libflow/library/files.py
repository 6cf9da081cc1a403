"""Library files: create a record, finalize its upload, list, fetch, link and delete."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from libflow.db.fast_reads import AnyFolder, FastReads, FileRecord, FolderFilter
from libflow.errors import (
    ContentTypeMismatch,
    EmptyUpload,
    Forbidden,
    LibflowError,
    NotFound,
    NotReady,
    PayloadTooLarge,
    Unavailable,
    UploadIncomplete,
    ValidationFailed,
)
from libflow.ids import iso, new_id, utcnow
from libflow.jobs import Job, JobQueue
from libflow.library.file_objects import delete_objects
from libflow.library.filetypes import (
    DOCUMENT_TYPES,
    MIME_TYPES,
    normalize_file_type,
    same_content_type,
)
from libflow.library.folders import find_folder, into_folder
from libflow.library.processing.budgets import MAX_FILE_TEXT_CHARS
from libflow.library.processing.pipeline import processing_lane
from libflow.library.processing.stored_text import read_stored_text, text_from_passages
from libflow.library.search_index import remove_file_index
from libflow.library.vectors import MetadataValue
from libflow.models import LibraryFile, ProcessingStatus
from libflow.paging import decode_cursor, encode_cursor
from libflow.storage import ObjectInfo, Storage, StorageError
from libflow.storage.keys import DOCUMENT_KEY, document_key, text_key

logger = logging.getLogger("libflow.files")

ABANDONED_AFTER = timedelta(hours=24)


async def create_file_record(
    storage: Storage,
    *,
    project_id: str,
    name: str,
    file_type: str,
    folder_id: str,
    uploader_name: str | None,
    uploader_email: str | None,
    url_ttl: int,
    metadata: Mapping[str, MetadataValue] | None = None,
) -> tuple[LibraryFile, str]:
    """A new record (``updating``, size 0) and the signed URL its bytes go to."""
    file_type = normalize_file_type(file_type)
    folder = await find_folder(project_id, folder_id)
    file_id = new_id()
    key = document_key(project_id, file_id, file_type)
    mime_type = MIME_TYPES[file_type]
    upload_url = await storage.upload_url(storage.upload_key(key), mime_type, url_ttl)
    async with into_folder(folder_id):
        file = await LibraryFile.create(
            id=file_id,
            project_id=project_id,
            folder=folder,
            name=name,
            file_type=file_type,
            mime_type=mime_type,
            storage_key=key,
            uploader_name=uploader_name,
            uploader_email=uploader_email,
            metadata=dict(metadata or {}),
        )
    return file, upload_url


async def check_upload_open(key: str) -> None:
    """Refuse (FORBIDDEN) a PUT to the storageLink of a file finalized or deleted."""
    file = await LibraryFile.get_or_none(storage_key=key).only("id", "finalized_at")
    if file is None:
        raise Forbidden("this storageLink is dead: its file was deleted")
    if file.finalized_at is not None:
        raise Forbidden("this storageLink is dead: the upload was finalized")


async def upload_still_wanted(key: str) -> bool:
    """Whether a record still owns ``key`` (an upload that raced a delete is discarded)."""
    return await LibraryFile.exists(storage_key=key)


async def _file_at_path(reads: FastReads, project_id: str, path: str) -> LibraryFile:
    match = DOCUMENT_KEY.fullmatch(path)
    if match is None:
        raise ValidationFailed(
            "path must be the value returned when the record was created",
            details=[{"field": "path", "problem": "not a libraryDocuments path"}],
        )
    if match.group(1) != project_id:
        raise NotFound(f"no file at path {path!r} in this project")
    file = await reads.file_at_key(project_id, path)
    if file is None:
        raise NotFound(f"no file at path {path!r} in this project")
    return file


async def finalize_upload(
    storage: Storage,
    jobs: JobQueue,
    reads: FastReads,
    *,
    project_id: str,
    path: str,
    prevent_search: bool,
    max_bytes: int,
) -> LibraryFile:
    """Check the uploaded bytes, seal them, record their size, and queue processing once.

    ``max_bytes`` is the server's upload limit: the local storage refuses a larger PUT
    itself, an S3 storageLink takes any size (a presigned PUT cannot bound it), so
    finalize refuses what is over it.

    Sealing makes the bytes immutable: whatever the storageLink receives afterwards, the
    object served and processed stays the one whose size (and later sha256) is recorded.
    """
    file = await _file_at_path(reads, project_id, path)
    if file.finalized_at is not None and file.status != ProcessingStatus.FAILED:
        return file  # already finalized: idempotent
    info = await _uploaded(storage, file.storage_key)
    _check_uploaded(info, file, max_bytes)
    now = utcnow()
    changes: dict[str, Any] = {
        "finalized_at": now,
        "size": info.size,
        "sha256": None,  # until processing hashes the sealed bytes
        "prevent_search": prevent_search,
        "status": ProcessingStatus.PENDING,
        "error": None,
        "updating": True,
        "steps": {"queued": iso(now)},
        "updated_at": now,
        "attempts_before": file.attempts,  # a new round: the limits count from here
    }
    # A conditional update claims the transition, so concurrent calls seal and enqueue once.
    if file.finalized_at is None:
        claimed = await LibraryFile.filter(id=file.id, finalized_at=None).update(**changes)
    else:
        claimed = await LibraryFile.filter(id=file.id, status=ProcessingStatus.FAILED).update(
            **changes
        )
    if claimed:
        try:
            sealed = await _seal(storage, file, max_bytes)
            if sealed.size != changes["size"]:
                # A PUT landed between the check and the seal: the sealed bytes are the truth.
                await LibraryFile.filter(id=file.id).update(size=sealed.size)
            await jobs.enqueue(
                Job.PROCESS_FILE,
                file.id,
                job_id=f"process_file:{file.id}:{file.attempts}",
                lane=processing_lane(file.file_type, sealed.size),
            )
        except LibflowError:
            await LibraryFile.filter(id=file.id).update(**{f: getattr(file, f) for f in changes})
            raise
    finalized = await reads.file(project_id, file.id)
    if finalized is None:
        raise NotFound(f"no file at path {path!r} in this project")  # deleted meanwhile
    return finalized


async def _uploaded(storage: Storage, key: str) -> ObjectInfo:
    """What finalize would seal: the object at ``key`` if sealed already, else the upload."""
    try:
        info = await storage.head(key)
        staged = storage.upload_key(key)
        if info is None and staged != key:
            info = await storage.head(staged)
    except StorageError as err:
        raise Unavailable("storage is unavailable, retry later") from err
    if info is None:
        raise UploadIncomplete("no bytes were uploaded for this file yet: PUT them to storageLink")
    return info


def _check_uploaded(info: ObjectInfo, file: LibraryFile, max_bytes: int) -> None:
    """Refuse bytes that are not the file the record describes, or over the limit."""
    if info.size == 0:
        raise EmptyUpload("the uploaded file is empty")
    if info.size > max_bytes:
        raise PayloadTooLarge(
            f"the uploaded file is {info.size} bytes, over this server's limit of {max_bytes} "
            "(LIBFLOW_MAX_UPLOAD_BYTES)"
        )
    if not same_content_type(info.content_type, file.mime_type):
        raise ContentTypeMismatch(
            f"the bytes were uploaded as {info.content_type!r}, not {file.mime_type!r}: "
            "PUT them again with the mimeType returned at creation"
        )
    if (info.content_encoding or "identity").lower() != "identity":
        # The stored bytes would be the encoded ones: processing and downloads need the file.
        raise ContentTypeMismatch(
            f"the bytes were uploaded with Content-Encoding {info.content_encoding!r}: "
            "PUT the file itself again, without a Content-Encoding"
        )


async def _seal(storage: Storage, file: LibraryFile, max_bytes: int) -> ObjectInfo:
    """Seal the upload of a claimed file; the sealed object must pass the same checks."""
    try:
        sealed = await storage.seal_upload(file.storage_key)
    except StorageError as err:
        raise Unavailable("storage is unavailable, retry later") from err
    if sealed is None:
        raise UploadIncomplete("the upload disappeared while it was finalized: PUT it again")
    try:
        _check_uploaded(sealed, file, max_bytes)
    except LibflowError:
        # What a racing PUT left is not servable: unseal it, so a new upload can be sealed.
        try:
            await storage.delete(file.storage_key)
        except StorageError as err:
            raise Unavailable("storage is unavailable, retry later") from err
        raise
    return sealed


async def list_files(
    reads: FastReads,
    project_id: str,
    *,
    folder_id: str | None,
    limit: int,
    cursor: str | None,
) -> tuple[list[FileRecord], str | None]:
    """One page of files, newest first, and the cursor of the next page if there is one."""
    folder: FolderFilter = AnyFolder.ANY
    if folder_id is not None:
        found = await find_folder(project_id, folder_id)
        folder = found.id if found else None
    after = decode_cursor(cursor) if cursor else None
    files = await reads.file_records_page(project_id, folder=folder, after=after, limit=limit + 1)
    if len(files) > limit:
        last = files[limit - 1]
        return files[:limit], encode_cursor(last.created_at, last.id)
    return files, None


async def get_file(reads: FastReads, project_id: str, file_id: str) -> LibraryFile:
    """One file of the project."""
    file = await reads.file(project_id, file_id)
    if file is None:
        raise NotFound(f"file {file_id!r} not found")
    return file


async def get_file_record(reads: FastReads, project_id: str, file_id: str) -> FileRecord:
    """One file of the project, as its record shows it (GET one)."""
    record = await reads.file_record(project_id, file_id)
    if record is None:
        raise NotFound(f"file {file_id!r} not found")
    return record


async def download_url(
    storage: Storage, reads: FastReads, project_id: str, file_id: str, ttl: int
) -> str:
    """A signed URL serving the file's bytes under its original name."""
    file = await get_file(reads, project_id, file_id)
    if file.finalized_at is None:
        raise NotReady("the upload of this file is not finalized yet")
    return await storage.download_url(
        file.storage_key, filename=file.name, content_type=file.mime_type, expires_in=ttl
    )


async def thumbnail_url(
    storage: Storage, reads: FastReads, project_id: str, file_id: str, ttl: int
) -> str:
    """A signed URL of the file's WEBP thumbnail."""
    file = await get_file(reads, project_id, file_id)
    if file.thumbnail_key is None:
        raise NotFound("this file has no thumbnail (yet)")
    stem = file.name.rsplit(".", 1)[0] or "thumbnail"
    return await storage.download_url(
        file.thumbnail_key,
        filename=f"{stem}.webp",
        content_type="image/webp",
        expires_in=ttl,
        inline=True,
    )


async def delete_file(storage: Storage, reads: FastReads, project_id: str, file_id: str) -> None:
    """Remove the record first (the source of truth), then its bytes, thumbnail and text."""
    file = await get_file(reads, project_id, file_id)
    await remove_file_index(file.id, project_id)
    await file.delete()
    # Each delete also removes what a storageLink may still have staged for its key.
    keys = (file.storage_key, file.thumbnail_key, text_key(project_id, file.id))
    await delete_objects(storage, file.id, keys)


async def file_text(
    storage: Storage, reads: FastReads, project_id: str, file_id: str
) -> dict[str, Any]:
    """The text processing stored for a document: ``{text, name, type}`` (workflow nodes).

    At most MAX_FILE_TEXT_CHARS, read from storage: nothing is extracted in the API process.
    A file processed before the text was stored answers from its indexed passages.
    """
    file = await get_file(reads, project_id, file_id)
    if file.file_type not in DOCUMENT_TYPES:
        raise ValidationFailed(f"file {file_id!r} is a {file.mime_type}, not a text document")
    if file.finalized_at is None:
        raise NotReady("the upload of this file is not finalized yet")
    if file.status == ProcessingStatus.FAILED:
        raise ValidationFailed(f"the text of {file.name!r} cannot be read: {file.error}")
    if file.status != ProcessingStatus.DONE:
        raise NotReady("the text of this file is not extracted yet: it is being processed")
    try:
        text = await read_stored_text(storage, project_id, file.id, limit=MAX_FILE_TEXT_CHARS)
    except StorageError as err:
        raise Unavailable("storage is unavailable, retry later") from err
    if text is None:
        if not file.indexed:
            raise NotReady(
                "this file was processed before libflow kept extracted text, and it is not "
                "indexed (preventSearch): upload it again to read its text"
            )
        text = await text_from_passages(file.id, limit=MAX_FILE_TEXT_CHARS)
    return {"text": text, "name": file.name, "type": file.mime_type}


async def remove_abandoned_uploads(storage: Storage) -> int:
    """Delete records whose upload was never finalized within 24 hours, and their bytes."""
    cutoff = utcnow() - ABANDONED_AFTER
    abandoned = await LibraryFile.filter(finalized_at=None, created_at__lt=cutoff)
    removed = 0
    for file in abandoned:
        # Still unfinalized: a finalize that came in since the list was read keeps its file.
        if not await LibraryFile.filter(id=file.id, finalized_at=None).delete():
            continue
        removed += 1
        try:
            await storage.delete(file.storage_key)
        except StorageError:
            logger.warning("could not delete the object of abandoned file %s", file.id)
    if removed:
        logger.info("removed %d abandoned uploads", removed)
    return removed
