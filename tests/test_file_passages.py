"""A file's passages (GET .../files/:fileId/chunks) and reprocessing (POST .../reprocess)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from libflow import appkeys
from libflow.models import Chunk, LibraryFile
from tests.conftest import (
    Api,
    ClientFactory,
    Shape,
    base_settings,
    linked_pages,
    new_project,
    put_bytes,
    wait_until_processed,
)
from tests.library_helpers import assert_error
from tests.search_helpers import create_labelled, upload_labelled

PARAGRAPH = (
    "The harbour master counted the boats at dawn, wrote each name in the ledger, "
    "and sent the tally to the council before the tide turned. "
)


async def passages_of(api: Api, file_id: str, **params: Any) -> tuple[list[dict[str, Any]], Any]:
    response = await api.call("GET", f"/files/{file_id}/chunks", params=params)
    assert response.status == 200, await response.text()
    return await response.json(), response.headers.get("Link")


async def test_passages_come_in_file_order_page_by_page(shaped_api: Api) -> None:
    file_id = await upload_labelled(shaped_api, PARAGRAPH * 30)
    whole, link = await passages_of(shaped_api, file_id)
    assert link is None
    assert len(whole) >= 3
    assert [p["index"] for p in whole] == list(range(len(whole)))
    for passage in whole:
        assert set(passage) == {"index", "page", "text", "tokens"}
        assert passage["page"] is None
        assert isinstance(passage["tokens"], int)
        assert passage["tokens"] > 0

    pages = await linked_pages(shaped_api, shaped_api.url(f"/files/{file_id}/chunks?limit=2"))
    assert [passage for page in pages for passage in page] == whole


async def test_a_page_holds_100_passages_unless_told(
    start_app: ClientFactory, tmp_path: Path
) -> None:
    # Keyword-only (no model): 101 passages cost no embedding time.
    client = await start_app(base_settings(tmp_path, embedder="none"))
    project_id, key = await new_project()
    api = Api(client, Shape("keyword-only", client.app[appkeys.SETTINGS]), project_id, key)
    file_id = await upload_labelled(api, PARAGRAPH * 2000)
    assert await Chunk.filter(file_id=file_id).count() > 100
    first, link = await passages_of(api, file_id)
    assert len(first) == 100
    assert link is not None
    most, _ = await passages_of(api, file_id, limit="1000")
    assert most[:100] == first


async def test_a_file_without_passages_has_an_empty_list(api: Api) -> None:
    created = await create_labelled(api, None)
    assert await passages_of(api, created["documentId"]) == ([], None)


async def test_passage_listing_errors(api: Api) -> None:
    file_id = await upload_labelled(api, PARAGRAPH)
    for limit in ("0", "1001", "x"):
        response = await api.call("GET", f"/files/{file_id}/chunks", params={"limit": limit})
        await assert_error(response, 400, "VALIDATION_ERROR")
    response = await api.call("GET", f"/files/{file_id}/chunks", params={"cursor": "!!nope"})
    await assert_error(response, 400, "VALIDATION_ERROR")
    # Numbers no column holds: refused, not sent to the database to fail there.
    for numbers in (f"{2**63}|1", f"1|{2**63}", "-1|1"):
        cursor = base64.urlsafe_b64encode(numbers.encode()).decode().rstrip("=")
        response = await api.call("GET", f"/files/{file_id}/chunks", params={"cursor": cursor})
        await assert_error(response, 400, "VALIDATION_ERROR")
    response = await api.call("GET", "/files/nosuchfile/chunks")
    await assert_error(response, 404, "NOT_FOUND")


async def test_another_projects_passages_are_404(api: Api) -> None:
    file_id = await upload_labelled(api, PARAGRAPH)
    project_id, key = await new_project("other")
    other = Api(api.client, api.shape, project_id, key)
    response = await other.call("GET", f"/files/{file_id}/chunks")
    await assert_error(response, 404, "NOT_FOUND")


async def test_reprocess_runs_the_file_through_processing_again(shaped_api: Api) -> None:
    file_id = await upload_labelled(shaped_api, "The vermilion otter almanac.")
    before = await (await shaped_api.call("GET", f"/files/{file_id}")).json()
    await Chunk.filter(file_id=file_id).delete()  # an index that lost the file's rows

    response = await shaped_api.call("POST", f"/files/{file_id}/reprocess")
    assert response.status == 202, await response.text()
    record = await response.json()
    assert record["updating"] is True
    assert record["processing"]["status"] in ("pending", "processing")

    after = await wait_until_processed(shaped_api, file_id)
    assert after["processing"]["status"] == "done"
    assert after["processing"]["steps"]["started"] > before["processing"]["steps"]["started"]
    assert await Chunk.filter(file_id=file_id).count() == 1
    hits = await (await shaped_api.call("GET", "/search", params={"q": "otter almanac"})).json()
    assert [hit["fileId"] for hit in hits] == [file_id]


async def test_reprocess_of_a_file_being_processed_queues_nothing_more(shaped_api: Api) -> None:
    created = await create_labelled(shaped_api, None)
    async with put_bytes(shaped_api, created, b"The saffron heron tally.") as response:
        assert response.status == 200
    await shaped_api.call("POST", "/files:complete", json={"path": created["path"]})
    response = await shaped_api.call("POST", f"/files/{created['documentId']}/reprocess")
    assert response.status == 202, await response.text()
    assert (await response.json())["updating"] is True
    processed = await wait_until_processed(shaped_api, created["documentId"])
    assert processed["processing"]["status"] == "done"
    file = await LibraryFile.get(id=created["documentId"])
    assert file.attempts == 1  # one job ran


async def test_reprocess_before_finalize_is_409_not_ready(api: Api) -> None:
    created = await create_labelled(api, None)
    response = await api.call("POST", f"/files/{created['documentId']}/reprocess")
    await assert_error(response, 409, "NOT_READY")


async def test_reprocess_of_an_unknown_or_another_projects_file_is_404(api: Api) -> None:
    response = await api.call("POST", "/files/nosuchfile/reprocess")
    await assert_error(response, 404, "NOT_FOUND")
    file_id = await upload_labelled(api, PARAGRAPH)
    project_id, key = await new_project("other")
    other = Api(api.client, api.shape, project_id, key)
    response = await other.call("POST", f"/files/{file_id}/reprocess")
    await assert_error(response, 404, "NOT_FOUND")
