"""Webhooks of a workflow: create, list, get, delete, and rotate their secrets.

Signing secrets are stored sealed (``libflow.secrets.crypto``, bound to the webhook's id);
a webhook that create or rotate returns carries its new secret in clear, for the one
answer that shows it.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from libflow.db.fast_reads import FastReads
from libflow.engine import check_event
from libflow.errors import NotFound
from libflow.ids import new_id, possible_id, utcnow
from libflow.models import Webhook
from libflow.secrets.crypto import secret_box, webhook_bound_to
from libflow.webhooks.signatures import new_secret
from libflow.workflows.versions import find_run_target, get_workflow

ROTATION_GRACE = timedelta(hours=24)


async def create_webhook(
    project_id: str, workflow_id: str, *, scheme: str, event: str, reads: FastReads
) -> Webhook:
    """A webhook of one of the project's workflows, with a fresh secret (in clear); its
    event must start runs of the latest version (UnknownEvent), as a schedule's must.

    A later version without the event fails each delivery's run with UNKNOWN_EVENT.
    """
    target = await find_run_target(project_id, workflow_id, None, reads)
    check_event(target.definition, event)
    webhook_id = new_id()
    secret = new_secret(scheme)
    webhook = await Webhook.create(
        id=webhook_id,
        project_id=project_id,
        workflow_id=target.workflow_id,
        scheme=scheme,
        event=event,
        secret=secret_box().seal(secret, webhook_bound_to(webhook_id)),
    )
    webhook.secret = secret  # for the answer only: the row holds it sealed
    return webhook


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
    """A new secret (in clear); the current one keeps verifying for ROTATION_GRACE."""
    webhook = await get_webhook(project_id, webhook_id)
    secret = new_secret(webhook.scheme)
    webhook.previous_secret = webhook.secret  # sealed, and bound to the same row
    webhook.previous_expires_at = utcnow() + ROTATION_GRACE
    webhook.secret = secret_box().seal(secret, webhook_bound_to(webhook.id))
    await webhook.save(update_fields=["secret", "previous_secret", "previous_expires_at"])
    webhook.secret = secret  # for the answer only: the row holds it sealed
    return webhook


def verifying_secrets(webhook: Webhook, now: datetime) -> list[str]:
    """The secrets a delivery may be signed with right now (in clear), current first.

    Opening one costs about a microsecond (AES-GCM of some 50 bytes): not worth a cache.
    """
    box, bound_to = secret_box(), webhook_bound_to(webhook.id)
    found = [box.open(webhook.secret, bound_to)]
    expires = webhook.previous_expires_at
    if webhook.previous_secret and expires is not None and now < expires:
        found.append(box.open(webhook.previous_secret, bound_to))
    return found
