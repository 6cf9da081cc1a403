"""Office packages (docx, pptx, xlsx) checked before a library unpacks them: zip bombs.

Declared sizes and ratios are a first refusal; then every entry is inflated once in bounded
steps, counting what actually comes out (bytes, XML bytes, tags) against the budgets.
"""

from __future__ import annotations

import re
import zipfile
import zlib
from pathlib import Path

from libflow.library.processing.budgets import (
    MAX_UNZIPPED_BYTES,
    MAX_XML_BYTES,
    MAX_XML_TAGS,
    MAX_ZIP_ENTRIES,
    MAX_ZIP_RATIO,
    MIB,
)
from libflow.library.processing.extracted import ExtractionError

_CFB_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # password-protected or legacy binary Office
# libxml2's XML_ERR_NO_MEMORY, the code lxml gives a parse that ran out of memory (under the
# child's address-space limit): a budget, not a damaged file.
_XML_NO_MEMORY = 2


def check_office_zip(path: Path, label: str, *, refuse_dtd: bool = False) -> None:
    """Refuse what is not a zip, and zip bombs, before an office library unpacks it.

    ``refuse_dtd``: also refuse XML that declares a document type (xlsx: openpyxl reads
    sheets with the standard library's parser, which expands entities a DTD declares; Open
    Packaging Conventions parts never carry one).
    """
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
            inflated = _Inflated(label, refuse_dtd=refuse_dtd)
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
# A DOCTYPE in each encoding the standard library's parser (expat) reads.
_DOCTYPES = tuple("<!DOCTYPE".encode(codec) for codec in ("utf-8", "utf-16-le", "utf-16-be"))
_DOCTYPE_SPAN = max(map(len, _DOCTYPES))


class _Inflated:
    """What a package's entries inflated to, as read: refuses a bomb at the first chunk over.

    An entry is counted as XML when its first bytes are XML, whatever its name: the office
    libraries parse a part by its declared content type, not by its file name.
    """

    __slots__ = ("bomb", "dtd", "in_xml", "label", "tags", "tail", "total", "xml")

    def __init__(self, label: str, *, refuse_dtd: bool) -> None:
        self.label = label
        self.bomb = f"the {label} file looks like a zip bomb"
        self.total = self.xml = self.tags = 0
        self.in_xml = False
        self.dtd = refuse_dtd
        self.tail = b""  # the end of the last chunk: a DOCTYPE may straddle two

    def add(self, chunk: bytes, *, first: bool) -> None:
        """Count one chunk read from an entry (``first``: the entry's first chunk)."""
        self.total += len(chunk)
        if self.total > MAX_UNZIPPED_BYTES:
            raise ExtractionError(
                f"{self.bomb}: it unpacks to more than {MAX_UNZIPPED_BYTES // MIB} MiB"
            )
        if first:
            self.in_xml = _XML_START.match(chunk) is not None
            self.tail = b""
        if not self.in_xml:
            return
        if self.dtd:
            self._refuse_dtd(chunk)
        self.xml += len(chunk)
        self.tags += chunk.count(b"<")
        if self.xml > MAX_XML_BYTES:
            raise ExtractionError(
                f"{self.bomb}: its XML inflates to more than {MAX_XML_BYTES // MIB} MiB"
            )
        if self.tags > MAX_XML_TAGS:
            raise ExtractionError(f"{self.bomb}: its XML holds more than {MAX_XML_TAGS:,} tags")

    def _refuse_dtd(self, chunk: bytes) -> None:
        window = self.tail + chunk
        if any(doctype in window for doctype in _DOCTYPES):
            raise ExtractionError(f"not a valid {self.label} file: its XML declares a DOCTYPE")
        self.tail = window[-_DOCTYPE_SPAN:]


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


def raise_if_out_of_memory(err: Exception) -> None:
    """Raise MemoryError for an XML parse that failed for want of memory."""
    if isinstance(err, SyntaxError) and getattr(err, "code", None) == _XML_NO_MEMORY:
        raise MemoryError("the XML parser ran out of memory") from err
