"""Webhooks of a workflow: create, list, get, delete, and rotate their secrets."""

from __future__ import annotations

from datetime import datetime, timedelta

from libflow.errors import NotFound
from libflow.ids import possible_id, utcnow
from libflow.models import Webhook
from libflow.webhooks.signatures import new_secret
from libflow.workflows.versions import get_workflow

ROTATION_GRACE = timedelta(hours=24)


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
