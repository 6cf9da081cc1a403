"""Replaying a delivery: a new run of the payload it stored, whatever became of the first."""

from __future__ import annotations

from libflow import json_text
from libflow.db.fast_reads import FastReads
from libflow.engine import InvalidInputs
from libflow.errors import NotFound
from libflow.ids import possible_id
from libflow.jobs import JobQueue
from libflow.models import WebhookDelivery, WorkflowRun
from libflow.webhooks.inbox import payload_of
from libflow.webhooks.manage import get_webhook
from libflow.workflows.run_queue import queue_run
from libflow.workflows.running import RunControl
from libflow.workflows.versions import find_run_target


async def replay_delivery(
    project_id: str,
    webhook_id: str,
    delivery_id: str,
    *,
    reads: FastReads,
    control: RunControl,
    jobs: JobQueue,
) -> WorkflowRun:
    """Queue a new run (trigger ``replay``) of the delivery's payload on the latest version.

    NotFound for an unknown (or deleted) webhook or delivery; InvalidInputs for a payload
    no run could hold (as its first run was refused).
    """
    webhook = await get_webhook(project_id, webhook_id)
    delivery = None
    if possible_id(delivery_id):
        delivery = await WebhookDelivery.get_or_none(id=delivery_id, webhook_id=webhook.id)
    if delivery is None:
        raise NotFound(f"delivery {delivery_id!r} not found")
    try:
        payload = payload_of(delivery.body)
    except json_text.NonFiniteNumber as err:
        raise InvalidInputs(f"the payload {json_text.NON_FINITE_PROBLEM}") from err
    if json_text.may_hold_unstorable(delivery.body) and json_text.holds_unstorable(payload):
        raise InvalidInputs(f"the payload {json_text.UNSTORABLE_PROBLEM}")
    target = await find_run_target(project_id, webhook.workflow_id, None, reads)
    return await queue_run(
        target,
        event=webhook.event,
        inputs={"payload": payload, "headers": delivery.headers},
        trigger="replay",
        control=control,
        jobs=jobs,
    )
