"""Text extraction from a downloaded library file, by type (one module a reader).

Pure and synchronous: the worker runs it in a child process on a local temp file
(``isolation``). A corrupt, encrypted or hostile file raises `ExtractionError`, whose message
is shown to the user; anything else that escapes (a missing temp file, say) is the worker's
fault. Each reader applies its budgets (see ``budgets``) while it reads.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Final

from libflow.library.processing.budgets import MAX_TEXT_FILE_BYTES
from libflow.library.processing.extracted import (
    Extraction as Extraction,
)
from libflow.library.processing.extracted import (
    ExtractionError as ExtractionError,
)
from libflow.library.processing.extracted import (
    Segment as Segment,
)
from libflow.library.processing.extracted import (
    TextBudget,
    clean,
)
from libflow.library.processing.html_text import extract_html
from libflow.library.processing.ocr import extract_image
from libflow.library.processing.office import extract_docx, extract_pptx
from libflow.library.processing.pdf_text import extract_pdf
from libflow.library.processing.plain_text import decode_text as decode_text
from libflow.library.processing.plain_text import read_text_bytes, refuse_binary
from libflow.library.processing.spreadsheet import extract_xlsx

MAX_TEXT_BYTES = MAX_TEXT_FILE_BYTES  # the name tests and callers have known it by


def _extract_plain(path: Path, budget: TextBudget) -> Extraction:
    """txt, csv and md: the whole file, decoded, as one segment."""
    return extract_plain_bytes(read_text_bytes(path), budget)


def extract_plain_bytes(data: bytes, budget: TextBudget | None = None) -> Extraction:
    """The text of a txt, csv or md file already read whole (at most MAX_TEXT_FILE_BYTES)."""
    refuse_binary(data)
    text = (budget or TextBudget()).take(decode_text(data))
    return Extraction([Segment(clean(text), None)], None)


_READERS: Final[dict[str, Callable[[Path, TextBudget], Extraction]]] = {
    "pdf": extract_pdf,
    "docx": extract_docx,
    "pptx": extract_pptx,
    "xlsx": extract_xlsx,
    "html": extract_html,
    "txt": _extract_plain,
    "csv": _extract_plain,
    "md": _extract_plain,
    **dict.fromkeys(("png", "jpg", "jpeg", "gif", "webp"), extract_image),
}
FILE_TYPES: Final = frozenset(_READERS)


def extract_text(path: Path, file_type: str) -> Extraction:
    """The text of the file at ``path``, read as ``file_type`` (any of FILE_TYPES).

    Images (and pdf pages without a text layer) are read by OCR when the `ocr` extra is
    installed, and give empty text otherwise.
    """
    reader = _READERS.get(file_type)
    if reader is None:
        raise ValueError(f"no text extractor for file type {file_type!r}")
    return reader(path, TextBudget())
