"""Security checks through the public API: signed URLs, hostile names, hostile JSON, API keys.

Tampered, expired and traversing storage URLs are in tests/test_storage_local.py, and
ids no row can have in tests/test_ids.py; this module covers what they leave out.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
from collections.abc import Iterator
from email.message import Message
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientResponse

from libflow import appkeys
from libflow.models import ApiKey, LibraryFile, Project
from libflow.projects import create_api_key, revoke_api_key
from libflow.storage.local import LocalStorage
from tests.conftest import Api, create_record, fixture_bytes, new_project
from tests.library_helpers import assert_error, detail_fields, link
from tests.workflow_helpers import (
    SPEC_EXAMPLE,
    call,
    create,
    get_run,
    ok_json,
    runs_of,
    workflows_url,
)

PDF = fixture_bytes("pages.pdf")


def local_storage(api: Api) -> LocalStorage:
    """The app's local storage backend."""
    assert api.client.app is not None
    storage = api.client.app[appkeys.LOCAL_STORAGE]
    assert storage is not None
    return storage


@pytest.fixture
async def other(api: Api) -> Api:
    """A second project on the same server, with its own key."""
    project_id, secret = await new_project("other project")
    return Api(api.client, api.shape, project_id, secret)


async def download_location(api: Api, file_id: str) -> str:
    """The signed GET URL the download operation redirects to."""
    response = await api.call("GET", f"/files/{file_id}/download", allow_redirects=False)
    assert response.status == 302, await response.text()
    location: str = response.headers["Location"]
    return location


def moved(url: str, onto_key: str) -> Any:
    """``url``'s signed query string on the storage path of another object."""
    return link(f"{link(url).origin()}/storage/{onto_key}?{link(url).raw_query_string}")


# --- signed URLs replayed against other objects ---------------------------------------------


async def test_download_url_moved_to_another_files_key_is_403_forbidden(api: Api) -> None:
    mine = await api.upload(b"%PDF mine")
    theirs = await api.upload(PDF)
    location = await download_location(api, mine["id"])

    async with api.client.session.get(moved(location, theirs["path"])) as response:
        await assert_error(response, 403, "FORBIDDEN")


async def test_download_url_moved_to_a_file_of_another_project_is_403_forbidden(
    api: Api, other: Api
) -> None:
    mine = await api.upload(b"%PDF mine")
    theirs = await other.upload(PDF)
    location = await download_location(api, mine["id"])

    async with api.client.session.get(moved(location, theirs["path"])) as response:
        body = await assert_error(response, 403, "FORBIDDEN")
    assert "PDF" not in json.dumps(body)


async def test_upload_url_moved_to_a_key_of_another_project_stores_nothing(
    api: Api, other: Api
) -> None:
    mine = await create_record(api)
    theirs = await create_record(other)

    async with api.client.session.put(
        moved(mine["storageLink"], theirs["path"]),
        data=PDF,
        headers={"Content-Type": "application/pdf"},
    ) as response:
        await assert_error(response, 403, "FORBIDDEN")
    assert await local_storage(api).head(theirs["path"]) is None


async def test_upload_url_moved_to_a_thumbnail_key_stores_nothing(api: Api) -> None:
    created = await create_record(api)
    key = f"thumbnails/{api.project_id}/{created['documentId']}.webp"

    async with api.client.session.put(
        moved(created["storageLink"], key), data=PDF, headers={"Content-Type": "application/pdf"}
    ) as response:
        await assert_error(response, 403, "FORBIDDEN")
    assert await local_storage(api).head(key) is None


# --- names that look like paths ----------------------------------------------------------------

HOSTILE_NAMES = [
    "../../etc/passwd",
    "..\\..\\windows\\win.ini",
    "/etc/passwd",
    "C:\\Windows\\system.ini",
    "a/../../../b.pdf",
    "..",
    "\u202egnp.pdf",  # right-to-left override
]


def files_under(root: Path) -> set[Path]:
    """Every file below ``root``."""
    return {p for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("name", HOSTILE_NAMES)
async def test_a_name_that_looks_like_a_path_stays_a_display_name(api: Api, name: str) -> None:
    storage = local_storage(api)
    data_dir = api.shape.settings.data_dir
    before = files_under(data_dir)

    record = await api.upload(PDF, name=name)

    assert record["name"] == name
    assert record["path"] == f"libraryDocuments/{api.project_id}/{record['id']}.pdf"
    stored = storage.path_for(record["path"])
    assert stored.read_bytes() == PDF
    assert stored.resolve().is_relative_to(storage.root / "libraryDocuments" / api.project_id)
    new_files = files_under(data_dir) - before
    assert all(p.resolve().is_relative_to(data_dir.resolve()) for p in new_files)
    assert not any(p.name in {"passwd", "win.ini", "system.ini", "b.pdf"} for p in new_files)


def saved_names(disposition: str) -> list[str]:
    """The file names a client reads from a Content-Disposition (filename and filename*)."""
    message = Message()
    message["Content-Disposition"] = disposition
    params = message.get_params(header="content-disposition") or []
    return [str(message.get_filename())] + [v for k, v in params if k == "filename"]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
async def test_a_download_is_saved_without_a_directory_part(api: Api, name: str) -> None:
    record = await api.upload(PDF, name=name)
    location = await download_location(api, record["id"])

    async with api.client.session.get(link(location)) as response:
        assert response.status == 200
        assert await response.read() == PDF
        disposition = response.headers["Content-Disposition"]
    assert disposition.isascii()
    for saved in saved_names(disposition):
        assert "/" not in saved
        assert "\\" not in saved


@pytest.mark.parametrize("name", ["../..", "/", "..\\..", "a/../../b"])
async def test_a_folder_name_that_looks_like_a_path_stays_a_display_name(
    api: Api, name: str
) -> None:
    folder = await ok_json(await api.call("POST", "/dirs", json={"name": name}), 201)
    record = await api.upload(PDF, folder=folder["id"])

    assert folder["name"] == name
    assert record["dir"] == folder["id"]
    assert record["path"] == f"libraryDocuments/{api.project_id}/{record['id']}.pdf"


@pytest.mark.parametrize(
    "folder", ["..", "../..", "root/..", "root/../x", "/", "./root", "..\\root", "root\x00"]
)
async def test_a_dir_that_looks_like_a_path_is_404_and_creates_nothing(
    api: Api, folder: str
) -> None:
    response = await api.call(
        "POST", "/files", json={"originalname": "a.pdf", "fileType": "pdf", "dir": folder}
    )
    if "\x00" in folder:
        await assert_error(response, 400, "VALIDATION_ERROR")
    else:
        await assert_error(response, 404, "NOT_FOUND")
    assert await LibraryFile.filter(project_id=api.project_id).count() == 0


@pytest.mark.parametrize("folder", ["..", "../..", "root/..", "%2e%2e"])
async def test_a_dir_filter_that_looks_like_a_path_is_404(api: Api, folder: str) -> None:
    await api.upload(PDF)
    response = await api.call("GET", "/files", params={"dir": folder})
    await assert_error(response, 404, "NOT_FOUND")


# --- NUL characters: refused alike on both shapes (PostgreSQL cannot store them) ------------


@pytest.mark.parametrize(
    ("route", "body", "field"),
    [
        ("/files", {"originalname": "a\x00.pdf", "fileType": "pdf", "dir": "root"}, "originalname"),
        ("/files", {"originalname": "a.pdf", "fileType": "pdf\x00", "dir": "root"}, "fileType"),
        ("/dirs", {"name": "Re\x00ports"}, "name"),
    ],
)
async def test_a_nul_in_a_library_body_is_400_naming_the_field(
    shaped_api: Api, route: str, body: dict[str, Any], field: str
) -> None:
    api = shaped_api
    error = await assert_error(await api.call("POST", route, json=body), 400, "VALIDATION_ERROR")
    assert detail_fields(error) == {field}
    assert await (await api.call("GET", "/files")).json() == []
    assert await (await api.call("GET", "/dirs")).json() == []


async def test_a_nul_in_a_workflow_name_or_definition_is_400_and_creates_nothing(
    shaped_api: Api,
) -> None:
    api = shaped_api
    for body, field in [
        ({"name": "a\x00", "definition": SPEC_EXAMPLE}, "name"),
        ({"name": "a", "definition": {**SPEC_EXAMPLE, "x\x00": 1}}, "definition"),
    ]:
        response = await call(api, "POST", "", json=body)
        error = await assert_error(response, 400, "VALIDATION_ERROR")
        assert detail_fields(error) == {field}
    assert await ok_json(await call(api, "GET", "")) == []


async def test_a_nul_in_runsync_inputs_is_400_and_records_no_run(shaped_api: Api) -> None:
    api = shaped_api
    created = await create(api, SPEC_EXAMPLE)
    response = await call(
        api, "POST", f"/{created['workflowId']}/runsync", json={"inputs": {"name": "a\x00b"}}
    )
    error = await assert_error(response, 400, "VALIDATION_ERROR")
    assert detail_fields(error) == {"inputs"}
    assert await runs_of(api, created["workflowId"]) == []


async def test_an_escaped_backslash_u0000_is_text_not_a_nul(api: Api) -> None:
    created = await create(api, SPEC_EXAMPLE)
    response = await call(
        api, "POST", f"/{created['workflowId']}/runsync", json={"inputs": {"name": "\\u0000"}}
    )
    body = await ok_json(response)
    assert body["result"]["outputs"] == {"greeting": "Hello, \\u0000!"}


# --- hostile JSON bodies ------------------------------------------------------------------------


@pytest.fixture
async def workflow_id(api: Api) -> str:
    """A workflow of the api's project (the spec's example)."""
    created: dict[str, Any] = await create(api, SPEC_EXAMPLE)
    return str(created["workflowId"])


def json_routes(api: Api, workflow_id: str) -> dict[str, str]:
    """JSON routes by name: create file, create folder, create workflow, runsync."""
    return {
        "create file": api.url("/files"),
        "create folder": api.url("/dirs"),
        "create workflow": workflows_url(api.project_id),
        "runsync": workflows_url(api.project_id, f"/{workflow_id}/runsync"),
    }


async def post_raw(api: Api, url: str, body: bytes) -> ClientResponse:
    """POST ``body`` as JSON, byte for byte, with the project's key."""
    return await api.client.post(
        url,
        data=io.BytesIO(body),
        headers={**api.headers, "Content-Type": "application/json"},
    )


ROUTES = ["create file", "create folder", "create workflow", "runsync"]


@pytest.mark.parametrize("route", ROUTES)
async def test_a_body_over_1_mib_is_413_payload_too_large(
    api: Api, workflow_id: str, route: str
) -> None:
    body = json.dumps({"name": "x", "inputs": {"pad": "x" * (1024 * 1024)}}).encode()
    response = await post_raw(api, json_routes(api, workflow_id)[route], body)
    error = await assert_error(response, 413, "PAYLOAD_TOO_LARGE")
    assert error["message"] == "request body is too large: at most 1,048,576 bytes"


DEEP_BODIES = {
    "arrays": b"[" * 100_000,
    "objects": b'{"a":' * 100_000,
    "in a field": b'{"inputs": {"a": ' + b"[" * 100_000,
    "closed": b'{"inputs": {"a": ' + b"[" * 50_000 + b"]" * 50_000 + b"}}",
}


@pytest.mark.parametrize("nesting", list(DEEP_BODIES))
@pytest.mark.parametrize("route", ROUTES)
async def test_deeply_nested_json_is_400_invalid_json(
    api: Api, workflow_id: str, route: str, nesting: str
) -> None:
    response = await post_raw(api, json_routes(api, workflow_id)[route], DEEP_BODIES[nesting])
    await assert_error(response, 400, "INVALID_JSON")
    # The server is still healthy afterwards.
    assert (await api.client.get("/healthz")).status == 200


def nested(depth: int) -> Any:
    """A legal JSON value ``depth`` levels deep, objects and arrays in turn."""
    value: Any = "bottom"
    for level in range(depth):
        value = {"level": level, "next": value} if level % 2 else [value]
    return value


async def test_deeply_nested_but_legal_inputs_run_and_are_recorded(
    api: Api, workflow_id: str
) -> None:
    inputs = {"name": "Ada", "tree": nested(200)}
    response = await call(api, "POST", f"/{workflow_id}/runsync", json={"inputs": inputs})
    body = await ok_json(response)
    assert body["result"]["outputs"] == {"greeting": "Hello, Ada!"}

    [run] = await runs_of(api, workflow_id)
    assert (await get_run(api, run["runId"]))["inputs"] == inputs


# --- API keys -----------------------------------------------------------------------------------


async def test_an_api_key_is_stored_only_as_its_sha256(api: Api) -> None:
    key = await ApiKey.get(project_id=api.project_id)
    row = await ApiKey.filter(id=key.id).values()
    [values] = row

    assert values["key_hash"] == hashlib.sha256(api.api_key.encode()).hexdigest()
    assert all(api.api_key not in str(value) for value in values.values())
    # The prefix shown to tell keys apart is not enough to use one.
    assert len(values["prefix"]) <= 10 < len(api.api_key)


async def test_the_database_files_never_hold_an_api_key(api: Api) -> None:
    _key, secret = await create_api_key(await Project.get(id=api.project_id), name="ci")
    response = await api.client.get(api.url("/files"), headers={"Authorization": secret})
    assert response.status == 200

    data_dir = api.shape.settings.data_dir
    database_files = list(data_dir.glob("*.sqlite3*"))
    assert database_files
    for path in database_files:
        content = path.read_bytes()
        for plaintext in (api.api_key, secret):
            assert plaintext.encode() not in content, path


async def test_keys_are_looked_up_by_their_digest_so_the_digest_is_no_key(api: Api) -> None:
    # Lookup by SHA-256 (an index probe on key_hash) compares no secret byte by byte.
    digest = hashlib.sha256(api.api_key.encode()).hexdigest()
    assert await ApiKey.exists(key_hash=digest, project_id=api.project_id)

    response = await api.client.get(api.url("/files"), headers={"Authorization": digest})
    await assert_error(response, 401, "UNAUTHORIZED")


@pytest.fixture
def every_log_record() -> Iterator[list[logging.LogRecord]]:
    """Every record any logger emits during the test, at every level (aiohttp's and
    Tortoise's SQL logs included)."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep(logging.DEBUG)
    names = ["", "libflow", "aiohttp", "aiohttp.access", "aiohttp.server", "tortoise", "db_client"]
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    root = logging.getLogger()
    root.addHandler(handler)
    for logger in loggers:
        logger.setLevel(logging.DEBUG)
    try:
        yield records
    finally:
        root.removeHandler(handler)
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def rendered(record: logging.LogRecord) -> str:
    """All a record can show: its message, its arguments, its extras and its traceback."""
    formatter = logging.Formatter()
    text = [record.getMessage(), repr(record.args), repr(record.__dict__)]
    if record.exc_info:
        text.append(formatter.formatException(record.exc_info))
    return "\n".join(text)


async def test_api_keys_never_reach_the_logs(
    api: Api, other: Api, every_log_record: list[logging.LogRecord]
) -> None:
    project = await Project.get(id=api.project_id)
    revoked, revoked_secret = await create_api_key(project, name="old")
    await revoke_api_key(revoked.id)
    wrong = "lf_" + "w" * 43
    attempts = [
        (api.url("/files"), api.api_key, 200),
        (api.url("/files"), f"Bearer {api.api_key}", 200),
        (api.url("/files/nope"), api.api_key, 404),
        (api.url("/files"), wrong, 401),
        (api.url("/files"), f"Bearer {wrong}", 401),
        (api.url("/files"), revoked_secret, 401),
        (other.url("/files"), api.api_key, 403),
    ]
    for url, authorization, status in attempts:
        response = await api.client.get(url, headers={"Authorization": authorization})
        assert response.status == status, await response.text()
    created = await api.client.post(
        api.url("/files"), headers=api.headers, data=b'{"originalname": '
    )
    assert created.status == 400

    assert any(r.name == "libflow.access" for r in every_log_record)
    logged = "\n".join(rendered(record) for record in every_log_record)
    for secret in (api.api_key, other.api_key, wrong, revoked_secret):
        assert secret not in logged
        assert secret[len("lf_") :] not in logged


async def test_an_unpaired_surrogate_in_runsync_inputs_is_400_and_records_no_run(
    shaped_api: Api,
) -> None:
    api = shaped_api
    created = await create(api, SPEC_EXAMPLE)
    response = await call(
        api, "POST", f"/{created['workflowId']}/runsync", json={"inputs": {"name": "a\ud800b"}}
    )
    error = await assert_error(response, 400, "VALIDATION_ERROR")
    assert detail_fields(error) == {"inputs"}
    assert await runs_of(api, created["workflowId"]) == []


async def test_an_escaped_surrogate_pair_is_one_character_and_runs(shaped_api: Api) -> None:
    api = shaped_api
    created = await create(api, SPEC_EXAMPLE)
    response = await call(
        api,
        "POST",
        f"/{created['workflowId']}/runsync",
        data=b'{"inputs": {"name": "\\ud83d\\ude00"}}',
        headers={"Content-Type": "application/json"},
    )
    assert response.status == 200, await response.text()
    assert "\U0001f600" in json.dumps(await response.json(), ensure_ascii=False)
