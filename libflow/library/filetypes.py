"""The file types the library accepts and the content type each is uploaded with."""

from __future__ import annotations

from libflow.errors import UnsupportedFileType

MIME_TYPES: dict[str, str] = {
    "pdf": "application/pdf",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    "txt": "text/plain",
    "csv": "text/csv",
    "md": "text/markdown",
    "html": "text/html",
    "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "png": "image/png",
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
    "gif": "image/gif",
    "webp": "image/webp",
}
DOCUMENT_TYPES = frozenset({"pdf", "docx", "pptx", "txt", "csv", "md", "html", "xlsx"})
IMAGE_TYPES = frozenset({"png", "jpg", "jpeg", "gif", "webp"})
# What processing extracts text from and indexes: documents, and images by OCR (their text
# is empty without the `ocr` extra, and the file is done with the warning NO_TEXT).
TEXT_TYPES = DOCUMENT_TYPES | IMAGE_TYPES
# Types whose text may need OCR: pdf pages without a text layer, and images.
OCR_TYPES = IMAGE_TYPES | {"pdf"}


def normalize_file_type(file_type: str) -> str:
    """The lower-case fileType, or UnsupportedFileType."""
    normalized = file_type.strip().lower().lstrip(".")
    if normalized not in MIME_TYPES:
        allowed = ", ".join(MIME_TYPES)
        raise UnsupportedFileType(f"fileType {file_type!r} is not supported; use one of: {allowed}")
    return normalized


def same_content_type(stored: str | None, expected: str) -> bool:
    """Compare media types, ignoring parameters such as ``; charset=utf-8`` and case."""
    if stored is None:
        return False
    return stored.split(";", 1)[0].strip().lower() == expected.lower()
