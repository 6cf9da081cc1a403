"""A local server that speaks OpenAI's ``/v1/chat/completions`` wire protocol, for tests.

It streams as OpenAI does with ``stream: true``: server-sent events ``data: {chunk}``, a first
chunk with the assistant role, one chunk per content delta, one with the finish reason, then
(with ``stream_options.include_usage``) a chunk with no choices and the usage, and
``data: [DONE]``. It checks the key and the request as OpenAI does, with OpenAI's error
bodies ``{"error": {"message", "type", "param", "code"}}``, and can be told to fail.
The ``llm_server`` fixture yields an ``LlmServer``.
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

MODEL_SNAPSHOT = "-2024-07-18"  # OpenAI answers with the dated snapshot of the model asked
MAX_COMPLETION_TOKENS = 16384
ROLES = ("system", "assistant", "user", "function", "tool", "developer")
_WORD = re.compile(r"\w+", re.UNICODE)


def openai_error(
    status: int,
    message: str,
    kind: str = "invalid_request_error",
    *,
    param: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> web.Response:
    """An error in OpenAI's shape."""
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return web.json_response(body, status=status, headers=headers)


@dataclass
class RecordedRequest:
    """One request as the server received it."""

    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class LlmServer:
    """The fake's state: its key, what it received, what it answers and failures to send."""

    api_key: str = field(default_factory=lambda: f"sk-test-{secrets.token_hex(8)}")
    base_url: str = ""
    requests: list[RecordedRequest] = field(default_factory=list)
    # The content deltas of every answer, in order.
    reply: list[str] = field(default_factory=lambda: ["The answer", " is", " 42", "."])
    finish_reason: str = "stop"
    # Seconds between two content chunks.
    chunk_delay: float = 0.0
    # After this many content chunks, an error event instead of the rest (None: never).
    error_after: int | None = None
    # Written verbatim as the body of a 200 event stream instead of an answer (hostile tests).
    raw_stream: list[bytes] | None = None
    # Answer 200 and send only keep-alive comments until the client leaves.
    stall: bool = False
    _failures: list[tuple[int, str | None]] = field(default_factory=list)

    def fail_next(self, status: int, *, retry_after: str | None = None, n: int = 1) -> None:
        """Answer the next ``n`` requests with HTTP ``status`` (429 with ``Retry-After``)."""
        self._failures.extend([(status, retry_after)] * n)

    @property
    def bodies(self) -> list[Any]:
        """The JSON body of every request, in arrival order."""
        return [r.body for r in self.requests]

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        """``POST /v1/chat/completions``."""
        try:
            body = await request.json()
        except ValueError:
            body = None
        self.requests.append(RecordedRequest(request.path, dict(request.headers), body))
        if request.headers.get("Authorization") != f"Bearer {self.api_key}":
            return openai_error(401, "Incorrect API key provided.", code="invalid_api_key")
        if self._failures:
            return self._failure(*self._failures.pop(0))
        refused = _refusal(body)
        if refused is not None:
            return refused
        return await self._stream(request, body)

    def _failure(self, status: int, retry_after: str | None) -> web.Response:
        if status == 429:
            return openai_error(
                429,
                "Rate limit reached for gpt-4o-mini on requests per min (RPM): Limit 3, "
                "Used 3, Requested 1. Please try again in 20s.",
                "requests",
                code="rate_limit_exceeded",
                headers={"Retry-After": retry_after} if retry_after is not None else None,
            )
        return openai_error(
            status,
            "The server had an error while processing your request. Sorry about that!",
            "server_error",
        )

    async def _stream(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-cache",
            }
        )
        await response.prepare(request)
        if self.raw_stream is not None or self.stall:
            await self._misbehave(response)
            return response
        with_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        base = {
            "id": f"chatcmpl-{secrets.token_hex(12)}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": body["model"] + MODEL_SNAPSHOT,
            "system_fingerprint": "fp_test",
        }

        async def send(choices: list[dict[str, Any]], **extra: Any) -> None:
            chunk = {**base, "choices": choices, **({"usage": None} if with_usage else {})}
            chunk.update(extra)
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())

        def choice(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}

        await send([choice({"role": "assistant", "content": "", "refusal": None})])
        for index, part in enumerate(self.reply):
            if index == self.error_after:
                error = {"message": "The model stopped: overloaded.", "type": "server_error"}
                await response.write(f"data: {json.dumps({'error': error})}\n\n".encode())
                return response
            if self.chunk_delay and index:
                await asyncio.sleep(self.chunk_delay)
            await send([choice({"content": part})])
        await send([choice({}, self.finish_reason)])
        if with_usage:
            prompt = sum(len(_WORD.findall(m["content"])) for m in body["messages"])
            usage = {
                "prompt_tokens": prompt,
                "completion_tokens": len(self.reply),
                "total_tokens": prompt + len(self.reply),
            }
            await send([], usage=usage)
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def _misbehave(self, response: web.StreamResponse) -> None:
        """Send the raw stream, or comments until the client leaves (a write then fails)."""
        for piece in self.raw_stream or ():
            await response.write(piece)
        while self.stall:
            try:
                await response.write(b": keep-alive\n\n")
            except ConnectionError:
                return
            await asyncio.sleep(0.1)


def _refusal(body: Any) -> web.Response | None:
    """OpenAI's answer to a request it refuses, or None."""
    if not isinstance(body, dict):
        return openai_error(400, "We could not parse the JSON body of your request.")
    if not isinstance(body.get("model"), str):
        return openai_error(400, "you must provide a model parameter")
    if body.get("stream") is not True:
        return openai_error(400, "this test server answers only streamed requests", param="stream")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return openai_error(400, f"{messages!r} is too short - 'messages'", param="messages")
    for index, message in enumerate(messages):
        if message.get("role") not in ROLES:
            supported = ", ".join(f"'{r}'" for r in ROLES)
            return openai_error(
                400,
                f"Invalid value: '{message.get('role')}'. Supported values are: {supported}.",
                param=f"messages[{index}].role",
                code="invalid_value",
            )
    max_tokens = body.get("max_tokens")
    if isinstance(max_tokens, int) and max_tokens > MAX_COMPLETION_TOKENS:
        return openai_error(
            400,
            f"max_tokens is too large: {max_tokens}. This model supports at most "
            f"{MAX_COMPLETION_TOKENS} completion tokens, whereas you provided {max_tokens}.",
            param="max_tokens",
            code="invalid_value",
        )
    response_format = body.get("response_format") or {}
    if response_format.get("type") == "json_object" and not any(
        "json" in str(m.get("content", "")).lower() for m in messages
    ):
        return openai_error(
            400,
            "'messages' must contain the word 'json' in some form, to use 'response_format' "
            "of type 'json_object'.",
            param="messages",
        )
    return None


@pytest.fixture
async def llm_server() -> AsyncIterator[LlmServer]:
    """A fresh fake OpenAI chat completions API on 127.0.0.1, on a free port."""
    state = LlmServer()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", state.chat_completions)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    state.base_url = str(server.make_url("/v1"))
    try:
        yield state
    finally:
        await server.close()
