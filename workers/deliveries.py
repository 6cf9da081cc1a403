"""Webhook deliveries: every accepted delivery runs its workflow once, on a worker.

The inbox table is the queue; Redis only wakes workers up. The receiver queues a
``deliver_webhooks`` job after each commit, under an id shared by every delivery of
the same 50 ms, so a burst of deliveries wakes a few jobs rather than one job each
(arq spends about ten Redis round trips on a job: at one job per delivery that, not
the runs, was the ceiling). A job claims pending deliveries a batch at a time with one
conditional update (``FOR UPDATE SKIP LOCKED`` on PostgreSQL, so workers share the
inbox), runs them concurrently and claims more until the inbox is empty. Only a claim
runs a delivery, so a replayed delivery or a job queued twice cannot run it twice.

The claim names each run record before it exists, which is how the sweep tells a
delivery whose worker died before its run began (queued again) from one that died
during it (recorded failed rather than run a second time). The sweep also wakes a job
for deliveries left pending: queued while Redis was down, or arriving just as a job
finished its last claim.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Awaitable
from datetime import timedelta
from typing import Any

from arq.worker import Retry
from tortoise.backends.base.client import BaseDBAsyncClient
from tortoise.exceptions import OperationalError

from libflow.engine import InvalidInputs, UnknownEvent
from libflow.engine.definition import MAX_TIMEOUT_SECONDS
from libflow.errors import NotFound, Unavailable, dependency_down
from libflow.group_commit import commit_together
from libflow.ids import utcnow
from libflow.jobs import JobQueue
from libflow.json_text import UNSTORABLE_PROBLEM, holds_unstorable, may_hold_unstorable
from libflow.models import DeliveryStatus, WebhookDelivery, WorkflowRun
from libflow.webhooks import payload_of
from libflow.workflows import find_run_target, record_refused_run, run_version
from workers.context import JobResources, job_resources

logger = logging.getLogger("libflow.deliveries")

# Deliveries pending this long are queued again by the sweep (a wake-up was lost).
REQUEUE_AFTER = timedelta(seconds=2)
# A claimed delivery still running after the longest run allowed lost its worker.
INTERRUPTED_AFTER = timedelta(seconds=MAX_TIMEOUT_SECONDS + 60)
# Runs one job keeps going at once (most wait on I/O: the database, http_request nodes).
RUNS_AT_ONCE = 64
WAKE_UP_WINDOW_SECONDS = 0.05
DRAIN_SECONDS = 60
# Besides dependency_down(): the database or the network went away for a moment.
_TRANSIENT_TYPES: tuple[type[BaseException], ...] = (OperationalError, OSError)


def transient(err: BaseException) -> bool:
    """Whether ``err`` is the database or the network away for a moment: try again later."""
    return dependency_down(err) or isinstance(err, _TRANSIENT_TYPES)


_WOKEN: weakref.WeakKeyDictionary[JobQueue, int] = weakref.WeakKeyDictionary()


async def wake_delivery_job(jobs: JobQueue) -> bool:
    """Queue a job that drains the inbox; False when the queue is down (the sweep will).

    One job per window: this process asks Redis only for the first delivery of each
    (queueing costs several round trips even when arq refuses a job it already has).
    """
    window = int(time.time() / WAKE_UP_WINDOW_SECONDS)
    if _WOKEN.get(jobs) == window:
        return True
    try:
        await jobs.enqueue(deliver_webhooks, job_id=f"deliver_webhooks:{window}")
    except Unavailable:
        logger.warning("deliveries stay in the inbox until the job queue is back")
        return False
    _WOKEN[jobs] = window
    return True


# How long after its window a job makes its last claim: clocks of API and worker hosts
# differ a little (a larger gap leaves a delivery to the sweep, never loses it).
WINDOW_MARGIN_SECONDS = 0.05
WINDOW_CAP_SECONDS = WAKE_UP_WINDOW_SECONDS + WINDOW_MARGIN_SECONDS


def _window_end(ctx: dict[str, Any]) -> float:
    """When the wake-up window this job was queued for ends, plus the margin (0: unknown)."""
    _, _, window = str(ctx.get("job_id", "")).rpartition(":")
    if not window.isdigit():
        return 0.0
    return (int(window) + 1) * WAKE_UP_WINDOW_SECONDS + WINDOW_MARGIN_SECONDS


# PostgreSQL: workers skip the rows another worker is claiming. SQLite has one writer.
_CLAIM_SQL = {
    "postgres": (
        'UPDATE "webhook_deliveries" SET "status" = \'running\', "started_at" = $1,'
        ' "attempts" = "attempts" + 1, "run_id" = replace(gen_random_uuid()::text, \'-\', \'\')'
        ' WHERE "id" IN (SELECT "id" FROM "webhook_deliveries" WHERE "status" = \'pending\''
        ' ORDER BY "received_at" LIMIT $2 FOR UPDATE SKIP LOCKED) RETURNING "id"'
    ),
    "sqlite": (
        'UPDATE "webhook_deliveries" SET "status" = \'running\', "started_at" = ?,'
        ' "attempts" = "attempts" + 1, "run_id" = lower(hex(randomblob(16)))'
        ' WHERE "id" IN (SELECT "id" FROM "webhook_deliveries" WHERE "status" = \'pending\''
        ' ORDER BY "received_at" LIMIT ?) RETURNING "id"'
    ),
}


async def _claim(limit: int) -> list[str]:
    """Up to ``limit`` pending deliveries, now running and ours alone."""

    async def claim(db: BaseDBAsyncClient) -> list[str]:
        sql = _CLAIM_SQL[db.capabilities.dialect]
        started = utcnow()
        value: Any = started if db.capabilities.dialect == "postgres" else started.isoformat()
        # execute_query would not fetch an UPDATE's RETURNING rows on PostgreSQL.
        rows = await db.execute_query_dict(sql, [value, limit])
        return [row["id"] for row in rows]

    return await commit_together(claim)


async def _release(delivery_id: str, run_id: str | None) -> None:
    """Give a claimed delivery back to the inbox: its run has not begun."""
    await WebhookDelivery.filter(id=delivery_id, run_id=run_id).update(
        status=DeliveryStatus.PENDING, run_id=None, started_at=None
    )


async def deliver_webhooks(ctx: dict[str, Any]) -> None:
    """Claim and run pending deliveries until the inbox is empty."""
    resources = job_resources(ctx)
    job_try: int = ctx.get("job_try", 1)
    running: set[asyncio.Task[None]] = set()
    # A job's time is bounded (arq's timeout): past this it claims no more and hands over.
    stop_claiming = time.monotonic() + DRAIN_SECONDS
    waited = False
    try:
        while True:
            claimed: list[str] = []
            if len(running) < RUNS_AT_ONCE and time.monotonic() < stop_claiming:
                claimed = await _claim(RUNS_AT_ONCE - len(running))
            if claimed:
                deliveries = await WebhookDelivery.filter(id__in=claimed).select_related("webhook")
                for delivery in deliveries:
                    running.add(asyncio.create_task(_deliver(resources, delivery)))
            elif not running:
                if time.monotonic() >= stop_claiming:
                    await wake_delivery_job(resources.jobs)  # the inbox may still hold some
                    return
                # Once, and capped: a clock far ahead on the API's host must not park this job.
                wait = min(_window_end(ctx) - time.time(), WINDOW_CAP_SECONDS)
                if waited or wait <= 0:
                    return
                waited = True
                # Receivers in this job's window do not queue another job (see
                # wake_delivery_job): what they commit before it ends is ours to claim.
                await asyncio.sleep(wait)
                continue
            if running and (not claimed or len(running) >= RUNS_AT_ONCE):
                done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                running -= done
                for task in done:
                    if not task.cancelled() and task.exception() is not None:
                        logger.error("a delivery failed", exc_info=task.exception())
    except Exception as err:
        if not transient(err):
            raise
        # The claimed deliveries whose runs had not begun go back to the inbox (or, if the
        # database is still away, the sweep gives them back once stale).
        await asyncio.gather(*running, return_exceptions=True)
        raise Retry(defer=job_try * 2) from err
    finally:
        if running:  # cancelled (shutdown): let the runs record themselves as cancelled
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)


async def _deliver(resources: JobResources, delivery: WebhookDelivery) -> None:
    """Run one claimed delivery's workflow (latest version) and record how it went."""
    webhook = delivery.webhook
    try:
        target = await find_run_target(
            webhook.project_id, webhook.workflow_id, None, resources.reads
        )
    except NotFound as gone:  # the workflow has no version to run (cannot happen today)
        await _finish_alone(delivery.id, gone.code, gone.message)
        return
    except Exception as err:
        if transient(err):
            # If this fails too, the delivery stays claimed: the sweep gives it back once stale.
            await _unless_transient(_release(delivery.id, delivery.run_id))
        raise
    payload = payload_of(delivery.body)
    if may_hold_unstorable(delivery.body) and holds_unstorable(payload):
        # A run's inputs cannot carry these (PostgreSQL refuses them in JSON), as runsync's
        # cannot: refused the same way on every shape, before anything runs.
        await _finish_alone(delivery.id, "INVALID_INPUTS", f"the payload {UNSTORABLE_PROBLEM}")
        return
    inputs = {"payload": payload, "headers": delivery.headers}

    async def finish(db: BaseDBAsyncClient, run: WorkflowRun) -> None:
        # In the run record's own transaction: the two never disagree.
        error = run.error
        if run.status == "cancelled":  # shutdown mid-run: not run again (see the module)
            error = {"code": "CANCELLED", "node": None, "message": "the worker stopped"}
        await _finish(db, delivery.id, run.status == "succeeded", error)

    try:
        try:
            await run_version(
                target,
                event=webhook.event,
                inputs=inputs,
                trigger="webhook",
                services=resources.node_services(target.project_id),
                run_id=delivery.run_id,
                record_with=finish,
            )
        except (UnknownEvent, InvalidInputs) as refused:
            await record_refused_run(
                target,
                event=webhook.event,
                inputs=inputs,
                trigger="webhook",
                error=refused,
                run_id=delivery.run_id,
                record_with=finish,
            )
    except Exception as err:
        # The run began but could not be recorded. It is not run again (its effects may
        # have happened): the delivery says so now rather than when the sweep finds it.
        logger.exception("delivery %s: its run could not be recorded", delivery.id)
        message = f"the run could not be recorded ({type(err).__name__})"
        # If this fails too, the sweep settles it, as failed.
        await _unless_transient(_fail_unrecorded(delivery.id, delivery.run_id, message))


async def _unless_transient(write: Awaitable[None]) -> None:
    """Await ``write``; a transient failure of it is left to the sweep."""
    try:
        await write
    except Exception as err:
        if not transient(err):
            raise
        logger.warning("left to the sweep: %r", err)


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


async def _finish_alone(delivery_id: str, code: str, message: str) -> None:
    """Fail a delivery that has no run record (its claimed run id points at nothing)."""
    error = {"code": code, "node": None, "message": message}

    async def fail(db: BaseDBAsyncClient) -> None:
        await (
            WebhookDelivery.filter(id=delivery_id)
            .using_db(db)
            .update(status=DeliveryStatus.FAILED, error=error, finished_at=utcnow(), run_id=None)
        )

    await commit_together(fail)


async def _fail_unrecorded(delivery_id: str, run_id: str | None, message: str) -> None:
    """Fail a delivery whose run's end could not be written, and the run's record if any.

    A run longer than RECORD_RUNNING_AFTER already has a "running" record: it must not stay
    so with nothing pointing at it.
    """
    error = {"code": "INTERNAL", "node": None, "message": message}

    async def fail(db: BaseDBAsyncClient) -> None:
        now = utcnow()
        recorded = await (
            WorkflowRun.filter(id=run_id, status="running")
            .using_db(db)
            .update(status="failed", error=error, finished_at=now)
        )
        exists = recorded or await WorkflowRun.filter(id=run_id).using_db(db).exists()
        await (
            WebhookDelivery.filter(id=delivery_id)
            .using_db(db)
            .update(
                status=DeliveryStatus.FAILED,
                error=error,
                finished_at=now,
                run_id=run_id if exists else None,
            )
        )

    await commit_together(fail)


async def sweep_deliveries(ctx: dict[str, Any]) -> None:
    """Settle deliveries whose worker died, and wake a job for what the inbox still holds.

    Runs every few seconds and at worker start: after a Redis outage this is what
    runs the deliveries the receiver accepted while it was down.
    """
    await settle_interrupted_deliveries(INTERRUPTED_AFTER)
    await requeue_pending_deliveries(job_resources(ctx).jobs, REQUEUE_AFTER)


async def requeue_pending_deliveries(jobs: JobQueue, older_than: timedelta) -> None:
    """Wake a delivery job when a delivery has been pending longer than ``older_than``."""
    stale = WebhookDelivery.filter(
        status=DeliveryStatus.PENDING, received_at__lte=utcnow() - older_than
    )
    if await stale.exists():
        await wake_delivery_job(jobs)


async def settle_interrupted_deliveries(stale_after: timedelta) -> None:
    """Deliveries claimed longer than ``stale_after`` ago lost their worker.

    Each is recorded failed (INTERRUPTED), as is its run if it has a record: its run
    may have begun, and running it again could repeat its effects.
    """
    now = utcnow()
    stale = await WebhookDelivery.filter(
        status=DeliveryStatus.RUNNING, started_at__lte=now - stale_after
    ).values_list("id", "run_id")
    for delivery_id, run_id in stale:
        # No run record does not mean the run never began: short runs are recorded when
        # they end. Running it again could repeat its effects, so it is failed either way.
        run = await WorkflowRun.get_or_none(id=run_id)
        logger.error("delivery %s: its worker stopped during run %s", delivery_id, run_id)
        error = {"code": "INTERRUPTED", "node": None, "message": "the worker stopped mid-run"}
        if run is not None and run.status == "running":
            run.status, run.error, run.finished_at = "failed", error, now
            await run.save(update_fields=["status", "error", "finished_at"])
        await WebhookDelivery.filter(id=delivery_id, run_id=run_id).update(
            status=DeliveryStatus.FAILED,
            error=error,
            finished_at=now,
            run_id=run_id if run is not None else None,
        )
