"""Library records, listing and pagination, folders, get-one, download and delete over HTTP."""

from __future__ import annotations

import base64
import hashlib
import io
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from PIL import Image

from libflow import appkeys
from libflow.models import LibraryFile, Project
from libflow.projects import create_api_key
from libflow.storage.keys import thumbnail_key
from tests.conftest import Api, create_record, fixture_bytes, new_project, wait_until_processed
from tests.library_helpers import assert_error, detail_fields, link

LIST_FIELDS = {
    "id",
    "name",
    "type",
    "size",
    "dir",
    "createdDate",
    "updatedDate",
    "uploaderName",
    "uploaderEmail",
    "updating",
}
DETAIL_FIELDS = LIST_FIELDS | {
    "path",
    "mimeType",
    "searchable",
    "thumbnail",
    "sha256",
    "metadata",
    "processing",
}
ISO_Z = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z")
URL_SAFE_ID = re.compile(r"[A-Za-z0-9_-]{16,}")
NEXT_LINK = re.compile(r'<([^>]+)>;\s*rel="next"')
PDF = fixture_bytes("pages.pdf")  # a real pdf: processing reads it


@pytest.fixture
async def other(api: Api) -> Api:
    """A second project on the same server, with its own key."""
    project_id, secret = await new_project("other project")
    return Api(api.client, api.shape, project_id, secret)


def assert_recent_iso(value: Any) -> None:
    """An ISO 8601 UTC timestamp with ``Z``, from the last minute."""
    assert isinstance(value, str)
    assert ISO_Z.fullmatch(value), value
    moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    assert abs(datetime.now(UTC) - moment) < timedelta(minutes=1)


async def get_json(api: Api, path: str, **params: str) -> Any:
    """GET a library path with the project's key; 200 expected."""
    response = await api.call("GET", path, params=params)
    assert response.status == 200, await response.text()
    return await response.json()


async def make_folder(api: Api, name: str, parent: str | None = None) -> dict[str, Any]:
    """Create a folder; 201 expected."""
    body = {"name": name} if parent is None else {"name": name, "parent": parent}
    response = await api.call("POST", "/dirs", json=body)
    assert response.status == 201, await response.text()
    folder: dict[str, Any] = await response.json()
    return folder


# --- create and record ------------------------------------------------------------------------


async def test_create_returns_the_spec_fields_as_strings(api: Api) -> None:
    response = await api.call(
        "POST", "/files", json={"originalname": "Plan.pdf", "fileType": "pdf", "dir": "root"}
    )
    assert response.status == 201
    created = await response.json()
    assert set(created) == {"documentId", "storageLink", "mimeType", "path", "createdDate", "dir"}
    assert all(isinstance(v, str) for v in created.values())
    assert URL_SAFE_ID.fullmatch(created["documentId"])
    assert created["path"] == f"libraryDocuments/{api.project_id}/{created['documentId']}.pdf"
    assert created["mimeType"] == "application/pdf"
    assert created["dir"] == "root"
    assert_recent_iso(created["createdDate"])


@pytest.mark.parametrize(
    ("file_type", "mime_type"),
    [
        ("pdf", "application/pdf"),
        ("docx", "application/vnd.openxmlformats-officedocument.wordprocessingml.document"),
        ("pptx", "application/vnd.openxmlformats-officedocument.presentationml.presentation"),
        ("txt", "text/plain"),
        ("csv", "text/csv"),
        ("png", "image/png"),
        ("jpg", "image/jpeg"),
        ("jpeg", "image/jpeg"),
        ("gif", "image/gif"),
        ("webp", "image/webp"),
    ],
)
async def test_file_type_maps_to_mime_type_and_path_extension(
    api: Api, file_type: str, mime_type: str
) -> None:
    created = await create_record(api, name=f"a.{file_type}", file_type=file_type)
    assert created["mimeType"] == mime_type
    assert created["path"].endswith(f"/{created['documentId']}.{file_type}")
    [listed] = await get_json(api, "/files")
    assert listed["type"] == mime_type


async def test_new_record_is_updating_with_size_0(api: Api) -> None:
    created = await create_record(api)
    [listed] = await get_json(api, "/files")
    assert listed["id"] == created["documentId"]
    assert listed["updating"] is True
    assert listed["size"] == 0
    record = await get_json(api, f"/files/{created['documentId']}")
    assert record["updating"] is True
    assert record["size"] == 0
    assert record["processing"]["status"] == "pending"
    assert record["sha256"] is None


async def test_list_item_has_exactly_the_spec_fields(api: Api) -> None:
    await create_record(api, name="Budget 2026.csv", file_type="csv")
    [listed] = await get_json(api, "/files")
    assert set(listed) == LIST_FIELDS
    assert listed["name"] == "Budget 2026.csv"
    assert listed["type"] == "text/csv"
    assert listed["dir"] == "root"


async def test_timestamps_are_iso_utc_with_z(api: Api) -> None:
    created = await create_record(api)
    folder = await make_folder(api, "Dated")
    [listed] = await get_json(api, "/files")
    record = await get_json(api, f"/files/{created['documentId']}")
    for value in (
        created["createdDate"],
        listed["createdDate"],
        listed["updatedDate"],
        record["createdDate"],
        record["updatedDate"],
        folder["createdDate"],
        folder["updatedDate"],
    ):
        assert_recent_iso(value)
    assert listed["createdDate"] == created["createdDate"]


async def test_get_one_adds_path_mime_type_and_processing(api: Api) -> None:
    created = await create_record(api, name="photo.png", file_type="png")
    record = await get_json(api, f"/files/{created['documentId']}")
    assert set(record) == DETAIL_FIELDS
    assert record["path"] == created["path"]
    assert record["mimeType"] == "image/png"
    assert record["searchable"] is False
    assert record["thumbnail"] is False
    assert {"status", "error"} <= set(record["processing"])
    assert record["processing"]["error"] is None


async def test_processed_record_has_sha256_and_is_not_updating(api: Api) -> None:
    uploaded = await api.upload(PDF)
    record = await wait_until_processed(api, uploaded["id"])
    assert record["updating"] is None
    assert record["processing"] == {**record["processing"], "status": "done", "error": None}
    assert record["sha256"] == hashlib.sha256(PDF).hexdigest()
    assert record["size"] == len(PDF)
    assert record["updatedDate"] >= record["createdDate"]


async def test_uploader_is_the_api_key_identity(api: Api) -> None:
    project = await Project.get(id=api.project_id)
    _key, secret = await create_api_key(project, name="Ada Lovelace", email="ada@example.com")
    ada = Api(api.client, api.shape, api.project_id, secret)
    await create_record(ada)
    [listed] = await get_json(api, "/files")
    assert listed["uploaderName"] == "Ada Lovelace"
    assert listed["uploaderEmail"] == "ada@example.com"


async def test_get_unknown_file_is_404_not_found(api: Api) -> None:
    await assert_error(await api.call("GET", "/files/nope"), 404, "NOT_FOUND")


# --- list and pagination ----------------------------------------------------------------------


async def test_empty_library_lists_an_empty_array(api: Api) -> None:
    response = await api.call("GET", "/files")
    assert response.status == 200
    assert await response.json() == []
    assert "Link" not in response.headers


async def test_list_is_newest_first(shaped_api: Api) -> None:
    api = shaped_api
    ids = [(await create_record(api, name=f"{i}.pdf"))["documentId"] for i in range(4)]
    listed = await get_json(api, "/files")
    assert [f["id"] for f in listed] == ids[::-1]


async def test_list_shows_only_the_projects_files(api: Api, other: Api) -> None:
    mine = await create_record(api)
    await create_record(other)
    assert [f["id"] for f in await get_json(api, "/files")] == [mine["documentId"]]


async def test_list_filters_by_dir_root(api: Api) -> None:
    folder = await make_folder(api, "Invoices")
    at_root = await create_record(api, name="root.pdf")
    await create_record(api, name="inside.pdf", folder=folder["id"])
    listed = await get_json(api, "/files", dir="root")
    assert [f["id"] for f in listed] == [at_root["documentId"]]


async def test_list_filters_by_dir_folder(api: Api) -> None:
    folder = await make_folder(api, "Invoices")
    await create_record(api, name="root.pdf")
    inside = await create_record(api, name="inside.pdf", folder=folder["id"])
    listed = await get_json(api, "/files", dir=folder["id"])
    assert [f["id"] for f in listed] == [inside["documentId"]]
    assert listed[0]["dir"] == folder["id"]
    assert len(await get_json(api, "/files")) == 2


async def test_list_unknown_dir_is_404_not_found(api: Api) -> None:
    await assert_error(await api.call("GET", "/files", params={"dir": "nope"}), 404, "NOT_FOUND")


async def test_list_dir_of_another_project_is_404_not_found(api: Api, other: Api) -> None:
    folder = await make_folder(other, "Theirs")
    response = await api.call("GET", "/files", params={"dir": folder["id"]})
    await assert_error(response, 404, "NOT_FOUND")


async def follow_pages(api: Api, **params: str) -> list[list[dict[str, Any]]]:
    """Every page of the list, following Link rel="next" exactly as returned."""
    response = await api.call("GET", "/files", params=params)
    pages = []
    while True:
        assert response.status == 200, await response.text()
        pages.append(await response.json())
        header = response.headers.get("Link")
        if header is None:
            return pages
        match = NEXT_LINK.fullmatch(header)
        assert match, header
        base = api.shape.settings.resolved_public_base_url
        assert match.group(1).startswith(f"{base}{api.url('/files')}?")
        response = await api.client.session.get(link(match.group(1)), headers=api.headers)
        assert len(pages) < 20, "the Link chain does not end"


async def test_limit_pages_with_a_link_to_the_next_page(shaped_api: Api) -> None:
    api = shaped_api
    ids = [(await create_record(api, name=f"{i}.pdf"))["documentId"] for i in range(5)]
    pages = await follow_pages(api, limit="2")
    assert [len(p) for p in pages] == [2, 2, 1]
    assert [f["id"] for p in pages for f in p] == ids[::-1]


async def test_limit_equal_to_the_count_has_no_next_link(api: Api) -> None:
    for i in range(3):
        await create_record(api, name=f"{i}.pdf")
    response = await api.call("GET", "/files", params={"limit": "3"})
    assert len(await response.json()) == 3
    assert "Link" not in response.headers


async def test_next_link_keeps_the_dir_filter(api: Api) -> None:
    folder = await make_folder(api, "Paged")
    inside = [
        (await create_record(api, name=f"{i}.pdf", folder=folder["id"]))["documentId"]
        for i in range(3)
    ]
    await create_record(api, name="outside.pdf")
    pages = await follow_pages(api, limit="1", dir=folder["id"])
    assert [f["id"] for p in pages for f in p] == inside[::-1]


async def test_pages_have_no_duplicates_when_files_share_a_timestamp(shaped_api: Api) -> None:
    api = shaped_api
    ids = {(await create_record(api, name=f"{i}.pdf"))["documentId"] for i in range(5)}
    same = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    await LibraryFile.filter(project_id=api.project_id).update(created_at=same)
    pages = await follow_pages(api, limit="2")
    listed = [f["id"] for p in pages for f in p]
    assert len(listed) == len(set(listed)) == 5
    assert set(listed) == ids


async def test_limit_1000_is_allowed(api: Api) -> None:
    await create_record(api)
    assert len(await get_json(api, "/files", limit="1000")) == 1


@pytest.mark.parametrize("limit", ["0", "1001", "abc", "-1", "", "1.5"])
async def test_bad_limit_is_400_validation_error(api: Api, limit: str) -> None:
    response = await api.call("GET", "/files", params={"limit": limit})
    error = await assert_error(response, 400, "VALIDATION_ERROR")
    assert detail_fields(error) == {"limit"}


def _b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "cursor",
    [
        "!!!",
        "abc",
        _b64("no separator"),
        _b64("yesterday|abc"),
        _b64("2026-01-02T03:04:05|abc"),  # no time zone: not one this API wrote
        base64.urlsafe_b64encode(b"\xff\xfe|\x00").decode(),
        _b64("2026-01-02T03:04:05+00:00|" + "a" * 33),  # longer than any id
        _b64("2026-01-02T03:04:05+00:00|a\x00b"),
    ],
)
async def test_bad_cursor_is_400_validation_error(api: Api, cursor: str) -> None:
    await create_record(api)
    response = await api.call("GET", "/files", params={"cursor": cursor})
    error = await assert_error(response, 400, "VALIDATION_ERROR")
    assert detail_fields(error) == {"cursor"}


# --- folders ----------------------------------------------------------------------------------


async def test_create_folder_defaults_parent_to_root(api: Api) -> None:
    response = await api.call("POST", "/dirs", json={"name": "Reports"})
    assert response.status == 201, await response.text()
    folder = await response.json()
    assert set(folder) == {"id", "name", "parent", "createdDate", "updatedDate"}
    assert folder["name"] == "Reports"
    assert folder["parent"] == "root"
    assert URL_SAFE_ID.fullmatch(folder["id"])


async def test_create_folder_with_explicit_root_parent(api: Api) -> None:
    folder = await make_folder(api, "Top", parent="root")
    assert folder["parent"] == "root"


async def test_create_nested_folder(api: Api) -> None:
    parent = await make_folder(api, "2026")
    child = await make_folder(api, "Q1", parent=parent["id"])
    assert child["parent"] == parent["id"]
    created = await create_record(api, folder=child["id"])
    assert created["dir"] == child["id"]


async def test_folder_name_is_trimmed(api: Api) -> None:
    assert (await make_folder(api, "  Spaced  "))["name"] == "Spaced"


async def test_list_folders_oldest_first(api: Api, other: Api) -> None:
    first = await make_folder(api, "A")
    second = await make_folder(api, "B", parent=first["id"])
    await make_folder(other, "Not mine")
    assert await get_json(api, "/dirs") == [first, second]


async def test_list_folders_of_new_project_is_empty(api: Api) -> None:
    assert await get_json(api, "/dirs") == []


async def test_create_folder_under_unknown_parent_is_404_not_found(api: Api) -> None:
    response = await api.call("POST", "/dirs", json={"name": "Lost", "parent": "nope"})
    await assert_error(response, 404, "NOT_FOUND")
    assert await get_json(api, "/dirs") == []


async def test_create_folder_under_another_projects_folder_is_404(api: Api, other: Api) -> None:
    theirs = await make_folder(other, "Theirs")
    response = await api.call("POST", "/dirs", json={"name": "Mine", "parent": theirs["id"]})
    await assert_error(response, 404, "NOT_FOUND")


@pytest.mark.parametrize("name", ["", "   ", "x" * 256])
async def test_create_folder_with_bad_name_is_400_validation_error(api: Api, name: str) -> None:
    response = await api.call("POST", "/dirs", json={"name": name})
    error = await assert_error(response, 400, "VALIDATION_ERROR")
    assert detail_fields(error) == {"name"}


# --- download, thumbnail and delete -----------------------------------------------------------


async def download_location(api: Api, file_id: str, what: str = "download") -> str:
    """The signed URL a download (or thumbnail) redirects to."""
    response = await api.call("GET", f"/files/{file_id}/{what}", allow_redirects=False)
    assert response.status == 302, await response.text()
    assert response.headers["Cache-Control"] == "no-store"
    location: str = response.headers["Location"]
    return location


async def test_download_is_302_to_the_bytes(api: Api) -> None:
    record = await api.upload(PDF, name="Plan.pdf")
    location = await download_location(api, record["id"])
    assert location.startswith(api.shape.settings.resolved_public_base_url)
    async with api.client.session.get(link(location)) as got:
        assert got.status == 200
        assert got.headers["Content-Type"] == "application/pdf"
        assert got.headers["Content-Disposition"].startswith("attachment;")
        assert await got.read() == PDF


def webp_thumbnail() -> bytes:
    """A real WEBP image, as the thumbnail job writes one."""
    out = io.BytesIO()
    Image.new("RGB", (32, 24), (200, 30, 30)).save(out, "WEBP")
    return out.getvalue()


async def store_thumbnail(api: Api, file_id: str) -> bytes:
    """Store a thumbnail and point the record at it, as the thumbnail job does."""
    assert api.client.app is not None
    data = webp_thumbnail()
    key = thumbnail_key(api.project_id, file_id)
    await api.client.app[appkeys.STORAGE].write(key, data, "image/webp")
    await LibraryFile.filter(id=file_id).update(thumbnail_key=key)
    return data


async def test_thumbnail_once_stored_is_302_to_an_inline_webp(api: Api) -> None:
    record = await api.upload(
        fixture_bytes("thumb_small.png"), name="Holiday photo.png", file_type="png"
    )
    await wait_until_processed(api, record["id"])
    data = await store_thumbnail(api, record["id"])
    assert (await get_json(api, f"/files/{record['id']}"))["thumbnail"] is True

    location = await download_location(api, record["id"], "thumbnail")
    async with api.client.session.get(link(location)) as got:
        assert got.status == 200
        assert got.headers["Content-Type"] == "image/webp"
        assert got.headers["Content-Disposition"].startswith("inline;")
        assert "Holiday%20photo.webp" in got.headers["Content-Disposition"]
        assert await got.read() == data


async def test_delete_is_204_then_get_is_404(shaped_api: Api) -> None:
    api = shaped_api
    record = await api.upload(PDF)
    await wait_until_processed(api, record["id"])
    response = await api.call("DELETE", f"/files/{record['id']}")
    assert response.status == 204
    assert await response.read() == b""
    await assert_error(await api.call("GET", f"/files/{record['id']}"), 404, "NOT_FOUND")
    assert await get_json(api, "/files") == []


async def test_delete_twice_is_404_the_second_time(api: Api) -> None:
    created = await create_record(api)
    assert (await api.call("DELETE", f"/files/{created['documentId']}")).status == 204
    await assert_error(
        await api.call("DELETE", f"/files/{created['documentId']}"), 404, "NOT_FOUND"
    )


async def test_delete_removes_the_stored_object(shaped_api: Api) -> None:
    api = shaped_api
    record = await api.upload(PDF)
    await wait_until_processed(api, record["id"])
    location = await download_location(api, record["id"])
    async with api.client.session.get(link(location)) as got:
        assert got.status == 200

    assert (await api.call("DELETE", f"/files/{record['id']}")).status == 204

    assert api.client.app is not None
    assert await api.client.app[appkeys.STORAGE].head(record["path"]) is None
    async with api.client.session.get(link(location)) as got:
        # S3 says 404 NoSuchKey; moto answers a deleted key's presigned GET with 403.
        assert got.status in (403, 404)
        assert await got.read() != PDF


async def test_download_url_from_before_delete_is_404_not_found(api: Api) -> None:
    record = await api.upload(PDF)
    await wait_until_processed(api, record["id"])
    location = await download_location(api, record["id"])

    assert (await api.call("DELETE", f"/files/{record['id']}")).status == 204

    async with api.client.session.get(link(location)) as got:
        await assert_error(got, 404, "NOT_FOUND")
    storage_dir = api.shape.settings.storage_dir
    assert [p for p in storage_dir.rglob("*") if p.is_file()] == []


async def test_delete_removes_the_thumbnail(api: Api) -> None:
    record = await api.upload(fixture_bytes("thumb_small.png"), name="photo.png", file_type="png")
    await wait_until_processed(api, record["id"])
    await store_thumbnail(api, record["id"])
    location = await download_location(api, record["id"], "thumbnail")

    assert (await api.call("DELETE", f"/files/{record['id']}")).status == 204

    async with api.client.session.get(link(location)) as got:
        assert got.status == 404
    assert api.client.app is not None
    key = thumbnail_key(api.project_id, record["id"])
    assert await api.client.app[appkeys.STORAGE].head(key) is None


async def test_delete_a_record_never_uploaded_is_204(api: Api) -> None:
    created = await create_record(api)
    assert (await api.call("DELETE", f"/files/{created['documentId']}")).status == 204
    assert await get_json(api, "/files") == []
