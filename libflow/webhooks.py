"""Inbound webhooks: their management, and the durable inbox that accepts deliveries."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from tortoise.exceptions import IntegrityError

from libflow.errors import NotFound
from libflow.group_commit import commit_together
from libflow.ids import possible_id, utcnow
from libflow.inline_reads import InlineReads, InlineReadUnavailable, model_from_row
from libflow.models import Webhook, WebhookDelivery
from libflow.signatures import SIGNATURE_HEADERS, new_secret, verify
from libflow.workflows import get_workflow

ROTATION_GRACE = timedelta(hours=24)
MAX_DELIVERY_BYTES = 1024 * 1024
MAX_DELIVERIES_LISTED = 1000
MAX_EXTERNAL_ID = 200
LISTED_DELIVERY_FIELDS = (
    "id",
    "webhook_id",
    "external_id",
    "status",
    "attempts",
    "run_id",
    "error",
    "received_at",
    "started_at",
    "finished_at",
)

# Never handed to a workflow: they authenticate the sender, and a run record keeps its inputs.
_CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie"})


async def create_webhook(project_id: str, workflow_id: str, *, scheme: str, event: str) -> Webhook:
    """A webhook of one of the project's workflows, with a fresh secret."""
    workflow = await get_workflow(project_id, workflow_id)
    return await Webhook.create(
        project_id=project_id,
        workflow=workflow,
        scheme=scheme,
        event=event,
        secret=new_secret(scheme),
    )


async def list_webhooks(project_id: str, workflow_id: str) -> list[Webhook]:
    """The workflow's webhooks, oldest first."""
    workflow = await get_workflow(project_id, workflow_id)
    return await Webhook.filter(workflow_id=workflow.id, deleted_at__isnull=True).order_by(
        "created_at", "id"
    )


async def get_webhook(project_id: str, webhook_id: str) -> Webhook:
    """One webhook of the project that has not been deleted."""
    webhook = None
    if possible_id(webhook_id):
        webhook = await Webhook.get_or_none(id=webhook_id, project_id=project_id, deleted_at=None)
    if webhook is None:
        raise NotFound(f"webhook {webhook_id!r} not found")
    return webhook


async def delete_webhook(project_id: str, webhook_id: str) -> None:
    """Stop accepting deliveries; those already accepted still run."""
    webhook = await get_webhook(project_id, webhook_id)
    webhook.deleted_at = utcnow()
    await webhook.save(update_fields=["deleted_at"])


async def rotate_secret(project_id: str, webhook_id: str) -> Webhook:
    """A new secret; the current one keeps verifying for ROTATION_GRACE."""
    webhook = await get_webhook(project_id, webhook_id)
    webhook.previous_secret = webhook.secret
    webhook.previous_expires_at = utcnow() + ROTATION_GRACE
    webhook.secret = new_secret(webhook.scheme)
    await webhook.save(update_fields=["secret", "previous_secret", "previous_expires_at"])
    return webhook


def verifying_secrets(webhook: Webhook, now: datetime) -> list[str]:
    """The secrets a delivery may be signed with right now, current first."""
    found = [webhook.secret]
    expires = webhook.previous_expires_at
    if webhook.previous_secret and expires is not None and now < expires:
        found.append(webhook.previous_secret)
    return found


def run_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The headers a workflow sees: lower-cased, without signatures or credentials."""
    hidden = SIGNATURE_HEADERS | _CREDENTIAL_HEADERS
    kept: dict[str, str] = {}
    for name, value in headers.items():
        lowered = name.lower()
        if lowered not in hidden:
            # A repeated header reads as one value, as RFC 9110 allows for most headers.
            kept[lowered] = f"{kept[lowered]}, {value}" if lowered in kept else value
    return kept


def payload_of(body: bytes) -> Any:
    """The delivery's body for the workflow: parsed JSON, else text."""
    text = body.decode("utf-8", errors="replace")
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return text


def _storable_id(delivery_id: str) -> str:
    """The sender's delivery id, or its hash when it is too long or not printable ASCII."""
    if len(delivery_id) <= MAX_EXTERNAL_ID and delivery_id.isascii() and delivery_id.isprintable():
        return delivery_id
    digest = hashlib.sha256(delivery_id.encode("utf-8", errors="surrogateescape")).hexdigest()
    return f"sha256:{digest}"


_WEBHOOK_SQL = 'SELECT * FROM "webhooks" WHERE "id" = ? AND "deleted_at" IS NULL'


async def _live_webhook(webhook_id: str, reads: InlineReads) -> Webhook | None:
    if not possible_id(webhook_id):
        return None
    try:
        row = reads.row(_WEBHOOK_SQL, (webhook_id,))
    except InlineReadUnavailable:
        return await Webhook.get_or_none(id=webhook_id, deleted_at=None)
    return None if row is None else model_from_row(Webhook, row)


async def receive_delivery(
    webhook_id: str, headers: Mapping[str, str], body: bytes, reads: InlineReads
) -> WebhookDelivery:
    """Verify a delivery and commit it to the inbox; a repeated one returns the first.

    Raises NotFound for an unknown or deleted webhook and InvalidSignature when the
    signature does not verify. Nothing is written for a refused delivery.
    """
    webhook = await _live_webhook(webhook_id, reads)
    if webhook is None:
        raise NotFound(f"webhook {webhook_id!r} not found")
    now = utcnow()
    verified = verify(
        webhook.scheme, verifying_secrets(webhook, now), headers, body, now=now.timestamp()
    )
    delivery = WebhookDelivery(
        webhook_id=webhook.id,
        project_id=webhook.project_id,
        external_id=_storable_id(verified.delivery_id),
        body=body,
        headers=run_headers(headers),
    )
    try:
        # Concurrent deliveries share a commit; each answer still waits for its own.
        await commit_together(lambda db: delivery.save(using_db=db, force_create=True))
        return delivery
    except IntegrityError:
        # The sender retried (or replayed) a delivery we have: acknowledge it again.
        existing = await WebhookDelivery.get_or_none(
            webhook_id=webhook.id, external_id=_storable_id(verified.delivery_id)
        )
        if existing is None:  # not a duplicate after all: let the error surface
            raise
        return existing


async def list_deliveries(project_id: str, webhook_id: str, limit: int) -> list[WebhookDelivery]:
    """The webhook's latest deliveries, newest first."""
    webhook = await get_webhook(project_id, webhook_id)
    return (
        await WebhookDelivery.filter(webhook_id=webhook.id)
        .order_by("-received_at", "-id")
        .limit(limit)
        .only(*LISTED_DELIVERY_FIELDS)  # never the bodies: up to 1 MiB each
    )
