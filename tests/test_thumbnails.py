"""Thumbnails: WEBP, longest side 256 px, upright, first frame, and hostile files refused."""

from __future__ import annotations

import io
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from PIL import Image

from libflow.library.processing.thumbnails import (
    MAX_SOURCE_PIXELS,
    THUMBNAIL_TYPES,
    ThumbnailError,
    render_thumbnail,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures"

RED = (220, 30, 30)
GREEN = (30, 180, 60)
BLUE = (30, 60, 220)


def thumbnail(name: str, file_type: str | None = None) -> Image.Image:
    """Render the fixture's thumbnail and decode it again."""
    path = FIXTURES / name
    data = render_thumbnail(path, file_type or path.suffix.removeprefix("."))
    assert data is not None
    image = Image.open(io.BytesIO(data))
    image.load()
    return image


def near(
    colour: tuple[int, ...] | float | None, expected: tuple[int, ...], slack: int = 16
) -> bool:
    """Whether colour matches expected, channel by channel, within lossy-encoding slack."""
    assert isinstance(colour, tuple)
    return len(colour) == len(expected) and all(
        abs(got - want) <= slack for got, want in zip(colour, expected, strict=True)
    )


def centre(image: Image.Image) -> tuple[int, ...] | float | None:
    """The pixel in the middle of the image."""
    return image.getpixel((image.width // 2, image.height // 2))


def test_thumbnail_types() -> None:
    assert frozenset({"png", "jpg", "jpeg", "gif", "webp", "pdf"}) == THUMBNAIL_TYPES


def test_output_is_webp() -> None:
    data = render_thumbnail(FIXTURES / "thumb_photo.jpg", "jpg")
    assert data is not None
    assert data[:4] == b"RIFF"
    assert data[8:12] == b"WEBP"
    assert Image.open(io.BytesIO(data)).format == "WEBP"


def test_file_type_is_case_insensitive() -> None:
    assert render_thumbnail(FIXTURES / "thumb_photo.jpg", "JPEG") is not None


@pytest.mark.parametrize(
    ("name", "size"),
    [("thumb_photo.jpg", (256, 171)), ("thumb_wide.png", (256, 64))],
)
def test_longest_side_256_and_aspect_kept(name: str, size: tuple[int, int]) -> None:
    assert thumbnail(name).size == size


def test_small_image_not_upscaled() -> None:
    assert thumbnail("thumb_small.png").size == (40, 30)


def test_exif_orientation_applied() -> None:
    image = thumbnail("thumb_exif_rotated.jpg").convert("RGB")
    assert image.size == (128, 256)  # stored landscape, shown portrait
    # Orientation 6 turns the stored left half (red) to the top: 8 would have put blue there.
    assert near(image.getpixel((64, 32)), RED)
    assert near(image.getpixel((64, 224)), BLUE)


@pytest.mark.parametrize(
    ("name", "first"), [("thumb_animated.gif", RED), ("thumb_animated.webp", BLUE)]
)
def test_first_frame_of_animation(name: str, first: tuple[int, int, int]) -> None:
    image = thumbnail(name)
    assert getattr(image, "n_frames", 1) == 1
    assert near(centre(image.convert("RGB")), first)


def test_palette_transparency_kept() -> None:
    image = thumbnail("thumb_palette_transparent.png")
    assert image.mode == "RGBA"
    corner = image.getpixel((0, 0))
    assert isinstance(corner, tuple)
    assert corner[3] == 0  # the background stays see-through
    assert near(centre(image), (*RED, 255))


def test_cmyk_jpeg_becomes_rgb() -> None:
    image = thumbnail("thumb_cmyk.jpg")
    assert image.mode == "RGB"
    assert image.size == (256, 192)
    assert near(centre(image), (255, 0, 0))  # magenta + yellow ink is red


def test_16_bit_grey_scaled_not_clipped() -> None:
    assert near(centre(thumbnail("thumb_grey16.png").convert("RGB")), (128, 128, 128), slack=4)


def test_pdf_first_page_rendered() -> None:
    image = thumbnail("thumb_page.pdf").convert("RGB")
    assert image.size == (182, 256)  # A4, longest side 256
    assert near(centre(image), GREEN)  # page 2 is blue


@pytest.mark.parametrize("file_type", ["docx", "pptx", "txt", "csv"])
def test_documents_get_no_thumbnail(file_type: str, tmp_path: Path) -> None:
    assert render_thumbnail(tmp_path / f"never-read.{file_type}", file_type) is None


@pytest.mark.parametrize(
    "name",
    [
        "thumb_bomb_72mp.png",  # past libflow's limit only
        "thumb_bomb_100mp.png",  # Pillow warns (here, a warning is an error)
        "thumb_bomb_400mp.png",  # Pillow raises DecompressionBombError
    ],
)
def test_pixel_bomb_refused(name: str) -> None:
    with pytest.raises(ThumbnailError, match="the image is too large"):
        render_thumbnail(FIXTURES / name, "png")


def test_pixel_bomb_refused_when_pillows_warning_is_only_a_warning() -> None:
    # pytest.warns records warnings instead of raising them, as a production process would.
    with (
        pytest.warns(Image.DecompressionBombWarning),
        pytest.raises(ThumbnailError, match=r"too large \(10000 x 10000 pixels\)"),
    ):
        render_thumbnail(FIXTURES / "thumb_bomb_100mp.png", "png")


def test_pixel_bomb_refused_with_pillows_limit_disabled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", None)
    with pytest.raises(ThumbnailError, match=r"too large \(20000 x 20000 pixels\)"):
        render_thumbnail(FIXTURES / "thumb_bomb_400mp.png", "png")


def test_pillows_global_limit_left_alone() -> None:
    before = Image.MAX_IMAGE_PIXELS
    render_thumbnail(FIXTURES / "thumb_photo.jpg", "jpg")
    assert before == Image.MAX_IMAGE_PIXELS
    assert (before or 0) > MAX_SOURCE_PIXELS


def test_truncated_image_refused() -> None:
    with pytest.raises(ThumbnailError, match="the image is corrupt or truncated"):
        render_thumbnail(FIXTURES / "thumb_truncated.jpg", "jpg")


def test_corrupt_image_refused(tmp_path: Path) -> None:
    path = tmp_path / "garbage.png"
    path.write_bytes(b"\x89PNG\r\n\x1a\n this is not an image at all")
    with pytest.raises(ThumbnailError, match="not a readable PNG, JPEG, GIF or WEBP image"):
        render_thumbnail(path, "png")


def test_image_of_another_format_refused(tmp_path: Path) -> None:
    path = tmp_path / "really-a-bitmap.png"
    Image.new("RGB", (10, 10)).save(path, "BMP")
    with pytest.raises(ThumbnailError, match="not a readable PNG, JPEG, GIF or WEBP image"):
        render_thumbnail(path, "png")


def test_encrypted_pdf_refused() -> None:
    with pytest.raises(ThumbnailError, match="the pdf is encrypted with a password"):
        render_thumbnail(FIXTURES / "thumb_encrypted.pdf", "pdf")


def test_corrupt_pdf_refused(tmp_path: Path) -> None:
    path = tmp_path / "garbage.pdf"
    path.write_bytes(b"%PDF-1.7\nthis is not a pdf at all\n")
    with pytest.raises(ThumbnailError, match="the pdf is corrupt or not a pdf"):
        render_thumbnail(path, "pdf")


def test_absurd_pdf_page_refused() -> None:
    with pytest.raises(ThumbnailError, match="the pdf's first page has an impossible size"):
        render_thumbnail(FIXTURES / "thumb_banner_page.pdf", "pdf")


def test_missing_file_is_not_blamed_on_the_upload(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        render_thumbnail(tmp_path / "gone.png", "png")


def outcome(name: str) -> bytes | str | None:
    """The thumbnail's bytes, or the ThumbnailError's message."""
    path = FIXTURES / name
    try:
        return render_thumbnail(path, path.suffix.removeprefix("."))
    except ThumbnailError as err:
        return f"error: {err}"


def test_concurrent_rendering_from_threads() -> None:
    names = [
        "thumb_photo.jpg",
        "thumb_exif_rotated.jpg",
        "thumb_animated.gif",
        "thumb_animated.webp",
        "thumb_palette_transparent.png",
        "thumb_page.pdf",
        "thumb_encrypted.pdf",
        "thumb_bomb_72mp.png",
        "thumb_bomb_100mp.png",
        "thumb_bomb_400mp.png",
        "thumb_truncated.jpg",
    ]
    expected = {name: outcome(name) for name in names}
    jobs = names * 8
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(outcome, jobs))
    assert results == [expected[name] for name in jobs]
    assert all(isinstance(expected[name], bytes) for name in names[:6])
    assert all(str(expected[name]).startswith("error: ") for name in names[6:])
