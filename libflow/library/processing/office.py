"""docx (python-docx: body, tables, headers and footers) and pptx (python-pptx: slides, notes)."""

from __future__ import annotations

import zipfile
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import docx
import pptx
from docx.exceptions import PythonDocxError
from docx.opc.exceptions import OpcError
from docx.oxml.ns import qn
from docx.parts.hdrftr import FooterPart, HeaderPart
from pptx.enum.shapes import PP_PLACEHOLDER
from pptx.exc import PythonPptxError
from pptx.shapes.autoshape import Shape
from pptx.shapes.base import BaseShape
from pptx.shapes.graphfrm import GraphicFrame
from pptx.shapes.group import GroupShape
from pptx.table import Table

from libflow.library.processing.budgets import MAX_PAGES, BudgetExceeded
from libflow.library.processing.extracted import (
    Extraction,
    ExtractionError,
    Segment,
    TextBudget,
    clean,
)
from libflow.library.processing.office_package import check_office_zip, raise_if_out_of_memory

# python-docx and python-pptx surface damaged packages as any of these; lxml's
# XMLSyntaxError is a SyntaxError, and zlib/zipfile errors come from a damaged entry.
_OFFICE_ERRORS = (
    OpcError,
    PythonDocxError,
    PythonPptxError,
    KeyError,
    ValueError,
    IndexError,
    SyntaxError,
    zipfile.BadZipFile,
    zlib.error,
    EOFError,
    NotImplementedError,
)
_NOTES_CHROME = {
    PP_PLACEHOLDER.SLIDE_IMAGE,
    PP_PLACEHOLDER.SLIDE_NUMBER,
    PP_PLACEHOLDER.DATE,
    PP_PLACEHOLDER.HEADER,
    PP_PLACEHOLDER.FOOTER,
}


def extract_docx(path: Path, budget: TextBudget) -> Extraction:
    """The body in order (paragraphs, headings, tables), then the headers and footers."""
    check_office_zip(path, "docx")
    try:
        document = docx.Document(str(path))
        body = "\n".join(map(budget.take, _docx_blocks(document.element.body)))
        margins = [
            "\n".join(map(budget.take, _docx_blocks(part.element)))
            for part in document.part.package.iter_parts()
            if isinstance(part, HeaderPart | FooterPart)
        ]
    except _OFFICE_ERRORS as err:
        raise_if_out_of_memory(err)
        raise ExtractionError("not a valid docx file") from err
    segments = [Segment(clean(body), None)]
    segments += [Segment(clean(text), None) for text in dict.fromkeys(margins) if text.strip()]
    return Extraction(segments, None)


_W_P, _W_TBL, _W_SDT, _W_SDT_CONTENT = qn("w:p"), qn("w:tbl"), qn("w:sdt"), qn("w:sdtContent")
_W_TR, _W_TC, _W_T, _W_TAB = qn("w:tr"), qn("w:tc"), qn("w:t"), qn("w:tab")
_W_BR, _W_CR, _W_PPR, _W_RPR = qn("w:br"), qn("w:cr"), qn("w:pPr"), qn("w:rPr")
_MC_FALLBACK = "{http://schemas.openxmlformats.org/markup-compatibility/2006}Fallback"


def _docx_blocks(container: Any) -> Iterator[str]:
    """The text of each paragraph and table row directly in ``container``, in order.

    Content controls (``w:sdt``: cover pages, tables of contents) are opened, which
    python-docx's own ``iter_inner_content`` skips.
    """
    for child in container:
        if child.tag == _W_P:
            yield "".join(_docx_runs(child))
        elif child.tag == _W_TBL:
            for row in child.iterchildren(_W_TR):
                cells = (" ".join(_docx_blocks(cell)) for cell in row.iterchildren(_W_TC))
                yield " | ".join(cells)
        elif child.tag == _W_SDT:
            for content in child.iterchildren(_W_SDT_CONTENT):
                yield from _docx_blocks(content)


def _docx_runs(element: Any) -> Iterator[str]:
    """The visible text under a paragraph, including hyperlinks, fields, insertions, text boxes."""
    for child in element:
        tag = child.tag
        if tag == _W_T:
            yield child.text or ""
        elif tag == _W_TAB:
            yield "\t"
        elif tag in (_W_BR, _W_CR, _W_P):
            yield "\n"
            if tag == _W_P:
                yield from _docx_runs(child)
        elif tag not in (_W_PPR, _W_RPR, _MC_FALLBACK) and isinstance(tag, str):
            # mc:Fallback repeats the mc:Choice content for old readers.
            yield from _docx_runs(child)


def extract_pptx(path: Path, budget: TextBudget) -> Extraction:
    """One segment per slide: its shapes' text, tables and speaker notes."""
    check_office_zip(path, "pptx")
    try:
        presentation = pptx.Presentation(str(path))
        if len(presentation.slides) > MAX_PAGES:
            raise BudgetExceeded(f"the pptx has more than {MAX_PAGES:,} slides")
        segments = []
        for number, slide in enumerate(presentation.slides, start=1):
            texts = list(_shape_texts(slide.shapes))
            if slide.has_notes_slide:
                notes = slide.notes_slide.shapes
                texts += _shape_texts(
                    shape
                    for shape in notes
                    if not (shape.is_placeholder and shape.placeholder_format.type in _NOTES_CHROME)
                )
            text = budget.take("\n".join(t for t in texts if t.strip()))
            segments.append(Segment(clean(text), number))
    except _OFFICE_ERRORS as err:
        raise_if_out_of_memory(err)
        raise ExtractionError("not a valid pptx file") from err
    return Extraction(segments, len(segments))


def _shape_texts(shapes: Iterable[BaseShape]) -> Iterator[str]:
    """The text of each shape, entering groups and reading tables row by row."""
    for shape in shapes:
        if isinstance(shape, GroupShape):
            yield from _shape_texts(shape.shapes)
        elif isinstance(shape, Shape) and shape.has_text_frame:
            yield shape.text_frame.text
        elif isinstance(shape, GraphicFrame) and shape.has_table:
            yield from _table_rows(shape.table)


def _table_rows(table: Table) -> Iterator[str]:
    """Each row of a slide table as its cells' text, merged cells once."""
    for row in table.rows:
        yield " | ".join(cell.text for cell in row.cells if not cell.is_spanned)
