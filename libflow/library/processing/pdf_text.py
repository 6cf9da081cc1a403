"""The text of a pdf, page by page (pypdfium2); pages without a text layer are read by OCR."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pypdfium2 as pdfium
from PIL import Image

from libflow.library.processing.budgets import (
    MAX_OCR_PAGES,
    MAX_PAGES,
    OCR_MAX_DPI,
    OCR_SIDE_PIXELS,
    BudgetExceeded,
)
from libflow.library.processing.extracted import (
    Extraction,
    ExtractionError,
    Segment,
    TextBudget,
    clean,
)
from libflow.library.processing.ocr import ocr_engine, read_text
from libflow.library.processing.pdfium import PDFIUM_LOCK

_POINTS_PER_INCH = 72


def extract_pdf(path: Path, budget: TextBudget) -> Extraction:
    """One segment per page; a page with no text layer (a scan) is read by OCR if installed.

    Without OCR such a page gives an empty segment. The pages OCR will read are counted
    first: more than MAX_OCR_PAGES fail the file before the first is read.
    """
    with PDFIUM_LOCK:
        try:
            document = pdfium.PdfDocument(path)
        except pdfium.PdfiumError as err:
            if err.err_code in (pdfium.raw.FPDF_ERR_PASSWORD, pdfium.raw.FPDF_ERR_SECURITY):
                raise ExtractionError("the pdf is encrypted") from err
            raise ExtractionError("the pdf is damaged or not a pdf") from err
    try:
        with PDFIUM_LOCK:
            count = len(document)
            if count > MAX_PAGES:
                raise BudgetExceeded(f"the pdf has more than {MAX_PAGES:,} pages")
            texts = [_page_text(document, i) for i in range(count)]
        scans = [i for i, text in enumerate(texts) if not text.strip()]
        ocr_pages = None
        if scans and ocr_engine() is not None:
            if len(scans) > MAX_OCR_PAGES:
                raise BudgetExceeded(
                    f"the pdf has {len(scans):,} pages without a text layer: OCR reads at "
                    f"most {MAX_OCR_PAGES:,} a file"
                )
            for index in scans:
                texts[index] = _read_scan(document, index)
            ocr_pages = len(scans)
        pages = [Segment(clean(budget.take(text)), i + 1) for i, text in enumerate(texts)]
    except pdfium.PdfiumError as err:
        raise ExtractionError("the pdf is damaged and its text cannot be read") from err
    finally:
        with PDFIUM_LOCK:
            document.close()
    return Extraction(pages, count, ocr_pages=ocr_pages)


def _page_text(document: Any, index: int) -> str:
    """The text layer of page ``index``, closing the page and its text page before returning."""
    page = document[index]
    try:
        textpage = page.get_textpage()
        try:
            return str(textpage.get_text_range())
        finally:
            textpage.close()
    finally:
        page.close()


def _read_scan(document: Any, index: int) -> str:
    """The text OCR reads on page ``index``, rendered with its longest side OCR_SIDE_PIXELS."""
    with PDFIUM_LOCK:
        image = _render(document, index)
    return "" if image is None else read_text(image)


def _render(document: Any, index: int) -> Image.Image | None:
    """Page ``index`` on white, at most OCR_SIDE_PIXELS and OCR_MAX_DPI; None if it has no size."""
    page = document[index]
    try:
        sides = (page.get_width(), page.get_height())
        if not all(math.isfinite(side) and side > 0 for side in sides):
            return None
        scale = min(OCR_MAX_DPI / _POINTS_PER_INCH, OCR_SIDE_PIXELS / max(sides))
        if min(sides) * scale < 1:
            return None  # a sliver: nothing OCR could read
        bitmap = page.render(scale=scale, rev_byteorder=True)
        try:
            image: Image.Image = bitmap.to_pil().convert("RGB")  # a copy of the buffer
        finally:
            bitmap.close()
        return image
    finally:
        page.close()
