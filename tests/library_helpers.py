"""Helpers shared by the library and local-storage tests: error bodies, raw HTTP, polling."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import ClientResponse
from yarl import URL

from tests.conftest import Api

ERROR_KEYS = {"error", "message", "details"}


async def assert_error(response: ClientResponse, status: int, code: str) -> dict[str, Any]:
    """The response is the one JSON error shape with ``status`` and ``code``; return its body."""
    text = await response.text()
    assert response.status == status, text
    assert response.content_type == "application/json", text
    assert "<html" not in text.lower()
    body: dict[str, Any] = await response.json()
    assert {"error", "message"} <= set(body) <= ERROR_KEYS, body
    assert body["error"] == code, body
    assert isinstance(body["message"], str)
    assert body["message"]
    return body


def detail_fields(body: dict[str, Any]) -> set[str]:
    """The field names an error body's details point at."""
    return {d["field"] for d in body["details"]}


def link(url: str) -> URL:
    """A URL the server returned, used exactly as given (signatures are percent-encoded)."""
    return URL(url, encoded=True)


async def raw_http(api: Api, request: bytes, *, timeout: float = 10) -> tuple[int, bytes, bytes]:
    """Send ``request`` byte for byte on a fresh connection; return status, headers, body.

    The request must carry ``Connection: close``: the response is read until the server
    closes. Nothing normalizes the path on the way, unlike an HTTP client library.
    """
    server = api.client.server
    reader, writer = await asyncio.open_connection(server.host, server.port)
    try:
        writer.write(request)
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), timeout)
    finally:
        writer.close()
        await writer.wait_closed()
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, head, body


async def eventually(condition: Callable[[], bool], what: str, timeout: float = 10) -> None:
    """Poll ``condition`` until it holds; the server works on the same loop, so yield to it."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        await asyncio.sleep(0.01)


async def until(done: Callable[[], Awaitable[bool]], what: str, timeout: float = 30) -> None:
    """``eventually`` for a condition that asks the server (a request a poll)."""
    deadline = time.monotonic() + timeout
    while not await done():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        await asyncio.sleep(0.05)
