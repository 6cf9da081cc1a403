"""Every error path of the file library through the public HTTP API."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
from typing import Any

import pytest

from libflow import appkeys
from libflow.models import LibraryFile, Project
from libflow.projects import create_api_key, revoke_api_key
from tests.conftest import (
    Api,
    ClientFactory,
    Shape,
    create_record,
    fixture_bytes,
    new_project,
    put_bytes,
    wait_until_processed,
)
from tests.library_helpers import assert_error, detail_fields, link

PDF = fixture_bytes("pages.pdf")  # a real pdf: processing reads it


@pytest.fixture
async def other(api: Api) -> Api:
    """A second project on the same server, with its own key."""
    project_id, secret = await new_project("other project")
    return Api(api.client, api.shape, project_id, secret)


@pytest.fixture
async def s3_api(start_app: ClientFactory, scaled: Shape) -> Api:
    """A project on the scaled shape: S3 (moto), which does not enforce signed content types."""
    client = await start_app(scaled.settings)
    project_id, secret = await new_project()
    return Api(client, scaled, project_id, secret)


# --- authentication -------------------------------------------------------------------------


async def test_missing_authorization_is_401_unauthorized(api: Api) -> None:
    response = await api.client.get(api.url("/files"))
    await assert_error(response, 401, "UNAUTHORIZED")


async def test_empty_authorization_is_401_unauthorized(api: Api) -> None:
    response = await api.client.get(api.url("/files"), headers={"Authorization": "Bearer "})
    await assert_error(response, 401, "UNAUTHORIZED")


async def test_unknown_api_key_is_401_unauthorized(api: Api) -> None:
    response = await api.client.get(api.url("/files"), headers={"Authorization": "lf_nope"})
    await assert_error(response, 401, "UNAUTHORIZED")


@pytest.mark.parametrize("scheme", ["Bearer", "bearer"])
async def test_bearer_api_key_is_accepted(api: Api, scheme: str) -> None:
    response = await api.client.get(
        api.url("/files"), headers={"Authorization": f"{scheme} {api.api_key}"}
    )
    assert response.status == 200, await response.text()
    assert await response.json() == []


async def test_key_of_another_project_is_403_forbidden(api: Api, other: Api) -> None:
    response = await api.client.get(other.url("/files"), headers=api.headers)
    await assert_error(response, 403, "FORBIDDEN")


async def test_key_of_another_project_cannot_create_there(api: Api, other: Api) -> None:
    response = await api.client.post(
        other.url("/files"),
        headers=api.headers,
        json={"originalname": "a.pdf", "fileType": "pdf", "dir": "root"},
    )
    await assert_error(response, 403, "FORBIDDEN")
    listed = await other.call("GET", "/files")
    assert await listed.json() == []


async def test_revoked_api_key_is_401_unauthorized(api: Api) -> None:
    key, secret = await create_api_key(await Project.get(id=api.project_id), name="ci")
    response = await api.client.get(api.url("/files"), headers={"Authorization": secret})
    assert response.status == 200, await response.text()

    await revoke_api_key(key.id)

    response = await api.client.get(api.url("/files"), headers={"Authorization": secret})
    await assert_error(response, 401, "UNAUTHORIZED")
    # The project's other key keeps working.
    response = await api.call("GET", "/files")
    assert response.status == 200


async def test_file_of_another_project_is_404_not_found(api: Api, other: Api) -> None:
    created = await create_record(other)
    response = await api.call("GET", f"/files/{created['documentId']}")
    await assert_error(response, 404, "NOT_FOUND")


# --- request bodies ---------------------------------------------------------------------------

VALID_BODIES: dict[str, dict[str, Any]] = {
    "/files": {"originalname": "a.pdf", "fileType": "pdf", "dir": "root"},
    "/files:complete": {"path": "libraryDocuments/p/d.pdf"},
    "/dirs": {"name": "Reports"},
}


@pytest.mark.parametrize("route", list(VALID_BODIES))
async def test_bad_json_is_400_invalid_json(api: Api, route: str) -> None:
    response = await api.call(
        "POST", route, data=b'{"originalname": ', headers={"Content-Type": "application/json"}
    )
    await assert_error(response, 400, "INVALID_JSON")


async def test_empty_body_is_400_invalid_json(api: Api) -> None:
    response = await api.call("POST", "/files", data=b"")
    await assert_error(response, 400, "INVALID_JSON")


@pytest.mark.parametrize("payload", [b"[]", b'["a.pdf"]', b'"a.pdf"', b"1", b"null", b"true"])
async def test_json_not_an_object_is_400_validation_error(api: Api, payload: bytes) -> None:
    response = await api.call(
        "POST", "/files", data=payload, headers={"Content-Type": "application/json"}
    )
    await assert_error(response, 400, "VALIDATION_ERROR")


@pytest.mark.parametrize(
    ("route", "field"),
    [
        ("/files", "originalname"),
        ("/files", "fileType"),
        ("/files", "dir"),
        ("/files:complete", "path"),
        ("/dirs", "name"),
    ],
)
async def test_missing_field_is_400_naming_the_field(api: Api, route: str, field: str) -> None:
    body = {k: v for k, v in VALID_BODIES[route].items() if k != field}
    response = await api.call("POST", route, json=body)
    error = await assert_error(response, 400, "VALIDATION_ERROR")
    assert detail_fields(error) == {field}


@pytest.mark.parametrize(
    ("route", "field", "value"),
    [
        ("/files", "originalname", 123),
        ("/files", "originalname", None),
        ("/files", "fileType", ["pdf"]),
        ("/files", "dir", 1),
        ("/files:complete", "path", {"p": 1}),
        ("/files:complete", "preventSearch", "yes"),
        ("/files:complete", "preventSearch", "true"),
        ("/files:complete", "preventSearch", 1),
        ("/dirs", "name", 5),
        ("/dirs", "parent", False),
    ],
)
async def test_wrong_type_is_400_naming_the_field(
    api: Api, route: str, field: str, value: Any
) -> None:
    body = {**VALID_BODIES[route], field: value}
    response = await api.call("POST", route, json=body)
    error = await assert_error(response, 400, "VALIDATION_ERROR")
    assert detail_fields(error) == {field}
    assert field in error["message"]


@pytest.mark.parametrize("name", ["", "   ", "x" * 256])
async def test_bad_originalname_is_400_validation_error(api: Api, name: str) -> None:
    response = await api.call(
        "POST", "/files", json={**VALID_BODIES["/files"], "originalname": name}
    )
    error = await assert_error(response, 400, "VALIDATION_ERROR")
    assert detail_fields(error) == {"originalname"}


@pytest.mark.parametrize("file_type", ["exe", "svg", "pdf.exe", "tar.gz", "doc"])
async def test_unknown_file_type_is_400_unsupported_file_type(api: Api, file_type: str) -> None:
    response = await api.call(
        "POST", "/files", json={"originalname": "a.bin", "fileType": file_type, "dir": "root"}
    )
    await assert_error(response, 400, "UNSUPPORTED_FILE_TYPE")
    assert await (await api.call("GET", "/files")).json() == []


async def test_unknown_folder_is_404_not_found(api: Api) -> None:
    response = await api.call(
        "POST", "/files", json={"originalname": "a.pdf", "fileType": "pdf", "dir": "nope"}
    )
    await assert_error(response, 404, "NOT_FOUND")
    assert await (await api.call("GET", "/files")).json() == []


async def test_folder_of_another_project_is_404_not_found(api: Api, other: Api) -> None:
    folder = await (await other.call("POST", "/dirs", json={"name": "Theirs"})).json()
    response = await api.call(
        "POST", "/files", json={"originalname": "a.pdf", "fileType": "pdf", "dir": folder["id"]}
    )
    await assert_error(response, 404, "NOT_FOUND")


async def test_body_over_1_mib_is_413_payload_too_large(api: Api) -> None:
    body = json.dumps({**VALID_BODIES["/files"], "padding": "x" * (1024 * 1024)})
    response = await api.call(
        "POST",
        "/files",
        data=io.BytesIO(body.encode()),
        headers={"Content-Type": "application/json"},
    )
    await assert_error(response, 413, "PAYLOAD_TOO_LARGE")


# --- routing ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/api/publicv1/projects/{projectId}/library/nope",
        "/api/publicv1/projects/{projectId}/library/files/abc/nope",
        "/api/publicv1/nope",
        "/nope",
    ],
)
async def test_unknown_route_is_404_json(api: Api, path: str) -> None:
    response = await api.client.get(path.format(projectId=api.project_id), headers=api.headers)
    await assert_error(response, 404, "NOT_FOUND")


@pytest.mark.parametrize(
    ("method", "route"),
    [("PUT", "/files"), ("DELETE", "/dirs"), ("GET", "/files:complete"), ("PUT", "/files/x")],
)
async def test_wrong_method_is_405_json(api: Api, method: str, route: str) -> None:
    response = await api.call(method, route)
    await assert_error(response, 405, "METHOD_NOT_ALLOWED")
    assert response.headers["Allow"]


# --- finalize ---------------------------------------------------------------------------------


async def finalize(api: Api, path: str, **extra: Any) -> Any:
    """Operation 4 with ``path`` and any extra body fields."""
    return await api.call("POST", "/files:complete", json={"path": path, **extra})


async def test_finalize_before_put_is_409_upload_incomplete(api: Api) -> None:
    created = await create_record(api)
    response = await finalize(api, created["path"])
    await assert_error(response, 409, "UPLOAD_INCOMPLETE")
    record = await (await api.call("GET", f"/files/{created['documentId']}")).json()
    assert record["updating"] is True
    assert record["size"] == 0


async def test_finalize_retried_after_put_succeeds_and_loses_nothing(api: Api) -> None:
    created = await create_record(api)
    await assert_error(await finalize(api, created["path"]), 409, "UPLOAD_INCOMPLETE")

    async with put_bytes(api, created, PDF) as response:
        assert response.status == 200, await response.text()
    response = await finalize(api, created["path"])
    assert response.status == 200, await response.text()
    assert (await response.json())["size"] == len(PDF)

    processed = await wait_until_processed(api, created["documentId"])
    assert processed["processing"]["status"] == "done"
    assert processed["sha256"] == hashlib.sha256(PDF).hexdigest()
    response = await api.call(
        "GET", f"/files/{created['documentId']}/download", allow_redirects=False
    )
    async with api.client.session.get(link(response.headers["Location"])) as got:
        assert await got.read() == PDF


async def test_finalize_path_of_another_project_is_404_not_found(api: Api, other: Api) -> None:
    created = await create_record(other)
    async with put_bytes(other, created, PDF) as response:
        assert response.status == 200
    await assert_error(await finalize(api, created["path"]), 404, "NOT_FOUND")
    record = await (await other.call("GET", f"/files/{created['documentId']}")).json()
    assert record["processing"]["steps"] == {}


async def test_finalize_unknown_path_is_404_not_found(api: Api) -> None:
    path = f"libraryDocuments/{api.project_id}/AAAAAAAAAAAAAAAAAAAAAA.pdf"
    await assert_error(await finalize(api, path), 404, "NOT_FOUND")


async def test_finalize_path_with_another_extension_is_404_not_found(api: Api) -> None:
    created = await create_record(api)
    path = created["path"].rsplit(".", 1)[0] + ".txt"
    await assert_error(await finalize(api, path), 404, "NOT_FOUND")


@pytest.mark.parametrize(
    "path",
    [
        "nope",
        "/libraryDocuments/{projectId}/{documentId}.pdf",
        "libraryDocuments/{projectId}/{documentId}.pdf ",
        "libraryDocuments/{projectId}/../{documentId}.pdf",
        "libraryDocuments/{projectId}/{documentId}",
        "thumbnails/{projectId}/{documentId}.webp",
        "https://example.com/libraryDocuments/{projectId}/{documentId}.pdf",
    ],
)
async def test_finalize_malformed_path_is_400_validation_error(api: Api, path: str) -> None:
    created = await create_record(api)
    path = path.format(projectId=api.project_id, documentId=created["documentId"])
    error = await assert_error(await finalize(api, path), 400, "VALIDATION_ERROR")
    assert detail_fields(error) == {"path"}


async def test_finalize_content_type_mismatch_is_409(s3_api: Api) -> None:
    api = s3_api
    created = await create_record(api)
    async with put_bytes(api, created, PDF, content_type="text/plain") as response:
        assert response.status == 200, await response.text()
    response = await finalize(api, created["path"])
    await assert_error(response, 409, "CONTENT_TYPE_MISMATCH")
    record = await (await api.call("GET", f"/files/{created['documentId']}")).json()
    assert record["updating"] is True
    assert record["size"] == 0


async def test_finalize_of_s3_bytes_over_the_upload_limit_is_413_and_seals_nothing(
    start_app: ClientFactory, scaled: Shape
) -> None:
    """An S3 storageLink (a presigned PUT) takes any size: finalize holds the limit."""
    settings = scaled.settings.model_copy(update={"max_upload_bytes": len(PDF) - 1})
    client = await start_app(settings)
    project_id, secret = await new_project()
    api = Api(client, scaled, project_id, secret)
    created = await create_record(api)
    async with put_bytes(api, created, PDF) as response:
        assert response.status == 200, await response.text()
    error = await assert_error(await finalize(api, created["path"]), 413, "PAYLOAD_TOO_LARGE")
    assert f"over this server's limit of {len(PDF) - 1}" in error["message"]
    record = await (await api.call("GET", f"/files/{created['documentId']}")).json()
    assert (record["updating"], record["size"]) == (True, 0)


async def test_finalize_after_reupload_with_right_content_type_succeeds(s3_api: Api) -> None:
    api = s3_api
    created = await create_record(api)
    async with put_bytes(api, created, PDF, content_type="text/plain") as response:
        assert response.status == 200
    await assert_error(await finalize(api, created["path"]), 409, "CONTENT_TYPE_MISMATCH")
    async with put_bytes(api, created, PDF) as response:
        assert response.status == 200
    response = await finalize(api, created["path"])
    assert response.status == 200, await response.text()
    assert (await response.json())["size"] == len(PDF)


async def test_finalize_empty_upload_is_409_empty_upload(s3_api: Api) -> None:
    api = s3_api
    created = await create_record(api)
    async with put_bytes(api, created, b"") as response:
        assert response.status == 200, await response.text()
    response = await finalize(api, created["path"])
    await assert_error(response, 409, "EMPTY_UPLOAD")
    record = await (await api.call("GET", f"/files/{created['documentId']}")).json()
    assert record["updating"] is True


async def test_finalize_returns_record_still_updating_with_real_size(api: Api) -> None:
    created = await create_record(api, name="notes.txt", file_type="txt")
    async with put_bytes(api, created, b"hello, library") as response:
        assert response.status == 200
    response = await finalize(api, created["path"])
    assert response.status == 200
    record = await response.json()
    assert record["id"] == created["documentId"]
    assert record["updating"] is True
    assert record["size"] == len(b"hello, library")
    assert record["path"] == created["path"]


async def test_finalize_twice_returns_the_record_and_processes_once(api: Api) -> None:
    record = await api.upload(PDF)
    processed = await wait_until_processed(api, record["id"])

    response = await finalize(api, record["path"])
    assert response.status == 200, await response.text()
    again = await response.json()
    assert again["id"] == record["id"]
    assert again["processing"] == processed["processing"]
    assert again["updating"] is None

    await api.run_jobs()
    after = await (await api.call("GET", f"/files/{record['id']}")).json()
    assert after == processed
    assert (await LibraryFile.get(id=record["id"])).attempts == 1


async def test_concurrent_finalize_processes_once(api: Api) -> None:
    created = await create_record(api)
    async with put_bytes(api, created, PDF) as response:
        assert response.status == 200
    responses = await asyncio.gather(*(finalize(api, created["path"]) for _ in range(5)))
    assert [r.status for r in responses] == [200] * 5
    assert {(await r.json())["id"] for r in responses} == {created["documentId"]}

    processed = await wait_until_processed(api, created["documentId"])
    assert processed["processing"]["status"] == "done"
    assert (await LibraryFile.get(id=created["documentId"])).attempts == 1


async def test_finalize_after_failed_processing_processes_again(s3_api: Api) -> None:
    api = s3_api
    assert api.client.app is not None
    storage = api.client.app[appkeys.STORAGE]
    created = await create_record(api)
    async with put_bytes(api, created, PDF) as response:
        assert response.status == 200
    assert (await finalize(api, created["path"])).status == 200
    # The object disappears before the worker gets to it: processing fails.
    await storage.delete(created["path"])
    failed = await wait_until_processed(api, created["documentId"])
    assert failed["processing"]["status"] == "failed"
    assert failed["processing"]["error"]

    async with put_bytes(api, created, PDF) as response:
        assert response.status == 200
    response = await finalize(api, created["path"])
    assert response.status == 200, await response.text()
    assert (await response.json())["updating"] is True
    done = await wait_until_processed(api, created["documentId"])
    assert done["processing"]["status"] == "done"
    assert done["processing"]["error"] is None
    assert done["sha256"] == hashlib.sha256(PDF).hexdigest()
    assert (await LibraryFile.get(id=created["documentId"])).attempts == 2


async def test_finalize_accepts_prevent_search(api: Api) -> None:
    created = await create_record(api, name="secret.txt", file_type="txt")
    async with put_bytes(api, created, b"do not index me") as response:
        assert response.status == 200
    response = await finalize(api, created["path"], preventSearch=True)
    assert response.status == 200, await response.text()
    processed = await wait_until_processed(api, created["documentId"])
    assert processed["searchable"] is False
    assert (await LibraryFile.get(id=created["documentId"])).prevent_search is True


# --- download and thumbnail -------------------------------------------------------------------


async def test_download_before_finalize_is_409_not_ready(api: Api) -> None:
    created = await create_record(api)
    async with put_bytes(api, created, PDF) as response:
        assert response.status == 200
    response = await api.call(
        "GET", f"/files/{created['documentId']}/download", allow_redirects=False
    )
    await assert_error(response, 409, "NOT_READY")


async def test_download_unknown_file_is_404_not_found(api: Api) -> None:
    response = await api.call("GET", "/files/nope/download", allow_redirects=False)
    await assert_error(response, 404, "NOT_FOUND")


async def test_thumbnail_before_one_exists_is_404_not_found(api: Api) -> None:
    created = await create_record(api, name="photo.png", file_type="png")
    response = await api.call(
        "GET", f"/files/{created['documentId']}/thumbnail", allow_redirects=False
    )
    await assert_error(response, 404, "NOT_FOUND")


async def test_thumbnail_of_unknown_file_is_404_not_found(api: Api) -> None:
    response = await api.call("GET", "/files/nope/thumbnail", allow_redirects=False)
    await assert_error(response, 404, "NOT_FOUND")


async def test_delete_unknown_file_is_404_not_found(api: Api) -> None:
    await assert_error(await api.call("DELETE", "/files/nope"), 404, "NOT_FOUND")


async def test_delete_file_of_another_project_is_404_and_keeps_it(api: Api, other: Api) -> None:
    created = await create_record(other)
    await assert_error(
        await api.call("DELETE", f"/files/{created['documentId']}"), 404, "NOT_FOUND"
    )
    response = await other.call("GET", f"/files/{created['documentId']}")
    assert response.status == 200


async def test_a_refused_body_says_each_fields_problem_in_its_message(api: Api) -> None:
    error = await assert_error(
        await api.call("POST", "/dirs", json={"name": ""}), 400, "VALIDATION_ERROR"
    )
    assert error["message"] == "invalid request body: name: String should have at least 1 character"


async def test_a_body_with_many_problems_names_the_first_few_in_its_message(api: Api) -> None:
    body = {"query": "", "limit": 0, "mode": "fuzzy", "dir": "", "filter": []}
    response = await api.call("POST", "/search", json=body)
    error = await assert_error(response, 400, "VALIDATION_ERROR")
    assert len(error["details"]) == 5
    assert error["message"].startswith("invalid request body: query: ")
    assert error["message"].endswith("(and 2 more in details)")
