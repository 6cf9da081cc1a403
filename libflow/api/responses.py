"""JSON answers, encoded once, straight to bytes (``libflow.json_text.dumps``).

Encoding is a good part of what a small answer costs: ``web.json_response`` runs
``json.dumps`` and then encodes its text to bytes again; orjson writes the bytes at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiohttp import web

from libflow.json_text import dumps


def json_response(
    value: Any, *, status: int = 200, headers: Mapping[str, str] | None = None
) -> web.Response:
    """An ``application/json; charset=utf-8`` answer holding ``value``."""
    return web.Response(
        body=dumps(value),
        status=status,
        headers=headers,
        content_type="application/json",
        charset="utf-8",
    )
