"""Folders after their creation: get one, rename, move, delete (both shapes)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from libflow.library import files, folders
from libflow.models import Folder
from tests.conftest import Api, create_record, linked_pages, new_project
from tests.library_helpers import assert_error, detail_fields


async def make_folder(api: Api, name: str, parent: str = "root") -> dict[str, Any]:
    response = await api.call("POST", "/dirs", json={"name": name, "parent": parent})
    assert response.status == 201, await response.text()
    folder: dict[str, Any] = await response.json()
    return folder


async def patch_folder(api: Api, folder_id: str, **body: str) -> dict[str, Any]:
    response = await api.call("PATCH", f"/dirs/{folder_id}", json=body)
    assert response.status == 200, await response.text()
    folder: dict[str, Any] = await response.json()
    return folder


async def listed(api: Api) -> list[dict[str, Any]]:
    response = await api.call("GET", "/dirs")
    assert response.status == 200, await response.text()
    folder_list: list[dict[str, Any]] = await response.json()
    return folder_list


async def test_get_one_folder_is_the_listed_record(shaped_api: Api) -> None:
    folder = await make_folder(shaped_api, "Reports")
    response = await shaped_api.call("GET", f"/dirs/{folder['id']}")
    assert response.status == 200
    assert await response.json() == folder == (await listed(shaped_api))[0]


@pytest.mark.parametrize("folder_id", ["root", "nope", "A" * 32])
async def test_get_root_or_an_unknown_folder_is_404(shaped_api: Api, folder_id: str) -> None:
    await assert_error(await shaped_api.call("GET", f"/dirs/{folder_id}"), 404, "NOT_FOUND")


async def test_another_projects_folder_is_404_on_every_method(shaped_api: Api) -> None:
    project_id, secret = await new_project("other")
    other = Api(shaped_api.client, shaped_api.shape, project_id, secret)
    theirs = await make_folder(other, "Theirs")
    for method, body in (("GET", None), ("PATCH", {"name": "Mine"}), ("DELETE", None)):
        response = await shaped_api.call(method, f"/dirs/{theirs['id']}", json=body)
        await assert_error(response, 404, "NOT_FOUND")
    assert await listed(other) == [theirs]


async def test_rename_changes_the_name_and_updated_date_only(shaped_api: Api) -> None:
    folder = await make_folder(shaped_api, "Reprots")
    await asyncio.sleep(0.01)  # dates are in milliseconds
    renamed = await patch_folder(shaped_api, folder["id"], name="  Reports ")
    assert renamed["name"] == "Reports"
    assert renamed["updatedDate"] > folder["updatedDate"]
    unchanged = ("id", "parent", "createdDate")
    assert {k: renamed[k] for k in unchanged} == {k: folder[k] for k in unchanged}
    assert await listed(shaped_api) == [renamed]


async def test_move_under_another_folder_and_back_to_root(shaped_api: Api) -> None:
    year = await make_folder(shaped_api, "2026")
    quarter = await make_folder(shaped_api, "Q1")
    moved = await patch_folder(shaped_api, quarter["id"], parent=year["id"])
    assert moved["parent"] == year["id"]
    assert (await patch_folder(shaped_api, quarter["id"], parent="root"))["parent"] == "root"


async def test_a_moved_folder_keeps_its_files(shaped_api: Api) -> None:
    year = await make_folder(shaped_api, "2026")
    quarter = await make_folder(shaped_api, "Q1")
    created = await create_record(shaped_api, folder=quarter["id"])
    await patch_folder(shaped_api, quarter["id"], parent=year["id"])
    response = await shaped_api.call("GET", "/files", params={"dir": quarter["id"]})
    assert [f["id"] for f in await response.json()] == [created["documentId"]]


async def test_empty_patch_changes_nothing(shaped_api: Api) -> None:
    folder = await make_folder(shaped_api, "Reports")
    assert await patch_folder(shaped_api, folder["id"]) == folder


async def test_move_into_itself_is_400(shaped_api: Api) -> None:
    folder = await make_folder(shaped_api, "Loop")
    body = {"parent": folder["id"]}
    response = await shaped_api.call("PATCH", f"/dirs/{folder['id']}", json=body)
    error = await assert_error(response, 400, "VALIDATION_ERROR")
    assert detail_fields(error) == {"parent"}


async def test_move_into_a_folder_under_it_is_400_and_changes_nothing(shaped_api: Api) -> None:
    top = await make_folder(shaped_api, "Top")
    middle = await make_folder(shaped_api, "Middle", top["id"])
    bottom = await make_folder(shaped_api, "Bottom", middle["id"])
    response = await shaped_api.call("PATCH", f"/dirs/{top['id']}", json={"parent": bottom["id"]})
    await assert_error(response, 400, "VALIDATION_ERROR")
    assert await listed(shaped_api) == [top, middle, bottom]


async def test_move_under_an_unknown_folder_is_404(shaped_api: Api) -> None:
    folder = await make_folder(shaped_api, "Reports")
    response = await shaped_api.call("PATCH", f"/dirs/{folder['id']}", json={"parent": "nope"})
    await assert_error(response, 404, "NOT_FOUND")
    assert await listed(shaped_api) == [folder]


@pytest.mark.parametrize("body", [{"name": ""}, {"name": "x" * 256}, {"parent": ""}])
async def test_bad_patch_is_400(shaped_api: Api, body: dict[str, str]) -> None:
    folder = await make_folder(shaped_api, "Reports")
    response = await shaped_api.call("PATCH", f"/dirs/{folder['id']}", json=body)
    error = await assert_error(response, 400, "VALIDATION_ERROR")
    assert detail_fields(error) == set(body)


async def test_delete_an_empty_folder(shaped_api: Api) -> None:
    kept = await make_folder(shaped_api, "Kept")
    gone = await make_folder(shaped_api, "Gone")
    response = await shaped_api.call("DELETE", f"/dirs/{gone['id']}")
    assert response.status == 204
    assert await response.read() == b""
    await assert_error(await shaped_api.call("GET", f"/dirs/{gone['id']}"), 404, "NOT_FOUND")
    assert await listed(shaped_api) == [kept]


async def test_delete_a_folder_holding_a_file_is_409_and_keeps_both(shaped_api: Api) -> None:
    folder = await make_folder(shaped_api, "Full")
    created = await create_record(shaped_api, folder=folder["id"])
    response = await shaped_api.call("DELETE", f"/dirs/{folder['id']}")
    error = await assert_error(response, 409, "FOLDER_NOT_EMPTY")
    assert error["details"] == {"files": 1, "folders": 0}
    assert await listed(shaped_api) == [folder]
    response = await shaped_api.call("GET", f"/files/{created['documentId']}")
    assert (await response.json())["dir"] == folder["id"]


async def test_delete_a_folder_holding_a_folder_is_409(shaped_api: Api) -> None:
    parent = await make_folder(shaped_api, "Parent")
    await make_folder(shaped_api, "Child", parent["id"])
    error = await assert_error(
        await shaped_api.call("DELETE", f"/dirs/{parent['id']}"), 409, "FOLDER_NOT_EMPTY"
    )
    assert error["details"] == {"files": 0, "folders": 1}


async def test_a_folder_emptied_by_moving_its_file_can_be_deleted(shaped_api: Api) -> None:
    folder = await make_folder(shaped_api, "Temporary")
    created = await create_record(shaped_api, folder=folder["id"])
    response = await shaped_api.call(
        "PATCH", f"/files/{created['documentId']}", json={"dir": "root"}
    )
    assert response.status == 200, await response.text()
    assert (await shaped_api.call("DELETE", f"/dirs/{folder['id']}")).status == 204


async def test_a_file_cannot_go_into_a_folder_removed_after_it_was_found(
    shaped_api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database's foreign key, not the earlier lookup, has the last word: the race of
    a create and a folder's delete ends in NOT_FOUND, never in a file in no folder."""
    folder = await make_folder(shaped_api, "Racing")
    stale = await Folder.get(id=folder["id"])
    await Folder.filter(id=folder["id"]).delete()

    async def found_before_the_delete(*_args: Any) -> Folder:
        return stale

    monkeypatch.setattr(files, "find_folder", found_before_the_delete)
    response = await shaped_api.call(
        "POST", "/files", json={"originalname": "a.txt", "fileType": "txt", "dir": folder["id"]}
    )
    await assert_error(response, 404, "NOT_FOUND")
    assert await (await shaped_api.call("GET", "/files")).json() == []


async def test_a_folder_cannot_be_deleted_once_a_file_went_in_after_the_count(
    shaped_api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = await make_folder(shaped_api, "Racing")
    created = await create_record(shaped_api, folder=folder["id"])
    real_filter = folders.LibraryFile.filter

    class CountsNothing:
        async def count(self) -> int:
            return 0

    def filter_counting_nothing(*args: Any, **kwargs: Any) -> Any:
        return CountsNothing() if "folder_id" in kwargs else real_filter(*args, **kwargs)

    monkeypatch.setattr(folders.LibraryFile, "filter", filter_counting_nothing)
    response = await shaped_api.call("DELETE", f"/dirs/{folder['id']}")
    await assert_error(response, 409, "FOLDER_NOT_EMPTY")
    monkeypatch.undo()
    response = await shaped_api.call("GET", f"/files/{created['documentId']}")
    assert (await response.json())["dir"] == folder["id"]


async def test_folders_nest_at_most_64_deep_made_or_moved(api: Api) -> None:
    """The bound keeps each create or move to a walk of at most 64 parents."""
    parent = "root"
    for depth in range(1, folders.MAX_FOLDER_DEPTH + 1):
        parent = (await make_folder(api, f"level {depth}", parent))["id"]
    response = await api.call("POST", "/dirs", json={"name": "too deep", "parent": parent})
    error = await assert_error(response, 400, "VALIDATION_ERROR")
    assert detail_fields(error) == {"parent"}
    loose = await make_folder(api, "loose")
    response = await api.call("PATCH", f"/dirs/{loose['id']}", json={"parent": parent})
    await assert_error(response, 400, "VALIDATION_ERROR")
    assert (await listed(api))[-1] == loose  # not moved


async def test_a_moved_folder_counts_the_folders_under_it_against_the_depth(api: Api) -> None:
    """Two chains of 40: the top of one under the bottom of the other would be 80 deep."""
    tops, bottoms = [], []
    for chain in ("a", "b"):
        parent = "root"
        for depth in range(40):
            parent = (await make_folder(api, f"{chain}{depth}", parent))["id"]
            if depth == 0:
                tops.append(parent)
        bottoms.append(parent)
    response = await api.call("PATCH", f"/dirs/{tops[1]}", json={"parent": bottoms[0]})
    error = await assert_error(response, 400, "VALIDATION_ERROR")
    assert "at most 64 deep" in error["message"]
    assert (await (await api.call("GET", f"/dirs/{tops[1]}")).json())["parent"] == "root"
    # A chain that fits goes: 40 + 24 is 64.
    short = await make_folder(api, "short")
    parent = short["id"]
    for depth in range(23):
        parent = (await make_folder(api, f"s{depth}", parent))["id"]
    await patch_folder(api, short["id"], parent=bottoms[0])


async def test_folders_are_paged_oldest_first_by_link(shaped_api: Api) -> None:
    made = [await make_folder(shaped_api, f"f{n}") for n in range(5)]
    path = f"/api/publicv1/projects/{shaped_api.project_id}/library/dirs?limit=2"
    pages = await linked_pages(shaped_api, path)
    assert [len(page) for page in pages] == [2, 2, 1]
    assert [folder for page in pages for folder in page] == made


async def test_a_folder_page_with_a_bad_limit_or_cursor_is_400(api: Api) -> None:
    await make_folder(api, "only")
    for params in ({"limit": "0"}, {"limit": "1001"}, {"cursor": "not-a-cursor"}):
        response = await api.call("GET", "/dirs", params=params)
        error = await assert_error(response, 400, "VALIDATION_ERROR")
        assert detail_fields(error) == set(params)
