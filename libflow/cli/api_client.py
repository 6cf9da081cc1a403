"""One call of libflow's public HTTP API from the CLI: the API key, the error line, 429s.

Every client command calls through here, so a failed call reads the same whatever the
command (``METHOD URL: STATUS CODE: message``) and a 429 RATE_LIMITED answer is waited out.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from libflow.cli.output import CliError

API = "/api/publicv1"
# Waits on 429 RATE_LIMITED before the CLI gives up on a call.
RATE_LIMIT_RETRIES = 10


class ApiCallError(CliError):
    """The API answered with an error body, kept for callers that print more of it."""

    def __init__(self, message: str, body: dict[str, Any]) -> None:
        super().__init__(message)
        self.body = body


class RateLimitedError(ApiCallError):
    """429 RATE_LIMITED: the call may be made again after ``retry_after`` seconds."""

    def __init__(self, message: str, body: dict[str, Any], retry_after: int) -> None:
        super().__init__(message, body)
        self.retry_after = retry_after


async def call_api(
    session: aiohttp.ClientSession, method: str, url: str, api_key: str, **kwargs: Any
) -> tuple[Any, aiohttp.ClientResponse]:
    """One call's JSON body (an object or a list) and its response; 429s are waited out.

    The response is kept for its headers (a list's ``Link``); its body is already read.
    """
    for attempt in range(RATE_LIMIT_RETRIES + 1):
        try:
            return await _call_once(session, method, url, api_key, **kwargs)
        except RateLimitedError as err:
            if attempt == RATE_LIMIT_RETRIES:
                raise
            await asyncio.sleep(err.retry_after)
    raise AssertionError("unreachable")


async def call_api_for_object(
    session: aiohttp.ClientSession, method: str, url: str, api_key: str, **kwargs: Any
) -> dict[str, Any]:
    """One call whose answer is a JSON object (a record): that object; 429s are waited out."""
    body, response = await call_api(session, method, url, api_key, **kwargs)
    if not isinstance(body, dict):
        raise _not_an_api_answer(f"{method} {url}", response)
    return body


async def _call_once(
    session: aiohttp.ClientSession, method: str, url: str, api_key: str, **kwargs: Any
) -> tuple[Any, aiohttp.ClientResponse]:
    headers = {"Authorization": api_key}
    async with session.request(method, url, headers=headers, **kwargs) as response:
        body = await json_body(response)
        if response.status >= 400 or body is None:
            raise answer_error(f"{method} {url}", response, body)
        return body, response


async def json_body(response: aiohttp.ClientResponse) -> Any:
    """The response's body as JSON, whatever its content type; None when it is not JSON."""
    try:
        return await response.json(content_type=None)
    except ValueError:
        return None


def answer_error(call: str, response: aiohttp.ClientResponse, body: Any) -> CliError:
    """The error to raise for an answer that is not a success: the API's message in it."""
    if not isinstance(body, dict):
        return _not_an_api_answer(call, response)
    message = f"{call}: {response.status} {body.get('error')}: {body.get('message')}"
    retry_after = response.headers.get("Retry-After", "")
    if response.status == 429 and retry_after.isdigit():
        return RateLimitedError(message, body, int(retry_after))
    return ApiCallError(message, body)


def _not_an_api_answer(call: str, response: aiohttp.ClientResponse) -> CliError:
    # A proxy or another server may answer at this URL: say so instead of crashing.
    return CliError(f"{call}: {response.status} {response.reason}: not a libflow API answer")
