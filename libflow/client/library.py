"""The file library through the API: folders, files and their three-step upload, search."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any, cast

from yarl import URL

from libflow.client.errors import LibflowError
from libflow.client.paging import pages
from libflow.client.records import FileChunk, Folder, LibraryFile, SearchHit, UploadTicket
from libflow.client.transport import Transport

UPLOAD_PIECE = 1024 * 1024
# Called as bytes go out: (bytes sent so far, the file's size).
Progress = Callable[[int, int], None]
MetadataValue = str | int | float | bool


class UploadFailed(LibflowError):
    """The storage link refused the bytes (the link expired, the size is over the limit...)."""


class Library:
    """One project's folders, files and search."""

    def __init__(self, transport: Transport, project_id: str) -> None:
        self._t = transport
        self._base = f"/projects/{project_id}/library"

    def _url(self, path: str) -> URL:
        return self._t.api_url(self._base + path)

    # Folders

    async def folders(self) -> list[Folder]:
        """Every folder of the project, oldest first, all pages read."""
        return [folder async for folder in pages(self._t, self._url("/dirs"))]

    async def create_folder(self, name: str, parent: str = "root") -> Folder:
        """A new folder under ``parent`` (a folder id or "root")."""
        answer = await self._t.call(
            "POST", self._url("/dirs"), json={"name": name, "parent": parent}
        )
        return cast(Folder, answer.body)

    async def folder(self, folder_id: str) -> Folder:
        """One folder."""
        return cast(Folder, (await self._t.call("GET", self._url(f"/dirs/{folder_id}"))).body)

    async def update_folder(
        self, folder_id: str, *, name: str | None = None, parent: str | None = None
    ) -> Folder:
        """Rename a folder, or move it under ``parent`` (a folder id or "root")."""
        body = {k: v for k, v in (("name", name), ("parent", parent)) if v is not None}
        answer = await self._t.call("PATCH", self._url(f"/dirs/{folder_id}"), json=body)
        return cast(Folder, answer.body)

    async def delete_folder(self, folder_id: str) -> None:
        """Remove an empty folder (one holding files or folders: FOLDER_NOT_EMPTY)."""
        await self._t.call("DELETE", self._url(f"/dirs/{folder_id}"))

    # Files

    async def create_file(
        self,
        name: str,
        *,
        dir: str = "root",
        file_type: str | None = None,
        metadata: Mapping[str, MetadataValue] | None = None,
    ) -> UploadTicket:
        """Step 1 of an upload: the record, and the signed link to PUT the bytes to."""
        body: dict[str, Any] = {
            "originalname": name,
            "fileType": file_type or Path(name).suffix.lstrip(".").lower(),
            "dir": dir,
        }
        if metadata is not None:
            body["metadata"] = dict(metadata)
        return cast(UploadTicket, (await self._t.call("POST", self._url("/files"), json=body)).body)

    async def put_bytes(
        self, ticket: UploadTicket, source: Path | bytes, progress: Progress | None = None
    ) -> None:
        """Step 2: the bytes, streamed to the ticket's storage link."""
        size = (
            len(source)
            if isinstance(source, bytes)
            else (await asyncio.to_thread(source.stat)).st_size
        )
        # The signed link goes as it is (re-quoting would break its signature), and
        # without the API key: it is a credential of its own.
        async with self._t.session.put(
            URL(ticket["storageLink"], encoded=True),
            data=_pieces(source, size, progress),
            headers={"Content-Type": ticket["mimeType"], "Content-Length": str(size)},
        ) as response:
            if response.status >= 400:
                text = (await response.text())[:500]
                raise UploadFailed(f"PUT of {ticket['path']}: {response.status} {text}")

    async def finalize(self, path: str, *, prevent_search: bool = False) -> LibraryFile:
        """Step 3: the server checks the stored bytes and starts processing them."""
        body = {"path": path, "preventSearch": prevent_search}
        answer = await self._t.call("POST", self._url("/files:complete"), json=body)
        return cast(LibraryFile, answer.body)

    async def upload(
        self,
        source: Path | str | bytes,
        *,
        name: str | None = None,
        dir: str = "root",
        metadata: Mapping[str, MetadataValue] | None = None,
        prevent_search: bool = False,
        progress: Progress | None = None,
    ) -> LibraryFile:
        """Create, PUT, finalize: a file (a path, or bytes with a ``name``) into the library."""
        if isinstance(source, str):
            source = Path(source)
        if name is None:
            if isinstance(source, bytes):
                raise ValueError("uploading bytes needs a name (with its extension)")
            name = source.name
        ticket = await self.create_file(name, dir=dir, metadata=metadata)
        await self.put_bytes(ticket, source, progress)
        return await self.finalize(ticket["path"], prevent_search=prevent_search)

    async def files(self, *, dir: str | None = None, page_size: int = 1000) -> list[LibraryFile]:
        """Every file (newest first), all pages read."""
        return [file async for file in self.iter_files(dir=dir, page_size=page_size)]

    def iter_files(
        self, *, dir: str | None = None, page_size: int = 1000
    ) -> AsyncIterator[LibraryFile]:
        """The files, newest first, a page fetched as the previous one runs out."""
        params = {"limit": str(page_size)}
        if dir is not None:
            params["dir"] = dir
        return cast(AsyncIterator[LibraryFile], pages(self._t, self._url("/files"), params))

    async def file(self, file_id: str) -> LibraryFile:
        """One file's record, with its processing state and metadata."""
        return cast(LibraryFile, (await self._t.call("GET", self._url(f"/files/{file_id}"))).body)

    async def update_file(
        self,
        file_id: str,
        *,
        name: str | None = None,
        dir: str | None = None,
        metadata: Mapping[str, MetadataValue] | None = None,
    ) -> LibraryFile:
        """Rename, move, or replace the metadata of a file."""
        body: dict[str, Any] = {}
        if name is not None:
            body["name"] = name
        if dir is not None:
            body["dir"] = dir
        if metadata is not None:
            body["metadata"] = dict(metadata)
        answer = await self._t.call("PATCH", self._url(f"/files/{file_id}"), json=body)
        return cast(LibraryFile, answer.body)

    async def delete_file(self, file_id: str) -> None:
        """Remove the file, its bytes, thumbnail and passages."""
        await self._t.call("DELETE", self._url(f"/files/{file_id}"), expect_json=False)

    async def reprocess(self, file_id: str) -> LibraryFile:
        """Run the file through processing again."""
        answer = await self._t.call("POST", self._url(f"/files/{file_id}/reprocess"))
        return cast(LibraryFile, answer.body)

    async def wait_processed(
        self, file_id: str, *, seconds: float = 120, interval: float = 0.25
    ) -> LibraryFile:
        """The record once processing has ended (``updating`` is no longer true)."""
        deadline = time.monotonic() + seconds
        while True:
            record = await self.file(file_id)
            if not record.get("updating"):
                return record
            if time.monotonic() > deadline:
                raise LibflowError(f"file {file_id} still processing after {seconds} s")
            await asyncio.sleep(interval)

    def iter_chunks(self, file_id: str, *, page_size: int = 100) -> AsyncIterator[FileChunk]:
        """The file's passages in order, as the index holds them."""
        return cast(
            AsyncIterator[FileChunk],
            pages(self._t, self._url(f"/files/{file_id}/chunks"), {"limit": str(page_size)}),
        )

    async def download_url(self, file_id: str, *, thumbnail: bool = False) -> str:
        """The signed address of the file's bytes (or its thumbnail), valid a few minutes."""
        path = f"/files/{file_id}/thumbnail" if thumbnail else f"/files/{file_id}/download"
        answer = await self._t.call("GET", self._url(path), expect_json=False)
        location = answer.headers.get("Location")
        if location is None:
            raise LibflowError(f"GET {path}: {answer.status} without a Location")
        return str(answer.url.join(URL(location, encoded=True)))

    async def download(self, file_id: str, target: Path | str, *, thumbnail: bool = False) -> int:
        """Write the file's bytes (or its thumbnail) to ``target``; how many bytes."""
        target = Path(target)
        url = await self.download_url(file_id, thumbnail=thumbnail)
        written = 0
        async with self._t.session.get(URL(url, encoded=True)) as response:
            if response.status >= 400:
                raise LibflowError(f"GET {url}: {response.status}")
            out = await asyncio.to_thread(target.open, "wb")
            try:
                async for piece in response.content.iter_chunked(UPLOAD_PIECE):
                    await asyncio.to_thread(out.write, piece)
                    written += len(piece)
            finally:
                await asyncio.to_thread(out.close)
        return written

    # Search

    async def search(
        self,
        query: str,
        *,
        limit: int = 10,
        dir: str | None = None,
        filter: Mapping[str, Any] | None = None,
        mode: str | None = None,
    ) -> list[SearchHit]:
        """The passages best matching ``query`` (hybrid unless ``mode`` says otherwise)."""
        body: dict[str, Any] = {"query": query, "limit": limit}
        if dir is not None:
            body["dir"] = dir
        if filter is not None:
            body["filter"] = dict(filter)
        if mode is not None:
            body["mode"] = mode
        answer = await self._t.call("POST", self._url("/search"), json=body)
        return cast(list[SearchHit], answer.body)


async def _pieces(
    source: Path | bytes, size: int, progress: Progress | None
) -> AsyncIterator[bytes]:
    sent = 0
    if isinstance(source, bytes):
        for start in range(0, size, UPLOAD_PIECE):
            piece = source[start : start + UPLOAD_PIECE]
            sent += len(piece)
            if progress is not None:
                progress(sent, size)
            yield piece
        return
    with source.open("rb") as f:
        while piece := await asyncio.to_thread(f.read, UPLOAD_PIECE):
            sent += len(piece)
            if progress is not None:
                progress(sent, size)
            yield piece
