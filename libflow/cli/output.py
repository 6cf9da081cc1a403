"""How every ``libflow`` command reports: a result as text, table or JSON; a failure as a line."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from typing import Any


class CliError(Exception):
    """A failure to report in one line, without a traceback."""


def error_lines(err: Exception) -> list[str]:
    """The line of a failure, then one ``what: problem`` line per detail the API gave.

    The message names only the fields (``invalid request body: fileType``); the details
    say what is wrong with each, and the node, field or input it is about.
    """
    lines = [str(err)]
    body = getattr(err, "body", None)
    details = body.get("details") if isinstance(body, dict) else None
    if isinstance(details, list):
        for detail in details:
            if isinstance(detail, dict) and "problem" in detail:
                what = detail.get("node") or detail.get("field") or detail.get("input")
                lines.append(f"  {what or 'definition'}: {detail['problem']}")
    return lines


def print_result(data: Any, as_json: bool, text: str) -> None:
    """Print ``data`` as JSON with ``--json``, else the human-readable ``text``."""
    print(json.dumps(data) if as_json else text)


def add_output_option(parser: argparse.ArgumentParser) -> None:
    """``--output json|table`` (``--json`` is short for ``--output json``)."""
    parser.add_argument(
        "--output", choices=("table", "json"), default="table", help="how to print (table)"
    )
    parser.add_argument(
        "--json", dest="output", action="store_const", const="json", help="--output json"
    )


Column = tuple[str, Callable[[dict[str, Any]], Any]]


def print_records(
    records: Sequence[dict[str, Any]], output: str, columns: Sequence[Column]
) -> None:
    """Records as a JSON array, or as a table of ``columns`` (header, value of a record)."""
    if output == "json":
        print(json.dumps(list(records)))
        return
    if not records:
        print("(none)")
        return
    rows = [[header for header, _ in columns]]
    rows += [[_cell(value(record)) for _, value in columns] for record in records]
    widths = [max(len(row[i]) for row in rows) for i in range(len(columns))]
    for row in rows:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )


def print_record(record: dict[str, Any], output: str) -> None:
    """One record: JSON on one line, or ``field  value`` lines."""
    if output == "json":
        print(json.dumps(record))
        return
    width = max((len(name) for name in record), default=0)
    for name, value in record.items():
        print(f"{name.ljust(width)}  {_cell(value)}")


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    # One record, one line: a passage or an error message may hold line breaks.
    text = text.replace("\r", " ").replace("\n", " ")
    return text if len(text) <= 80 else text[:77] + "..."
