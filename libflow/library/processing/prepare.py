"""The CPU side of processing a file: extract, chunk, render a thumbnail (runs off the loop)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from libflow.library.filetypes import DOCUMENT_TYPES
from libflow.library.processing.chunking import Chunk, chunk_segments
from libflow.library.processing.extract import extract_text
from libflow.library.processing.thumbnails import THUMBNAIL_TYPES, render_thumbnail


@dataclass(frozen=True, slots=True)
class Prepared:
    """What a file yields: its passages (documents), page count, and thumbnail (images, pdf)."""

    chunks: list[Chunk]
    pages: int | None
    thumbnail: bytes | None


def prepare_file(path: Path, file_type: str, *, extract: bool) -> Prepared:
    """Extract and chunk the text (when ``extract``) and render the thumbnail of a local copy.

    Raises ExtractionError or ThumbnailError for a corrupt or hostile file.
    """
    chunks: list[Chunk] = []
    pages: int | None = None
    if extract and file_type in DOCUMENT_TYPES:
        extraction = extract_text(path, file_type)
        pages = extraction.pages
        chunks = chunk_segments(extraction.segments)
    thumbnail = render_thumbnail(path, file_type) if file_type in THUMBNAIL_TYPES else None
    return Prepared(chunks=chunks, pages=pages, thumbnail=thumbnail)
