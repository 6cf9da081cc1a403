"""How every ``libflow`` command reports: a result as text or JSON, a failure as one line."""

from __future__ import annotations

import json
from typing import Any


class CliError(Exception):
    """A failure to report in one line, without a traceback."""


def print_result(data: Any, as_json: bool, text: str) -> None:
    """Print ``data`` as JSON with ``--json``, else the human-readable ``text``."""
    print(json.dumps(data) if as_json else text)
