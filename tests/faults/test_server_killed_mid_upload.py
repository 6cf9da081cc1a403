"""kill -9 the server in the middle of PUT uploads: nothing partial shows, a retry succeeds."""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import urllib.request
from collections.abc import AsyncIterator

import aiohttp
import pytest
from yarl import URL

from tests.faults.conftest import ServerFactory
from tests.faults.processes import Server, http_json

SIZE = 16 * 1024 * 1024
CHUNK = 256 * 1024
UPLOADS = 3


@pytest.fixture
def server(start_server: ServerFactory) -> Server:
    return start_server()


async def trickle(data: bytes, sent: asyncio.Event) -> AsyncIterator[bytes]:
    """The body in chunks, slowly enough that the server dies part-way through."""
    for offset in range(0, len(data), CHUNK):
        yield data[offset : offset + CHUNK]
        if offset >= len(data) // 4:
            sent.set()  # a quarter is on the wire
        await asyncio.sleep(0.01)


async def put(session: aiohttp.ClientSession, link: str, mime: str, body: object) -> int:
    headers = {"Content-Type": mime, "Content-Length": str(SIZE)}
    async with session.put(URL(link, encoded=True), data=body, headers=headers) as response:
        return response.status


async def test_an_upload_cut_by_a_server_crash_is_never_visible_and_can_be_retried(
    server: Server,
) -> None:
    project_id, key = server.create_project()
    files_url = f"{server.url}/api/publicv1/projects/{project_id}/library/files"
    auth = {"Authorization": key}
    data = os.urandom(SIZE)
    records = []
    for n in range(UPLOADS):
        status, record = http_json(
            "POST",
            files_url,
            {"originalname": f"big{n}.txt", "fileType": "txt", "dir": "root"},
            **auth,
        )
        assert status == 201, record
        records.append(record)

    async with aiohttp.ClientSession() as session:
        on_the_wire = [asyncio.Event() for _ in records]
        puts = [
            asyncio.create_task(put(session, r["storageLink"], r["mimeType"], trickle(data, e)))
            for r, e in zip(records, on_the_wire, strict=True)
        ]
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in on_the_wire)), 30)
        server.kill()
        for task in puts:
            with pytest.raises(aiohttp.ClientError):
                await task

        await asyncio.to_thread(
            server.start
        )  # same data dir, same port: the signed links still point here
        for record in records:
            # Nothing of the cut upload is an object: finalize sees no bytes at all.
            status, body = http_json(
                "POST", f"{files_url}:complete", {"path": record["path"]}, **auth
            )
            assert (status, body["error"]) == (409, "UPLOAD_INCOMPLETE"), body
            status, body = http_json("GET", f"{files_url}/{record['documentId']}/download", **auth)
            assert (status, body["error"]) == (409, "NOT_READY"), body

        for record in records:  # the client retries with the link it has
            status = await put(session, record["storageLink"], record["mimeType"], io.BytesIO(data))
            assert status == 200

    for record in records:
        status, done = http_json("POST", f"{files_url}:complete", {"path": record["path"]}, **auth)
        assert status == 200, done
        assert done["size"] == SIZE
        download = urllib.request.Request(
            f"{files_url}/{record['documentId']}/download", headers=auth
        )
        with urllib.request.urlopen(download, timeout=60) as reply:  # follows the 302
            assert hashlib.sha256(reply.read()).digest() == hashlib.sha256(data).digest()
    objects = [p for p in (server.data_dir / "objects").rglob("*") if p.is_file()]
    visible = [p for p in objects if not {".tmp", ".meta"} & set(p.parts)]
    assert len(visible) == UPLOADS
