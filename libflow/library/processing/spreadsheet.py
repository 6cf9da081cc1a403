"""xlsx: each sheet's rows as text, one segment a sheet named after it (openpyxl, read-only).

Read-only mode streams each sheet's XML instead of building the workbook in memory; the
package passes the zip-bomb and XML budgets first (``office_package``), and the cells that
openpyxl yields, padding included, are counted against MAX_SPREADSHEET_CELLS.
"""

from __future__ import annotations

import datetime
import zipfile
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path

import openpyxl
from openpyxl.utils.exceptions import InvalidFileException

from libflow.library.processing.budgets import MAX_PAGES, MAX_SPREADSHEET_CELLS, BudgetExceeded
from libflow.library.processing.extracted import (
    Extraction,
    ExtractionError,
    Segment,
    TextBudget,
    clean,
)
from libflow.library.processing.office_package import check_office_zip

# openpyxl surfaces a damaged package or sheet as any of these (ElementTree's ParseError is
# a SyntaxError; missing parts are KeyErrors; malformed values Type- or ValueErrors).
_XLSX_ERRORS = (
    InvalidFileException,
    KeyError,
    ValueError,
    TypeError,
    IndexError,
    AttributeError,
    SyntaxError,
    zipfile.BadZipFile,
    zlib.error,
    EOFError,
    NotImplementedError,
)
_CELL_SEPARATOR = " | "  # as docx and pptx table rows


def extract_xlsx(path: Path, budget: TextBudget) -> Extraction:
    """One segment per worksheet: its non-empty rows, cells joined by `` | ``."""
    check_office_zip(path, "xlsx", refuse_dtd=True)
    with path.open("rb") as file:
        try:
            workbook = openpyxl.load_workbook(file, read_only=True, data_only=True)
        except (*_XLSX_ERRORS, OSError) as err:  # OSError: a package without a workbook
            raise ExtractionError("not a valid xlsx file") from err
        try:
            sheets = workbook.worksheets
            if len(sheets) > MAX_PAGES:
                raise BudgetExceeded(f"the xlsx has more than {MAX_PAGES:,} sheets")
            cells = _CellCount()
            segments = []
            for number, sheet in enumerate(sheets, start=1):
                # The declared size may lie (or be absent): the rows themselves say.
                sheet.reset_dimensions()
                rows = cells.counted(sheet.iter_rows(values_only=True))
                text = "\n".join(budget.take(line) for line in _row_lines(rows))
                segments.append(Segment(clean(text), number, page_name=sheet.title))
        except _XLSX_ERRORS as err:
            raise ExtractionError("not a valid xlsx file") from err
        finally:
            workbook.close()
    return Extraction(segments, len(segments))


class _CellCount:
    """Cells yielded so far across the workbook; BudgetExceeded past MAX_SPREADSHEET_CELLS."""

    __slots__ = ("used",)

    def __init__(self) -> None:
        self.used = 0

    def counted(self, rows: Iterable[tuple[object, ...]]) -> Iterator[tuple[object, ...]]:
        """``rows``, each counted as its cells (an empty row as one) as it comes."""
        for row in rows:
            self.used += max(len(row), 1)
            if self.used > MAX_SPREADSHEET_CELLS:
                raise BudgetExceeded(
                    f"the xlsx has more than {MAX_SPREADSHEET_CELLS:,} cells "
                    "(the empty ones within and between its rows included)"
                )
            yield row


def _row_lines(rows: Iterable[tuple[object, ...]]) -> Iterator[str]:
    """Each row with a value as a line, without its trailing empty cells."""
    for row in rows:
        values = [_cell_text(value) for value in row]
        while values and not values[-1]:
            values.pop()
        if values:
            yield _CELL_SEPARATOR.join(values)


def _cell_text(value: object) -> str:
    """A cell's value as a reader sees it: 42 rather than 42.0, a date without its midnight."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e16:
        return str(int(value))
    if isinstance(value, datetime.datetime):
        if value.time() == datetime.time():
            return value.date().isoformat()
        return value.isoformat(sep=" ")
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    return str(value).strip()
