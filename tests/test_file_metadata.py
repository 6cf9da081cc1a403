"""File metadata through the public API: set at creation, shown by get-one, replaced by PATCH."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from libflow.library.search_index import write_file_index
from libflow.models import Chunk, LibraryFile
from tests.conftest import Api, new_project
from tests.library_helpers import assert_error, detail_fields
from tests.search_helpers import create_labelled, file_ids, upload_labelled

LABELS = {"team": "finance", "year": 2024, "ratio": 0.5, "final": True, "a.b-c_D": ""}


async def get_file(api: Api, file_id: str) -> dict[str, Any]:
    response = await api.call("GET", f"/files/{file_id}")
    assert response.status == 200, await response.text()
    record: dict[str, Any] = await response.json()
    return record


async def patch(api: Api, file_id: str, body: dict[str, Any]) -> dict[str, Any]:
    response = await api.call("PATCH", f"/files/{file_id}", json=body)
    assert response.status == 200, await response.text()
    record: dict[str, Any] = await response.json()
    return record


async def test_metadata_given_at_creation_is_shown_by_get_one(shaped_api: Api) -> None:
    created = await create_labelled(shaped_api, LABELS)
    record = await get_file(shaped_api, created["documentId"])
    assert record["metadata"] == LABELS
    assert record["metadata"]["final"] is True
    assert record["processing"]["ocrPages"] is None
    assert record["processing"]["warning"] is None


async def test_a_file_created_without_metadata_has_an_empty_object(api: Api) -> None:
    created = await create_labelled(api, None)
    assert (await get_file(api, created["documentId"]))["metadata"] == {}


async def test_list_items_keep_the_spec_fields_only(api: Api) -> None:
    await create_labelled(api, LABELS)
    [item] = await (await api.call("GET", "/files")).json()
    assert "metadata" not in item
    assert "processing" not in item


BAD_METADATA: list[tuple[Any, str]] = [
    ({"bad key": "x"}, "metadata.bad key.[key]"),
    ({"k" * 65: "x"}, "metadata." + "k" * 65 + ".[key]"),
    ({"": "x"}, "metadata..[key]"),
    ({f"k{i}": i for i in range(33)}, "metadata"),
    ({"k": "x" * 1001}, "metadata.k"),
    ({"k": 2**53}, "metadata.k"),
    ({"k": None}, "metadata.k"),
    ({"k": [1]}, "metadata.k"),
    ({"k": {"nested": 1}}, "metadata.k"),
    (["k"], "metadata"),
]


async def test_create_refuses_metadata_breaking_its_rules(api: Api) -> None:
    for metadata, field in BAD_METADATA:
        response = await api.call(
            "POST",
            "/files",
            json={"originalname": "a.txt", "fileType": "txt", "dir": "root", "metadata": metadata},
        )
        body = await assert_error(response, 400, "VALIDATION_ERROR")
        assert field in detail_fields(body), metadata
    assert await (await api.call("GET", "/files")).json() == []


async def test_metadata_at_the_limits_is_taken(api: Api) -> None:
    labels: dict[str, Any] = {f"k{i}": i for i in range(30)}
    labels["x" * 64] = "y" * 1000
    labels["big"] = -(2**53 - 1)
    labels["k0"] = 2**53 - 1
    created = await create_labelled(api, labels)
    assert (await get_file(api, created["documentId"]))["metadata"] == labels


async def test_patch_replaces_the_whole_metadata_object(shaped_api: Api) -> None:
    created = await create_labelled(shaped_api, LABELS)
    before = await get_file(shaped_api, created["documentId"])
    record = await patch(shaped_api, created["documentId"], {"metadata": {"team": "legal"}})
    assert record["metadata"] == {"team": "legal"}
    assert record["id"] == created["documentId"]
    assert record["updatedDate"] >= before["updatedDate"]
    assert (await get_file(shaped_api, created["documentId"]))["metadata"] == {"team": "legal"}


async def test_patch_with_an_empty_object_clears_the_metadata(api: Api) -> None:
    created = await create_labelled(api, LABELS)
    assert (await patch(api, created["documentId"], {"metadata": {}}))["metadata"] == {}


async def test_patch_renames_and_moves_a_file(shaped_api: Api) -> None:
    folder = await (await shaped_api.call("POST", "/dirs", json={"name": "archive"})).json()
    created = await create_labelled(shaped_api, LABELS)
    record = await patch(
        shaped_api, created["documentId"], {"name": "renamed.txt", "dir": folder["id"]}
    )
    assert record["name"] == "renamed.txt"
    assert record["dir"] == folder["id"]
    assert record["metadata"] == LABELS  # not given: unchanged
    [listed] = await (await shaped_api.call("GET", "/files", params={"dir": folder["id"]})).json()
    assert listed["name"] == "renamed.txt"
    back = await patch(shaped_api, created["documentId"], {"dir": "root"})
    assert back["dir"] == "root"


async def test_patch_without_fields_changes_nothing(api: Api) -> None:
    created = await create_labelled(api, LABELS)
    before = await get_file(api, created["documentId"])
    assert await patch(api, created["documentId"], {}) == before


async def test_patch_changes_the_index_copy_before_the_answer(shaped_api: Api) -> None:
    file_id = await upload_labelled(
        shaped_api, "The quarterly basilisk lantern report.", {"team": "finance"}
    )
    assert await file_ids(shaped_api, "basilisk lantern", filter={"team": "finance"}) == [file_id]

    await patch(shaped_api, file_id, {"metadata": {"team": "legal"}})
    assert await Chunk.filter(file_id=file_id, metadata={"team": "legal"}).count() == 1
    assert await file_ids(shaped_api, "basilisk lantern", filter={"team": "finance"}) == []
    assert await file_ids(shaped_api, "basilisk lantern", filter={"team": "legal"}) == [file_id]


async def test_moving_a_file_moves_its_passages_in_search(shaped_api: Api) -> None:
    folder = await (await shaped_api.call("POST", "/dirs", json={"name": "archive"})).json()
    file_id = await upload_labelled(shaped_api, "The tangerine gyroscope minutes.")
    assert await file_ids(shaped_api, "tangerine gyroscope", dir=folder["id"]) == []

    await patch(shaped_api, file_id, {"dir": folder["id"]})
    assert await file_ids(shaped_api, "tangerine gyroscope", dir=folder["id"]) == [file_id]
    assert await file_ids(shaped_api, "tangerine gyroscope", dir="root") == []


async def test_a_renamed_file_is_found_under_its_new_name(api: Api) -> None:
    file_id = await upload_labelled(api, "The mulberry sextant ledger.")
    await patch(api, file_id, {"name": "ledger.txt"})
    [hit] = await (await api.call("GET", "/search", params={"q": "mulberry sextant"})).json()
    assert hit["name"] == "ledger.txt"


BAD_PATCHES: list[tuple[dict[str, Any], str]] = [
    ({"metadata": {"bad key": 1}}, "metadata.bad key.[key]"),
    ({"metadata": {"k": [1]}}, "metadata.k"),
    ({"name": ""}, "name"),
    ({"name": "x" * 256}, "name"),
    ({"name": 5}, "name"),
    ({"dir": 5}, "dir"),
]


async def test_patch_refuses_a_bad_body(api: Api) -> None:
    created = await create_labelled(api, LABELS)
    before = await get_file(api, created["documentId"])
    for body, field in BAD_PATCHES:
        response = await api.call("PATCH", f"/files/{created['documentId']}", json=body)
        error = await assert_error(response, 400, "VALIDATION_ERROR")
        assert field in detail_fields(error), body
    assert await get_file(api, created["documentId"]) == before


async def test_patch_that_is_not_json_is_400(api: Api) -> None:
    created = await create_labelled(api, LABELS)
    response = await api.call("PATCH", f"/files/{created['documentId']}", data=b"{nope")
    await assert_error(response, 400, "INVALID_JSON")


async def test_patch_of_an_unknown_file_is_404(api: Api) -> None:
    response = await api.call("PATCH", "/files/nosuchfile", json={"metadata": {}})
    await assert_error(response, 404, "NOT_FOUND")


async def test_patch_into_an_unknown_folder_is_404_and_changes_nothing(api: Api) -> None:
    created = await create_labelled(api, LABELS)
    response = await api.call(
        "PATCH",
        f"/files/{created['documentId']}",
        json={"dir": "nosuchfolder", "metadata": {"team": "legal"}},
    )
    await assert_error(response, 404, "NOT_FOUND")
    record = await get_file(api, created["documentId"])
    assert (record["dir"], record["metadata"]) == ("root", LABELS)


async def test_patch_of_another_projects_file_is_404(api: Api) -> None:
    created = await create_labelled(api, LABELS)
    project_id, key = await new_project("other")
    other = Api(api.client, api.shape, project_id, key)
    response = await other.call("PATCH", f"/files/{created['documentId']}", json={"metadata": {}})
    await assert_error(response, 404, "NOT_FOUND")
    assert (await get_file(api, created["documentId"]))["metadata"] == LABELS


async def test_patch_with_another_projects_key_is_403(api: Api) -> None:
    created = await create_labelled(api, LABELS)
    _, other_key = await new_project("other")
    response = await api.call(
        "PATCH",
        f"/files/{created['documentId']}",
        json={"metadata": {}},
        headers={"Authorization": other_key},
    )
    await assert_error(response, 403, "FORBIDDEN")


@dataclass(frozen=True)
class Passage:
    text: str
    seq: int
    page: int | None = None
    page_name: str | None = None
    tokens: int | None = None


async def test_a_patch_racing_processing_is_kept_in_the_index(shaped_api: Api) -> None:
    folder = await (await shaped_api.call("POST", "/dirs", json={"name": "archive"})).json()
    file_id = await upload_labelled(shaped_api, "The pewter albatross log.", {"team": "finance"})
    stale = await LibraryFile.get(id=file_id)  # as a processing job loaded it
    await patch(shaped_api, file_id, {"metadata": {"team": "legal"}, "dir": folder["id"]})

    # The job writes its passages after the PATCH, from the file it loaded before.
    await write_file_index(stale, [Passage("The pewter albatross log.", 0)], None, None)
    [chunk] = await Chunk.filter(file_id=file_id)
    assert (chunk.metadata, chunk.folder_id) == ({"team": "legal"}, folder["id"])


async def test_get_one_answers_the_record_patch_answered(shaped_api: Api) -> None:
    # PATCH renders the model it saved; GET one renders the row it reads (inline on
    # SQLite, without a model): the two must be the same record.
    created = await create_labelled(shaped_api, LABELS)
    labels = {"city": "Zürich ✓", "quote": 'say "hi"\n', "n": -(2**53) + 1, "x": 1e-7}
    patched = await patch(shaped_api, created["documentId"], {"metadata": labels, "dir": "root"})
    fetched = await get_file(shaped_api, created["documentId"])
    assert fetched == patched
    assert fetched["metadata"] == labels
