"""Inbound webhooks through the API: create, inspect, rotate, deliveries and their replay."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, cast

from libflow.client.paging import pages
from libflow.client.records import Delivery, Run, Webhook
from libflow.client.transport import Transport


class Webhooks:
    """One project's webhooks."""

    def __init__(self, transport: Transport, project_id: str) -> None:
        self._t = transport
        self._project = f"/projects/{project_id}"

    async def create(
        self, workflow_id: str, *, scheme: str | None = None, event: str | None = None
    ) -> Webhook:
        """A webhook of the workflow; the answer holds its signing ``secret``, shown once."""
        body: dict[str, Any] = {}
        if scheme is not None:
            body["scheme"] = scheme
        if event is not None:
            body["event"] = event
        url = self._t.api_url(f"{self._project}/workflows/{workflow_id}/webhooks")
        return cast(Webhook, (await self._t.call("POST", url, json=body)).body)

    async def get(self, webhook_id: str) -> Webhook:
        """One webhook (without its secret)."""
        url = self._t.api_url(f"{self._project}/webhooks/{webhook_id}")
        return cast(Webhook, (await self._t.call("GET", url)).body)

    async def delete(self, webhook_id: str) -> None:
        """Remove a webhook: its URL answers 404 from now on."""
        url = self._t.api_url(f"{self._project}/webhooks/{webhook_id}")
        await self._t.call("DELETE", url, expect_json=False)

    async def rotate(self, webhook_id: str) -> Webhook:
        """A new signing secret (in the answer, shown once); the old one still verifies
        deliveries for 24 hours, while senders move to the new one."""
        url = self._t.api_url(f"{self._project}/webhooks/{webhook_id}/rotate")
        return cast(Webhook, (await self._t.call("POST", url)).body)

    def iter_deliveries(self, webhook_id: str, *, page_size: int = 100) -> AsyncIterator[Delivery]:
        """The webhook's deliveries, newest first."""
        url = self._t.api_url(f"{self._project}/webhooks/{webhook_id}/deliveries")
        return cast(AsyncIterator[Delivery], pages(self._t, url, {"limit": str(page_size)}))

    async def deliveries(self, webhook_id: str, *, limit: int = 100) -> list[Delivery]:
        """At most ``limit`` of the webhook's deliveries, newest first."""
        found: list[Delivery] = []
        async for delivery in self.iter_deliveries(webhook_id, page_size=min(max(limit, 1), 1000)):
            found.append(delivery)
            if len(found) >= limit:
                break
        return found

    async def replay(self, webhook_id: str, delivery_id: str) -> Run:
        """Run the stored payload again, as a new run (queued; trigger ``replay``)."""
        url = self._t.api_url(
            f"{self._project}/webhooks/{webhook_id}/deliveries/{delivery_id}/replay"
        )
        return cast(Run, (await self._t.call("POST", url)).body)

    async def list(self, workflow_id: str) -> list[Webhook]:
        """The workflow's webhooks (without secrets)."""
        url = self._t.api_url(f"{self._project}/workflows/{workflow_id}/webhooks")
        return cast(list[Webhook], (await self._t.call("GET", url)).body)
