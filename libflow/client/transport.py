"""One HTTP call of the public API: the API key, error bodies as exceptions, 429s waited out."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
from yarl import URL

from libflow.client.errors import ApiError, NotAnApiAnswer, RateLimitedError

API_PREFIX = "/api/publicv1"
# Waits on 429 RATE_LIMITED before a call gives up.
RATE_LIMIT_RETRIES = 10


@dataclass(frozen=True, slots=True)
class Answer:
    """A successful answer: its status, JSON body (None when it had none) and headers."""

    status: int
    body: Any
    headers: Mapping[str, str]
    url: URL

    def next_page(self) -> URL | None:
        """The ``Link: <...>; rel="next"`` of a list answer, absolute; None on the last page."""
        link = self.headers.get("Link")
        if not link:
            return None
        for part in link.split(","):
            target, _, params = part.partition(";")
            if 'rel="next"' in params.replace(" ", ""):
                return self.url.join(URL(target.strip().strip("<>")))
        return None


class Transport:
    """The session, the server's URL and the API key that every call of a client shares."""

    def __init__(self, session: aiohttp.ClientSession, base_url: str, api_key: str) -> None:
        self.session = session
        self.base_url = URL(base_url.rstrip("/"))
        self.api_key = api_key

    def url(self, path: str) -> URL:
        """An absolute URL of the server; ``path`` starts with ``/``."""
        return self.base_url.with_path(self.base_url.path.rstrip("/") + path, encoded=False)

    def api_url(self, path: str) -> URL:
        """An absolute URL under the API prefix."""
        return self.url(API_PREFIX + path)

    async def call(
        self,
        method: str,
        url: URL,
        *,
        json: Any = None,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        expect_json: bool = True,
        check: bool = True,
    ) -> Answer:
        """Make the call; ApiError for an error answer, after waiting out 429s.

        With ``check=False`` any answer but the rate limiter's 429 comes back as it is, for the
        caller to read.
        """
        for attempt in range(RATE_LIMIT_RETRIES + 1):
            try:
                return await self._call_once(method, url, json, params, headers, expect_json, check)
            except RateLimitedError as err:
                if attempt == RATE_LIMIT_RETRIES:
                    raise
                await asyncio.sleep(err.retry_after)
        raise AssertionError("unreachable")

    async def _call_once(
        self,
        method: str,
        url: URL,
        json: Any,
        params: Mapping[str, str] | None,
        headers: Mapping[str, str] | None,
        expect_json: bool,
        check: bool,
    ) -> Answer:
        sent = {"Authorization": self.api_key, **(headers or {})}
        async with self.session.request(
            method, url, json=json, params=params, headers=sent, allow_redirects=False
        ) as response:
            body = await json_body(response)
            # Unchecked (runsync), an answer is the run's, whatever its status, a fail
            # node's 429 included; only the rate limiter's 429, an API error, is retried.
            failed = response.status >= 400 if check else _rate_limited(response.status, body)
            if failed or (expect_json and body is None and response.status != 204):
                raise answer_error(f"{method} {url}", response, body)
            return Answer(response.status, body, response.headers, response.url)

    @asynccontextmanager
    async def stream(
        self, url: URL, headers: Mapping[str, str], limits: aiohttp.ClientTimeout
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """A GET whose body is read as it comes; ApiError unless it succeeds."""
        sent = {"Authorization": self.api_key, **headers}
        async with self.session.get(url, headers=sent, timeout=limits) as response:
            if response.status >= 400:
                raise answer_error(f"GET {url}", response, await json_body(response))
            yield response


async def json_body(response: aiohttp.ClientResponse) -> Any:
    """The response's body as JSON, whatever its content type; None when it is not JSON."""
    try:
        return await response.json(content_type=None)
    except ValueError:
        return None


def _rate_limited(status: int, body: Any) -> bool:
    return status == 429 and isinstance(body, dict) and "error" in body


def answer_error(call: str, response: aiohttp.ClientResponse, body: Any) -> Exception:
    """The error for an answer that is not a success: the API's own, or NotAnApiAnswer."""
    if not isinstance(body, dict) or "error" not in body:
        return NotAnApiAnswer(call, response.status, response.reason)
    retry_after = response.headers.get("Retry-After", "")
    if response.status == 429 and retry_after.isdigit():
        return RateLimitedError(call, body, int(retry_after))
    return ApiError(call, response.status, body)
