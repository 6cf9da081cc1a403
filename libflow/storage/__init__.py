"""Object storage: one protocol, a local-disk backend and an S3 backend."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import quote


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """What storage knows about a stored object."""

    size: int
    content_type: str | None
    # What the uploader declared (S3 keeps a PUT's Content-Encoding): the bytes are not
    # the file itself unless this is None or "identity".
    content_encoding: str | None = None


class StorageError(Exception):
    """A storage operation failed for a reason other than a missing object."""


class Storage(Protocol):
    """Where library bytes live. Keys are ``/``-separated, without a leading ``/``."""

    async def upload_url(self, key: str, content_type: str, expires_in: int) -> str:
        """A URL that accepts one PUT of ``key`` with exactly ``content_type``."""
        ...

    def upload_key(self, key: str) -> str:
        """Where the storageLink of ``key`` puts its bytes until finalize seals them.

        A backend that cannot refuse a PUT (S3's presigned URLs stay valid until they
        expire) stages uploads under another key, so no PUT ever reaches a sealed object.
        """
        ...

    async def seal_upload(self, key: str) -> ObjectInfo | None:
        """Make the upload staged for ``key`` the object served at ``key``, never replaced.

        An object already at ``key`` is kept as it is; None when nothing was uploaded.
        """
        ...

    async def download_url(
        self, key: str, *, filename: str, content_type: str, expires_in: int, inline: bool = False
    ) -> str:
        """A URL that serves ``key`` with a Content-Disposition naming ``filename``."""
        ...

    async def head(self, key: str) -> ObjectInfo | None:
        """Size and content type of ``key``, or None when nothing is stored there."""
        ...

    def read(self, key: str, chunk_size: int = 1024 * 1024) -> AsyncIterator[bytes]:
        """Stream the bytes of ``key``; FileNotFoundError when nothing is stored there."""
        ...

    async def write(self, key: str, data: bytes, content_type: str) -> None:
        """Store a small object (thumbnails) in one call."""
        ...

    async def delete(self, key: str) -> None:
        """Remove ``key`` and any upload staged for it; a missing key is not an error."""
        ...

    async def check(self) -> None:
        """Raise StorageError when the backend cannot serve requests."""
        ...


# The chunk ``read`` streams in by default; ``read_start`` asks for less when it wants less.
_READ_CHUNK_BYTES = 1024 * 1024


async def read_start(storage: Storage, key: str, size: int) -> bytes:
    """The first ``size`` bytes of ``key`` (all of it when shorter), its stream closed as
    soon as they are in; FileNotFoundError when nothing is stored there."""
    data = bytearray()
    stream = storage.read(key, chunk_size=min(size, _READ_CHUNK_BYTES))
    try:
        async for piece in stream:
            data += piece
            if len(data) >= size:
                break
    finally:
        close = getattr(stream, "aclose", None)
        if close is not None:
            await close()
    return bytes(data[:size])


# Unicode bidi controls: in a saved name, "invoice\u202efdp.exe" displays as "invoiceexe.pdf".
BIDI_CONTROLS = frozenset(
    "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
)


def content_disposition(filename: str, *, inline: bool = False) -> str:
    """An RFC 6266 Content-Disposition with an ASCII fallback and a UTF-8 ``filename*``.

    A display name may be ``../../etc/passwd``: the saved file gets no directory part, no
    control characters and no bidi controls, whatever the client does with them (RFC 6266
    section 4.3).
    """
    filename = "".join(c for c in filename if c not in BIDI_CONTROLS)
    filename = "".join("_" if c in "/\\" or ord(c) < 32 or ord(c) == 127 else c for c in filename)
    fallback = (
        "".join(c if 32 <= ord(c) < 127 and c not in '"\\%;' else "_" for c in filename)
        or "download"
    )
    kind = "inline" if inline else "attachment"
    return f"{kind}; filename=\"{fallback}\"; filename*=UTF-8''{quote(filename, safe='')}"
