"""Records as the public API shows them: camelCase JSON."""

from __future__ import annotations

from typing import Any

from libflow.db.fast_reads import FileRecord
from libflow.ids import iso
from libflow.json_text import RawJson
from libflow.models import Folder, LibraryFile


def folder_json(folder: Folder) -> dict[str, Any]:
    """A folder record."""
    return {
        "id": folder.id,
        "name": folder.name,
        "parent": folder.parent_id or "root",
        "createdDate": iso(folder.created_at),
        "updatedDate": iso(folder.updated_at),
    }


def file_json(file: LibraryFile | FileRecord) -> dict[str, Any]:
    """Exactly the fields of the spec's library file record."""
    return {
        "id": file.id,
        "name": file.name,
        "type": file.mime_type,
        "size": file.size,
        "dir": file.folder_id or "root",
        "createdDate": iso(file.created_at),
        "updatedDate": iso(file.updated_at),
        "uploaderName": file.uploader_name,
        "uploaderEmail": file.uploader_email,
        "updating": True if file.updating else None,
    }


def file_detail_json(file: LibraryFile | FileRecord) -> dict[str, Any]:
    """The record plus what get-one adds: path, processing state, hashes."""
    if isinstance(file, LibraryFile):
        file = FileRecord.of(file)
    return {
        **file_json(file),
        "path": file.storage_key,
        "mimeType": file.mime_type,
        "searchable": file.indexed and not file.prevent_search,
        "thumbnail": file.thumbnail_key is not None,
        "sha256": file.sha256,
        "metadata": RawJson(file.metadata_json),
        "processing": {
            "status": file.status,
            "error": file.error,
            "steps": RawJson(file.steps_json),
            "pages": file.pages,
            "chunks": file.chunks,
            "ocrPages": file.ocr_pages,
            "warning": file.warning,
        },
    }
