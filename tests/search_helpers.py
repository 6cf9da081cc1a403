"""Helpers of the metadata, filtered-search and chunk tests: labelled uploads and searches."""

from __future__ import annotations

from typing import Any

from tests.conftest import Api, put_bytes, wait_until_processed


async def create_labelled(
    api: Api,
    metadata: dict[str, Any] | None,
    *,
    name: str = "notes.txt",
    file_type: str = "txt",
    folder: str = "root",
) -> dict[str, Any]:
    """Operation 2 with ``metadata``: the 201 body."""
    body: dict[str, Any] = {"originalname": name, "fileType": file_type, "dir": folder}
    if metadata is not None:
        body["metadata"] = metadata
    response = await api.call("POST", "/files", json=body)
    assert response.status == 201, await response.text()
    created: dict[str, Any] = await response.json()
    return created


async def upload_labelled(
    api: Api,
    text: str,
    metadata: dict[str, Any] | None = None,
    *,
    name: str = "notes.txt",
    folder: str = "root",
) -> str:
    """A txt file with ``metadata``, uploaded, finalized and processed: its id."""
    created = await create_labelled(api, metadata, name=name, folder=folder)
    async with put_bytes(api, created, text.encode()) as response:
        assert response.status == 200, await response.text()
    response = await api.call("POST", "/files:complete", json={"path": created["path"]})
    assert response.status == 200, await response.text()
    processed = await wait_until_processed(api, created["documentId"])
    assert processed["processing"]["status"] == "done", processed
    return str(created["documentId"])


async def search_post(api: Api, query: str, **body: Any) -> list[dict[str, Any]]:
    """POST .../library/search: the hits of a 200 answer."""
    response = await api.call("POST", "/search", json={"query": query, **body})
    assert response.status == 200, await response.text()
    hits: list[dict[str, Any]] = await response.json()
    return hits


async def file_ids(api: Api, query: str, **body: Any) -> list[str]:
    """The file ids of POST search's hits, best first."""
    return [hit["fileId"] for hit in await search_post(api, query, **body)]
