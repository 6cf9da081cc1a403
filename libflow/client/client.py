"""``LibflowClient``: every route of one project's public API, typed, over one HTTP session."""

from __future__ import annotations

import os
from types import TracebackType
from typing import Any, Self, cast

import aiohttp

from libflow.client.library import Library
from libflow.client.secrets import Secrets
from libflow.client.transport import Transport
from libflow.client.webhooks import Webhooks
from libflow.client.workflows import Runs, Workflows

DEFAULT_URL = "http://127.0.0.1:8080"


class LibflowClient:
    """A project's API: ``library``, ``workflows``, ``runs``, ``webhooks``, ``secrets``.

    Use it as an async context manager (it owns its HTTP session unless given one)::

        async with LibflowClient(url, api_key, project_id) as libflow:
            record = await libflow.library.upload("report.pdf")
    """

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        project_id: str | None = None,
        *,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        url = url or os.environ.get("LIBFLOW_URL") or DEFAULT_URL
        api_key = api_key or os.environ.get("LIBFLOW_API_KEY")
        project_id = project_id or os.environ.get("LIBFLOW_PROJECT_ID")
        if not api_key or not project_id:
            raise ValueError(
                "a client needs an API key and a project id (or LIBFLOW_API_KEY and "
                "LIBFLOW_PROJECT_ID in the environment)"
            )
        self._own_session = session is None
        self._session = session
        self.url = url
        self.api_key = api_key
        self.project_id = project_id
        self._transport: Transport | None = None
        if session is not None:
            self._bind(session)

    def _bind(self, session: aiohttp.ClientSession) -> None:
        self._transport = transport = Transport(session, self.url, self.api_key)
        self.library = Library(transport, self.project_id)
        self.workflows = Workflows(transport, self.project_id)
        self.runs = Runs(transport, self.project_id)
        self.webhooks = Webhooks(transport, self.project_id)
        self.secrets = Secrets(transport, self.project_id)

    async def __aenter__(self) -> Self:
        if self._session is None:
            self._session = aiohttp.ClientSession()
            self._bind(self._session)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the HTTP session, if the client opened it."""
        if self._own_session and self._session is not None:
            await self._session.close()
            self._session = None

    async def health(self) -> dict[str, Any]:
        """``/readyz``: whether the server and what it depends on are up."""
        transport = self._require_transport()
        answer = await transport.call("GET", transport.url("/readyz"), check=False)
        return cast(dict[str, Any], answer.body)

    def _require_transport(self) -> Transport:
        if self._transport is None:
            raise RuntimeError("use the client in `async with`, or give it a session")
        return self._transport
