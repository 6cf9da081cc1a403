"""Text read from pictures by OCR: rapidocr-onnxruntime, the `ocr` install extra.

The engine (PP-OCRv4 models that the package ships, run by onnxruntime) is loaded once a
process, on first use: the preparation server loads it before it forks, so each file's child
starts with it in place. It runs on one thread: the children are forked from a process that
loaded it, where a thread pool would not survive the fork, and the two cores a worker shares
are better spent on two files than on one file's threads. Without the extra installed, OCR is
simply not available: the files that needed it are done with the warning NO_TEXT.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from PIL import Image

from libflow.library.processing.budgets import OCR_SIDE_PIXELS
from libflow.library.processing.extracted import (
    Extraction,
    ExtractionError,
    Segment,
    TextBudget,
    clean,
)
from libflow.library.processing.thumbnails import ThumbnailError, load_image

# The module of the `ocr` extra; a name rather than an import, so that the server's own
# process never loads it (onnxruntime and OpenCV: about 300 MB) and mypy needs no stubs.
ENGINE_MODULE: Final = "rapidocr_onnxruntime"


@functools.cache
def ocr_engine() -> Any | None:
    """The OCR engine of this process, loaded on first use; None without the `ocr` extra."""
    try:
        module = importlib.import_module(ENGINE_MODULE)
    except ImportError:
        return None
    importlib.import_module("cv2").setNumThreads(1)  # OpenCV's pool would not survive a fork
    return module.RapidOCR(intra_op_num_threads=1, inter_op_num_threads=1)


def read_text(image: Image.Image) -> str:
    """The text OCR finds in ``image``: lines top to bottom, words left to right.

    Only called when ``ocr_engine()`` is not None.
    """
    engine = ocr_engine()
    if engine is None:
        raise RuntimeError("OCR is not installed")
    if image.mode != "RGB":
        # On white, as a page is: transparent pixels are often black under their alpha.
        background = Image.new("RGB", image.size, "white")
        background.paste(image, mask=image.getchannel("A") if "A" in image.getbands() else None)
        image = background
    boxes, _elapsed = engine(image)
    return "\n".join(_lines(boxes or []))


def _lines(boxes: Sequence[Sequence[Any]]) -> list[str]:
    """Join the engine's boxes ``[corners, text, score]`` into lines of text.

    The engine gives a box per word or run of words; boxes whose vertical middles fall within
    one another's height are one line, read left to right.
    """
    found = []
    for corners, text, *_ in boxes:
        xs, ys = [point[0] for point in corners], [point[1] for point in corners]
        found.append((min(ys), max(ys), min(xs), max(xs), str(text).strip()))
    found.sort()
    lines: list[list[tuple[float, float, str]]] = []
    bottom = float("-inf")
    for top, low, left, right, text in found:
        if lines and (top + low) / 2 <= bottom:
            lines[-1].append((left, right, text))
            continue
        lines.append([(left, right, text)])
        bottom = low
    return [_join_line(sorted(line)) for line in lines]


def _join_line(boxes: list[tuple[float, float, str]]) -> str:
    """The texts of one line's boxes (left to right), each overlap read twice kept once.

    The detector may cut a line into boxes that overlap by a letter or two, and each box
    then reads those letters: "lighthouse" + "e keeper". Letters of a box that fall within
    the one before are dropped when they are how that one ended.
    """
    parts: list[str] = []
    previous_right = float("-inf")
    for left, right, text in boxes:
        overlap = previous_right - left
        if overlap > 0 and text and parts:
            letter_width = max(right - left, 1.0) / len(text)
            letters = min(round(overlap / letter_width), len(text))
            while letters and not parts[-1].endswith(text[:letters]):
                letters -= 1
            text = text[letters:].lstrip()
        if text:
            parts.append(text)
        previous_right = max(previous_right, right)
    return " ".join(parts)


def extract_image(path: Path, budget: TextBudget) -> Extraction:
    """The text of an image (its first frame) by OCR; no text without the `ocr` extra."""
    if ocr_engine() is None:
        return Extraction([Segment("", None)], None)
    try:
        image = load_image(path, OCR_SIDE_PIXELS)
    except ThumbnailError as err:
        raise ExtractionError(str(err)) from err
    text = budget.take(read_text(image))
    return Extraction([Segment(clean(text), None)], None, ocr_pages=1)
