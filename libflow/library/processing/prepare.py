"""The CPU side of processing a file: extract, chunk, render a thumbnail (in a child process).

``prepare_file`` is pure and synchronous; ``isolation.prepare_in_child`` runs it under the
file's memory and time budgets.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from libflow.library.embeddings.interface import ESTIMATED_SIZING, PassageSizing
from libflow.library.filetypes import IMAGE_TYPES, TEXT_TYPES
from libflow.library.processing.budgets import MAX_CHUNKS
from libflow.library.processing.chunking import Chunk, chunk_segments
from libflow.library.processing.extract import extract_plain_bytes, extract_text
from libflow.library.processing.extracted import Extraction
from libflow.library.processing.thumbnails import THUMBNAIL_TYPES, render_thumbnail


@dataclass(frozen=True, slots=True)
class Prepared:
    """What a file yields: its text and passages (documents), page count, thumbnail."""

    text: str  # every segment with text, in order, blank-line separated
    chunks: list[Chunk]
    pages: int | None
    thumbnail: bytes | None
    ocr_pages: int | None = None  # pages (or the image) OCR read


def prepare_file(
    path: Path, file_type: str, *, chunk: bool, sizing: PassageSizing = ESTIMATED_SIZING
) -> Prepared:
    """Extract a document's text (chunked when ``chunk``) and render the thumbnail.

    Raises ExtractionError, ThumbnailError or BudgetExceeded for a corrupt, hostile or
    over-budget file.
    """
    prepared = Prepared(text="", chunks=[], pages=None, thumbnail=None)
    # An image is decoded for its thumbnail first: a corrupt image or a pixel bomb fails
    # there, with the thumbnail's message, before OCR reads it.
    thumbnail = render_thumbnail(path, file_type) if file_type in IMAGE_TYPES else None
    if file_type in TEXT_TYPES:
        prepared = _of_extraction(extract_text(path, file_type), chunk, sizing)
    if file_type in THUMBNAIL_TYPES and file_type not in IMAGE_TYPES:
        thumbnail = render_thumbnail(path, file_type)
    return replace(prepared, thumbnail=thumbnail)


def prepare_plain_text(
    data: bytes, *, chunk: bool, sizing: PassageSizing = ESTIMATED_SIZING
) -> Prepared:
    """``prepare_file`` of a txt, csv or md file already read whole (no thumbnail)."""
    return _of_extraction(extract_plain_bytes(data), chunk, sizing)


def _of_extraction(extraction: Extraction, chunk: bool, sizing: PassageSizing) -> Prepared:
    """A document's text, and its passages when ``chunk``."""
    text = "\n\n".join(s.text for s in extraction.segments if s.text.strip())
    chunks = chunk_segments(extraction.segments, sizing, max_chunks=MAX_CHUNKS) if chunk else []
    return Prepared(
        text=text,
        chunks=chunks,
        pages=extraction.pages,
        thumbnail=None,
        ocr_pages=extraction.ocr_pages,
    )


def storable(prepared: Prepared) -> Prepared:
    """``prepared`` with its text and passages as UTF-8 can store them."""
    return replace(
        prepared,
        text=_storable_text(prepared.text),
        chunks=[replace(chunk, text=_storable_text(chunk.text)) for chunk in prepared.chunks],
    )


def _storable_text(text: str) -> str:
    """``text`` as UTF-8 can store it: a lone surrogate (a pdf's broken font map) becomes ?."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", errors="replace").decode("utf-8")
    return text
