"""The in-memory vector cache follows every index write, reading only the files it names.

Each test searches first, so the process holds the project's vectors, then changes the
index and searches by meaning again: what the second search finds is what the cache did.
"""

from __future__ import annotations

import pytest

from libflow.library import search_index
from libflow.models import SearchIndexChange
from tests.conftest import Api, wait_until_processed
from tests.search_helpers import file_ids, upload_labelled

pytestmark = pytest.mark.usefixtures("semantic_search")

CAT = "The feline dozed on the rug for the whole afternoon."
SALES = "Quarterly revenue grew by eight percent in Europe."
QUERY = "a cat sleeping on a mat"


async def by_meaning(api: Api, **body: object) -> list[str]:
    return await file_ids(api, QUERY, mode="semantic", **body)


async def test_a_file_indexed_after_a_search_is_found_by_meaning(shaped_api: Api) -> None:
    await upload_labelled(shaped_api, SALES)
    assert await by_meaning(shaped_api) == []
    cat = await upload_labelled(shaped_api, CAT)
    assert await by_meaning(shaped_api) == [cat]


async def test_a_file_moved_after_a_search_is_found_in_its_new_folder(shaped_api: Api) -> None:
    cat = await upload_labelled(shaped_api, CAT)
    assert await by_meaning(shaped_api, dir="root") == [cat]
    folder = await (await shaped_api.call("POST", "/dirs", json={"name": "pets"})).json()
    response = await shaped_api.call("PATCH", f"/files/{cat}", json={"dir": folder["id"]})
    assert response.status == 200, await response.text()
    assert await by_meaning(shaped_api, dir="root") == []
    assert await by_meaning(shaped_api, dir=folder["id"]) == [cat]


async def test_metadata_changed_after_a_search_filters_by_its_new_values(
    shaped_api: Api,
) -> None:
    cat = await upload_labelled(shaped_api, CAT, {"kind": "draft"})
    assert await by_meaning(shaped_api, filter={"kind": "draft"}) == [cat]
    response = await shaped_api.call("PATCH", f"/files/{cat}", json={"metadata": {"kind": "pets"}})
    assert response.status == 200, await response.text()
    assert await by_meaning(shaped_api, filter={"kind": "draft"}) == []
    assert await by_meaning(shaped_api, filter={"kind": "pets"}) == [cat]


async def test_a_file_deleted_after_a_search_is_no_longer_found(shaped_api: Api) -> None:
    cat = await upload_labelled(shaped_api, CAT)
    other = await upload_labelled(shaped_api, "A kitten naps on the doormat.", name="kit.txt")
    assert set(await by_meaning(shaped_api)) == {cat, other}
    response = await shaped_api.call("DELETE", f"/files/{cat}")
    assert response.status == 204
    assert await by_meaning(shaped_api) == [other]


async def test_a_file_processed_again_and_again_is_found_once(shaped_api: Api) -> None:
    cat = await upload_labelled(shaped_api, CAT)
    other = await upload_labelled(shaped_api, "A kitten naps on the doormat.", name="kit.txt")
    # Each processing replaces the file's passages: the cache retires the old rows and,
    # once they are half of its matrix, drops them.
    for _ in range(4):
        assert sorted(await by_meaning(shaped_api)) == sorted([cat, other])
        response = await shaped_api.call("POST", f"/files/{cat}/reprocess")
        assert response.status == 202, await response.text()
        processed = await wait_until_processed(shaped_api, cat)
        assert processed["processing"]["status"] == "done"
    assert sorted(await by_meaning(shaped_api)) == sorted([cat, other])


async def test_a_cache_the_change_log_cannot_bring_up_to_date_reads_every_vector(
    api: Api,
) -> None:
    await upload_labelled(api, SALES)
    assert await by_meaning(api) == []
    cat = await upload_labelled(api, CAT)
    # As after a pruned log, or for versions written before the log existed.
    await SearchIndexChange.filter(project_id=api.project_id).delete()
    assert await by_meaning(api) == [cat]


async def test_the_change_log_keeps_only_the_latest_changes(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(search_index, "KEPT_CHANGES", 2)
    for n in range(5):
        await upload_labelled(api, f"Note {n} on the heron survey.", name=f"n{n}.txt")
    versions = await SearchIndexChange.filter(project_id=api.project_id).values_list(
        "version", flat=True
    )
    assert 2 <= len(versions) < 4
    assert max(versions) == 5
