"""Handlers of webhooks: their management, their deliveries, and the receiver."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from libflow import appkeys
from libflow.api.bodies import CreateWebhookBody, parse_body, query_limit
from libflow.api.responses import json_response, page_response
from libflow.api.runs import accepted
from libflow.errors import PayloadTooLarge
from libflow.ids import iso
from libflow.models import Webhook, WebhookDelivery
from libflow.webhooks import inbox, manage, replay

routes = web.RouteTableDef()
PROJECT = "/api/publicv1/projects/{projectId}"
WEBHOOK = f"{PROJECT}/webhooks/{{webhookId}}"
RECEIVER = "/webhooks/{webhookId}"


def _project(request: web.Request) -> str:
    return request.match_info["projectId"]


def webhook_json(webhook: Webhook, public_base_url: str, *, with_secret: bool) -> dict[str, Any]:
    """A webhook record; the secret only where it was just made (create, rotate)."""
    body: dict[str, Any] = {
        "webhookId": webhook.id,
        "url": f"{public_base_url.rstrip('/')}/webhooks/{webhook.id}",
        "scheme": webhook.scheme,
        "event": webhook.event,
        "workflowId": webhook.workflow_id,
        "createdDate": iso(webhook.created_at),
    }
    if with_secret:
        body["secret"] = webhook.secret
        body["previousSecretExpiresDate"] = iso(webhook.previous_expires_at)
    return body


def delivery_json(delivery: WebhookDelivery) -> dict[str, Any]:
    """A delivery as the deliveries list shows it (without its body)."""
    return {
        "deliveryId": delivery.id,
        "webhookId": delivery.webhook_id,
        "externalId": delivery.external_id,
        "status": delivery.status,
        "attempts": delivery.attempts,
        "runId": delivery.run_id,
        "error": delivery.error,
        "receivedDate": iso(delivery.received_at),
        "startedDate": iso(delivery.started_at),
        "finishedDate": iso(delivery.finished_at),
    }


def _render(request: web.Request, webhook: Webhook, *, with_secret: bool) -> dict[str, Any]:
    base_url = request.app[appkeys.SETTINGS].resolved_public_base_url
    return webhook_json(webhook, base_url, with_secret=with_secret)


@routes.post(f"{PROJECT}/workflows/{{workflowId}}/webhooks")
async def create_webhook(request: web.Request) -> web.Response:
    """Add a webhook trigger to a workflow; the answer holds its secret."""
    body = await parse_body(request, CreateWebhookBody, allow_empty=True)
    webhook = await manage.create_webhook(
        _project(request),
        request.match_info["workflowId"],
        scheme=body.scheme,
        event=body.event,
        reads=request.app[appkeys.READS],
    )
    return json_response(_render(request, webhook, with_secret=True), status=201)


@routes.get(f"{PROJECT}/workflows/{{workflowId}}/webhooks")
async def list_webhooks(request: web.Request) -> web.Response:
    """The workflow's webhooks."""
    found = await manage.list_webhooks(_project(request), request.match_info["workflowId"])
    return json_response([_render(request, w, with_secret=False) for w in found])


@routes.get(WEBHOOK)
async def get_webhook(request: web.Request) -> web.Response:
    """One webhook."""
    webhook = await manage.get_webhook(_project(request), request.match_info["webhookId"])
    return json_response(_render(request, webhook, with_secret=False))


@routes.delete(WEBHOOK)
async def delete_webhook(request: web.Request) -> web.Response:
    """Stop accepting deliveries (those accepted still run)."""
    await manage.delete_webhook(_project(request), request.match_info["webhookId"])
    return web.Response(status=204)


@routes.post(f"{WEBHOOK}/rotate")
async def rotate_secret(request: web.Request) -> web.Response:
    """A new secret; the previous one keeps verifying for 24 hours."""
    webhook = await manage.rotate_secret(_project(request), request.match_info["webhookId"])
    return json_response(_render(request, webhook, with_secret=True))


@routes.get(f"{WEBHOOK}/deliveries")
async def list_deliveries(request: web.Request) -> web.Response:
    """The webhook's deliveries, newest first; a Link header points at the next page."""
    limit = query_limit(request, default=100, maximum=inbox.MAX_DELIVERIES_LISTED)
    page, next_cursor = await inbox.list_deliveries(
        _project(request),
        request.match_info["webhookId"],
        limit=limit,
        cursor=request.query.get("cursor"),
    )
    return page_response(
        request, [delivery_json(d) for d in page], limit=limit, next_cursor=next_cursor
    )


@routes.post(f"{WEBHOOK}/deliveries/{{deliveryId}}/replay")
async def replay_delivery(request: web.Request) -> web.Response:
    """Run the delivery's payload again: 202 with the new run (trigger ``replay``)."""
    resources = request.app[appkeys.RESOURCES]
    run = await replay.replay_delivery(
        _project(request),
        request.match_info["webhookId"],
        request.match_info["deliveryId"],
        reads=resources.reads,
        control=resources.runs,
        jobs=resources.jobs,
    )
    return accepted(run)


@routes.post(RECEIVER)
async def receive(request: web.Request) -> web.Response:
    """Operation 9: verify, commit to the inbox, then queue the run; 200 once committed."""
    limit = inbox.MAX_DELIVERY_BYTES
    if (request.content_length or 0) > limit:
        raise PayloadTooLarge(f"a delivery may hold at most {limit} bytes")
    body = await request.read()  # the app's client_max_size bounds a chunked body too
    if len(body) > limit:
        raise PayloadTooLarge(f"a delivery may hold at most {limit} bytes")
    delivery = await inbox.accept_delivery(
        request.match_info["webhookId"], request.headers, body, request.app[appkeys.READS]
    )
    if delivery.status == "pending":
        # Redis down: the delivery stays in the inbox and the sweep wakes a job later.
        await inbox.wake_delivery_job(request.app[appkeys.JOBS])
    return json_response({"ok": True})
