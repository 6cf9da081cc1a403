"""What text extraction yields, and the errors and text budget every reader shares."""

from __future__ import annotations

from dataclasses import dataclass

from libflow.library.processing.budgets import MAX_TEXT_CHARS, BudgetExceeded

# NUL and other C0 controls: PostgreSQL text refuses NUL, and none of them carry meaning.
_CONTROLS = dict.fromkeys([*range(0x00, 0x09), *range(0x0E, 0x20), 0x7F])


@dataclass(frozen=True, slots=True)
class Segment:
    """A run of text from one place: a pdf page, a slide, a sheet, or a whole document."""

    text: str
    # 1-based pdf page, pptx slide or xlsx sheet number; None for docx, txt, csv, md, html
    # and images.
    page: int | None
    page_name: str | None = None  # a page known by name rather than number: an xlsx sheet


@dataclass(frozen=True, slots=True)
class Extraction:
    """Every segment of a file, in reading order, its page count, and what OCR read."""

    segments: list[Segment]
    pages: int | None  # pdf pages, pptx slides or xlsx sheets; None otherwise
    # Pages (or the image) whose text OCR was asked for; None for types that never need
    # it, and when OCR is not installed.
    ocr_pages: int | None = None


class ExtractionError(Exception):
    """Corrupt, encrypted or hostile file; str(err) is a clear user-facing message."""


class TextBudget:
    """The characters extracted so far: the first ones past MAX_TEXT_CHARS stop extraction."""

    __slots__ = ("used",)

    def __init__(self) -> None:
        self.used = 0

    def take(self, text: str) -> str:
        """``text``, counted; BudgetExceeded once the file's text goes over the budget."""
        self.used += len(text)
        if self.used > MAX_TEXT_CHARS:
            raise BudgetExceeded(
                f"the file holds more than {MAX_TEXT_CHARS:,} characters of text, "
                "more than one file may index"
            )
        return text


def clean(text: str) -> str:
    """``text`` without control characters other than whitespace."""
    return text.translate(_CONTROLS)
