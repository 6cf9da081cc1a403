"""A claim whose process died is found by the sweeps on every database.

The claims are raw queries; the sweeps compare against moments the ORM writes. On SQLite
both are text, so a claim must write its moment as the ORM does, or the sweeps never see
it as old (a run or delivery left ``running`` until the next day).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import datetime, timedelta

import pytest

from libflow import appkeys
from libflow.ids import utcnow
from libflow.models import DeliveryStatus, WebhookDelivery, WorkflowRun
from libflow.webhooks import inbox
from libflow.workflows import run_queue
from tests.conftest import Api, jobs_running
from tests.run_helpers import start, wait_for_status
from tests.webhook_helpers import (
    delivered_once,
    deliveries_of,
)
from tests.workflow_helpers import SPEC_EXAMPLE, chain, create, get_run, output, runsync

LEASE = timedelta(seconds=30)


def later(by: timedelta) -> Callable[[], datetime]:
    """A clock ``by`` ahead of now: what the sweeps see once that much time has passed."""
    now = utcnow()
    return lambda: now + by


async def test_a_run_whose_process_died_after_its_claim_fails_interrupted(
    shaped_api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = shaped_api
    created = await create(api, SPEC_EXAMPLE)
    # Queued here, not POSTed: a POST wakes a drain, which would claim and run it.
    queued = await WorkflowRun.create(
        workflow_id=created["workflowId"],
        project_id=api.project_id,
        version=1,
        event="run",
        trigger="api_async",
        status="queued",
        inputs={"name": "Ada"},
    )
    # Claimed as a process claims it, which then dies before it renews the lease.
    [claimed] = await run_queue.claim(1, LEASE)
    assert claimed.id == queued.id

    monkeypatch.setattr(run_queue, "utcnow", later(LEASE + timedelta(seconds=1)))
    assert api.client.app is not None
    resources = api.client.app[appkeys.RESOURCES]
    await run_queue.sweep_runs(resources.runs, resources.jobs)

    run = await get_run(api, queued.id)
    assert (run["status"], run["error"]["code"]) == ("failed", "INTERRUPTED")


async def test_a_delivery_whose_worker_died_after_its_claim_fails_interrupted(
    shaped_api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = shaped_api
    webhook, delivery = await delivered_once(api)
    # Back in the inbox, then claimed as a worker claims it, which then dies.
    await WebhookDelivery.filter(id=delivery["deliveryId"]).update(
        status=DeliveryStatus.PENDING, started_at=None, run_id=None
    )
    assert await inbox.claim(1) == [delivery["deliveryId"]]

    monkeypatch.setattr(inbox, "utcnow", later(inbox.INTERRUPTED_AFTER + timedelta(seconds=1)))
    await inbox.settle_interrupted_deliveries(inbox.INTERRUPTED_AFTER)

    [settled] = await deliveries_of(api, webhook["webhookId"])
    assert (settled["status"], settled["error"]["code"]) == ("failed", "INTERRUPTED")


async def test_a_run_failed_interrupted_stays_failed_when_its_process_wakes_and_ends_it(
    shaped_api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    """A process paused past its lease (SIGSTOP) had its run failed INTERRUPTED by the
    sweep; when it resumes and the run ends, that end must not overwrite the failure."""
    api = shaped_api
    created = await create(
        api, chain({"id": "wait", "type": "delay", "seconds": 1}, output("done", "yes"))
    )
    queued = await start(api, created["workflowId"])
    async with jobs_running(api.shape):
        await wait_for_status(api, queued["runId"], {"running"})
        # What the sweep writes once the run's lease has expired.
        await WorkflowRun.filter(id=queued["runId"], status="running").update(
            status="failed",
            status_code=500,
            error=run_queue.INTERRUPTED.to_json(),
            finished_at=utcnow(),
        )
        deadline = time.monotonic() + 20
        while "recorded ended: kept" not in caplog.text:  # the runner's own end, refused
            assert time.monotonic() < deadline, "the run never ended"
            await asyncio.sleep(0.05)
    run = await get_run(api, queued["runId"])
    assert (run["status"], run["error"]["code"], run["outputs"]) == ("failed", "INTERRUPTED", {})


async def test_a_runsync_whose_run_was_failed_interrupted_answers_what_is_stored(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    """The caller hears the stored end, not the one its paused process reached later."""
    created = await create(
        api, chain({"id": "wait", "type": "delay", "seconds": 2}, output("done", "yes"))
    )
    answer = asyncio.create_task(runsync(api, created["workflowId"]))
    deadline = time.monotonic() + 20
    while not await WorkflowRun.filter(status="running", workflow_id=created["workflowId"]):
        assert time.monotonic() < deadline, "the run was never recorded running"
        await asyncio.sleep(0.05)
    await WorkflowRun.filter(workflow_id=created["workflowId"], status="running").update(
        status="failed",
        status_code=500,
        error=run_queue.INTERRUPTED.to_json(),
        finished_at=utcnow(),
    )
    status, body = await answer
    assert (status, body["success"], body["result"]["error"]["code"]) == (500, False, "INTERRUPTED")
    assert body["result"]["outputs"] == {}
