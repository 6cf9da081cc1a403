"""md, html and xlsx through the public API: accepted, processed, found by their phrases."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Api, create_record, wait_until_processed
from tests.library_helpers import assert_error
from tests.made_files import workbook_bytes
from tests.processing_helpers import search

NEW_TYPES = {
    "md": "text/markdown",
    "html": "text/html",
    "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
}
NOTES_MD = b"# Field notes\n\nThe **lilac narwhal** hums a quiet tune.\n"
PAGE_HTML = b"""<!doctype html><html><head><title>Harbour almanac</title>
<script>var scriptOnlyKeyword = "pumpernickel";</script>
<style>.styleonlykeyword { color: red }</style></head>
<body><h1>Tides</h1><p>The <b>copper</b> heron waits by the jetty.</p></body></html>"""
BOOK = {
    "Inventory": [["Item", "Count"], ["ochre kettle", 12]],
    "Suppliers": [["Name", "City"], ["Marigold Trading", "Tromsø"]],
}


async def keyword_search(api: Api, query: str) -> list[dict[str, Any]]:
    """The keyword-only hits for ``query`` (hybrid search always has nearest vectors)."""
    response = await api.call("POST", "/search", json={"query": query, "mode": "keyword"})
    assert response.status == 200, await response.text()
    hits: list[dict[str, Any]] = await response.json()
    return hits


async def process(api: Api, data: bytes, name: str) -> dict[str, Any]:
    """Upload through the public API and wait until processing ended; the record."""
    record = await api.upload(data, name=name, file_type=name.rsplit(".", 1)[1])
    return await wait_until_processed(api, record["id"])


@pytest.mark.parametrize(("file_type", "mime_type"), NEW_TYPES.items())
async def test_create_takes_the_new_types_with_their_mime_types(
    api: Api, file_type: str, mime_type: str
) -> None:
    created = await create_record(api, name=f"doc.{file_type.upper()}", file_type=file_type)
    assert created["mimeType"] == mime_type
    assert created["path"].endswith(f".{file_type}")


async def test_a_type_outside_the_table_is_still_refused(api: Api) -> None:
    response = await api.call(
        "POST", "/files", json={"originalname": "a.xls", "fileType": "xls", "dir": "root"}
    )
    body = await assert_error(response, 400, "UNSUPPORTED_FILE_TYPE")
    assert "md" in body["message"] and "xlsx" in body["message"]


async def test_a_markdown_file_is_found_by_its_words(shaped_api: Api) -> None:
    api = shaped_api
    record = await process(api, NOTES_MD, "notes.md")
    assert record["processing"]["status"] == "done", record
    assert record["processing"]["warning"] is None
    assert record["mimeType"] == "text/markdown"
    [hit] = await search(api, "lilac narwhal")
    assert hit["fileId"] == record["id"]
    assert hit["page"] is None
    assert "The **lilac narwhal** hums a quiet tune." in hit["chunk"]


async def test_an_html_page_is_found_by_its_text_and_never_by_its_scripts(shaped_api: Api) -> None:
    api = shaped_api
    record = await process(api, PAGE_HTML, "almanac.html")
    assert record["processing"]["status"] == "done", record
    [hit] = await search(api, "copper heron jetty")
    assert hit["fileId"] == record["id"]
    assert hit["chunk"] == "Harbour almanac\nTides\nThe copper heron waits by the jetty."
    assert await keyword_search(api, "pumpernickel") == []
    assert await keyword_search(api, "styleonlykeyword") == []


async def test_an_xlsx_is_found_on_the_sheet_that_holds_the_phrase(shaped_api: Api) -> None:
    api = shaped_api
    record = await process(api, workbook_bytes(BOOK), "book.xlsx")
    assert record["processing"]["status"] == "done", record
    assert record["processing"]["pages"] == 2
    assert record["processing"]["chunks"] == 2

    [inventory] = await search(api, "ochre kettle")
    assert (inventory["fileId"], inventory["page"]) == (record["id"], "Inventory")
    assert inventory["chunk"] == "Item | Count\nochre kettle | 12"  # a line a row
    [suppliers] = await search(api, "Marigold Trading")
    assert suppliers["page"] == "Suppliers"
    assert "Tromsø" in suppliers["chunk"]


async def test_a_damaged_xlsx_fails_clearly(shaped_api: Api) -> None:
    api = shaped_api
    record = await process(api, b"PK\x03\x04 not really a workbook", "broken.xlsx")
    assert record["processing"]["status"] == "failed", record
    assert record["processing"]["error"] == "not a valid xlsx file"
    assert record["updating"] is None


async def test_an_html_page_with_no_text_is_done_with_no_text(api: Api) -> None:
    record = await process(api, b"<html><body><script>x()</script></body></html>", "blank.html")
    assert record["processing"]["status"] == "done", record
    assert record["processing"]["warning"] == "NO_TEXT"
    assert record["processing"]["chunks"] == 0
