"""JSON answers, encoded once, straight to bytes (``libflow.json_text.dumps``).

Encoding is a good part of what a small answer costs: ``web.json_response`` runs
``json.dumps`` and then encodes its text to bytes again; orjson writes the bytes at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from libflow import appkeys
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


def page_response(
    request: web.Request, items: list[Any], *, limit: int, next_cursor: str | None
) -> web.Response:
    """One page of a list as its JSON answer; when another page follows, a
    ``Link: <...>; rel="next"`` header names it, keeping the request's other query
    parameters (its filters)."""
    response = json_response(items)
    if next_cursor is not None:
        query = {k: v for k, v in request.query.items() if k not in {"cursor", "limit"}}
        query.update({"limit": str(limit), "cursor": next_cursor})
        base = request.app[appkeys.SETTINGS].resolved_public_base_url
        response.headers["Link"] = f'<{base}{request.path}?{urlencode(query)}>; rel="next"'
    return response
