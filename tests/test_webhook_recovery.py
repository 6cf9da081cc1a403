"""Deliveries whose worker stopped: never lost, never run twice."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

from libflow.ids import new_id, utcnow
from libflow.jobs import WAKE_UP_WINDOW_SECONDS
from libflow.models import DeliveryStatus, WebhookDelivery, WorkflowRun
from libflow.webhooks.inbox import INTERRUPTED_AFTER, settle_interrupted_deliveries
from tests.conftest import Api, ClientFactory, Shape, new_project
from tests.processing_helpers import job_context
from tests.webhook_helpers import (
    create_webhook,
    deliver,
    delivered_once,
    deliveries_of,
    event_body,
)
from tests.webhook_helpers import standard_headers as signed
from tests.workflow_helpers import chain, get_run, output, runs_of
from workers.deliveries import deliver_webhooks


def slow(seconds: float) -> dict[str, object]:
    """A webhook workflow that waits ``seconds``."""
    wait = {"id": "wait", "type": "delay", "seconds": seconds}
    return chain(wait, output("done", True), event="webhook")


async def wait_for_status(api: Api, webhook_id: str, status: str) -> dict[str, object]:
    """Poll the deliveries list until the only delivery has ``status``."""
    deadline = time.monotonic() + 10
    while True:
        found = await deliveries_of(api, webhook_id)
        if found and found[0]["status"] == status:
            return found[0]
        assert time.monotonic() < deadline, found
        await asyncio.sleep(0.05)


async def test_a_run_cut_off_by_a_shutdown_is_recorded_and_not_run_again(
    start_app: ClientFactory, embedded: Shape
) -> None:
    client = await start_app(embedded.settings)
    project_id, key = await new_project()
    api = Api(client, embedded, project_id, key)
    created = await create_webhook(api, slow(30))  # outlasts the shutdown's grace period
    body = event_body()
    await deliver(api, created["webhookId"], body, signed(created["secret"], body))
    await wait_for_status(api, created["webhookId"], "running")

    await client.close()  # the in-process queue cancels the run at shutdown
    restarted = Api(await start_app(embedded.settings), embedded, project_id, key)
    await restarted.run_jobs()

    [delivery] = await deliveries_of(restarted, created["webhookId"])
    # A shutdown is no one's cancel: INTERRUPTED, as a queued run's (errors.md).
    assert (delivery["status"], delivery["error"]["code"]) == ("failed", "INTERRUPTED")
    [run] = await runs_of(restarted, created["workflowId"])
    assert (run["status"], run["statusCode"], run["error"]["code"]) == (
        "failed",
        500,
        "INTERRUPTED",
    )


async def test_a_stale_claim_without_a_run_record_is_failed_not_run_again(api: Api) -> None:
    created, delivery = await delivered_once(api)
    # As a worker leaves it when it dies during a short run (recorded only when it ends).
    await WebhookDelivery.filter(id=delivery["deliveryId"]).update(
        status=DeliveryStatus.RUNNING,
        run_id=new_id(),
        started_at=utcnow() - INTERRUPTED_AFTER - timedelta(seconds=1),
    )

    await settle_interrupted_deliveries(INTERRUPTED_AFTER)

    [settled] = await deliveries_of(api, created["webhookId"])
    assert (settled["status"], settled["runId"]) == ("failed", None)
    assert settled["error"]["code"] == "INTERRUPTED"


async def test_a_claim_whose_run_was_failed_interrupted_settles_at_once(api: Api) -> None:
    """The run sweep fails a run whose lease ran out within a minute; its delivery ends
    with it at the next sweep, not minutes later."""
    created, delivery = await delivered_once(api)
    # Claimed a moment ago; its run already failed by the run sweep.
    await WebhookDelivery.filter(id=delivery["deliveryId"]).update(
        status=DeliveryStatus.RUNNING, started_at=utcnow(), finished_at=None, error=None
    )
    interrupted = {"code": "INTERRUPTED", "node": None, "message": "its process stopped"}
    await WorkflowRun.filter(id=delivery["runId"]).update(status="failed", error=interrupted)

    await settle_interrupted_deliveries(INTERRUPTED_AFTER)

    [settled] = await deliveries_of(api, created["webhookId"])
    assert (settled["status"], settled["error"], settled["runId"]) == (
        "failed",
        interrupted,
        delivery["runId"],
    )


async def test_a_stale_claim_whose_run_began_is_failed_with_its_run(api: Api) -> None:
    created, delivery = await delivered_once(api)
    # As a worker leaves it when it dies mid-run.
    await WebhookDelivery.filter(id=delivery["deliveryId"]).update(
        status=DeliveryStatus.RUNNING,
        started_at=utcnow() - INTERRUPTED_AFTER - timedelta(seconds=1),
    )
    await WorkflowRun.filter(id=delivery["runId"]).update(status="running", finished_at=None)

    await settle_interrupted_deliveries(INTERRUPTED_AFTER)

    [settled] = await deliveries_of(api, created["webhookId"])
    assert (settled["status"], settled["error"]["code"]) == ("failed", "INTERRUPTED")
    run = await get_run(api, delivery["runId"])
    assert (run["status"], run["error"]["code"]) == ("failed", "INTERRUPTED")


async def test_a_fresh_claim_is_left_alone(api: Api) -> None:
    created = await create_webhook(api, slow(2))
    body = event_body()
    await deliver(api, created["webhookId"], body, signed(created["secret"], body))
    await wait_for_status(api, created["webhookId"], "running")

    await settle_interrupted_deliveries(INTERRUPTED_AFTER)

    [delivery] = await deliveries_of(api, created["webhookId"])
    assert delivery["status"] == "running"


async def test_a_drain_job_queued_by_a_clock_far_ahead_does_not_wait_for_its_window(
    api: Api,
) -> None:
    # The API host's clock is an hour ahead: the job's window ends an hour from now here.
    window = int((time.time() + 3600) / WAKE_UP_WINDOW_SECONDS)
    context = {**job_context(api), "job_id": f"deliver_webhooks:{window}"}

    started = time.monotonic()
    await asyncio.wait_for(deliver_webhooks(context), 10)

    assert time.monotonic() - started < 5  # capped at one window, not an hour
