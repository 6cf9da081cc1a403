"""Hostile files made in the tests (never committed): office bombs, huge page counts.

The office packages start from what python-docx / python-pptx save, with one part replaced
by a stream written a MiB at a time; random text in each MiB keeps an entry compressed at
under 200:1, and every declared size is honest, so each one passes the zip's own numbers.
"""

from __future__ import annotations

import io
import re
import secrets
import zipfile
from collections.abc import Iterable, Iterator

import docx
import pptx
import pypdfium2 as pdfium

MIB = 1024 * 1024
DOCUMENT_XML = "word/document.xml"
_BODY_HEAD = (
    b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
    b'<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">'
    b"<w:body>"
)
_BODY_TAIL = b"</w:body></w:document>"
NOISE_HEX = 3_000  # random hex a MiB: about 190:1 for repeated markup


def paragraphs(inflated: int, noise: int = NOISE_HEX) -> Iterator[bytes]:
    """A document.xml of about ``inflated`` bytes of empty paragraphs, a MiB at a time."""
    yield _BODY_HEAD
    written = len(_BODY_HEAD)
    block = b"<w:p/>" * (MIB // 6)
    while written < inflated:
        text = secrets.token_hex(noise).encode()
        piece = block + b"<w:p><w:r><w:t>" + text + b"</w:t></w:r></w:p>"
        written += len(piece)
        yield piece
    yield _BODY_TAIL


def long_text(inflated: int) -> Iterator[bytes]:
    """A document.xml of about ``inflated`` bytes, nearly all of it one paragraph's text."""
    yield _BODY_HEAD + b"<w:p><w:r><w:t>"
    written = 0
    while written < inflated:
        piece = b"a" * MIB + secrets.token_hex(2 * NOISE_HEX).encode()
        written += len(piece)
        yield piece
    yield b"</w:t></w:r></w:p>" + _BODY_TAIL


def docx_with(part: str, chunks: Iterable[bytes]) -> bytes:
    """A docx with ``part`` (added, or replacing python-docx's own) streamed from ``chunks``."""
    template = io.BytesIO()
    docx.Document().save(template)
    source = zipfile.ZipFile(template)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as package:
        for entry in source.infolist():
            if entry.filename != part:
                package.writestr(entry, source.read(entry))
        with package.open(part, "w", force_zip64=True) as stream:
            for chunk in chunks:
                stream.write(chunk)
    entry = zipfile.ZipFile(out).getinfo(part)
    assert entry.file_size < 256 * MIB, "over the declared-size limit"
    assert entry.file_size / entry.compress_size < 200, "over the declared-ratio limit"
    return out.getvalue()


def empty_paragraphs_docx(inflated: int) -> bytes:
    """A docx whose document.xml is ``inflated`` bytes of empty paragraphs (6 bytes a tag)."""
    return docx_with(DOCUMENT_XML, paragraphs(inflated))


def blank_pdf(pages: int) -> bytes:
    """A pdf of ``pages`` blank pages."""
    document = pdfium.PdfDocument.new()
    try:
        for _ in range(pages):
            document.new_page(200, 200).close()
        buffer = io.BytesIO()
        document.save(buffer)
    finally:
        document.close()
    return buffer.getvalue()


def pptx_listing_slides(count: int) -> bytes:
    """A one-slide pptx whose presentation lists that slide ``count`` times."""
    template = io.BytesIO()
    deck = pptx.Presentation()
    deck.slides.add_slide(deck.slide_layouts[6])
    deck.save(template)
    source = zipfile.ZipFile(template)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as package:
        for entry in source.infolist():
            data = source.read(entry)
            if entry.filename == "ppt/presentation.xml":
                listed = re.search(rb"<p:sldId [^>]*/>", data)
                assert listed is not None
                data = data.replace(listed.group(0), listed.group(0) * count)
            package.writestr(entry, data)
    return out.getvalue()
