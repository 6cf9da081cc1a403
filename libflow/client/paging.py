"""List answers read page by page, following ``Link: <...>; rel="next"``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

from yarl import URL

from libflow.client.errors import LibflowError
from libflow.client.transport import Transport


async def pages(
    transport: Transport, url: URL, params: Mapping[str, str] | None = None
) -> AsyncIterator[Any]:
    """Every item of a paged list: the next page is fetched when this one runs out.

    Only the next link's query (its cursor) is taken: the next page is asked of the URL the
    client was given, whatever host the server believes it is reached at (behind a proxy).
    """
    page_url = url.update_query(params or {})
    while True:
        answer = await transport.call("GET", page_url)
        if not isinstance(answer.body, list):
            raise LibflowError(f"GET {page_url}: not a list")
        for item in answer.body:
            yield item
        next_link = answer.next_page()
        if next_link is None:
            return
        next_url = url.with_query(next_link.query)
        if next_url == page_url:
            raise LibflowError(f"GET {page_url}: the next page is this page again")
        page_url = next_url
