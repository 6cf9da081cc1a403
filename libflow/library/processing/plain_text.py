"""Text files of unknown encoding: txt, csv and md are read whole and decoded."""

from __future__ import annotations

import codecs
from pathlib import Path

from charset_normalizer import from_bytes

from libflow.library.processing.budgets import MAX_TEXT_FILE_BYTES, MIB
from libflow.library.processing.extracted import ExtractionError

_ICELANDIC = frozenset("ðÐþÞ")
BOMS = (  # UTF-32 first: its little-endian BOM starts with UTF-16's
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


# Binary formats by their first bytes: a file of one of them uploaded as a text type
# would otherwise be "decoded" into noise and indexed, crowding searches.
_SIGNATURES = (
    (b"%PDF-", "a pdf", "pdf"),
    (b"PK\x03\x04", "a zip archive (docx, pptx and xlsx are zip archives)", None),
    (b"\x89PNG\r\n\x1a\n", "a PNG image", "png"),
    (b"\xff\xd8\xff", "a JPEG image", "jpg"),
    (b"GIF87a", "a GIF image", "gif"),
    (b"GIF89a", "a GIF image", "gif"),
    (b"\x1f\x8b", "gzip-compressed", None),
    (b"\x7fELF", "an executable", None),
)
# Bytes no text holds: controls other than tab, the line breaks (LF, VT: FileMaker's line
# break in a field, FF, CR), SUB (DOS's end-of-file padding) and ESC (terminal colours). A
# text file may carry a few stray ones (they are dropped); random binary bytes are one in
# ten of them, a binary format's usually more.
_NOT_TEXT = bytes([*range(0, 9), *range(14, 26), *range(28, 32)])
_SAMPLE_BYTES = 8192
_MOST_NOT_TEXT = 0.05
_STRAY_NOT_TEXT = 8
# Text in UTF-16 or UTF-32 without a byte-order mark: its NULs are the high bytes of its
# characters, so they hold one place of every two (or four). Recognised by _wide_codec.
_LITTLE_ENDIAN = ("utf-16-le", "utf-32-le")
_BIG_ENDIAN = ("utf-16-be", "utf-32-be")


def read_text_bytes(path: Path) -> bytes:
    """The whole file, refusing one over MAX_TEXT_FILE_BYTES."""
    with path.open("rb") as file:
        data = file.read(MAX_TEXT_FILE_BYTES + 1)
    if len(data) > MAX_TEXT_FILE_BYTES:
        raise ExtractionError(
            f"the text file is larger than {MAX_TEXT_FILE_BYTES // MIB} MiB, too large to index"
        )
    return data


def refuse_binary(data: bytes) -> None:
    """ExtractionError if ``data`` begins as a binary format does, or if more than 5% of its
    first 8 KiB are bytes no text holds; text in UTF-16 or UTF-32 (with a byte-order mark
    or without) is text. Only the start is looked at: a binary format says what it is
    there, and the look costs the same for any size."""
    if any(data.startswith(bom) for bom, _ in BOMS):
        return
    for signature, what, file_type in _SIGNATURES:
        if data.startswith(signature):
            raise ExtractionError(_not_text(what, file_type))
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        raise ExtractionError(_not_text("a WEBP image", "webp"))
    sample = data[:_SAMPLE_BYTES]
    not_text = len(sample) - len(sample.translate(None, _NOT_TEXT))
    if not_text > max(_STRAY_NOT_TEXT, _MOST_NOT_TEXT * len(sample)) and not _wide_codec(sample):
        raise ExtractionError("not a text file: its bytes are binary, not characters")


def _not_text(what: str, file_type: str | None) -> str:
    upload = f"; upload it with fileType {file_type!r}" if file_type else ""
    return f"not a text file: its bytes are {what}{upload}"


def _wide_codec(sample: bytes) -> str | None:
    """The UTF-16 or UTF-32 codec ``sample`` (with no BOM) decodes in to text with no
    control characters but line breaks and tabs, if any: the NULs of such text are the
    high bytes of its characters, half its bytes or more."""
    # A stray NUL in 8-bit text must not make it read as UTF-16 (every pair of its bytes a
    # CJK character): wide text of mostly ASCII or Latin letters is a NUL in every two
    # bytes or more. (Wide text of other scripts has few NULs: detection reads it.)
    if sample.count(0) < max(_STRAY_NOT_TEXT, len(sample) // 10):
        return None
    # The high bytes come second in little-endian text (NULs at odd places), first in
    # big-endian: either order decodes without an error, but only one gives the letters.
    odd_first = sample[1::2].count(0) > sample[0::2].count(0)
    for codec in _LITTLE_ENDIAN + _BIG_ENDIAN if odd_first else _BIG_ENDIAN + _LITTLE_ENDIAN:
        width = 4 if "32" in codec else 2
        try:
            text = sample[: len(sample) - len(sample) % width].decode(codec)
        except UnicodeDecodeError:
            continue
        if text and not any(char < " " and char not in "\t\n\r\f\v" for char in text):
            return codec
    return None


def decode_text(data: bytes) -> str:
    """Decode text of unknown encoding: BOM, then UTF-16/32 by their NULs, then UTF-8, then
    cp1252, then detection."""
    for bom, encoding in BOMS:
        if data.startswith(bom):
            return data.decode(encoding, errors="replace")
    wide = _wide_codec(data[:_SAMPLE_BYTES])
    if wide is not None:
        return data.decode(wide, errors="replace")
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
