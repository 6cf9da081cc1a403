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


def read_text_bytes(path: Path) -> bytes:
    """The whole file, refusing one over MAX_TEXT_FILE_BYTES."""
    with path.open("rb") as file:
        data = file.read(MAX_TEXT_FILE_BYTES + 1)
    if len(data) > MAX_TEXT_FILE_BYTES:
        raise ExtractionError(
            f"the text file is larger than {MAX_TEXT_FILE_BYTES // MIB} MiB, too large to index"
        )
    return data


def decode_text(data: bytes) -> str:
    """Decode text of unknown encoding: BOM, then UTF-8, then cp1252, then detection."""
    for bom, encoding in BOMS:
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
