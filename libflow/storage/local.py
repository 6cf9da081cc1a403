"""The local-disk storage backend: objects in the data dir, served by the app's signed URLs."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import time
from collections.abc import AsyncIterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from libflow.storage import ObjectInfo, StorageError, content_disposition
from libflow.storage.signing import UrlSigner

_SEGMENT = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,199}")
_WRITE_BUFFER = 1024 * 1024
# A temp file idle this long belongs to no upload still running.
STALE_TEMP_SECONDS = 3600
# Upload writes and fsyncs get threads of their own, so a burst of uploads never
# starves the default executor that other blocking calls share.
_IO_THREADS = ThreadPoolExecutor(max_workers=8, thread_name_prefix="libflow-upload")


class InvalidKey(ValueError):
    """A key that could escape the storage root or is not one libflow makes."""


class ShortBody(StorageError):
    """The body ended before Content-Length bytes arrived."""


class BodyTooLarge(StorageError):
    """The body carried more bytes than allowed."""


class AlreadyStored(StorageError):
    """An upload arrived for a key that already holds an object: objects are never replaced."""


def _write_chunks(fd: int, chunks: list[bytes], sync: bool) -> None:
    """Write without joining the chunks (no copy); fsync after the last ones."""
    for chunk in chunks:
        view = memoryview(chunk)
        while view:
            view = view[os.write(fd, view) :]
    if sync:
        os.fsync(fd)


def _discard_when_idle(fd: int, tmp: Path, inflight: Future[None] | None) -> None:
    """Close and remove a failed upload's temp file once no thread is using it."""

    def discard(_: object = None) -> None:
        os.close(fd)
        tmp.unlink(missing_ok=True)

    if inflight is None:
        discard()
    else:
        inflight.add_done_callback(discard)


class LocalStorage:
    """Objects as files under ``root``; temp files and metadata live beside them, hidden."""

    def __init__(self, root: Path, signer: UrlSigner) -> None:
        self.root = root.resolve()
        self._tmp = self.root / ".tmp"
        self._meta = self.root / ".meta"
        self.signer = signer
        for path in (self.root, self._tmp, self._meta):
            path.mkdir(parents=True, exist_ok=True)

    def path_for(self, key: str) -> Path:
        """The file of ``key``; raises InvalidKey for anything but plain segments."""
        segments = key.split("/")
        if not key or not all(_SEGMENT.fullmatch(s) for s in segments):
            raise InvalidKey(f"invalid storage key {key!r}")
        return self.root.joinpath(*segments)

    def _meta_path(self, key: str) -> Path:
        self.path_for(key)
        return self._meta.joinpath(*key.split("/")).with_name(key.rsplit("/", 1)[-1] + ".json")

    async def upload_url(self, key: str, content_type: str, expires_in: int) -> str:
        """A signed URL for one PUT of ``key`` with exactly ``content_type``."""
        self.path_for(key)
        return self.signer.sign("PUT", key, content_type=content_type, expires_in=expires_in)

    def upload_key(self, key: str) -> str:
        """``key`` itself: this server refuses a PUT to a key that already holds an object."""
        return key

    async def seal_upload(self, key: str) -> ObjectInfo | None:
        """The object at ``key``: a stored upload is sealed already, nothing replaces it."""
        return await self.head(key)

    async def download_url(
        self, key: str, *, filename: str, content_type: str, expires_in: int, inline: bool = False
    ) -> str:
        """A signed GET URL serving ``key`` under ``filename``."""
        self.path_for(key)
        return self.signer.sign(
            "GET",
            key,
            content_type=content_type,
            expires_in=expires_in,
            disposition=content_disposition(filename, inline=inline),
        )

    async def head(self, key: str) -> ObjectInfo | None:
        """Size from the file, content type from its metadata."""
        return await asyncio.to_thread(self._head, key)

    def _head(self, key: str) -> ObjectInfo | None:
        try:
            size = self.path_for(key).stat().st_size
        except FileNotFoundError:
            return None
        try:
            meta = json.loads(self._meta_path(key).read_text())
            content_type = meta.get("contentType")
        except (FileNotFoundError, ValueError):
            content_type = None
        return ObjectInfo(size=size, content_type=content_type)

    async def read(self, key: str, chunk_size: int = 1024 * 1024) -> AsyncIterator[bytes]:
        """Stream the file in chunks read on a worker thread."""
        # A missing object raises FileNotFoundError, as the S3 backend does.
        f = await asyncio.to_thread(self.path_for(key).open, "rb")
        try:
            while chunk := await asyncio.to_thread(f.read, chunk_size):
                yield chunk
        finally:
            f.close()

    async def write(self, key: str, data: bytes, content_type: str) -> None:
        """Store small bytes atomically."""
        await asyncio.to_thread(self._write_small, key, data, content_type)

    def _write_small(self, key: str, data: bytes, content_type: str) -> None:
        tmp = self._tmp_path()
        with tmp.open("wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        self._commit(tmp, key, content_type, replace=True)

    async def store_stream(
        self,
        key: str,
        content_type: str,
        body: AsyncIterator[bytes],
        length: int,
    ) -> None:
        """Stream exactly ``length`` bytes to a new object at ``key``.

        Nothing is visible unless every byte arrived; AlreadyStored when ``key`` holds an
        object (checked before the body is read, and again by the no-overwrite commit).
        """
        if await asyncio.to_thread(self.path_for(key).exists):
            raise AlreadyStored(f"an object is already stored at {key!r}")
        tmp = self._tmp_path()
        # Opening is one quick syscall: doing it here leaves no window in which a
        # cancelled request owns a file that a thread is still opening.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        # The one thread operation using ``fd`` at a time; a concurrent future, because
        # an asyncio wrapper reports "done" on cancellation while the thread still runs.
        inflight: Future[None] | None = None
        received = 0
        chunks: list[bytes] = []
        buffered = 0
        try:
            async for chunk in body:
                received += len(chunk)
                if received > length:
                    raise BodyTooLarge("the body is longer than its Content-Length")
                chunks.append(chunk)
                buffered += len(chunk)
                if buffered >= _WRITE_BUFFER:
                    # One write in flight on a thread while the next buffer fills.
                    if inflight is not None:
                        await asyncio.wrap_future(inflight)
                    inflight = _IO_THREADS.submit(_write_chunks, fd, chunks, False)
                    chunks, buffered = [], 0
            if received < length:
                raise ShortBody(f"the body ended after {received} of {length} bytes")
            if inflight is not None:
                await asyncio.wrap_future(inflight)
            inflight = _IO_THREADS.submit(_write_chunks, fd, chunks, True)
            await asyncio.wrap_future(inflight)
            inflight = _IO_THREADS.submit(self._commit, tmp, key, content_type, replace=False)
            await asyncio.wrap_future(inflight)
        except BaseException:
            _discard_when_idle(fd, tmp, inflight)
            raise
        os.close(fd)

    def remove_stale_temp_files(self, older_than: float = STALE_TEMP_SECONDS) -> int:
        """Remove temp files nothing has written to for ``older_than`` seconds.

        An upload in progress writes to its temp file all the time, so an idle one was cut
        off (a crash, a kill -9); other processes sharing this root are left alone.
        """
        cutoff = time.time() - older_than
        removed = 0
        for path in self._tmp.glob("*.part"):
            with contextlib.suppress(FileNotFoundError):
                if path.stat().st_mtime < cutoff:
                    path.unlink()
                    removed += 1
        return removed

    def _tmp_path(self) -> Path:
        return self._tmp / f"{os.urandom(12).hex()}.part"

    def _commit(self, tmp: Path, key: str, content_type: str, *, replace: bool) -> None:
        """Metadata first, then the atomic rename (or link) that makes the object visible.

        ``replace=False`` never replaces an object: a hard link fails atomically when the
        name exists, so of two uploads racing for one key (or an upload racing finalize)
        exactly one becomes the object and it is never swapped afterwards. The loser may
        have rewritten the metadata first, with the same content type (both were signed
        for the same record).
        """
        target = self.path_for(key)
        if not replace and target.exists():
            raise AlreadyStored(f"an object is already stored at {key!r}")
        meta = self._meta_path(key)
        meta.parent.mkdir(parents=True, exist_ok=True)
        meta_tmp = self._tmp_path()
        meta_tmp.write_text(json.dumps({"contentType": content_type}))
        os.replace(meta_tmp, meta)
        target.parent.mkdir(parents=True, exist_ok=True)
        if replace:
            os.replace(tmp, target)
        else:
            try:
                os.link(tmp, target)
            except FileExistsError as err:
                raise AlreadyStored(f"an object is already stored at {key!r}") from err
            tmp.unlink()
        dir_fd = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    async def delete(self, key: str) -> None:
        """Remove the object and its metadata."""
        await asyncio.to_thread(self._delete, key)

    def _delete(self, key: str) -> None:
        self.path_for(key).unlink(missing_ok=True)
        self._meta_path(key).unlink(missing_ok=True)

    async def check(self) -> None:
        """The root must exist and be writable."""
        if not await asyncio.to_thread(os.access, self.root, os.W_OK):
            raise StorageError(f"storage dir {self.root} is not writable")
