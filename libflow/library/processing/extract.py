"""Text extraction from a downloaded library file: pdf, docx, pptx, txt and csv.

Pure and synchronous: the worker runs it in a thread or process on a local temp file.
A corrupt, encrypted or hostile file raises `ExtractionError`, whose message is shown to
the user; anything else that escapes (a missing temp file, say) is the worker's fault.
A little over 400 lines: one reader per file type, each beside the budget checks it
applies while reading (see ``budgets``); the next file type added should split it by type.
"""

from __future__ import annotations

import codecs
import re
import zipfile
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docx
import pptx
import pypdfium2 as pdfium
from charset_normalizer import from_bytes
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

from libflow.library.processing.budgets import (
    MAX_PAGES,
    MAX_TEXT_CHARS,
    MAX_TEXT_FILE_BYTES,
    MAX_UNZIPPED_BYTES,
    MAX_XML_BYTES,
    MAX_XML_TAGS,
    MAX_ZIP_ENTRIES,
    MAX_ZIP_RATIO,
    MIB,
    BudgetExceeded,
)
from libflow.library.processing.pdfium import PDFIUM_LOCK

MAX_TEXT_BYTES = MAX_TEXT_FILE_BYTES  # the name tests and callers have known it by
FILE_TYPES = frozenset({"pdf", "docx", "pptx", "txt", "csv"})


_ICELANDIC = frozenset("ðÐþÞ")
_CFB_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # password-protected or legacy binary Office
_BOMS = (  # UTF-32 first: its little-endian BOM starts with UTF-16's
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
# NUL and other C0 controls: PostgreSQL text refuses NUL, and none of them carry meaning.
_CONTROLS = dict.fromkeys([*range(0x00, 0x09), *range(0x0E, 0x20), 0x7F])
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
# libxml2's XML_ERR_NO_MEMORY, the code lxml gives a parse that ran out of memory (under the
# child's address-space limit): a budget, not a damaged file.
_XML_NO_MEMORY = 2
_NOTES_CHROME = {
    PP_PLACEHOLDER.SLIDE_IMAGE,
    PP_PLACEHOLDER.SLIDE_NUMBER,
    PP_PLACEHOLDER.DATE,
    PP_PLACEHOLDER.HEADER,
    PP_PLACEHOLDER.FOOTER,
}


@dataclass(frozen=True, slots=True)
class Segment:
    """A run of text from one place: a pdf page, a slide, or a whole docx/txt/csv."""

    text: str
    page: int | None  # 1-based pdf page or pptx slide number; None for docx, txt, csv
    page_name: str | None = None  # a page known by name rather than number: an xlsx sheet


@dataclass(frozen=True, slots=True)
class Extraction:
    """Every segment of a file, in reading order, and its page or slide count."""

    segments: list[Segment]
    pages: int | None  # pdf pages or pptx slides; None otherwise


class ExtractionError(Exception):
    """Corrupt, encrypted or hostile file; str(err) is a clear user-facing message."""


class _TextBudget:
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


def extract_text(path: Path, file_type: str) -> Extraction:
    """The text of the file at ``path``, read as ``file_type`` (pdf, docx, pptx, txt, csv)."""
    if file_type not in FILE_TYPES:
        raise ValueError(f"no text extractor for file type {file_type!r}")
    budget = _TextBudget()
    if file_type == "pdf":
        return _extract_pdf(path, budget)
    if file_type == "docx":
        return _extract_docx(path, budget)
    if file_type == "pptx":
        return _extract_pptx(path, budget)
    text = budget.take(decode_text(_read_text_bytes(path)))
    return Extraction([Segment(_clean(text), None)], None)


def _clean(text: str) -> str:
    """``text`` without control characters other than whitespace."""
    return text.translate(_CONTROLS)


# -- pdf ----------------------------------------------------------------------------------


def _extract_pdf(path: Path, budget: _TextBudget) -> Extraction:
    """One segment per page; a page with no text layer (a scan) gives an empty segment."""
    with PDFIUM_LOCK:
        try:
            document = pdfium.PdfDocument(path)
        except pdfium.PdfiumError as err:
            if err.err_code in (pdfium.raw.FPDF_ERR_PASSWORD, pdfium.raw.FPDF_ERR_SECURITY):
                raise ExtractionError("the pdf is encrypted") from err
            raise ExtractionError("the pdf is damaged or not a pdf") from err
        try:
            count = len(document)
            if count > MAX_PAGES:
                raise BudgetExceeded(f"the pdf has more than {MAX_PAGES:,} pages")
            pages = [
                Segment(_clean(budget.take(_pdf_page_text(document, i))), i + 1)
                for i in range(count)
            ]
        except pdfium.PdfiumError as err:
            raise ExtractionError("the pdf is damaged and its text cannot be read") from err
        finally:
            document.close()
    return Extraction(pages, count)


def _pdf_page_text(document: Any, index: int) -> str:
    """The text of page ``index``, closing the page and its text page before returning."""
    page = document[index]
    try:
        textpage = page.get_textpage()
        try:
            return str(textpage.get_text_range())
        finally:
            textpage.close()
    finally:
        page.close()


# -- docx and pptx ------------------------------------------------------------------------


def _check_office_zip(path: Path, label: str) -> None:
    """Refuse what is not a zip, and zip bombs, before an office library unpacks it."""
    with path.open("rb") as file:
        magic = file.read(len(_CFB_MAGIC))
    if magic == _CFB_MAGIC:
        raise ExtractionError(
            f"not a valid {label} file: it is password-protected or an old binary Office file"
        )
    try:
        with zipfile.ZipFile(path) as archive:
            _check_zip_entries(archive.infolist(), label)
            # zipfile stops an entry at its declared size, but python-docx reads each entry
            # in one call that first inflates all of it (a 1 KiB claim over 50 KiB of
            # deflate costs 130 MB): inflate once here in bounded steps to prove the sizes,
            # counting what actually comes out against the budgets.
            inflated = _Inflated(label)
            for entry in archive.infolist():
                with archive.open(entry) as stream:
                    first = True
                    while chunk := stream.read(MIB):
                        inflated.add(chunk, first=first)
                        first = False
    except (zipfile.BadZipFile, zlib.error, ValueError, EOFError, NotImplementedError) as err:
        raise ExtractionError(f"not a valid {label} file") from err


# XML as the parsers accept it: after a byte-order mark and whitespace (UTF-16 and UTF-32
# put NULs between), a "<".
_XML_START = re.compile(rb"\A(?:\xef\xbb\xbf|\xff\xfe|\xfe\xff)?[\s\x00]*<")


class _Inflated:
    """What a package's entries inflated to, as read: refuses a bomb at the first chunk over.

    An entry is counted as XML when its first bytes are XML, whatever its name: the office
    libraries parse a part by its declared content type, not by its file name.
    """

    __slots__ = ("bomb", "in_xml", "tags", "total", "xml")

    def __init__(self, label: str) -> None:
        self.bomb = f"the {label} file looks like a zip bomb"
        self.total = self.xml = self.tags = 0
        self.in_xml = False

    def add(self, chunk: bytes, *, first: bool) -> None:
        """Count one chunk read from an entry (``first``: the entry's first chunk)."""
        self.total += len(chunk)
        if self.total > MAX_UNZIPPED_BYTES:
            raise ExtractionError(
                f"{self.bomb}: it unpacks to more than {MAX_UNZIPPED_BYTES // MIB} MiB"
            )
        if first:
            self.in_xml = _XML_START.match(chunk) is not None
        if not self.in_xml:
            return
        self.xml += len(chunk)
        self.tags += chunk.count(b"<")
        if self.xml > MAX_XML_BYTES:
            raise ExtractionError(
                f"{self.bomb}: its XML inflates to more than {MAX_XML_BYTES // MIB} MiB"
            )
        if self.tags > MAX_XML_TAGS:
            raise ExtractionError(f"{self.bomb}: its XML holds more than {MAX_XML_TAGS:,} tags")


def _check_zip_entries(entries: list[zipfile.ZipInfo], label: str) -> None:
    """Refuse an archive whose declared sizes or ratios are those of a zip bomb."""
    bomb = f"the {label} file looks like a zip bomb"
    if len(entries) > MAX_ZIP_ENTRIES:
        raise ExtractionError(f"{bomb}: more than {MAX_ZIP_ENTRIES} entries")
    if sum(entry.file_size for entry in entries) > MAX_UNZIPPED_BYTES:
        raise ExtractionError(f"{bomb}: it unpacks to more than {MAX_UNZIPPED_BYTES // MIB} MiB")
    for entry in entries:
        if entry.file_size > MIB and entry.file_size > MAX_ZIP_RATIO * max(entry.compress_size, 1):
            raise ExtractionError(f"{bomb}: {entry.filename} is compressed over {MAX_ZIP_RATIO}:1")
        if entry.flag_bits & 0x1:
            raise ExtractionError(f"not a valid {label} file: it holds encrypted entries")


def _raise_if_out_of_memory(err: Exception) -> None:
    """Raise MemoryError for an XML parse that failed for want of memory."""
    if isinstance(err, SyntaxError) and getattr(err, "code", None) == _XML_NO_MEMORY:
        raise MemoryError("the XML parser ran out of memory") from err


def _extract_docx(path: Path, budget: _TextBudget) -> Extraction:
    """The body in order (paragraphs, headings, tables), then the headers and footers."""
    _check_office_zip(path, "docx")
    try:
        document = docx.Document(str(path))
        body = "\n".join(map(budget.take, _docx_blocks(document.element.body)))
        margins = [
            "\n".join(map(budget.take, _docx_blocks(part.element)))
            for part in document.part.package.iter_parts()
            if isinstance(part, HeaderPart | FooterPart)
        ]
    except _OFFICE_ERRORS as err:
        _raise_if_out_of_memory(err)
        raise ExtractionError("not a valid docx file") from err
    segments = [Segment(_clean(body), None)]
    segments += [Segment(_clean(text), None) for text in dict.fromkeys(margins) if text.strip()]
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


def _extract_pptx(path: Path, budget: _TextBudget) -> Extraction:
    """One segment per slide: its shapes' text, tables and speaker notes."""
    _check_office_zip(path, "pptx")
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
            segments.append(Segment(_clean(text), number))
    except _OFFICE_ERRORS as err:
        _raise_if_out_of_memory(err)
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


# -- txt and csv --------------------------------------------------------------------------


def _read_text_bytes(path: Path) -> bytes:
    """The whole file, refusing one over `MAX_TEXT_BYTES`."""
    with path.open("rb") as file:
        data = file.read(MAX_TEXT_BYTES + 1)
    if len(data) > MAX_TEXT_BYTES:
        raise ExtractionError(
            f"the text file is larger than {MAX_TEXT_BYTES // MIB} MiB, too large to index"
        )
    return data


def decode_text(data: bytes) -> str:
    """Decode text of unknown encoding: BOM, then UTF-8, then cp1252, then detection."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return data.decode(encoding, errors="replace")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    # charset-normalizer reads short and 1 KB cp1252 French, Spanish and German as cp775,
    # cp1006, cp1257 or cp1250 (measured), so cp1252 comes first when the detector finds it
    # plausible at all. Only its Icelandic letters give it away: other code pages put
    # common letters there (Turkish ğ ş İ, Baltic š ž), and the detector gets those right.
    try:
        western = data.decode("cp1252")
    except UnicodeDecodeError:
        western = None
    if (
        western is not None
        and not _ICELANDIC.intersection(western)
        and from_bytes(data, cp_isolation=["cp1252"]).best() is not None
    ):
        return western
    best = from_bytes(data).best()
    return data.decode("cp1252", errors="replace") if best is None else str(best)
