"""Jobs of the webhook inbox: drain it (run what it holds), and sweep it."""

from __future__ import annotations

from typing import Any

from libflow.resources import job_resources
from libflow.webhooks import delivery, inbox


async def deliver_webhooks(ctx: dict[str, Any]) -> None:
    """Claim and run pending deliveries until the inbox is empty."""
    resources = job_resources(ctx)
    await delivery.drain_inbox(
        jobs=resources.jobs,
        reads=resources.reads,
        services_for=resources.node_services,
        control=resources.runs,
        job_id=str(ctx.get("job_id", "")),
        job_try=int(ctx.get("job_try", 1)),
    )


async def sweep_deliveries(ctx: dict[str, Any]) -> None:
    """Settle deliveries whose worker died, and wake a job for what the inbox still holds.

    Runs every few seconds and at worker start: after a Redis outage this is what
    runs the deliveries the receiver accepted while it was down.
    """
    await inbox.settle_interrupted_deliveries(inbox.INTERRUPTED_AFTER)
    await inbox.requeue_pending_deliveries(job_resources(ctx).jobs, inbox.REQUEUE_AFTER)
