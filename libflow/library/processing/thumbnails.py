"""Thumbnails of images and of a pdf's first page: WEBP, longest side 256 px."""

from __future__ import annotations

import io
import math
import struct
from pathlib import Path
from typing import Final

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c
from PIL import Image, ImageOps, UnidentifiedImageError

from libflow.library.processing.budgets import MAX_SOURCE_PIXELS as MAX_SOURCE_PIXELS
from libflow.library.processing.pdfium import PDFIUM_LOCK

THUMBNAIL_SIDE: Final = 256
IMAGE_TYPES: Final = frozenset({"png", "jpg", "jpeg", "gif", "webp"})
THUMBNAIL_TYPES: Final = IMAGE_TYPES | {"pdf"}

# MAX_SOURCE_PIXELS (budgets): a decoded image costs up to 4 bytes a pixel, twice over while it
# is resized. 64 MP (256 MB as RGBA) admits the biggest common cameras (61 MP full frame, 50 MP
# phone modes) and refuses anything larger before a single pixel is decoded. It sits below
# Pillow's own default (89.5 MP, where Pillow only warns); this module compares against it
# itself and never touches Pillow's global Image.MAX_IMAGE_PIXELS.

# PDF 1.7 (annex C) caps a page side at 14,400 units; PDFium reports sizes in those units.
_MAX_PAGE_POINTS: Final = 14_400.0
_MIN_PAGE_POINTS: Final = 1.0

# Only the formats the library accepts as images: Image.open would otherwise try every plugin,
# including ones that hand the file to other programs (EPS runs Ghostscript).
_IMAGE_FORMATS: Final = ("PNG", "JPEG", "GIF", "WEBP")


_WEBP_QUALITY: Final = 80
_RGB_MODES: Final = frozenset({"RGB", "RGBA"})


class ThumbnailError(Exception):
    """A corrupt or hostile file; str(err) is a clear user-facing message."""


def render_thumbnail(path: Path, file_type: str) -> bytes | None:
    """Render the WEBP thumbnail of the file at path, or None for a type that gets none."""
    file_type = file_type.lower()
    if file_type in IMAGE_TYPES:
        return _encode_webp(load_image(path))
    if file_type == "pdf":
        return _encode_webp(_render_pdf_first_page(path))
    return None


def load_image(path: Path, side: int = THUMBNAIL_SIDE) -> Image.Image:
    """Decode the first frame of the image at path, upright, as RGB or RGBA, at most ``side`` px.

    Thumbnails and OCR both read images through this, under the same pixel budget.
    """
    with path.open("rb") as fp:
        try:
            with Image.open(fp, formats=_IMAGE_FORMATS) as source:
                _refuse_pixel_bomb(source.size)
                if source.format == "JPEG":
                    # Let libjpeg decode at 1/2, 1/4 or 1/8 scale: fast and small in memory.
                    source.draft(source.mode, (side, side))
                source.load()  # the first frame only: animations are never seeked
                icc_profile = source.info.get("icc_profile") if source.mode in _RGB_MODES else None
                image = _to_output_mode(ImageOps.exif_transpose(source))
                image.thumbnail((side, side), Image.Resampling.LANCZOS)
        except ThumbnailError:
            raise
        except UnidentifiedImageError as err:
            raise ThumbnailError("the file is not a readable PNG, JPEG, GIF or WEBP image") from err
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as err:
            # Pillow's own check fired first (an error beyond 2x its limit, or its warning when a
            # warning filter turned it into one); the message is the same as ours.
            raise ThumbnailError(_bomb_message()) from err
        except (OSError, SyntaxError, ValueError, EOFError, IndexError, struct.error) as err:
            raise ThumbnailError(f"the image is corrupt or truncated ({err})") from err
    # Only an RGB source's colour profile still describes the converted pixels; the rest of the
    # metadata (EXIF with its GPS position, comments, palette transparency) stays behind.
    image.info = {"icc_profile": icc_profile} if isinstance(icc_profile, bytes) else {}
    return image


def _refuse_pixel_bomb(size: tuple[int, int]) -> None:
    """Refuse an image whose header declares more pixels than MAX_SOURCE_PIXELS."""
    # Image.open has read only the header, so this runs before any decoding. It replaces making
    # Pillow's DecompressionBombWarning an error with warnings.catch_warnings(), which swaps the
    # process-wide filter list and so is not thread-safe (Python 3.11).
    width, height = size
    if width * height > MAX_SOURCE_PIXELS:
        raise ThumbnailError(_bomb_message(width, height))


def _bomb_message(width: int | None = None, height: int | None = None) -> str:
    """The user-facing message for an image too large to decode safely."""
    declared = f" ({width} x {height} pixels)" if width and height else ""
    return (
        f"the image is too large{declared}: at most {MAX_SOURCE_PIXELS // 1_000_000} megapixels "
        "are decoded (a decompression bomb is refused)"
    )


def _to_output_mode(image: Image.Image) -> Image.Image:
    """Convert to RGB (CMYK, grey, palette), or RGBA with transparency: the modes WEBP encodes."""
    if image.mode in _RGB_MODES:
        return image
    if image.mode == "I" or image.mode.startswith("I;16"):
        # 16-bit grey: scale to 8 bits, where a plain convert would clip all but black to white.
        image = image.convert("I").point(lambda value: value * (1 / 256)).convert("L")
    return image.convert("RGBA" if image.has_transparency_data else "RGB")


def _render_pdf_first_page(path: Path) -> Image.Image:
    """Render the first page of the pdf at path so that its longest side is 256 px."""
    with PDFIUM_LOCK:
        document = _open_pdf(path)
        try:
            if len(document) == 0:
                raise ThumbnailError("the pdf has no pages")
            page = document[0]
            try:
                width: float = page.get_width()
                height: float = page.get_height()
                _refuse_absurd_page(width, height)
                # On white, as a viewer shows it; RGB byte order, so no channel swap follows.
                bitmap = page.render(scale=THUMBNAIL_SIDE / max(width, height), rev_byteorder=True)
                try:
                    # A copy: the bitmap's buffer goes away when it is closed.
                    image: Image.Image = bitmap.to_pil().convert("RGB")
                finally:
                    bitmap.close()
            finally:
                page.close()
        except pdfium.PdfiumError as err:
            raise ThumbnailError(f"the pdf's first page cannot be rendered ({err})") from err
        finally:
            document.close()
    # Rounding the page size up to whole pixels can leave a side at 257.
    image.thumbnail((THUMBNAIL_SIDE, THUMBNAIL_SIDE), Image.Resampling.LANCZOS)
    return image


def _open_pdf(path: Path) -> pdfium.PdfDocument:
    """Open the pdf at path, turning PDFium's load errors into user-facing ones."""
    try:
        return pdfium.PdfDocument(path)
    except pdfium.PdfiumError as err:
        if err.err_code == pdfium_c.FPDF_ERR_PASSWORD:
            raise ThumbnailError("the pdf is encrypted with a password") from err
        raise ThumbnailError(f"the pdf is corrupt or not a pdf ({err})") from err


def _refuse_absurd_page(width: float, height: float) -> None:
    """Refuse a page whose size no real document has (and no renderer should trust)."""
    sides = (width, height)
    if not all(
        math.isfinite(side) and _MIN_PAGE_POINTS <= side <= _MAX_PAGE_POINTS for side in sides
    ):
        raise ThumbnailError(f"the pdf's first page has an impossible size ({width} x {height} pt)")


def _encode_webp(image: Image.Image) -> bytes:
    """Encode the image as WEBP, keeping only its ICC profile (no EXIF, no GPS)."""
    buffer = io.BytesIO()
    icc_profile = image.info.get("icc_profile")
    options = {"icc_profile": icc_profile} if isinstance(icc_profile, bytes) else {}
    image.save(buffer, format="WEBP", quality=_WEBP_QUALITY, method=4, **options)
    return buffer.getvalue()
