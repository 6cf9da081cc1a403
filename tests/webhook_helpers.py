"""Helpers of the webhook tests: senders signing as each provider does, and the API calls."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import io
import json
import secrets
import time
from datetime import UTC, datetime
from typing import Any

from aiohttp import ClientResponse
from standardwebhooks.webhooks import Webhook as StandardWebhook

from tests.conftest import Api
from tests.workflow_helpers import API, chain, create, ok_json, output


def echo(event: str = "webhook") -> dict[str, Any]:
    """A workflow started by ``event`` that outputs the payload and headers it was given."""
    return chain(
        output("payload", "{{ inputs.payload }}"),
        output("headers", "{{ inputs.headers }}", node_id="out_headers"),
        event=event,
    )


def webhooks_path(api: Api, path: str = "") -> str:
    """A path under the project's webhooks."""
    return f"{API}/projects/{api.project_id}/webhooks{path}"


async def create_webhook(
    api: Api, definition: dict[str, Any] | None = None, **body: Any
) -> dict[str, Any]:
    """A workflow of ``definition`` (echo by default) and a webhook on it; the 201 body."""
    workflow = await create(api, definition or echo(body.get("event", "webhook")))
    response = await api.client.post(
        f"{API}/projects/{api.project_id}/workflows/{workflow['workflowId']}/webhooks",
        json=body,
        headers=api.headers,
    )
    created: dict[str, Any] = await ok_json(response, 201)
    return created


def standard_headers(
    secret: str, body: bytes, *, msg_id: str | None = None, timestamp: float | None = None
) -> dict[str, str]:
    """Headers of a Standard Webhooks delivery, signed by the standardwebhooks library."""
    msg_id = msg_id or f"msg_{secrets.token_hex(8)}"
    moment = datetime.fromtimestamp(int(time.time() if timestamp is None else timestamp), UTC)
    signature = StandardWebhook(secret).sign(msg_id, moment, body.decode())
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(moment.timestamp())),
        "webhook-signature": signature,
        "Content-Type": "application/json",
    }


def github_headers(secret: str, body: bytes, *, delivery: str | None = None) -> dict[str, str]:
    """Headers of a GitHub delivery: X-Hub-Signature-256 over the body."""
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {
        "X-Hub-Signature-256": f"sha256={digest}",
        "X-GitHub-Delivery": delivery or secrets.token_hex(16),
        "X-GitHub-Event": "push",
        "Content-Type": "application/json",
    }


def stripe_headers(secret: str, body: bytes, *, timestamp: float | None = None) -> dict[str, str]:
    """Headers of a Stripe delivery: ``t=..,v1=..`` over ``t.body``, the secret as plain bytes."""
    t = str(int(time.time() if timestamp is None else timestamp))
    digest = hmac.new(secret.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    return {"Stripe-Signature": f"t={t},v1={digest}", "Content-Type": "application/json"}


def event_body(**fields: Any) -> bytes:
    """A JSON delivery body."""
    return json.dumps({"type": "test.event", **fields}).encode()


async def deliver(
    api: Api, webhook_id: str, body: bytes, headers: dict[str, str]
) -> ClientResponse:
    """POST a delivery to the receiver, as the sender would (no API key)."""
    return await api.client.post(f"/webhooks/{webhook_id}", data=io.BytesIO(body), headers=headers)


async def deliveries_of(api: Api, webhook_id: str) -> list[dict[str, Any]]:
    """The webhook's deliveries, newest first."""
    response = await api.client.get(
        webhooks_path(api, f"/{webhook_id}/deliveries"), headers=api.headers
    )
    found: list[dict[str, Any]] = await ok_json(response)
    return found


async def delivered_once(api: Api) -> tuple[dict[str, Any], dict[str, Any]]:
    """A webhook of ``echo`` and the one signed delivery it ran: (webhook, delivery)."""
    webhook = await create_webhook(api)
    body = event_body()
    await deliver(api, webhook["webhookId"], body, standard_headers(webhook["secret"], body))
    await api.run_jobs()
    [delivery] = await deliveries_of(api, webhook["webhookId"])
    return webhook, delivery


async def wait_for_deliveries(
    api: Api, webhook_id: str, count: int, timeout: float = 60
) -> list[dict[str, Any]]:
    """Run jobs until ``count`` deliveries have finished; return them."""
    deadline = time.monotonic() + timeout
    while True:
        await api.run_jobs()
        found = await deliveries_of(api, webhook_id)
        if len(found) == count and all(d["status"] in ("succeeded", "failed") for d in found):
            return found
        assert time.monotonic() < deadline, f"deliveries not finished: {found}"
        await asyncio.sleep(0.2)
