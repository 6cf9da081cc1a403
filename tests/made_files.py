"""Files of the newer types made in the tests: spreadsheets, web pages, scans and pictures.

Scans are what a scanner makes: text drawn into a picture by Pillow (a TrueType font of the
system's when there is one, Pillow's own otherwise), saved as an image or as a pdf of images
with no text layer at all.
"""

from __future__ import annotations

import functools
import io
import subprocess
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path

import openpyxl
from PIL import Image, ImageDraw, ImageFont

# Common TrueType fonts of Debian's packages, tried before asking fontconfig.
_FONT_FILES = (
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
)


@functools.cache
def _font_file() -> str | None:
    """A TrueType font of this system, or None."""
    for name in _FONT_FILES:
        if Path(name).is_file():
            return name
    try:
        found = subprocess.run(
            ["fc-match", "--format=%{file}", "sans"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    return found if found.endswith((".ttf", ".otf")) and Path(found).is_file() else None


def font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    """A sans-serif font of ``size`` pixels."""
    name = _font_file()
    return ImageFont.truetype(name, size) if name else ImageFont.load_default(size)


def text_picture(
    lines: Sequence[str], size: tuple[int, int] = (1240, 1754), font_size: int = 48
) -> Image.Image:
    """Black ``lines`` on white, as a scanned page (A4 at 150 dpi by default) shows them."""
    picture = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(picture)
    face = font(font_size)
    for number, line in enumerate(lines):
        draw.text((100, 120 + number * font_size * 2), line, fill="black", font=face)
    return picture


def image_bytes(picture: Image.Image, image_format: str) -> bytes:
    """``picture`` encoded as PNG, JPEG, GIF or WEBP."""
    buffer = io.BytesIO()
    picture.save(buffer, format=image_format)
    return buffer.getvalue()


def scanned_pdf(pages: Sequence[Image.Image]) -> bytes:
    """A pdf whose pages are only these pictures: no text layer (Pillow's pdf writer)."""
    buffer = io.BytesIO()
    first, *rest = pages
    first.save(buffer, format="PDF", resolution=150, save_all=True, append_images=rest)
    return buffer.getvalue()


def workbook_bytes(sheets: dict[str, Sequence[Sequence[object]]]) -> bytes:
    """An xlsx (openpyxl) with a sheet of rows for each name, in order."""
    workbook = openpyxl.Workbook()
    workbook.remove(workbook.active)  # type: ignore[arg-type]
    for name, rows in sheets.items():
        sheet = workbook.create_sheet(name)
        for row in rows:
            sheet.append(list(row))
    buffer = io.BytesIO()
    workbook.save(buffer)
    return buffer.getvalue()


def workbook_with(part: str, chunks: Iterable[bytes]) -> bytes:
    """An xlsx whose ``part`` (added, or replacing openpyxl's own) is streamed from ``chunks``."""
    source = zipfile.ZipFile(io.BytesIO(workbook_bytes({"Sheet": [["seed"]]})))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as package:
        for entry in source.infolist():
            if entry.filename != part:
                package.writestr(entry, source.read(entry))
        with package.open(part, "w", force_zip64=True) as stream:
            for chunk in chunks:
                stream.write(chunk)
    return out.getvalue()


SHEET_XML = "xl/worksheets/sheet1.xml"
_SHEET_HEAD = (
    b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
    b'<worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main">'
)


def sheet_xml(rows: str, prolog: bytes = b"") -> bytes:
    """A worksheet part holding ``rows`` (``<row>`` elements), after ``prolog`` (a DOCTYPE)."""
    head = _SHEET_HEAD.replace(b"\n", b"\n" + prolog, 1) if prolog else _SHEET_HEAD
    return head + b"<sheetData>" + rows.encode() + b"</sheetData></worksheet>"
