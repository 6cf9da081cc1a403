"""Where the library keeps each object in storage."""

from __future__ import annotations

import re

DOCUMENT_ROOT = "libraryDocuments"
THUMBNAIL_ROOT = "thumbnails"
DOCUMENT_KEY = re.compile(rf"{DOCUMENT_ROOT}/([A-Za-z0-9_-]+)/([A-Za-z0-9_-]+)\.([a-z]+)")


def document_key(project_id: str, file_id: str, file_type: str) -> str:
    """``libraryDocuments/<projectId>/<documentId>.<ext>``, the spec's ``path``."""
    return f"{DOCUMENT_ROOT}/{project_id}/{file_id}.{file_type}"


def thumbnail_key(project_id: str, file_id: str) -> str:
    """Where a file's WEBP thumbnail is stored."""
    return f"{THUMBNAIL_ROOT}/{project_id}/{file_id}.webp"


def text_key(project_id: str, file_id: str) -> str:
    """Where a document's extracted text is stored (UTF-8), for library_file_text."""
    return f"extractedText/{project_id}/{file_id}.txt"
