"""A project's secrets through the API: names in, values never out."""

from __future__ import annotations

from typing import cast

from libflow.client.records import Secret
from libflow.client.transport import Transport


class Secrets:
    """One project's secrets, read by workflows as ``{{ secrets.NAME }}``."""

    def __init__(self, transport: Transport, project_id: str) -> None:
        self._t = transport
        self._base = f"/projects/{project_id}/secrets"

    async def list(self) -> list[Secret]:
        """Names and dates of the project's secrets (never their values)."""
        return cast(list[Secret], (await self._t.call("GET", self._t.api_url(self._base))).body)

    async def put(self, name: str, value: str) -> None:
        """Create or replace the secret ``name``."""
        url = self._t.api_url(f"{self._base}/{name}")
        await self._t.call("PUT", url, json={"value": value}, expect_json=False)

    async def delete(self, name: str) -> None:
        """Remove the secret ``name``."""
        url = self._t.api_url(f"{self._base}/{name}")
        await self._t.call("DELETE", url, expect_json=False)
