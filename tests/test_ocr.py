"""OCR (the `ocr` extra): scans and pictures made here are read, searched, or warned about.

Every scan is made in the test: text drawn into a picture with Pillow, saved as an image or
as a pdf that has no text layer at all. "Without the extra" is simulated for real: the
engine's module is shadowed by one that cannot be imported, here and in the preparation
server (started again with the shadow first on its path).
"""

from __future__ import annotations

import io
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pypdfium2 as pdfium
import pytest
from PIL import Image

from libflow.library.processing import isolation, ocr, pdf_text
from libflow.library.processing.budgets import MAX_OCR_PAGES, BudgetExceeded
from libflow.library.processing.extract import Extraction, Segment, extract_text
from libflow.models import Chunk
from tests.conftest import Api, fixture_bytes, wait_until_processed
from tests.hostile.hostile_files import blank_pdf
from tests.made_files import image_bytes, scanned_pdf, text_picture
from tests.processing_helpers import search, thumbnail_image

# Phrases the engine reads back word for word from the pictures made here.
FIRST_PAGE = ["violet pelican orchard", "The amber walrus sings at dawn."]
SECOND_PAGE = ["second page cobalt heron"]
PICTURE = ["saffron lighthouse keeper"]
IMAGE_FORMATS = {"png": "PNG", "jpg": "JPEG", "webp": "WEBP", "gif": "GIF"}


def write(tmp_path: Path, name: str, data: bytes) -> Path:
    """``data`` as a file named ``name`` in ``tmp_path``."""
    path = tmp_path / name
    path.write_bytes(data)
    return path


def picture(lines: list[str]) -> Image.Image:
    """A small picture of ``lines`` in large type."""
    return text_picture(lines, size=(1000, 90 + 110 * len(lines)), font_size=56)


def words(text: str) -> str:
    """``text`` with its whitespace collapsed."""
    return " ".join(text.split())


@pytest.fixture
def ocr_uninstalled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Processing as without the `ocr` extra: its module cannot be imported anywhere."""
    shadow = tmp_path / "shadow" / ocr.ENGINE_MODULE
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text('raise ImportError("the ocr extra is not installed")\n')
    monkeypatch.syspath_prepend(str(shadow.parent))
    monkeypatch.delitem(sys.modules, ocr.ENGINE_MODULE, raising=False)
    ocr.ocr_engine.cache_clear()
    isolation.stop_preparation_server()  # the next file starts one with the shadow in place
    yield
    isolation.stop_preparation_server()
    ocr.ocr_engine.cache_clear()


# --- extraction ---------------------------------------------------------------------------------


def test_a_scanned_pdf_is_read_by_ocr_page_by_page(tmp_path: Path) -> None:
    scan = scanned_pdf([text_picture(FIRST_PAGE), text_picture(SECOND_PAGE)])
    result = extract_text(write(tmp_path, "scan.pdf", scan), "pdf")
    assert (result.pages, result.ocr_pages) == (2, 2)
    assert [s.page for s in result.segments] == [1, 2]
    assert words(result.segments[0].text) == " ".join(FIRST_PAGE)
    assert words(result.segments[1].text) == " ".join(SECOND_PAGE)


def test_only_pages_without_a_text_layer_are_read_by_ocr(tmp_path: Path) -> None:
    document = pdfium.PdfDocument(fixture_bytes("pages.pdf"))  # three pages of text
    document.import_pages(pdfium.PdfDocument(scanned_pdf([text_picture(SECOND_PAGE)])))
    buffer = io.BytesIO()
    document.save(buffer)
    result = extract_text(write(tmp_path, "mixed.pdf", buffer.getvalue()), "pdf")
    assert (result.pages, result.ocr_pages) == (4, 1)
    assert "amber falcon quilt" in words(result.segments[0].text)
    assert words(result.segments[3].text) == " ".join(SECOND_PAGE)


@pytest.mark.parametrize(("file_type", "image_format"), IMAGE_FORMATS.items())
def test_an_image_is_read_by_ocr(tmp_path: Path, file_type: str, image_format: str) -> None:
    path = write(tmp_path, f"picture.{file_type}", image_bytes(picture(PICTURE), image_format))
    assert extract_text(path, file_type) == Extraction(
        [Segment(" ".join(PICTURE), None)], None, ocr_pages=1
    )


def test_an_animation_is_read_on_its_first_frame(tmp_path: Path) -> None:
    first, second = picture(PICTURE), picture(["another frame entirely"])
    buffer = io.BytesIO()
    first.save(buffer, format="GIF", save_all=True, append_images=[second], duration=100)
    assert extract_text(write(tmp_path, "moving.gif", buffer.getvalue()), "gif").segments == [
        Segment(" ".join(PICTURE), None)
    ]


def test_text_on_a_transparent_background_is_read_on_white(tmp_path: Path) -> None:
    ink = picture(PICTURE).convert("L").point(lambda value: 255 - value)  # text opaque
    transparent = Image.new("RGBA", ink.size, (0, 0, 0, 0))
    transparent.putalpha(ink)  # black everywhere, seen only where the text is
    path = write(tmp_path, "cutout.png", image_bytes(transparent, "PNG"))
    assert words(extract_text(path, "png").segments[0].text) == " ".join(PICTURE)


def test_a_pdf_of_more_scanned_pages_than_the_budget_is_refused_before_any_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def never(image: Image.Image) -> str:
        raise AssertionError("a page was read")

    monkeypatch.setattr(pdf_text, "read_text", never)
    pdf = write(tmp_path, "scans.pdf", blank_pdf(MAX_OCR_PAGES + 1))
    with pytest.raises(BudgetExceeded, match=f"OCR reads at most {MAX_OCR_PAGES:,} a file"):
        extract_text(pdf, "pdf")


def test_without_the_extra_scans_and_images_give_no_text(
    tmp_path: Path, ocr_uninstalled: None
) -> None:
    scan = extract_text(write(tmp_path, "scan.pdf", scanned_pdf([picture(PICTURE)])), "pdf")
    assert scan == Extraction([Segment("", 1)], 1, ocr_pages=None)
    image = write(tmp_path, "picture.png", image_bytes(picture(PICTURE), "PNG"))
    assert extract_text(image, "png") == Extraction([Segment("", None)], None, ocr_pages=None)


# --- through the public API ---------------------------------------------------------------------


async def process(api: Api, data: bytes, name: str) -> dict[str, Any]:
    """Upload through the public API and wait until processing ended; the record."""
    record = await api.upload(data, name=name, file_type=name.rsplit(".", 1)[1])
    return await wait_until_processed(api, record["id"], timeout=180)


async def test_a_scanned_pdf_is_found_by_a_phrase_from_its_image(shaped_api: Api) -> None:
    api = shaped_api
    scan = scanned_pdf([text_picture(FIRST_PAGE), text_picture(SECOND_PAGE)])
    record = await process(api, scan, "scan.pdf")

    processing = record["processing"]
    assert processing["status"] == "done", record
    assert (processing["pages"], processing["ocrPages"], processing["warning"]) == (2, 2, None)
    assert record["searchable"] is True
    hits = await search(api, "amber walrus sings")
    assert (hits[0]["fileId"], hits[0]["page"]) == (record["id"], 1)
    assert "The amber walrus sings at dawn." in hits[0]["chunk"]
    hits = await search(api, "cobalt heron")
    assert (hits[0]["fileId"], hits[0]["page"]) == (record["id"], 2)


async def test_a_png_is_found_by_its_text_and_keeps_its_thumbnail(shaped_api: Api) -> None:
    api = shaped_api
    record = await process(api, image_bytes(picture(PICTURE), "PNG"), "sign.png")

    processing = record["processing"]
    assert processing["status"] == "done", record
    assert (processing["ocrPages"], processing["warning"], processing["chunks"]) == (1, None, 1)
    [hit] = await search(api, "saffron lighthouse")
    assert (hit["fileId"], hit["page"], hit["chunk"]) == (record["id"], None, " ".join(PICTURE))
    image, _ = await thumbnail_image(api, record["id"])
    assert max(image.size) == 256


async def test_a_picture_without_text_is_done_with_the_warning_no_text(api: Api) -> None:
    record = await process(api, image_bytes(Image.new("RGB", (400, 300), "white"), "PNG"), "x.png")
    processing = record["processing"]
    assert processing["status"] == "done", record
    assert (processing["ocrPages"], processing["warning"], processing["chunks"]) == (
        1,
        "NO_TEXT",
        0,
    )


async def test_without_the_extra_a_scan_is_done_with_the_warning_no_text(
    shaped_api: Api, ocr_uninstalled: None
) -> None:
    api = shaped_api
    for name, data in [
        ("scan.pdf", scanned_pdf([text_picture(FIRST_PAGE)])),
        ("sign.png", image_bytes(picture(PICTURE), "PNG")),
    ]:
        record = await process(api, data, name)
        processing = record["processing"]
        assert processing["status"] == "done", record
        assert processing["error"] is None
        assert (processing["warning"], processing["ocrPages"]) == ("NO_TEXT", None), record
        assert processing["chunks"] == 0
        assert await Chunk.filter(file_id=record["id"]).count() == 0
        assert record["thumbnail"] is True
