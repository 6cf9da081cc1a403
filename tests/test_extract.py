"""Text extraction on real files from LibreOffice, reportlab and zipfile (tests/fixtures)."""

from __future__ import annotations

import codecs
import datetime
import re
import tracemalloc
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from libflow.library.processing import ocr, spreadsheet
from libflow.library.processing.budgets import (
    MAX_HTML_TAGS,
    MAX_PAGES,
    MAX_TEXT_CHARS,
    MAX_XML_BYTES,
    MAX_XML_TAGS,
    MAX_ZIP_ENTRIES,
    MIB,
    BudgetExceeded,
)
from libflow.library.processing.extract import (
    MAX_TEXT_BYTES,
    Extraction,
    ExtractionError,
    Segment,
    decode_text,
    extract_text,
)
from tests.hostile.hostile_files import (
    DOCUMENT_XML,
    NOISE_HEX,
    blank_pdf,
    docx_with,
    empty_paragraphs_docx,
    long_text,
    paragraphs,
    pptx_listing_slides,
)
from tests.made_files import SHEET_XML, sheet_xml, workbook_bytes, workbook_with

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def without_ocr(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process reads as it would without the `ocr` extra installed."""
    monkeypatch.setattr(ocr, "ENGINE_MODULE", "libflow_no_such_ocr_module")
    ocr.ocr_engine.cache_clear()
    yield
    ocr.ocr_engine.cache_clear()


def extract(name: str, file_type: str | None = None) -> Extraction:
    """Extract a fixture, as the type its name says unless told otherwise."""
    return extract_text(FIXTURES / name, file_type or name.rsplit(".", 1)[1])


def page_of(segments: list[Segment], phrase: str) -> list[int | None]:
    """The pages of the segments that contain ``phrase``."""
    return [s.page for s in segments if phrase in " ".join(s.text.split())]


def test_reportlab_pdf_gives_one_segment_per_page() -> None:
    result = extract("pages.pdf")
    assert result.pages == 3
    assert [s.page for s in result.segments] == [1, 2, 3]


def test_reportlab_pdf_keeps_each_phrase_on_its_page() -> None:
    segments = extract("pages.pdf").segments
    assert page_of(segments, "amber falcon quilt") == [1]
    assert page_of(segments, "silver yak harbor") == [2]
    assert page_of(segments, "indigo moose carnival") == [3]


def test_pdf_text_keeps_accents() -> None:
    assert page_of(extract("pages.pdf").segments, "Déjà vu at the café: naïve résumé.") == [2]


def test_hundred_page_pdf_finds_the_phrase_on_page_73() -> None:
    result = extract("hundred_pages.pdf")
    assert result.pages == 100
    assert [s.page for s in result.segments] == list(range(1, 101))
    assert page_of(result.segments, "emerald squid parliament") == [73]


def test_libreoffice_pdf_from_docx_keeps_pages() -> None:
    segments = extract("report.pdf").segments
    assert page_of(segments, "zephyr quokka alignment") == [1]
    assert page_of(segments, "saffron tapir overture") == [2]


def test_libreoffice_pdf_from_pptx_has_a_page_per_slide() -> None:
    segments = extract("deck.pdf").segments
    assert page_of(segments, "nebula pangolin ferry") == [1]
    assert page_of(segments, "obsidian badger sonnet") == [2]
    assert page_of(segments, "juniper otter cascade") == [3]


def test_image_only_pdf_is_pages_without_text() -> None:
    result = extract("image_only.pdf")
    assert result.pages == 2
    assert all(not s.text.strip() for s in result.segments)


def test_encrypted_pdf_is_refused() -> None:
    with pytest.raises(ExtractionError, match=r"^the pdf is encrypted$"):
        extract("encrypted.pdf")


def test_a_docx_is_not_a_pdf() -> None:
    with pytest.raises(ExtractionError, match="not a pdf"):
        extract("report.docx", "pdf")


def test_docx_body_comes_in_document_order() -> None:
    body = extract("report.docx").segments[0].text
    order = ["Quarterly zephyr report", "zephyr quokka alignment", "marmot lantern", "saffron"]
    positions = [body.index(phrase) for phrase in order]
    assert positions == sorted(positions)


def test_docx_table_reads_row_by_row() -> None:
    assert "Item | Code\nmarmot lantern ledger | 42" in extract("report.docx").segments[0].text


def test_docx_headers_and_footers_are_extracted() -> None:
    texts = [s.text for s in extract("report.docx").segments]
    assert "Header velvet heron almanac" in texts
    assert "Footer cobalt walrus footnote" in texts


def test_docx_has_no_pages() -> None:
    result = extract("report.docx")
    assert result.pages is None
    assert {s.page for s in result.segments} == {None}


def test_pptx_gives_one_segment_per_slide() -> None:
    result = extract("deck.pptx")
    assert result.pages == 3
    assert [s.page for s in result.segments] == [1, 2, 3]
    assert page_of(result.segments, "juniper otter cascade") == [3]


def test_pptx_speaker_notes_belong_to_their_slide() -> None:
    assert page_of(extract("deck.pptx").segments, "crimson llama whisper") == [1]


def test_pptx_grouped_shapes_are_read() -> None:
    segments = extract("deck.pptx").segments
    assert page_of(segments, "tangerine gecko relay") == [2]
    assert page_of(segments, "grouped shape two") == [2]


def test_pptx_table_reads_row_by_row() -> None:
    assert "obsidian badger | sonnet" in extract("deck.pptx").segments[1].text


def test_cp1252_text_is_decoded_right() -> None:
    text = "Le café naïve coûte €100, “quotes” — plum walrus tango.\n"
    assert extract("cp1252.txt").segments == [Segment(text, None)]


def test_utf16_text_with_bom_is_decoded_right() -> None:
    text = "Grüße aus Köln ✓ quartz ibis meadow 日本語のテキスト\nSecond line.\n"
    assert extract("utf16.txt") == Extraction([Segment(text, None)], None)


def test_csv_stays_one_text_segment_with_its_delimiters() -> None:
    [segment] = extract("table.csv").segments
    assert segment.text.splitlines() == [
        "city,item,note",
        "Zürich,ochre tortoise bazaar,first row",
        'Łódź,plain widget,"second, with a comma"',
    ]


def test_corrupt_docx_is_not_a_valid_docx() -> None:
    with pytest.raises(ExtractionError, match=r"^not a valid docx file$"):
        extract("corrupt.docx")


def test_truncated_pptx_is_not_a_valid_pptx() -> None:
    with pytest.raises(ExtractionError, match=r"^not a valid pptx file$"):
        extract("truncated.pptx")


def test_a_pptx_is_not_a_docx() -> None:
    with pytest.raises(ExtractionError, match=r"^not a valid docx file$"):
        extract("deck.pptx", "docx")


def test_legacy_binary_doc_is_named_as_such() -> None:
    with pytest.raises(ExtractionError, match="password-protected or an old binary Office file"):
        extract("report.doc", "docx")


def test_zip_bomb_docx_is_refused_before_unpacking() -> None:
    with pytest.raises(ExtractionError, match="looks like a zip bomb: it unpacks to more than"):
        extract("zip_bomb.docx")


def test_highly_compressed_entry_is_a_zip_bomb() -> None:
    with pytest.raises(ExtractionError, match=r"looks like a zip bomb: .* over 200:1"):
        extract("ratio_bomb.pptx")


def test_entry_lying_about_its_size_is_refused_in_bounded_memory() -> None:
    tracemalloc.start()
    try:
        with pytest.raises(ExtractionError, match=r"^not a valid docx file$"):
            extract("lying_sizes.docx")  # claims 1000 bytes, inflates to 50 MiB
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 1024 * 1024


def test_text_file_over_the_limit_is_refused(tmp_path: Path) -> None:
    big = tmp_path / "big.txt"
    with big.open("wb") as file:
        file.truncate(MAX_TEXT_BYTES + 1)  # sparse: no disk space used
    with pytest.raises(ExtractionError, match="larger than 64 MiB"):
        extract_text(big, "txt")


def test_control_characters_are_dropped(tmp_path: Path) -> None:
    path = tmp_path / "nul.txt"
    path.write_bytes(b"tab\there\x00 nul\x07\r\nend")
    assert extract_text(path, "txt").segments[0].text == "tab\there nul\r\nend"


def test_text_with_a_few_stray_nul_bytes_is_still_text(tmp_path: Path) -> None:
    path = tmp_path / "log.txt"
    path.write_bytes(b"line one\n" * 100 + b"\x00" * 64 + b"line two\n" * 100)
    assert "line two" in extract_text(path, "txt").segments[0].text


@pytest.mark.parametrize("codec", ["utf-16", "utf-32"])
def test_text_with_a_byte_order_mark_is_text_despite_its_nul_bytes(
    tmp_path: Path, codec: str
) -> None:
    path = tmp_path / "wide.csv"
    path.write_bytes("name,city\nAda,London\n".encode(codec))
    assert "Ada,London" in extract_text(path, "csv").segments[0].text


@pytest.mark.parametrize(
    ("codec", "text"),
    [
        ("utf-16-le", "name,city\r\nAda,London\r\nJürgen,Köln\r\n"),
        ("utf-16-be", "name,city\nAda,London\nJürgen,Köln\n"),
        ("utf-32-le", "name,city\nAda,London\nJürgen,Köln\n"),
    ],
)
def test_text_in_utf16_or_utf32_without_a_byte_order_mark_is_text(
    tmp_path: Path, codec: str, text: str
) -> None:
    # As SQL Server's bcp -w and .NET's Encoding.Unicode write it: no BOM.
    path = tmp_path / "export.csv"
    path.write_bytes((text * 20).encode(codec))
    lines = extract_text(path, "csv").segments[0].text.splitlines()
    assert lines[:3] == ["name,city", "Ada,London", "Jürgen,Köln"]


def test_text_with_line_breaks_of_old_tools_is_text(tmp_path: Path) -> None:
    # FileMaker's line break inside a field (VT), DOS's end-of-file padding (SUB).
    path = tmp_path / "export.txt"
    path.write_bytes(b"first\x0bsecond line\r\n" * 50 + b"\x1a" * 128)
    assert "second line" in extract_text(path, "txt").segments[0].text


@pytest.mark.parametrize(
    ("head", "what"),
    [
        (b"%PDF-1.7\n", "a pdf; upload it with fileType 'pdf'"),
        (b"PK\x03\x04", "a zip archive (docx, pptx and xlsx are zip archives)"),
        (b"\xff\xd8\xff\xe0", "a JPEG image; upload it with fileType 'jpg'"),
        (b"RIFF\x10\x00\x00\x00WEBPVP8 ", "a WEBP image; upload it with fileType 'webp'"),
    ],
)
def test_a_binary_format_uploaded_as_text_is_refused_by_name(
    tmp_path: Path, head: bytes, what: str
) -> None:
    path = tmp_path / "page.html"
    path.write_bytes(head + b"<p>looks like text after the header</p>" * 10)
    with pytest.raises(ExtractionError, match=re.escape(f"not a text file: its bytes are {what}")):
        extract_text(path, "html")


def test_unknown_file_type_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="no text extractor"):
        extract("pages.pdf", "exe")


def test_utf8_bom_is_dropped() -> None:
    assert decode_text(codecs.BOM_UTF8 + "naïve".encode()) == "naïve"


def test_utf32_bom_is_read_before_utf16() -> None:
    assert decode_text("Grüße".encode("utf-32")) == "Grüße"


def test_turkish_cp1254_is_not_read_as_cp1252() -> None:
    text = "Merhaba dünya, bu bir test metnidir. Şişli, Ğ, İstanbul."
    assert decode_text(text.encode("cp1254")) == text


def test_cyrillic_cp1251_is_detected() -> None:
    text = "Привет мир, как у тебя дела сегодня?"  # noqa: RUF001
    assert decode_text(text.encode("cp1251")) == text


# --- budgets: what is actually inflated, read, and extracted (tests/hostile/hostile_files.py) ---


def write(tmp_path: Path, name: str, data: bytes) -> Path:
    """``data`` as a file named ``name`` in ``tmp_path``."""
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_xml_with_more_tags_than_the_budget_is_refused_while_inflating(tmp_path: Path) -> None:
    bomb = write(tmp_path, "bomb.docx", empty_paragraphs_docx(6 * (MAX_XML_TAGS + MIB)))
    with pytest.raises(ExtractionError, match=f"its XML holds more than {MAX_XML_TAGS:,} tags"):
        extract_text(bomb, "docx")


def test_xml_inflating_past_its_byte_budget_is_refused(tmp_path: Path) -> None:
    big = write(tmp_path, "big.docx", docx_with(DOCUMENT_XML, long_text(MAX_XML_BYTES + MIB)))
    with pytest.raises(ExtractionError, match="its XML inflates to more than 64 MiB"):
        extract_text(big, "docx")


def test_xml_is_counted_by_its_content_whatever_its_name(tmp_path: Path) -> None:
    hidden = docx_with("word/media/image1.bin", paragraphs(6 * (MAX_XML_TAGS + MIB)))
    with pytest.raises(ExtractionError, match="its XML holds more than"):
        extract_text(write(tmp_path, "hidden.docx", hidden), "docx")


def test_utf16_xml_is_counted_as_xml(tmp_path: Path) -> None:
    markup = paragraphs(6 * (MAX_XML_TAGS + MIB), noise=2 * NOISE_HEX)
    utf16 = (chunk.decode().encode("utf-16-le") for chunk in markup)
    wide = docx_with("customXml/item1.xml", (b"\xff\xfe", *utf16))
    with pytest.raises(ExtractionError, match="its XML holds more than"):
        extract_text(write(tmp_path, "wide.docx", wide), "docx")


def test_text_over_the_text_budget_is_refused(tmp_path: Path) -> None:
    text = tmp_path / "long.txt"
    text.write_bytes(b"word " * (MAX_TEXT_CHARS // 5 + 1))
    with pytest.raises(BudgetExceeded, match=f"more than {MAX_TEXT_CHARS:,} characters"):
        extract_text(text, "txt")


def test_a_pdf_over_the_page_budget_is_refused(tmp_path: Path) -> None:
    pdf = write(tmp_path, "pages.pdf", blank_pdf(MAX_PAGES + 1))
    with pytest.raises(BudgetExceeded, match=f"the pdf has more than {MAX_PAGES:,} pages"):
        extract_text(pdf, "pdf")


def test_a_pptx_over_the_slide_budget_is_refused_before_its_slides_are_read(
    tmp_path: Path,
) -> None:
    deck = write(tmp_path, "deck.pptx", pptx_listing_slides(MAX_PAGES + 1))
    with pytest.raises(BudgetExceeded, match=f"the pptx has more than {MAX_PAGES:,} slides"):
        extract_text(deck, "pptx")


def test_a_pdf_at_the_page_budget_is_read(tmp_path: Path, without_ocr: None) -> None:
    # Without OCR: with it, 10,000 pages without text are over the OCR budget (test_ocr.py).
    pdf = write(tmp_path, "pages.pdf", blank_pdf(MAX_PAGES))
    assert extract_text(pdf, "pdf").pages == MAX_PAGES


def test_a_package_of_more_entries_than_the_budget_is_refused(tmp_path: Path) -> None:
    many = (f"<w:p>{n}</w:p>".encode() for n in range(MAX_ZIP_ENTRIES + 1))
    path = tmp_path / "many.docx"
    with zipfile.ZipFile(path, "w") as package:
        for n, entry in enumerate(many):
            package.writestr(f"word/part{n}.xml", entry)
    with pytest.raises(ExtractionError, match=f"more than {MAX_ZIP_ENTRIES} entries"):
        extract_text(path, "docx")


# --- md, html and xlsx -------------------------------------------------------------------------


def test_markdown_is_read_as_text(tmp_path: Path) -> None:
    source = "# Field notes\n\nThe *lilac narwhal* sings.\n\n- one\n- two\n"
    path = write(tmp_path, "notes.md", source.encode())
    assert extract_text(path, "md") == Extraction([Segment(source, None)], None)


HTML_PAGE = """<!doctype html>
<html><head><title>Harbour report</title>
<style>p { color: red } .secret-style-rule {}</style>
<script>var secretScriptToken = 1;</script></head>
<body><nav><a href="/">Home</a></nav>
<h1>Tides of the <em>north</em></h1>
<p>The copper hero<b>n</b> waits at dawn.<br>Second line here.</p>
<noscript>enable scripts please</noscript>
<table><tr><th>Boat</th><th>Crew</th></tr><tr><td>Gannet</td><td>4</td></tr></table>
<ul><li>first item</li><li>second item</li></ul>
<template><p>template text never shown</p></template>
</body></html>"""


def test_html_gives_the_title_and_the_visible_text_a_line_per_block(tmp_path: Path) -> None:
    [segment] = extract_text(write(tmp_path, "page.html", HTML_PAGE.encode()), "html").segments
    assert segment.page is None
    assert segment.text.splitlines() == [
        "Harbour report",
        "Home",
        "Tides of the north",
        "The copper heron waits at dawn.",
        "Second line here.",
        "Boat Crew",
        "Gannet 4",
        "first item",
        "second item",
    ]


def test_html_drops_scripts_styles_and_what_is_never_shown(tmp_path: Path) -> None:
    text = extract_text(write(tmp_path, "page.html", HTML_PAGE.encode()), "html").segments[0].text
    for hidden in ("secretScriptToken", "secret-style-rule", "enable scripts", "template text"):
        assert hidden not in text


def test_html_honours_its_declared_charset(tmp_path: Path) -> None:
    page = '<meta charset="windows-1251"><p>Привет мир, как дела?</p>'.encode("cp1251")
    assert extract_text(write(tmp_path, "ru.html", page), "html").segments[0].text == (
        "Привет мир, как дела?"
    )


def test_html_without_a_charset_is_detected_like_text(tmp_path: Path) -> None:
    page = "<p>Le café naïve coûte €100.</p>".encode("cp1252")
    assert extract_text(write(tmp_path, "fr.html", page), "html").segments[0].text == (
        "Le café naïve coûte €100."
    )


def test_html_over_the_tag_budget_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    page = write(tmp_path, "many.html", b"<i>" * (MAX_HTML_TAGS + 1))
    with pytest.raises(BudgetExceeded, match=f"the html has more than {MAX_HTML_TAGS:,} tags"):
        extract_text(page, "html")


WORKBOOK = {
    "Budget 2026": [
        ["Item", "Amount", "Due"],
        ["ochre kettle", 42.0, datetime.datetime(2026, 3, 1)],
        [],
        ["walrus fund", 3.25, None, None],
        [None, True],
    ],
    "Notes": [["crimson ledger remark"]],
}


def test_xlsx_gives_a_segment_per_sheet_named_after_it(tmp_path: Path) -> None:
    result = extract_text(write(tmp_path, "book.xlsx", workbook_bytes(WORKBOOK)), "xlsx")
    assert result.pages == 2
    assert [(s.page, s.page_name) for s in result.segments] == [(1, "Budget 2026"), (2, "Notes")]
    assert result.segments[1].text == "crimson ledger remark"


def test_xlsx_rows_read_as_lines_of_cells(tmp_path: Path) -> None:
    result = extract_text(write(tmp_path, "book.xlsx", workbook_bytes(WORKBOOK)), "xlsx")
    assert result.segments[0].text.splitlines() == [
        "Item | Amount | Due",
        "ochre kettle | 42 | 2026-03-01",
        "walrus fund | 3.25",
        " | TRUE",
    ]


def test_xlsx_with_only_empty_sheets_gives_empty_segments(tmp_path: Path) -> None:
    result = extract_text(write(tmp_path, "empty.xlsx", workbook_bytes({"Empty": []})), "xlsx")
    assert result.segments == [Segment("", 1, page_name="Empty")]


def test_a_docx_is_not_an_xlsx() -> None:
    with pytest.raises(ExtractionError, match=r"^not a valid xlsx file$"):
        extract("report.docx", "xlsx")


def test_a_damaged_xlsx_is_not_a_valid_xlsx(tmp_path: Path) -> None:
    broken = workbook_with(SHEET_XML, [b"<worksheet><sheetData><row r='x'>"])
    with pytest.raises(ExtractionError, match=r"^not a valid xlsx file$"):
        extract_text(write(tmp_path, "broken.xlsx", broken), "xlsx")


def test_an_xlsx_zip_bomb_is_refused_while_inflating(tmp_path: Path) -> None:
    bomb = write(tmp_path, "bomb.xlsx", workbook_with(SHEET_XML, paragraphs(6 * MAX_XML_TAGS)))
    with pytest.raises(ExtractionError, match=f"its XML holds more than {MAX_XML_TAGS:,} tags"):
        extract_text(bomb, "xlsx")


@pytest.mark.parametrize("codec", ["utf-8", "utf-16"])
def test_an_xlsx_declaring_entities_is_refused(tmp_path: Path, codec: str) -> None:
    laughs = b'<!DOCTYPE worksheet [<!ENTITY a "ha"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;">]>\n'
    xml = sheet_xml('<row r="1"><c r="A1" t="inlineStr"><is><t>&b;</t></is></c></row>', laughs)
    part = xml.decode().replace('encoding="UTF-8"', f'encoding="{codec.upper()}"').encode(codec)
    path = write(tmp_path, "laughs.xlsx", workbook_with(SHEET_XML, [part]))
    with pytest.raises(
        ExtractionError, match=r"^not a valid xlsx file: its XML declares a DOCTYPE"
    ):
        extract_text(path, "xlsx")


def test_xlsx_padding_counts_against_the_cell_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One cell at the last column, then one a million rows down: openpyxl yields 16,384
    # cells for the first row and a million empty rows for the gap.
    monkeypatch.setattr(spreadsheet, "MAX_SPREADSHEET_CELLS", 100_000)
    rows = (
        '<row r="1"><c r="XFD1"><v>1</v></c></row>'
        '<row r="1048576"><c r="A1048576"><v>2</v></c></row>'
    )
    path = write(tmp_path, "padded.xlsx", workbook_with(SHEET_XML, [sheet_xml(rows)]))
    with pytest.raises(BudgetExceeded, match="the xlsx has more than 100,000 cells"):
        extract_text(path, "xlsx")


def test_xlsx_ignores_a_declared_size_its_rows_do_not_have(tmp_path: Path) -> None:
    xml = sheet_xml('<row r="1"><c r="A1" t="inlineStr"><is><t>lone cell</t></is></c></row>')
    lying = xml.replace(b"<sheetData>", b'<dimension ref="A1:XFD1048576"/><sheetData>')
    path = write(tmp_path, "lying.xlsx", workbook_with(SHEET_XML, [lying]))
    assert extract_text(path, "xlsx").segments[0].text == "lone cell"
