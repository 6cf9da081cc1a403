"""Webhook deliveries: each accepted delivery runs its workflow once, on a worker.

Once: a job claims its delivery with one conditional update (pending -> running) and
only the job that wins runs it, so a replayed delivery, a job queued twice (by the
receiver and by the sweep) or a retried job cannot run a workflow twice. The claim
also names the run record, which is how the sweep tells a delivery whose worker died
before the run began (queued again) from one that died during it (recorded failed
rather than run a second time).
"""

from __future__ import annotations

import contextlib
import logging
from datetime import timedelta
from typing import Any

from arq.worker import Retry
from tortoise.backends.base.client import BaseDBAsyncClient
from tortoise.exceptions import OperationalError
from tortoise.expressions import F

from libflow.engine import InvalidInputs, UnknownEvent
from libflow.engine.definition import MAX_TIMEOUT_SECONDS
from libflow.errors import DEPENDENCY_DOWN, Unavailable
from libflow.group_commit import commit_together
from libflow.ids import new_id, utcnow
from libflow.jobs import JobQueue
from libflow.models import (
    DeliveryStatus,
    WebhookDelivery,
    WorkflowRun,
)
from libflow.webhooks import payload_of
from libflow.workflows import find_run_target, record_refused_run, run_version
from workers.context import job_resources

logger = logging.getLogger("libflow.deliveries")

# A delivery the receiver could not queue (Redis down) is queued by the sweep once it
# is this old; younger ones are most likely still on their way through the queue.
REQUEUE_AFTER = timedelta(seconds=2)
# A claimed delivery still running after the longest run allowed lost its worker.
INTERRUPTED_AFTER = timedelta(seconds=MAX_TIMEOUT_SECONDS + 60)
_SWEEP_BATCH = 500
# The database or the network went away for a moment: try again later.
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (*DEPENDENCY_DOWN, OperationalError, OSError)


def delivery_job_id(delivery_id: str) -> str:
    """One queued job per delivery: arq refuses a second job with the same id."""
    return f"deliver:{delivery_id}"


async def enqueue_delivery(jobs: JobQueue, delivery_id: str) -> bool:
    """Queue the delivery's run; False when the queue is down (the sweep queues it later)."""
    try:
        await jobs.enqueue(deliver_webhook, delivery_id, job_id=delivery_job_id(delivery_id))
    except Unavailable:
        logger.warning("delivery %s stays in the inbox: the job queue is down", delivery_id)
        return False
    return True


async def _claim(delivery_id: str) -> str | None:
    """The run id of the delivery if this job won it, else None."""
    run_id = new_id()

    async def claim(db: BaseDBAsyncClient) -> int:
        pending = WebhookDelivery.filter(id=delivery_id, status=DeliveryStatus.PENDING)
        return await pending.using_db(db).update(
            status=DeliveryStatus.RUNNING,
            run_id=run_id,
            started_at=utcnow(),
            attempts=F("attempts") + 1,
        )

    return run_id if await commit_together(claim) else None


async def _release(delivery_id: str, run_id: str) -> None:
    """Give a claimed delivery back to the inbox: its run has not begun."""
    await WebhookDelivery.filter(id=delivery_id, run_id=run_id).update(
        status=DeliveryStatus.PENDING, run_id=None, started_at=None
    )


async def deliver_webhook(ctx: dict[str, Any], delivery_id: str) -> None:
    """Run the workflow of one delivery (latest version) and record how it went."""
    resources = job_resources(ctx)
    job_try: int = ctx.get("job_try", 1)
    try:
        run_id = await _claim(delivery_id)
    except TRANSIENT_ERRORS as err:
        raise Retry(defer=job_try * 2) from err
    if run_id is None:
        return  # already run, or running elsewhere
    try:
        delivery = await WebhookDelivery.get(id=delivery_id).select_related("webhook")
        webhook = delivery.webhook
        target = await find_run_target(
            webhook.project_id, webhook.workflow_id, None, resources.reads
        )
    except TRANSIENT_ERRORS as err:
        # If this fails too, the delivery stays claimed: the sweep gives it back once stale.
        with contextlib.suppress(*TRANSIENT_ERRORS):
            await _release(delivery_id, run_id)
        raise Retry(defer=job_try * 2) from err
    inputs = {"payload": payload_of(delivery.body), "headers": delivery.headers}

    async def finish(db: BaseDBAsyncClient, run: WorkflowRun) -> None:
        # In the run record's own transaction: the two never disagree.
        error = run.error
        if run.status == "cancelled":  # shutdown mid-run: not run again (see the module)
            error = {"code": "CANCELLED", "node": None, "message": "the worker stopped"}
        await _finish(db, delivery_id, run.status == "succeeded", error)

    try:
        await run_version(
            target,
            event=webhook.event,
            inputs=inputs,
            trigger="webhook",
            services=resources.node_services(target.project_id),
            run_id=run_id,
            record_with=finish,
        )
    except (UnknownEvent, InvalidInputs) as refused:
        await record_refused_run(
            target,
            event=webhook.event,
            inputs=inputs,
            trigger="webhook",
            error=refused,
            run_id=run_id,
            record_with=finish,
        )


async def _finish(
    db: BaseDBAsyncClient, delivery_id: str, succeeded: bool, error: dict[str, Any] | None
) -> None:
    await (
        WebhookDelivery.filter(id=delivery_id)
        .using_db(db)
        .update(
            status=DeliveryStatus.SUCCEEDED if succeeded else DeliveryStatus.FAILED,
            error=error,
            finished_at=utcnow(),
        )
    )


async def sweep_deliveries(ctx: dict[str, Any]) -> None:
    """Queue what the inbox still holds, and settle deliveries whose worker died.

    Runs periodically and at worker start: after a Redis outage this is what
    queues the deliveries the receiver accepted while it was down.
    """
    await settle_interrupted_deliveries(INTERRUPTED_AFTER)
    await requeue_pending_deliveries(job_resources(ctx).jobs, REQUEUE_AFTER)


async def requeue_pending_deliveries(jobs: JobQueue, older_than: timedelta) -> None:
    """Queue every pending delivery received more than ``older_than`` ago."""
    pending = WebhookDelivery.filter(
        status=DeliveryStatus.PENDING, received_at__lt=utcnow() - older_than
    ).order_by("received_at", "id")
    offset = 0
    while ids := await pending.offset(offset).limit(_SWEEP_BATCH).values_list("id", flat=True):
        for delivery_id in ids:
            if not await enqueue_delivery(jobs, str(delivery_id)):
                return  # the queue is down again: the next sweep goes on
        offset += len(ids)


async def settle_interrupted_deliveries(stale_after: timedelta) -> None:
    """Deliveries claimed longer than ``stale_after`` ago lost their worker.

    One whose run never began goes back to the inbox; one whose run began is
    recorded failed, as is its run: running it again could repeat its effects.
    """
    now = utcnow()
    stale = await WebhookDelivery.filter(
        status=DeliveryStatus.RUNNING, started_at__lte=now - stale_after
    ).values_list("id", "run_id")
    for delivery_id, run_id in stale:
        run = await WorkflowRun.get_or_none(id=run_id)
        if run is None:
            await _release(delivery_id, run_id)
            continue
        logger.error("delivery %s: its worker stopped during run %s", delivery_id, run_id)
        error = {"code": "INTERRUPTED", "node": None, "message": "the worker stopped mid-run"}
        if run.status == "running":
            run.status, run.error, run.finished_at = "failed", error, now
            await run.save(update_fields=["status", "error", "finished_at"])
        await WebhookDelivery.filter(id=delivery_id, run_id=run_id).update(
            status=DeliveryStatus.FAILED, error=error, finished_at=now
        )
