"""The webhook inbox: the state machine of a delivery, from accepted to settled.

pending (accepted, committed before the 200) -> running (claimed by one worker, its run
id named) -> succeeded | failed; a claim whose run never began is released back to
pending; a claim whose worker died is settled as failed (INTERRUPTED), never run twice.
The inbox table is the queue; Redis only wakes workers up (``wake_delivery_job``), and
a sweep wakes them for what a lost wake-up left pending.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from tortoise.backends.base.client import BaseDBAsyncClient
from tortoise.exceptions import IntegrityError

from libflow import json_text
from libflow.db.fast_reads import FastReads
from libflow.db.group_commit import commit_together
from libflow.db.moments import query_moment
from libflow.engine.definition import MAX_TIMEOUT_SECONDS
from libflow.errors import NotFound
from libflow.ids import utcnow
from libflow.jobs import Job, JobQueue, wake_job
from libflow.models import DeliveryStatus, WebhookDelivery, WorkflowRun
from libflow.paging import after_cursor, page_and_cursor
from libflow.webhooks.manage import get_webhook, verifying_secrets
from libflow.webhooks.signatures import SIGNATURE_HEADERS, TOLERANCE_SECONDS, verify

logger = logging.getLogger("libflow.deliveries")

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
# Deliveries pending this long are queued again by the sweep (a wake-up was lost).
REQUEUE_AFTER = timedelta(seconds=2)
# A claimed delivery still running after the longest run allowed lost its worker.
INTERRUPTED_AFTER = timedelta(seconds=MAX_TIMEOUT_SECONDS + 60)
# GitHub signs the body alone, with no timestamp: a captured delivery verifies forever, and
# a new X-GitHub-Delivery makes it look new. A body this webhook accepted this recently (the
# tolerance of the timestamped schemes) is taken for a replay: acknowledged, not run again.
GITHUB_REPLAY_WINDOW = timedelta(seconds=TOLERANCE_SECONDS)

# Never handed to a workflow: they authenticate the sender, and a run record keeps its inputs.
_CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie"})


def run_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The headers a workflow sees: lower-cased, without signatures or credentials."""
    hidden = SIGNATURE_HEADERS | _CREDENTIAL_HEADERS
    kept: dict[str, str] = {}
    for name, value in headers.items():
        lowered = name.lower()
        if lowered not in hidden:
            # Stored, and handed to a run: bytes that are not UTF-8 become U+FFFD.
            lowered, value = json_text.header_text(lowered), json_text.header_text(value)
            # A repeated header reads as one value, as RFC 9110 allows for most headers.
            kept[lowered] = f"{kept[lowered]}, {value}" if lowered in kept else value
    return kept


def payload_of(body: bytes) -> Any:
    """The delivery's body for the workflow: parsed JSON, else text.

    Raises NonFiniteNumber for JSON holding NaN, Infinity or 1e999, which a run's inputs
    cannot hold; text that only begins like them ("NaN is...") is text.
    """
    text = body.decode("utf-8", errors="replace")
    try:
        return json_text.loads(text)
    except json_text.NonFiniteNumber:
        try:
            json.loads(text)  # Python's lenient reader: JSON but for those numbers?
        except (ValueError, RecursionError):
            return text
        raise
    except (ValueError, RecursionError):
        return text


def _storable_id(delivery_id: str) -> str:
    """The sender's delivery id, or its hash when it is too long or not printable ASCII."""
    if len(delivery_id) <= MAX_EXTERNAL_ID and delivery_id.isascii() and delivery_id.isprintable():
        return delivery_id
    digest = hashlib.sha256(delivery_id.encode("utf-8", errors="surrogateescape")).hexdigest()
    return f"sha256:{digest}"


async def accept_delivery(
    webhook_id: str, headers: Mapping[str, str], body: bytes, reads: FastReads
) -> WebhookDelivery:
    """Verify a delivery and commit it to the inbox; a repeated one returns the first.

    Repeated: the same sender's delivery id, or for the github scheme the same body within
    GITHUB_REPLAY_WINDOW.

    Raises NotFound for an unknown or deleted webhook and InvalidSignature when the
    signature does not verify. Nothing is written for a refused delivery.
    """
    webhook = await reads.live_webhook(webhook_id)
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
        body_sha256=hashlib.sha256(body).hexdigest(),
        headers=run_headers(headers),
    )

    async def save(db: BaseDBAsyncClient) -> WebhookDelivery:
        if webhook.scheme == "github":
            replayed = await _same_body_lately(db, webhook.id, delivery, now)
            if replayed is not None:
                return replayed
        await delivery.save(using_db=db, force_create=True)
        return delivery

    try:
        # Concurrent deliveries share a commit; each answer still waits for its own.
        return await commit_together(save)
    except IntegrityError:
        # The sender retried (or replayed) a delivery we have: acknowledge it again.
        existing = await WebhookDelivery.get_or_none(
            webhook_id=webhook.id, external_id=_storable_id(verified.delivery_id)
        )
        if existing is None:  # not a duplicate after all: let the error surface
            raise
        return existing


# The replay check's query, for SQLite (False) and PostgreSQL (True). Two branches rather
# than an OR, so that each is an index search on (webhook_id, body_sha256, received_at):
# the same digest, or a row stored before digests were (NULL; none after the window).
_SAME_BODY_SQL = {
    False: 'SELECT "id" FROM "webhook_deliveries" WHERE "webhook_id" = ?1'
    ' AND "body_sha256" = ?3 AND "received_at" >= ?2'
    ' UNION ALL SELECT "id" FROM "webhook_deliveries" WHERE "webhook_id" = ?1'
    ' AND "body_sha256" IS NULL AND "received_at" >= ?2 AND "body" = ?4 LIMIT 1',
    True: 'SELECT "id" FROM "webhook_deliveries" WHERE "webhook_id" = $1'
    ' AND "body_sha256" = $3 AND "received_at" >= $2'
    ' UNION ALL SELECT "id" FROM "webhook_deliveries" WHERE "webhook_id" = $1'
    ' AND "body_sha256" IS NULL AND "received_at" >= $2 AND "body" = $4 LIMIT 1',
}


async def _same_body_lately(
    db: BaseDBAsyncClient, webhook_id: str, delivery: WebhookDelivery, now: datetime
) -> WebhookDelivery | None:
    """A delivery of ``delivery``'s body (its digest already made) accepted by this
    webhook within GITHUB_REPLAY_WINDOW."""
    body = delivery.body
    if db.capabilities.dialect == "postgres":
        # Other API processes look for the same body now: one at a time, each after the
        # previous one's insert committed (released with this transaction). SQLite has one
        # writer, and this process's checks run one after another in the group commit.
        key = hashlib.sha256(webhook_id.encode() + b"\x00" + body).digest()
        lock = int.from_bytes(key[:8], "big", signed=True)
        await db.execute_query("SELECT pg_advisory_xact_lock($1)", [lock])
    since = WebhookDelivery._meta.fields_map["received_at"].to_db_value(
        now - GITHUB_REPLAY_WINDOW, WebhookDelivery
    )
    # One raw query, in the transaction every delivery of the batch waits on: the ORM's
    # query building cost more than the lookup.
    sql = _SAME_BODY_SQL[db.capabilities.dialect == "postgres"]
    _, rows = await db.execute_query(sql, [webhook_id, since, delivery.body_sha256, body])
    if not rows:
        return None
    return (
        await WebhookDelivery.filter(id=rows[0]["id"])
        .using_db(db)
        .only(*LISTED_DELIVERY_FIELDS)  # not the body
        .first()
    )


async def list_deliveries(
    project_id: str, webhook_id: str, *, limit: int, cursor: str | None
) -> tuple[list[WebhookDelivery], str | None]:
    """One page of the webhook's deliveries, newest first, and the next page's cursor if any."""
    webhook = await get_webhook(project_id, webhook_id)
    query = WebhookDelivery.filter(webhook_id=webhook.id)
    if cursor:
        query = after_cursor(query, cursor, "received_at")
    found = (
        await query.order_by("-received_at", "-id")
        .limit(limit + 1)
        .only(*LISTED_DELIVERY_FIELDS)  # never the bodies: up to 1 MiB each
    )
    return page_and_cursor(found, limit, lambda delivery: delivery.received_at)


async def wake_delivery_job(jobs: JobQueue) -> bool:
    """Queue a job that drains the inbox; False when the queue is down (the sweep will)."""
    return await wake_job(jobs, Job.DELIVER_WEBHOOKS, "deliveries stay in the inbox")


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


async def claim(limit: int) -> list[str]:
    """Up to ``limit`` pending deliveries, now running and ours alone."""

    async def claim(db: BaseDBAsyncClient) -> list[str]:
        sql = _CLAIM_SQL[db.capabilities.dialect]
        # execute_query would not fetch an UPDATE's RETURNING rows on PostgreSQL.
        rows = await db.execute_query_dict(sql, [query_moment(db, utcnow()), limit])
        return [row["id"] for row in rows]

    return await commit_together(claim)


async def release(delivery_id: str, run_id: str | None) -> None:
    """Give a claimed delivery back to the inbox: its run has not begun."""
    await WebhookDelivery.filter(id=delivery_id, run_id=run_id).update(
        status=DeliveryStatus.PENDING, run_id=None, started_at=None
    )


async def finish(
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


async def finish_alone(delivery_id: str, code: str, message: str) -> None:
    """Fail a delivery that has no run record (its claimed run id points at nothing)."""
    error = {"code": code, "node": None, "message": message}

    async def fail(db: BaseDBAsyncClient) -> None:
        await (
            WebhookDelivery.filter(id=delivery_id)
            .using_db(db)
            .update(status=DeliveryStatus.FAILED, error=error, finished_at=utcnow(), run_id=None)
        )

    await commit_together(fail)


async def fail_unrecorded(delivery_id: str, run_id: str | None, message: str) -> None:
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


async def requeue_pending_deliveries(jobs: JobQueue, older_than: timedelta) -> None:
    """Wake a delivery job when a delivery has been pending longer than ``older_than``."""
    stale = WebhookDelivery.filter(
        status=DeliveryStatus.PENDING, received_at__lte=utcnow() - older_than
    )
    if await stale.exists():
        await wake_delivery_job(jobs)


async def _settle_with_interrupted_runs(now: datetime) -> None:
    """Deliveries whose run the run sweep already failed INTERRUPTED (its lease ran out:
    the worker is gone) end now with it, not ``stale_after`` later. Running deliveries
    are few (a worker's concurrency each), so they are read whole."""
    claimed = await WebhookDelivery.filter(status=DeliveryStatus.RUNNING).values_list(
        "id", "run_id"
    )
    run_ids = [run_id for _, run_id in claimed if run_id]
    if not run_ids:
        return
    interrupted = {
        run_id: error
        for run_id, error in await WorkflowRun.filter(id__in=run_ids, status="failed").values_list(
            "id", "error"
        )
        if isinstance(error, dict) and error.get("code") == "INTERRUPTED"
    }
    for delivery_id, run_id in claimed:
        if run_id in interrupted:
            logger.error("delivery %s: its worker stopped during run %s", delivery_id, run_id)
            await WebhookDelivery.filter(
                id=delivery_id, run_id=run_id, status=DeliveryStatus.RUNNING
            ).update(status=DeliveryStatus.FAILED, error=interrupted[run_id], finished_at=now)


async def settle_interrupted_deliveries(stale_after: timedelta) -> None:
    """Deliveries claimed longer than ``stale_after`` ago lost their worker.

    Each is recorded failed (INTERRUPTED), as is its run if it has a record: its run
    may have begun, and running it again could repeat its effects.
    """
    now = utcnow()
    await _settle_with_interrupted_runs(now)
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
