"""A local server that speaks OpenAI's ``/v1/embeddings`` wire format, for tests.

Its vectors are a hashed bag of words, so texts that share words are similar. Unlike
OpenAI's they are not unit length: the client's normalization is under test too.
The ``openai_server`` fixture yields an ``OpenAIServer``; a conftest can make it visible
everywhere with ``from tests.openai_server import openai_server  # noqa: F401``.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

DIMENSIONS = 64
_WORD = re.compile(r"\w+", re.UNICODE)


def hashed_embedding(text: str, dimensions: int = DIMENSIONS) -> list[float]:
    """Each word adds +-1 to the dimension its hash picks: shared words, similar vectors."""
    vector = [0.0] * dimensions
    for word in _WORD.findall(text.lower()):
        digest = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "big")
        vector[digest % dimensions] += 1.0 if digest >> 63 else -1.0
    if not any(vector):
        vector[0] = 1.0  # OpenAI never answers with a zero vector
    return vector


def _error(status: int, message: str, kind: str, code: str | None = None) -> web.Response:
    """An error in OpenAI's shape."""
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    headers = {"Retry-After": "1"} if status == 429 else None
    return web.json_response(body, status=status, headers=headers)


@dataclass
class RecordedRequest:
    """One request as the server received it."""

    headers: dict[str, str]
    body: Any


@dataclass
class OpenAIServer:
    """The fake's state: its key, what it received, and failures it was told to answer with."""

    api_key: str = field(default_factory=lambda: f"sk-test-{secrets.token_hex(8)}")
    base_url: str = ""
    requests: list[RecordedRequest] = field(default_factory=list)
    # Answer rows last-first: OpenAI documents "index" so clients must not rely on order.
    reverse_order: bool = False
    _failures: list[int] = field(default_factory=list)

    def fail_next(self, status: int, n: int = 1) -> None:
        """Answer the next ``n`` requests with HTTP ``status``."""
        self._failures.extend([status] * n)

    @property
    def inputs(self) -> list[list[str]]:
        """The ``input`` list of every request, in arrival order."""
        return [r.body["input"] for r in self.requests if isinstance(r.body, dict)]

    async def embeddings(self, request: web.Request) -> web.Response:
        """``POST /v1/embeddings``."""
        try:
            body = await request.json()
        except ValueError:
            body = None
        self.requests.append(RecordedRequest(dict(request.headers), body))
        if request.headers.get("Authorization") != f"Bearer {self.api_key}":
            return _error(
                401, "Incorrect API key provided.", "invalid_request_error", "invalid_api_key"
            )
        if self._failures:
            status = self._failures.pop(0)
            if status == 429:
                return _error(
                    429, "Rate limit reached for requests", "requests", "rate_limit_exceeded"
                )
            return _error(
                status, "The server had an error while processing your request.", "server_error"
            )
        if not isinstance(body, dict) or not isinstance(body.get("model"), str):
            return _error(400, "'model' is required.", "invalid_request_error")
        texts = body.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            return _error(400, "'$.input' is invalid.", "invalid_request_error")
        if any(t == "" for t in texts):
            # OpenAI refuses empty strings.
            return _error(400, "'$.input' is invalid.", "invalid_request_error")
        data = [
            {"object": "embedding", "index": i, "embedding": hashed_embedding(t)}
            for i, t in enumerate(texts)
        ]
        if self.reverse_order:
            data.reverse()
        tokens = sum(len(_WORD.findall(t)) for t in texts)
        return web.json_response(
            {
                "object": "list",
                "data": data,
                "model": body["model"],
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )


@pytest.fixture
async def openai_server() -> AsyncIterator[OpenAIServer]:
    """A fresh fake OpenAI embeddings API on 127.0.0.1, on a free port."""
    state = OpenAIServer()
    app = web.Application()
    app.router.add_post("/v1/embeddings", state.embeddings)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    state.base_url = str(server.make_url("/v1"))
    try:
        yield state
    finally:
        await server.close()
