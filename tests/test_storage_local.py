"""The local storage backend's signed URLs over real HTTP: uploads, downloads and refusals."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator
from email.message import Message
from email.utils import collapse_rfc2231_value
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from yarl import URL

from libflow import appkeys
from libflow.storage.local import LocalStorage
from libflow.storage.signing import UrlSigner
from tests.conftest import (
    Api,
    ClientFactory,
    Shape,
    base_settings,
    create_record,
    fixture_bytes,
    new_project,
    put_bytes,
    wait_until_processed,
)
from tests.library_helpers import assert_error, eventually, link, raw_http

PDF = fixture_bytes("pages.pdf")  # a real pdf: processing reads it


def local_storage(api: Api) -> LocalStorage:
    """The app's local backend, whose signer makes URLs the way the server does."""
    assert api.client.app is not None
    storage = api.client.app[appkeys.LOCAL_STORAGE]
    assert storage is not None
    return storage


def stored_files(root: Path) -> list[Path]:
    """Every file under the storage root, temp files and metadata included."""
    return sorted(p for p in root.rglob("*") if p.is_file())


def with_query_of(target: str, source: str) -> URL:
    """``target``'s path with ``source``'s signed query string."""
    return link(f"{link(target).with_query(None)}?{link(source).raw_query_string}")


def tamper(url: str, **changes: str) -> URL:
    """``url`` with some query values replaced."""
    return link(url).update_query(changes)


async def finalize(api: Api, path: str) -> Any:
    """Operation 4."""
    return await api.call("POST", "/files:complete", json={"path": path})


async def download_location(api: Api, file_id: str) -> str:
    """The signed GET URL the download operation redirects to."""
    response = await api.call("GET", f"/files/{file_id}/download", allow_redirects=False)
    assert response.status == 302, await response.text()
    location: str = response.headers["Location"]
    return location


async def project_api(start_app: ClientFactory, tmp_path: Path, **overrides: Any) -> Api:
    """A project on an embedded server with some settings changed."""
    shape = Shape("embedded", base_settings(tmp_path, **overrides))
    client = await start_app(shape.settings)
    project_id, secret = await new_project()
    return Api(client, shape, project_id, secret)


# --- uploads that work ------------------------------------------------------------------------


async def test_put_with_the_signed_content_type_stores_the_bytes(api: Api) -> None:
    created = await create_record(api)
    async with put_bytes(api, created, PDF) as response:
        assert response.status == 200, await response.text()
    storage = local_storage(api)
    assert storage.path_for(created["path"]).read_bytes() == PDF
    info = await storage.head(created["path"])
    assert info is not None
    assert (info.size, info.content_type) == (len(PDF), "application/pdf")
    assert list((storage.root / ".tmp").iterdir()) == []


async def test_content_type_parameters_are_accepted(api: Api) -> None:
    created = await create_record(api, name="a.txt", file_type="txt")
    async with put_bytes(api, created, b"hello", "text/plain; charset=utf-8") as response:
        assert response.status == 200, await response.text()
    assert (await finalize(api, created["path"])).status == 200


async def test_upload_link_expires_after_the_configured_ttl(
    start_app: ClientFactory, tmp_path: Path
) -> None:
    api = await project_api(start_app, tmp_path, upload_url_ttl_seconds=1)
    before = time.time()
    created = await create_record(api)
    expires = int(link(created["storageLink"]).query["expires"])
    assert before <= expires <= time.time() + 1


async def test_download_link_expires_after_the_configured_ttl(api: Api) -> None:
    record = await api.upload(PDF)
    before = time.time()
    expires = int(link(await download_location(api, record["id"])).query["expires"])
    ttl = api.shape.settings.download_url_ttl_seconds
    assert before + ttl - 1 <= expires <= time.time() + ttl


# --- signatures -------------------------------------------------------------------------------


async def test_tampered_signature_is_403_forbidden(api: Api) -> None:
    created = await create_record(api)
    sig = link(created["storageLink"]).query["sig"]
    forged = tamper(created["storageLink"], sig=("A" if sig[0] != "A" else "B") + sig[1:])
    async with api.client.session.put(
        forged, data=PDF, headers={"Content-Type": "application/pdf"}
    ) as response:
        await assert_error(response, 403, "FORBIDDEN")
    assert await local_storage(api).head(created["path"]) is None


async def test_tampered_content_type_is_403_forbidden(api: Api) -> None:
    created = await create_record(api)
    forged = tamper(created["storageLink"], ct="text/html")
    async with api.client.session.put(
        forged, data=PDF, headers={"Content-Type": "text/html"}
    ) as response:
        await assert_error(response, 403, "FORBIDDEN")
    assert await local_storage(api).head(created["path"]) is None


@pytest.mark.parametrize("sig", ["\u00e9t\u00e9", "\U0001f511" * 43], ids=["latin-1", "emoji"])
async def test_non_ascii_signature_is_403_forbidden(api: Api, sig: str) -> None:
    created = await create_record(api)
    forged = tamper(created["storageLink"], sig=sig)
    async with api.client.session.put(
        forged, data=PDF, headers={"Content-Type": "application/pdf"}
    ) as response:
        await assert_error(response, 403, "FORBIDDEN")
    assert await local_storage(api).head(created["path"]) is None


async def test_extended_expiry_is_403_forbidden(api: Api) -> None:
    created = await create_record(api)
    expires = int(link(created["storageLink"]).query["expires"])
    forged = tamper(created["storageLink"], expires=str(expires + 3600))
    async with api.client.session.put(
        forged, data=PDF, headers={"Content-Type": "application/pdf"}
    ) as response:
        await assert_error(response, 403, "FORBIDDEN")


async def test_missing_signature_is_403_forbidden(api: Api) -> None:
    created = await create_record(api)
    async with api.client.session.put(
        link(created["storageLink"]).with_query(None),
        data=PDF,
        headers={"Content-Type": "application/pdf"},
    ) as response:
        await assert_error(response, 403, "FORBIDDEN")


async def test_expired_url_is_403_forbidden(api: Api) -> None:
    created = await create_record(api)
    expired = local_storage(api).signer.sign(
        "PUT",
        created["path"],
        content_type="application/pdf",
        expires_in=60,
        now=time.time() - 3600,
    )
    async with api.client.session.put(
        link(expired), data=PDF, headers={"Content-Type": "application/pdf"}
    ) as response:
        body = await assert_error(response, 403, "FORBIDDEN")
    assert "expired" in body["message"]
    assert await local_storage(api).head(created["path"]) is None


async def test_signature_replayed_to_another_path_is_403_forbidden(api: Api) -> None:
    mine = await create_record(api, name="mine.pdf")
    target = await create_record(api, name="target.pdf")
    replayed = with_query_of(target["storageLink"], mine["storageLink"])
    async with api.client.session.put(
        replayed, data=PDF, headers={"Content-Type": "application/pdf"}
    ) as response:
        await assert_error(response, 403, "FORBIDDEN")
    assert await local_storage(api).head(target["path"]) is None


async def test_get_url_used_for_put_is_403_forbidden(api: Api) -> None:
    record = await api.upload(PDF)
    location = await download_location(api, record["id"])
    async with api.client.session.put(
        link(location), data=b"overwritten", headers={"Content-Type": "application/pdf"}
    ) as response:
        await assert_error(response, 403, "FORBIDDEN")
    assert local_storage(api).path_for(record["path"]).read_bytes() == PDF


async def test_put_url_used_for_get_is_403_forbidden(api: Api) -> None:
    created = await create_record(api)
    async with put_bytes(api, created, PDF) as response:
        assert response.status == 200
    async with api.client.session.get(link(created["storageLink"])) as response:
        await assert_error(response, 403, "FORBIDDEN")


async def test_get_of_an_object_never_uploaded_is_404_not_found(api: Api) -> None:
    created = await create_record(api)
    url = local_storage(api).signer.sign(
        "GET", created["path"], content_type="application/pdf", expires_in=60
    )
    async with api.client.session.get(link(url)) as response:
        await assert_error(response, 404, "NOT_FOUND")


# --- refused uploads --------------------------------------------------------------------------


@pytest.mark.parametrize("content_type", ["text/plain", "application/pdfx", "application/json"])
async def test_wrong_content_type_on_put_is_403_forbidden(api: Api, content_type: str) -> None:
    created = await create_record(api)
    async with put_bytes(api, created, PDF, content_type) as response:
        await assert_error(response, 403, "FORBIDDEN")
    assert await local_storage(api).head(created["path"]) is None


async def test_put_without_content_type_is_403_forbidden(api: Api) -> None:
    created = await create_record(api)
    status, _head, body = await raw_http(
        api,
        f"PUT {link(created['storageLink']).raw_path_qs} HTTP/1.1\r\n"
        "Host: localhost\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello".encode(),
    )
    assert status == 403
    assert b'"FORBIDDEN"' in body
    assert await local_storage(api).head(created["path"]) is None


async def test_empty_put_is_400_empty_upload(api: Api) -> None:
    created = await create_record(api)
    async with put_bytes(api, created, b"") as response:
        await assert_error(response, 400, "EMPTY_UPLOAD")
    assert await local_storage(api).head(created["path"]) is None
    await assert_error(await finalize(api, created["path"]), 409, "UPLOAD_INCOMPLETE")


async def test_put_over_the_size_limit_is_413_payload_too_large(
    start_app: ClientFactory, tmp_path: Path
) -> None:
    api = await project_api(start_app, tmp_path, max_upload_bytes=1000)
    created = await create_record(api)
    async with put_bytes(api, created, b"x" * 1001) as response:
        await assert_error(response, 413, "PAYLOAD_TOO_LARGE")
    assert stored_files(local_storage(api).root) == []


async def test_put_of_exactly_the_size_limit_is_accepted(
    start_app: ClientFactory, tmp_path: Path
) -> None:
    api = await project_api(start_app, tmp_path, max_upload_bytes=1000)
    created = await create_record(api)
    async with put_bytes(api, created, b"x" * 1000) as response:
        assert response.status == 200, await response.text()


async def test_put_without_content_length_is_411_length_required(api: Api) -> None:
    created = await create_record(api)

    async def chunks() -> AsyncIterator[bytes]:
        yield PDF[:100]
        yield PDF[100:]

    async with api.client.session.put(
        link(created["storageLink"]),
        data=chunks(),
        headers={"Content-Type": "application/pdf"},
    ) as response:
        assert response.request_info.headers.get("Transfer-Encoding") == "chunked"
        await assert_error(response, 411, "LENGTH_REQUIRED")
    assert await local_storage(api).head(created["path"]) is None


async def test_body_shorter_than_content_length_stores_nothing(api: Api) -> None:
    created = await create_record(api)
    storage = local_storage(api)
    tmp_dir = storage.root / ".tmp"
    server = api.client.server
    reader, writer = await asyncio.open_connection(server.host, server.port)
    writer.write(
        f"PUT {link(created['storageLink']).raw_path_qs} HTTP/1.1\r\n"
        "Host: localhost\r\nContent-Type: application/pdf\r\n"
        "Content-Length: 100000\r\n\r\n".encode()
        + PDF
    )
    await writer.drain()
    # The server is streaming into its temp file when the client goes away.
    await eventually(lambda: any(tmp_dir.iterdir()), "the upload reaches a temp file")
    writer.close()
    await writer.wait_closed()
    reader.feed_eof()
    await eventually(lambda: not any(tmp_dir.iterdir()), "the temp file is removed")

    await assert_error(await finalize(api, created["path"]), 409, "UPLOAD_INCOMPLETE")
    assert stored_files(storage.root) == []


async def test_client_gone_right_after_headers_leaves_no_temp_file(api: Api) -> None:
    created = await create_record(api)
    storage = local_storage(api)
    server = api.client.server
    request = (
        f"PUT {link(created['storageLink']).raw_path_qs} HTTP/1.1\r\n"
        "Host: localhost\r\nContent-Type: application/pdf\r\nContent-Length: 100000\r\n\r\n"
        "%PDF"
    ).encode()
    # The disconnect can land at any await of the handler: try it many times.
    for _ in range(20):
        _reader, writer = await asyncio.open_connection(server.host, server.port)
        writer.write(request)
        writer.close()
        await writer.wait_closed()
    # An ordinary request afterwards goes through the same loop, after the handlers.
    async with put_bytes(api, created, PDF) as response:
        assert response.status == 200
    await eventually(
        lambda: not any((storage.root / ".tmp").iterdir()), "every temp file is removed"
    )
    assert storage.path_for(created["path"]).read_bytes() == PDF


# --- downloads --------------------------------------------------------------------------------


async def test_range_request_is_206_with_those_bytes(api: Api) -> None:
    record = await api.upload(PDF)
    location = await download_location(api, record["id"])
    async with api.client.session.get(
        link(location), headers={"Range": "bytes=100-1099"}
    ) as response:
        assert response.status == 206
        assert response.headers["Content-Range"] == f"bytes 100-1099/{len(PDF)}"
        assert await response.read() == PDF[100:1100]


async def test_suffix_range_request_is_206_with_the_last_bytes(api: Api) -> None:
    record = await api.upload(PDF)
    location = await download_location(api, record["id"])
    async with api.client.session.get(link(location), headers={"Range": "bytes=-10"}) as response:
        assert response.status == 206
        assert await response.read() == PDF[-10:]


async def test_unsatisfiable_range_is_416(api: Api) -> None:
    record = await api.upload(PDF)
    location = await download_location(api, record["id"])
    async with api.client.session.get(
        link(location), headers={"Range": f"bytes={len(PDF) + 10}-"}
    ) as response:
        assert response.status == 416
        assert await response.read() != PDF


def disposition_params(header: str) -> list[tuple[str, str]]:
    """The parameters of a Content-Disposition as a mail parser reads them, RFC 2231 decoded."""
    message = Message()
    message["Content-Disposition"] = header
    params = message.get_params(header="content-disposition")
    assert params is not None
    return [(name, collapse_rfc2231_value(value)) for name, value in params]


async def test_content_disposition_carries_the_non_ascii_name(api: Api) -> None:
    name = "Überblick \u2013 résumé 2026.pdf"  # an en dash: outside Latin-1 too
    record = await api.upload(PDF, name=name)
    await wait_until_processed(api, record["id"])
    location = await download_location(api, record["id"])
    async with api.client.session.get(link(location)) as response:
        assert response.status == 200
        disposition = response.headers["Content-Disposition"]
        assert await response.read() == PDF
    assert disposition.isascii()
    assert f"filename*=UTF-8''{quote(name, safe='')}" in disposition
    assert disposition_params(disposition) == [
        ("attachment", ""),
        ("filename", "_berblick _ r_sum_ 2026.pdf"),
        ("filename", name),  # the filename* parameter, decoded
    ]


async def test_quotes_in_the_name_cannot_break_the_header(api: Api) -> None:
    name = 'a"; filename="evil.exe.pdf'
    record = await api.upload(PDF, name=name)
    location = await download_location(api, record["id"])
    async with api.client.session.get(link(location)) as response:
        disposition = response.headers["Content-Disposition"]
    assert disposition_params(disposition) == [
        ("attachment", ""),
        ("filename", "a__ filename=_evil.exe.pdf"),
        ("filename", name),
    ]


# --- keys that try to leave the storage root --------------------------------------------------


@pytest.fixture
def outside_file(api: Api) -> Path:
    """A file beside the storage root that no URL may serve."""
    path = local_storage(api).root.parent / "outside.txt"
    path.write_text("secret outside the storage root")
    return path


@pytest.mark.parametrize(
    "raw_path",
    [
        "/storage/../outside.txt",
        "/storage/%2e%2e/outside.txt",
        "/storage/%2E%2E%2Foutside.txt",
        "/storage/libraryDocuments/%2e%2e/%2e%2e/outside.txt",
        "/storage/..%5Coutside.txt",
        "/storage//{outside}",
    ],
)
@pytest.mark.parametrize("signed_key", ["../outside.txt", "libraryDocuments/../../outside.txt"])
async def test_traversal_in_a_get_key_never_serves_a_file_outside_the_root(
    api: Api, outside_file: Path, raw_path: str, signed_key: str
) -> None:
    # Even a URL signed with the server's own key (a leaked secret) must not escape the root.
    signed = local_storage(api).signer.sign(
        "GET", signed_key, content_type="text/plain", expires_in=60
    )
    path = raw_path.format(outside=str(outside_file).lstrip("/"))
    status, _head, body = await raw_http(
        api,
        f"GET {path}?{link(signed).raw_query_string} HTTP/1.1\r\n"
        "Host: localhost\r\nConnection: close\r\n\r\n".encode(),
    )
    assert status in (403, 404)
    assert "error" in json.loads(body)  # the one error shape, as JSON
    assert b"secret" not in body


@pytest.mark.parametrize(
    "raw_path", ["/storage/../evil.pdf", "/storage/%2e%2e/evil.pdf", "/storage/%2e%2e%2fevil.pdf"]
)
async def test_traversal_in_a_put_key_never_writes_outside_the_root(
    api: Api, raw_path: str
) -> None:
    storage = local_storage(api)
    signed = storage.signer.sign(
        "PUT", "../evil.pdf", content_type="application/pdf", expires_in=60
    )
    status, _head, body = await raw_http(
        api,
        f"PUT {raw_path}?{link(signed).raw_query_string} HTTP/1.1\r\n"
        "Host: localhost\r\nContent-Type: application/pdf\r\nContent-Length: 4\r\n"
        "Connection: close\r\n\r\n%PDF".encode(),
    )
    assert status in (403, 404)
    assert "error" in json.loads(body)  # the one error shape, as JSON
    assert not (storage.root.parent / "evil.pdf").exists()
    assert stored_files(storage.root) == []


@pytest.mark.parametrize("hidden", [".meta", ".tmp"])
async def test_temp_and_metadata_files_are_never_served(api: Api, hidden: str) -> None:
    record = await api.upload(PDF)
    storage = local_storage(api)
    meta_key = f".meta/{record['path']}.json"
    assert (storage.root / meta_key).is_file()
    key = meta_key if hidden == ".meta" else ".tmp/x.part"
    signed = storage.signer.sign("GET", key, content_type="application/json", expires_in=60)
    async with api.client.session.get(link(signed)) as response:
        await assert_error(response, 403, "FORBIDDEN")


# --- the other deployment shape ---------------------------------------------------------------


@pytest.fixture
async def s3_api(start_app: ClientFactory, scaled: Shape) -> Api:
    """A project on the scaled shape, where S3 serves the signed URLs."""
    client = await start_app(scaled.settings)
    project_id, secret = await new_project()
    return Api(client, scaled, project_id, secret)


async def test_storage_routes_are_404_json_when_s3_serves_the_bytes(s3_api: Api) -> None:
    created = await create_record(s3_api)
    response = await s3_api.client.put(
        f"/storage/{created['path']}?expires=1&ct=application/pdf&sig=x",
        data=PDF,
        headers={"Content-Type": "application/pdf"},
    )
    await assert_error(response, 404, "NOT_FOUND")


def test_start_up_removes_temp_files_of_uploads_cut_off_long_ago(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path, UrlSigner(b"k", "http://127.0.0.1"))
    cut_off = tmp_path / ".tmp" / "a.part"
    in_progress = tmp_path / ".tmp" / "b.part"
    for path in (cut_off, in_progress):
        path.write_bytes(b"partial")
    two_hours_ago = time.time() - 7200
    os.utime(cut_off, (two_hours_ago, two_hours_ago))

    assert storage.remove_stale_temp_files() == 1
    assert not cut_off.exists()
    assert in_progress.exists()  # written to recently: an upload still running
