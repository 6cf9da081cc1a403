"""Hostile files of the newer types fail cleanly, and the server stays well (README budgets).

xlsx passes the same zip and XML budgets as docx and pptx, refuses a DTD (billion laughs),
and counts the cells openpyxl yields; html counts its tags before it is parsed; a pdf of
more scanned pages than OCR reads is refused before the first is read. Each at full size,
through the public API, with /healthz answering throughout and this process's memory bounded.
"""

from __future__ import annotations

import io
import zipfile
from typing import Any

from libflow.library.processing.budgets import (
    MAX_HTML_TAGS,
    MAX_OCR_PAGES,
    MAX_SPREADSHEET_CELLS,
    MAX_XML_TAGS,
)
from tests.conftest import Api, wait_until_processed
from tests.hostile.conftest import healthz_stays_responsive, peak_rss_growth
from tests.hostile.hostile_files import blank_pdf, paragraphs
from tests.hostile.test_file_budgets import RSS_BOUND_MIB, assert_failed_cleanly
from tests.made_files import SHEET_XML, sheet_xml, workbook_bytes, workbook_with

MIB = 1024 * 1024


async def process(api: Api, data: bytes, name: str) -> dict[str, Any]:
    """Upload ``data`` through the public API and wait until its processing ended."""
    record = await api.upload(data, name=name, file_type=name.rsplit(".", 1)[1])
    return await wait_until_processed(api, record["id"], timeout=120)


async def assert_next_xlsx_is_done(api: Api) -> None:
    """The worker goes on: a good workbook after the hostile one is processed."""
    record = await process(api, workbook_bytes({"Sheet": [["after the attack"]]}), "ok.xlsx")
    assert record["processing"]["status"] == "done", record


async def test_an_xlsx_bomb_under_the_zip_limits_fails_and_the_server_stays_well(
    shaped_api: Api,
) -> None:
    api = shaped_api
    # 262 MB of sheet XML at under 200:1 per MiB, as the docx bomb of test_file_budgets.
    bomb = workbook_with(SHEET_XML, paragraphs(262_000_000))
    assert len(bomb) < 2 * MIB

    async with healthz_stays_responsive(api.client):
        with peak_rss_growth() as growth:
            failed = await process(api, bomb, "bomb.xlsx")
    assert growth.mib < RSS_BOUND_MIB, growth

    await assert_failed_cleanly(
        api, failed, f"looks like a zip bomb: its XML holds more than {MAX_XML_TAGS:,} tags"
    )
    await assert_next_xlsx_is_done(api)


async def test_an_xlsx_of_billion_laughs_fails_before_it_is_parsed(shaped_api: Api) -> None:
    api = shaped_api
    entities = "".join(f'<!ENTITY e{n} "{f"&e{n - 1};" * 10 if n else "lol"}">' for n in range(10))
    laughs = f"<!DOCTYPE worksheet [{entities}]>\n".encode()
    cell = '<row r="1"><c r="A1" t="inlineStr"><is><t>&e9;</t></is></c></row>'
    bomb = workbook_with(SHEET_XML, [sheet_xml(cell, laughs)])

    async with healthz_stays_responsive(api.client):
        failed = await process(api, bomb, "laughs.xlsx")

    await assert_failed_cleanly(api, failed, "not a valid xlsx file: its XML declares a DOCTYPE")
    await assert_next_xlsx_is_done(api)


async def test_an_xlsx_of_padding_fails_at_the_cell_budget(api: Api) -> None:
    # 11 sheets of one cell a million rows down: 10 KB that openpyxl would turn into 11.5
    # million empty rows (and 10,000 such sheets into two hours of them).
    gap = b'<row r="1048576"><c r="A1048576"><v>2</v></c></row></sheetData>'
    source = zipfile.ZipFile(io.BytesIO(workbook_bytes({f"S{n}": [] for n in range(11)})))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as package:
        for entry in source.infolist():
            data = source.read(entry)
            if entry.filename.startswith("xl/worksheets/sheet"):
                data = data.replace(b"</sheetData>", gap)
                assert gap in data, data
            package.writestr(entry, data)

    async with healthz_stays_responsive(api.client):
        failed = await process(api, out.getvalue(), "padding.xlsx")

    await assert_failed_cleanly(
        api, failed, f"the xlsx has more than {MAX_SPREADSHEET_CELLS:,} cells"
    )


async def test_an_html_page_over_the_tag_budget_fails_before_it_is_parsed(
    shaped_api: Api,
) -> None:
    api = shaped_api
    page = b"<html><body>" + b"<p>" * (MAX_HTML_TAGS + 1) + b"</body></html>"

    async with healthz_stays_responsive(api.client):
        with peak_rss_growth() as growth:
            failed = await process(api, page, "tags.html")
    assert growth.mib < RSS_BOUND_MIB, growth

    await assert_failed_cleanly(api, failed, f"the html has more than {MAX_HTML_TAGS:,} tags")


async def test_a_pdf_of_more_scans_than_ocr_reads_fails_before_any_is_read(api: Api) -> None:
    async with healthz_stays_responsive(api.client):
        failed = await process(api, blank_pdf(MAX_OCR_PAGES + 1), "scans.pdf")

    await assert_failed_cleanly(api, failed, f"OCR reads at most {MAX_OCR_PAGES:,} a file")
