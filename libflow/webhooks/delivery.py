"""Running what the inbox holds: a drain claims deliveries and runs each one's workflow once.

The receiver queues a ``deliver_webhooks`` job after each commit, under an id shared by
every delivery of the same 50 ms, so a burst of deliveries wakes a few jobs rather than
one job each (arq spends about ten Redis round trips on a job: at one job per delivery
that, not the runs, was the ceiling). A job claims pending deliveries a batch at a time
with one conditional update (``FOR UPDATE SKIP LOCKED`` on PostgreSQL, so workers share
the inbox), runs them concurrently and claims more until the inbox is empty. Only a
claim runs a delivery, so a replayed delivery or a job queued twice cannot run it twice.

The claim names each run record before it exists, which is how the sweep tells a
delivery whose worker died before its run began (queued again) from one that died
during it (recorded failed rather than run a second time).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable

from tortoise.backends.base.client import BaseDBAsyncClient
from tortoise.exceptions import OperationalError

from libflow.db.fast_reads import FastReads
from libflow.db.outages import dependency_down
from libflow.engine import InvalidInputs, NodeServices, UnknownEvent
from libflow.errors import NotFound
from libflow.jobs import Drain, JobQueue, drain
from libflow.json_text import (
    NON_FINITE_PROBLEM,
    UNSTORABLE_PROBLEM,
    NonFiniteNumber,
    holds_unstorable,
    may_hold_unstorable,
)
from libflow.models import WebhookDelivery, WorkflowRun
from libflow.webhooks.inbox import (
    claim,
    fail_unrecorded,
    finish,
    finish_alone,
    payload_of,
    release,
    wake_delivery_job,
)
from libflow.workflows.running import RunControl
from libflow.workflows.runs import run_version
from libflow.workflows.versions import find_run_target

logger = logging.getLogger("libflow.deliveries")

# Runs one job keeps going at once (most wait on I/O: the database, http_request nodes).
RUNS_AT_ONCE = 64
DRAIN_SECONDS = 60
ServicesFor = Callable[[str], NodeServices]


# Besides dependency_down(): the database or the network went away for a moment.
_TRANSIENT_TYPES: tuple[type[BaseException], ...] = (OperationalError, OSError)


def transient(err: BaseException) -> bool:
    """Whether ``err`` is the database or the network away for a moment: try again later."""
    return dependency_down(err) or isinstance(err, _TRANSIENT_TYPES)


async def drain_inbox(
    *,
    jobs: JobQueue,
    reads: FastReads,
    services_for: ServicesFor,
    control: RunControl,
    job_id: str,
    job_try: int,
) -> None:
    """Claim and run pending deliveries until the inbox is empty (the deliver_webhooks job).

    ``job_id`` names the wake-up window the job was queued for; ``services_for`` gives a
    project's runs what their nodes may reach.
    """

    async def claim_deliveries(limit: int) -> list[WebhookDelivery]:
        claimed = await claim(limit)
        if not claimed:
            return []
        return list(await WebhookDelivery.filter(id__in=claimed).select_related("webhook"))

    async def deliver(delivery: WebhookDelivery) -> None:
        await _deliver(reads, services_for, control, delivery)

    inbox = Drain(
        claim=claim_deliveries,
        run=deliver,
        wake=lambda: wake_delivery_job(jobs),
        transient=transient,
        at_once=RUNS_AT_ONCE,
        seconds=DRAIN_SECONDS,
        what="a delivery",
    )
    await drain(inbox, job_id=job_id, job_try=job_try)


async def _deliver(
    reads: FastReads, services_for: ServicesFor, control: RunControl, delivery: WebhookDelivery
) -> None:
    """Run one claimed delivery's workflow (latest version) and record how it went."""
    webhook = delivery.webhook
    try:
        target = await find_run_target(webhook.project_id, webhook.workflow_id, None, reads)
    except NotFound as gone:  # the workflow has no version to run (cannot happen today)
        await finish_alone(delivery.id, gone.code, gone.message)
        return
    except Exception as err:
        if transient(err):
            # If this fails too, the delivery stays claimed: the sweep gives it back once stale.
            await _unless_transient(release(delivery.id, delivery.run_id))
        raise
    try:
        payload = payload_of(delivery.body)
    except NonFiniteNumber:
        # As runsync refuses them (INVALID_JSON): refused alike on every shape, before
        # anything runs, rather than a run whose record PostgreSQL cannot store.
        await finish_alone(delivery.id, "INVALID_INPUTS", f"the payload {NON_FINITE_PROBLEM}")
        return
    if may_hold_unstorable(delivery.body) and holds_unstorable(payload):
        # A run's inputs cannot carry these (PostgreSQL refuses them in JSON), as runsync's
        # cannot: refused the same way on every shape, before anything runs.
        await finish_alone(delivery.id, "INVALID_INPUTS", f"the payload {UNSTORABLE_PROBLEM}")
        return
    inputs = {"payload": payload, "headers": delivery.headers}

    async def record_with(db: BaseDBAsyncClient, run: WorkflowRun) -> None:
        # In the run record's own transaction: the two never disagree.
        await finish(db, delivery.id, run.status == "succeeded", run.error)

    try:
        # A refused run is recorded as failed, with the delivery's end, by run_version.
        with contextlib.suppress(UnknownEvent, InvalidInputs):
            await run_version(
                target,
                event=webhook.event,
                inputs=inputs,
                trigger="webhook",
                services=services_for(target.project_id),
                control=control,
                run_id=delivery.run_id,
                record_with=record_with,
                # A worker's shutdown is no one's cancel: failed INTERRUPTED, not run again.
                interrupted_when_stopped=True,
            )
    except Exception as err:
        # The run began but could not be recorded. It is not run again (its effects may
        # have happened): the delivery says so now rather than when the sweep finds it.
        logger.exception("delivery %s: its run could not be recorded", delivery.id)
        message = f"the run could not be recorded ({type(err).__name__})"
        # If this fails too, the sweep settles it, as failed.
        await _unless_transient(fail_unrecorded(delivery.id, delivery.run_id, message))


async def _unless_transient(write: Awaitable[None]) -> None:
    """Await ``write``; a transient failure of it is left to the sweep."""
    try:
        await write
    except Exception as err:
        if not transient(err):
            raise
        logger.warning("left to the sweep: %r", err)
