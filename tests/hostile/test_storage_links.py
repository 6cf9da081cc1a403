"""A storageLink takes one upload and finalize seals it: what is served never changes after.

An attacker with one ordinary API key holds the storageLink of every file they create: a
PUT after processing, after a delete, racing finalize or racing another PUT must never
change the bytes served under a record, nor leave bytes without a record. Also the
storage routes' refusals: a bad Range, an over-limit or dead upload announced with
``Expect: 100-continue``, a compressed upload, and bidi controls in a download's name.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from libflow import appkeys
from libflow.errors import EmptyUpload, NotFound, Unavailable, UploadIncomplete
from libflow.library import files
from libflow.library.files import finalize_upload
from libflow.storage import BIDI_CONTROLS, StorageError
from libflow.storage.local import LocalStorage
from tests.conftest import (
    Api,
    ClientFactory,
    Shape,
    base_settings,
    create_record,
    new_project,
    put_bytes,
    wait_until_processed,
)
from tests.hostile.conftest import healthz_stays_responsive, peak_rss_growth
from tests.library_helpers import assert_error, eventually, link
from tests.processing_helpers import search

# How far the server's peak RSS may rise while it refuses one hostile upload: a refused
# body is never kept (a bomb below inflates to 64 MiB, which must never be held whole).
RSS_BOUND_MIB = 48
# A body sent to a dead link: larger than the RSS bound, so keeping it would show.
LARGE_BODY_MIB = 96
# Rounds of the races below: each is a fresh record, and a lost race shows in any one.
RACE_ROUNDS = 4

ORIGINAL = b"the original quarterly words of this ledger\n" * 40
SWAPPED = b"swapped bytes an attacker wants served instead\n" * 70


def is_local(api: Api) -> bool:
    """The embedded shape: this server receives the PUTs and can refuse them."""
    return api.shape.settings.storage == "local"


def storage_of(api: Api) -> Any:
    """The app's storage backend."""
    assert api.client.app is not None
    return api.client.app[appkeys.STORAGE]


def local_storage(api: Api) -> LocalStorage:
    """The app's local backend (embedded shape)."""
    storage = storage_of(api)
    assert isinstance(storage, LocalStorage)
    return storage


def visible_files(root: Path) -> list[Path]:
    """Every object, temp file and metadata file under the storage root."""
    return sorted(p for p in root.rglob("*") if p.is_file())


async def put(api: Api, created: dict[str, Any], data: bytes, **headers: str) -> int:
    """PUT ``data`` to the storageLink; the status."""
    async with api.client.session.put(
        link(created["storageLink"]),
        data=io.BytesIO(data),
        headers={"Content-Type": created["mimeType"], **headers},
    ) as response:
        await response.read()
        return response.status


async def finalize(api: Api, path: str) -> Any:
    """Operation 4."""
    return await api.call("POST", "/files:complete", json={"path": path})


async def upload_text(api: Api, data: bytes, *, processed: bool = True) -> dict[str, Any]:
    """Create a txt record, PUT ``data``, finalize (and process) it; the created record."""
    created = await create_record(api, name="ledger.txt", file_type="txt")
    assert await put(api, created, data) == 200
    assert (await finalize(api, created["path"])).status == 200
    if processed:
        await wait_until_processed(api, created["documentId"])
    return created


async def record_of(api: Api, file_id: str) -> dict[str, Any]:
    """Get-one."""
    response = await api.call("GET", f"/files/{file_id}")
    assert response.status == 200, await response.text()
    body: dict[str, Any] = await response.json()
    return body


async def download_location(api: Api, file_id: str) -> str:
    """The signed GET URL the download operation redirects to."""
    response = await api.call("GET", f"/files/{file_id}/download", allow_redirects=False)
    assert response.status == 302, await response.text()
    location: str = response.headers["Location"]
    return location


async def served(api: Api, file_id: str) -> bytes:
    """The bytes a download of the file serves."""
    async with api.client.session.get(link(await download_location(api, file_id))) as got:
        assert got.status == 200, await got.text()
        return await got.read()


def sha256(data: bytes) -> str:
    """Hex SHA-256, as records carry it."""
    return hashlib.sha256(data).hexdigest()


async def assert_record_describes_what_is_served(api: Api, file_id: str) -> bytes:
    """Size and sha256 of the processed record are those of the bytes served; those bytes."""
    record = await wait_until_processed(api, file_id)
    data = await served(api, file_id)
    assert (record["size"], record["sha256"]) == (len(data), sha256(data)), record
    return data


def gzip_bomb(inflated_mib: int) -> bytes:
    """A gzip body of ``inflated_mib`` MiB of spaces (about 1000:1)."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: the gzip container
    mib = b" " * (1024 * 1024)
    return b"".join([*(compressor.compress(mib) for _ in range(inflated_mib)), compressor.flush()])


async def project_api(start_app: ClientFactory, tmp_path: Path, **overrides: Any) -> Api:
    """A project on an embedded server with some settings changed."""
    shape = Shape("embedded", base_settings(tmp_path, **overrides))
    client = await start_app(shape.settings)
    project_id, secret = await new_project()
    return Api(client, shape, project_id, secret)


async def exchange(api: Api, head: bytes) -> tuple[list[bytes], dict[str, str], bytes]:
    """Send a request head alone; the status lines received, the final headers and body.

    No body follows the head, as a client waiting for ``100 Continue`` sends none: a 100
    would show as a first status line before the final one.
    """
    server = api.client.server
    reader, writer = await asyncio.open_connection(server.host, server.port)
    try:
        writer.write(head)
        await writer.drain()
        status_lines = []
        while True:
            block = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            lines = block.decode("latin-1").split("\r\n")
            status_lines.append(lines[0].encode())
            if not lines[0].startswith("HTTP/1.1 100"):
                break
        headers = {
            name.strip().lower(): value.strip()
            for name, _, value in (line.partition(":") for line in lines[1:] if line)
        }
        body = await reader.readexactly(int(headers["content-length"]))
    finally:
        writer.close()
        await writer.wait_closed()
    return status_lines, headers, body


def put_head(created: dict[str, Any], length: int, *extra: str) -> bytes:
    """The head of a PUT to the storageLink declaring ``length`` bytes."""
    lines = [
        f"PUT {link(created['storageLink']).raw_path_qs} HTTP/1.1",
        "Host: localhost",
        f"Content-Type: {created['mimeType']}",
        f"Content-Length: {length}",
        *extra,
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


# --- a storageLink after finalize and after delete --------------------------------------------


async def test_a_put_after_processing_changes_nothing_served(shaped_api: Api) -> None:
    api = shaped_api
    created = await upload_text(api, ORIGINAL)
    file_id = created["documentId"]
    before = await record_of(api, file_id)

    async with healthz_stays_responsive(api.client):
        with peak_rss_growth() as growth:
            status = await put(api, created, SWAPPED)
    if is_local(api):
        assert status == 403  # FORBIDDEN (its JSON body: the next test)
    else:
        assert status == 200  # S3's presigned URL wrote the staging key, which nothing reads
    assert growth.mib < RSS_BOUND_MIB

    assert await served(api, file_id) == ORIGINAL
    assert await record_of(api, file_id) == before
    assert (before["size"], before["sha256"]) == (len(ORIGINAL), sha256(ORIGINAL))
    assert {hit["fileId"] for hit in await search(api, "quarterly ledger")} == {file_id}
    assert await search(api, "attacker") == []


async def test_a_put_after_finalize_is_403_forbidden_with_a_json_body(api: Api) -> None:
    created = await upload_text(api, ORIGINAL, processed=False)
    async with put_bytes(api, created, SWAPPED) as response:
        body = await assert_error(response, 403, "FORBIDDEN")
        assert response.headers["Connection"] == "close"
    assert "finalized" in body["message"]


async def test_finalize_again_after_a_put_keeps_the_sealed_bytes(shaped_api: Api) -> None:
    api = shaped_api
    created = await upload_text(api, ORIGINAL)
    await put(api, created, SWAPPED)

    again = await finalize(api, created["path"])
    assert again.status == 200, await again.text()
    assert (await again.json())["size"] == len(ORIGINAL)
    assert await assert_record_describes_what_is_served(api, created["documentId"]) == ORIGINAL


async def test_a_put_after_delete_recreates_nothing(shaped_api: Api) -> None:
    api = shaped_api
    created = await upload_text(api, ORIGINAL)
    file_id = created["documentId"]
    assert (await api.call("DELETE", f"/files/{file_id}")).status == 204

    async with healthz_stays_responsive(api.client):
        with peak_rss_growth() as growth:
            status = await put(api, created, SWAPPED)
    assert growth.mib < RSS_BOUND_MIB

    assert await storage_of(api).head(created["path"]) is None
    download = await api.call("GET", f"/files/{file_id}/download", allow_redirects=False)
    await assert_error(download, 404, "NOT_FOUND")
    if is_local(api):
        assert status == 403
        assert visible_files(local_storage(api).root) == []
    else:
        assert status == 200  # staged under uploads/, never served (README: lifecycle rule)


async def test_a_put_after_delete_is_403_forbidden_with_a_json_body(api: Api) -> None:
    created = await create_record(api)
    assert (await api.call("DELETE", f"/files/{created['documentId']}")).status == 204
    async with put_bytes(api, created, b"%PDF-1.7 late") as response:
        body = await assert_error(response, 403, "FORBIDDEN")
    assert "deleted" in body["message"]
    assert visible_files(local_storage(api).root) == []


async def test_a_large_body_sent_to_a_dead_link_is_refused_and_never_kept(api: Api) -> None:
    created = await upload_text(api, ORIGINAL, processed=False)
    mib = b"x" * (1024 * 1024)

    async def body() -> AsyncIterator[bytes]:
        for _ in range(LARGE_BODY_MIB):
            yield mib  # one buffer, sent again and again: the client holds 1 MiB

    async with healthz_stays_responsive(api.client):
        with peak_rss_growth() as growth:
            async with api.client.session.put(
                link(created["storageLink"]),
                data=body(),
                headers={
                    "Content-Type": created["mimeType"],
                    "Content-Length": str(LARGE_BODY_MIB * len(mib)),
                },
            ) as response:
                await assert_error(response, 403, "FORBIDDEN")
                assert response.headers["Connection"] == "close"
    assert growth.mib < RSS_BOUND_MIB
    assert await served(api, created["documentId"]) == ORIGINAL
    # Processing of the first upload writes its text and thumbnail through the same temp
    # folder: once it is over, any temp file left would be the refused body's.
    await wait_until_processed(api, created["documentId"])
    assert not any((local_storage(api).root / ".tmp").iterdir())


# --- one upload per link, and the bytes finalize records are the bytes served -----------------


async def test_a_second_complete_put_is_403_and_the_first_is_kept(api: Api) -> None:
    created = await create_record(api, name="ledger.txt", file_type="txt")
    assert await put(api, created, ORIGINAL) == 200
    async with put_bytes(api, created, SWAPPED) as response:
        body = await assert_error(response, 403, "FORBIDDEN")
    assert "already received" in body["message"]

    response = await finalize(api, created["path"])
    assert (await response.json())["size"] == len(ORIGINAL)
    assert await assert_record_describes_what_is_served(api, created["documentId"]) == ORIGINAL


async def test_an_upload_cut_off_can_be_sent_again(api: Api) -> None:
    created = await create_record(api, name="ledger.txt", file_type="txt")
    server = api.client.server
    reader, writer = await asyncio.open_connection(server.host, server.port)
    writer.write(put_head(created, len(ORIGINAL)) + ORIGINAL[:100])
    await writer.drain()
    tmp_dir = local_storage(api).root / ".tmp"
    await eventually(lambda: any(tmp_dir.iterdir()), "the upload reaches a temp file")
    writer.close()
    await writer.wait_closed()
    reader.feed_eof()
    await eventually(lambda: not any(tmp_dir.iterdir()), "the cut upload is discarded")

    assert await put(api, created, ORIGINAL) == 200
    assert (await finalize(api, created["path"])).status == 200
    assert await assert_record_describes_what_is_served(api, created["documentId"]) == ORIGINAL


async def test_puts_racing_each_other_and_finalize_never_split_record_and_bytes(
    shaped_api: Api,
) -> None:
    api = shaped_api
    bodies = [f"upload number {n} of the race\n".encode() * (10 + 7 * n) for n in range(3)]
    for _ in range(RACE_ROUNDS):
        created = await create_record(api, name="race.txt", file_type="txt")
        async with healthz_stays_responsive(api.client):
            results = await asyncio.gather(
                *(put(api, created, body) for body in bodies),
                *(finalize(api, created["path"]) for _ in range(3)),
            )
        puts = results[: len(bodies)]
        if is_local(api):
            assert sorted(puts) == [200, 403, 403]  # one upload per link
        else:
            assert puts == [200, 200, 200]
        # Every finalize answered 200 or 409 UPLOAD_INCOMPLETE (it ran before any bytes).
        assert {r.status for r in results[len(bodies) :]} <= {200, 409}
        final = await finalize(api, created["path"])
        assert final.status == 200, await final.text()

        data = await assert_record_describes_what_is_served(api, created["documentId"])
        assert data in bodies
        # Whatever the link receives afterwards, nothing changes.
        await asyncio.gather(*(put(api, created, body) for body in bodies))
        assert await served(api, created["documentId"]) == data


async def test_puts_racing_a_delete_leave_no_bytes_served(shaped_api: Api) -> None:
    api = shaped_api
    for _ in range(RACE_ROUNDS):
        created = await create_record(api, name="race.txt", file_type="txt")
        await asyncio.gather(
            put(api, created, ORIGINAL),
            api.call("DELETE", f"/files/{created['documentId']}"),
            put(api, created, SWAPPED),
        )
        assert await storage_of(api).head(created["path"]) is None
    if is_local(api):
        root = local_storage(api).root
        await eventually(lambda: visible_files(root) == [], "no object outlives its record")


# --- compressed uploads ------------------------------------------------------------------------


async def test_a_gzip_upload_is_refused_and_the_file_itself_is_accepted(shaped_api: Api) -> None:
    api = shaped_api
    created = await create_record(api, name="ledger.txt", file_type="txt")
    bomb = gzip_bomb(64)

    async with healthz_stays_responsive(api.client):
        with peak_rss_growth() as growth:
            async with api.client.session.put(
                link(created["storageLink"]),
                data=io.BytesIO(bomb),
                headers={"Content-Type": created["mimeType"], "Content-Encoding": "gzip"},
            ) as response:
                if is_local(api):
                    await assert_error(response, 400, "VALIDATION_ERROR")
                else:
                    assert response.status == 200  # S3 keeps the bytes as sent
            refused = await finalize(api, created["path"])
    assert growth.mib < RSS_BOUND_MIB
    if is_local(api):
        await assert_error(refused, 409, "UPLOAD_INCOMPLETE")
        assert visible_files(local_storage(api).root) == []
    else:
        body = await assert_error(refused, 409, "CONTENT_TYPE_MISMATCH")
        assert "Content-Encoding" in body["message"]
    assert (await record_of(api, created["documentId"]))["size"] == 0

    assert await put(api, created, ORIGINAL) == 200
    assert (await finalize(api, created["path"])).status == 200
    assert await assert_record_describes_what_is_served(api, created["documentId"]) == ORIGINAL


async def test_an_identity_content_encoding_is_accepted(api: Api) -> None:
    created = await create_record(api, name="ledger.txt", file_type="txt")
    assert await put(api, created, ORIGINAL, **{"Content-Encoding": "identity"}) == 200


# --- refusals before the body: Connection: close, and no 100 Continue --------------------------


async def test_a_put_over_the_limit_is_413_and_closes_the_connection(
    start_app: ClientFactory, tmp_path: Path
) -> None:
    api = await project_api(start_app, tmp_path, max_upload_bytes=1000)
    created = await create_record(api, name="ledger.txt", file_type="txt")
    async with healthz_stays_responsive(api.client):
        status_lines, headers, body = await exchange(api, put_head(created, 10**12))
    assert status_lines == [b"HTTP/1.1 413 Request Entity Too Large"]
    assert headers["connection"] == "close"
    assert headers["content-type"].startswith("application/json")
    assert b'"PAYLOAD_TOO_LARGE"' in body
    assert visible_files(local_storage(api).root) == []


async def test_expect_100_continue_over_the_limit_gets_413_before_any_100(
    start_app: ClientFactory, tmp_path: Path
) -> None:
    api = await project_api(start_app, tmp_path, max_upload_bytes=1000)
    created = await create_record(api, name="ledger.txt", file_type="txt")
    head = put_head(created, 10**12, "Expect: 100-continue")
    status_lines, headers, body = await exchange(api, head)
    assert status_lines == [b"HTTP/1.1 413 Request Entity Too Large"]
    assert headers["connection"] == "close"
    assert b'"PAYLOAD_TOO_LARGE"' in body


async def test_expect_100_continue_on_a_dead_link_gets_403_before_any_100(api: Api) -> None:
    created = await upload_text(api, ORIGINAL, processed=False)
    head = put_head(created, len(SWAPPED), "Expect: 100-continue")
    status_lines, headers, body = await exchange(api, head)
    assert status_lines == [b"HTTP/1.1 403 Forbidden"]
    assert headers["connection"] == "close"
    assert b'"FORBIDDEN"' in body
    assert await served(api, created["documentId"]) == ORIGINAL


async def test_expect_100_continue_on_a_good_upload_continues_and_stores(api: Api) -> None:
    created = await create_record(api, name="ledger.txt", file_type="txt")
    server = api.client.server
    reader, writer = await asyncio.open_connection(server.host, server.port)
    try:
        writer.write(put_head(created, len(ORIGINAL), "Expect: 100-continue"))
        interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    finally:
        writer.close()
        await writer.wait_closed()
    assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"  # the body may come: none did

    async with api.client.session.put(
        link(created["storageLink"]),
        data=ORIGINAL,
        headers={"Content-Type": created["mimeType"]},
        expect100=True,
    ) as response:
        assert response.status == 200, await response.text()
    assert (await finalize(api, created["path"])).status == 200
    assert await assert_record_describes_what_is_served(api, created["documentId"]) == ORIGINAL


async def test_a_fault_while_checking_an_expectation_sends_no_100_and_the_put_checks_again(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    created = await create_record(api, name="ledger.txt", file_type="txt")
    real_check = files.check_upload_open
    calls: list[str] = []

    async def database_blip_once(key: str) -> None:
        calls.append(key)
        if len(calls) == 1:
            raise ConnectionResetError("the database connection dropped")
        await real_check(key)

    monkeypatch.setattr(files, "check_upload_open", database_blip_once)
    server = api.client.server
    reader, writer = await asyncio.open_connection(server.host, server.port)
    try:
        # A client may send the body without waiting for the 100 (RFC 9110 10.1.1).
        head = put_head(created, len(ORIGINAL), "Expect: 100-continue", "Connection: close")
        writer.write(head + ORIGINAL)
        answer = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
        await writer.wait_closed()
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n")  # no 100 before it
    assert calls == [created["path"], created["path"]]
    assert local_storage(api).path_for(created["path"]).read_bytes() == ORIGINAL


async def test_an_unknown_expectation_is_417_json(api: Api) -> None:
    created = await create_record(api, name="ledger.txt", file_type="txt")
    status_lines, headers, body = await exchange(
        api, put_head(created, len(ORIGINAL), "Expect: something-else")
    )
    assert status_lines == [b"HTTP/1.1 417 Expectation Failed"]
    assert headers["connection"] == "close"
    assert b'"VALIDATION_ERROR"' in body


# --- ranges ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "wanted",
    [f"bytes={len(ORIGINAL)}-", f"bytes={len(ORIGINAL) + 10}-{len(ORIGINAL) + 20}", "bytes=9-2"],
    ids=["at-the-end", "past-the-end", "backwards"],
)
async def test_an_unsatisfiable_range_is_416_json_with_the_size(api: Api, wanted: str) -> None:
    created = await upload_text(api, ORIGINAL, processed=False)
    location = await download_location(api, created["documentId"])
    async with api.client.session.get(link(location), headers={"Range": wanted}) as response:
        await assert_error(response, 416, "VALIDATION_ERROR")
        assert response.headers["Content-Range"] == f"bytes */{len(ORIGINAL)}"


@pytest.mark.parametrize("wanted", ["bytes=0-1,5-6", "lines=1-2", "bytes=x-"])
async def test_a_range_this_server_does_not_serve_is_416_json(api: Api, wanted: str) -> None:
    created = await upload_text(api, ORIGINAL, processed=False)
    location = await download_location(api, created["documentId"])
    async with api.client.session.get(link(location), headers={"Range": wanted}) as response:
        await assert_error(response, 416, "VALIDATION_ERROR")
        assert response.headers["Content-Range"] == f"bytes */{len(ORIGINAL)}"


async def test_a_range_under_a_stale_if_range_serves_the_whole_object(api: Api) -> None:
    created = await upload_text(api, ORIGINAL, processed=False)
    location = await download_location(api, created["documentId"])
    headers = {"Range": f"bytes={len(ORIGINAL) + 10}-", "If-Range": "Thu, 01 Jan 1970 00:00:00 GMT"}
    async with api.client.session.get(link(location), headers=headers) as response:
        assert response.status == 200
        assert await response.read() == ORIGINAL


# --- names -------------------------------------------------------------------------------------


async def test_bidi_controls_are_stripped_from_the_saved_name(shaped_api: Api) -> None:
    api = shaped_api
    controls = "".join(sorted(BIDI_CONTROLS))
    assert len(controls) == 12
    name = f"invoice{controls}\u202efdp.exe"  # displays as "invoiceexe.pdf" in a file manager
    created = await create_record(api, name=name, file_type="txt")
    assert await put(api, created, ORIGINAL) == 200
    assert (await finalize(api, created["path"])).status == 200

    async with api.client.session.get(
        link(await download_location(api, created["documentId"]))
    ) as got:
        assert got.status == 200
        disposition = got.headers["Content-Disposition"]
    assert disposition == (
        "attachment; filename=\"invoicefdp.exe\"; filename*=UTF-8''invoicefdp.exe"
    )


# --- finalize's seal, when something lands between its check and its copy ---------------------


@pytest.fixture
async def s3_api(start_app: ClientFactory, scaled: Shape) -> Api:
    """A project on the scaled shape: S3 (moto) accepts every PUT to a storageLink."""
    client = await start_app(scaled.settings)
    project_id, secret = await new_project()
    return Api(client, scaled, project_id, secret)


class SealHooks:
    """The app's storage, with something done just before or just after a seal."""

    def __init__(
        self,
        storage: Any,
        before: Callable[[], Awaitable[None]] | None = None,
        after: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._storage = storage
        self._before = before
        self._after = after

    def __getattr__(self, name: str) -> Any:
        return getattr(self._storage, name)

    async def seal_upload(self, key: str) -> Any:
        """The real seal, between the hooks."""
        if self._before is not None:
            await self._before()
        sealed = await self._storage.seal_upload(key)
        if self._after is not None:
            await self._after()
        return sealed


async def finalize_through(api: Api, storage: SealHooks, path: str) -> Any:
    """The finalize service on ``storage`` (no HTTP client can land a PUT mid-finalize)."""
    assert api.client.app is not None
    return await finalize_upload(
        storage,
        api.client.app[appkeys.JOBS],
        api.client.app[appkeys.READS],
        project_id=api.project_id,
        path=path,
        prevent_search=False,
        max_bytes=api.shape.settings.max_upload_bytes,
    )


async def test_bytes_put_between_check_and_seal_are_the_ones_recorded(s3_api: Api) -> None:
    api = s3_api
    created = await create_record(api, name="ledger.txt", file_type="txt")
    assert await put(api, created, ORIGINAL) == 200

    async def swap() -> None:
        assert await put(api, created, SWAPPED) == 200

    finalized = await finalize_through(
        api, SealHooks(storage_of(api), before=swap), created["path"]
    )
    assert finalized.size == len(SWAPPED)
    assert await assert_record_describes_what_is_served(api, created["documentId"]) == SWAPPED


async def test_an_empty_put_between_check_and_seal_unseals_and_refuses(s3_api: Api) -> None:
    api = s3_api
    created = await create_record(api, name="ledger.txt", file_type="txt")
    assert await put(api, created, ORIGINAL) == 200

    async def empty() -> None:
        assert await put(api, created, b"") == 200

    with pytest.raises(EmptyUpload):
        await finalize_through(api, SealHooks(storage_of(api), before=empty), created["path"])
    record = await record_of(api, created["documentId"])
    assert (record["size"], record["updating"], record["processing"]["steps"]) == (0, True, {})
    assert await storage_of(api).head(created["path"]) is None  # nothing stays sealed

    assert await put(api, created, ORIGINAL) == 200
    assert (await finalize(api, created["path"])).status == 200
    assert await assert_record_describes_what_is_served(api, created["documentId"]) == ORIGINAL


async def test_an_upload_gone_before_its_seal_is_409_upload_incomplete(s3_api: Api) -> None:
    api = s3_api
    created = await create_record(api, name="ledger.txt", file_type="txt")
    assert await put(api, created, ORIGINAL) == 200

    async def vanish() -> None:
        await storage_of(api).delete(created["path"])

    with pytest.raises(UploadIncomplete):
        await finalize_through(api, SealHooks(storage_of(api), before=vanish), created["path"])
    assert (await record_of(api, created["documentId"]))["processing"]["steps"] == {}


async def test_storage_failing_at_the_seal_is_503_and_a_retry_finalizes(shaped_api: Api) -> None:
    api = shaped_api
    created = await create_record(api, name="ledger.txt", file_type="txt")
    assert await put(api, created, ORIGINAL) == 200

    async def fail() -> None:
        raise StorageError("connection reset by peer")

    with pytest.raises(Unavailable):
        await finalize_through(api, SealHooks(storage_of(api), before=fail), created["path"])
    record = await record_of(api, created["documentId"])
    assert (record["size"], record["updating"], record["processing"]["steps"]) == (0, True, {})

    assert (await finalize(api, created["path"])).status == 200
    assert await assert_record_describes_what_is_served(api, created["documentId"]) == ORIGINAL


async def test_a_file_deleted_while_it_is_sealed_is_404_and_leaves_nothing(
    shaped_api: Api,
) -> None:
    api = shaped_api
    created = await create_record(api, name="ledger.txt", file_type="txt")
    assert await put(api, created, ORIGINAL) == 200

    async def delete() -> None:
        assert (await api.call("DELETE", f"/files/{created['documentId']}")).status == 204

    with pytest.raises(NotFound):
        await finalize_through(api, SealHooks(storage_of(api), after=delete), created["path"])
    await api.run_jobs()
    assert await storage_of(api).head(created["path"]) is None
    if is_local(api):
        assert visible_files(local_storage(api).root) == []
