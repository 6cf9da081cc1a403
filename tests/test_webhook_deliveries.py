"""Deliveries on every shape, and the promises of the inbox when Redis or the database fail."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from arq.worker import Retry
from yarl import URL

from libflow.engine.nodes import flow as flow_nodes
from tests.conftest import Api, ClientFactory, Shape, base_settings, new_project
from tests.library_helpers import assert_error
from tests.private_redis import PrivateRedis
from tests.processing_helpers import job_context
from tests.tcp_proxy import TcpProxy
from tests.webhook_helpers import (
    create_webhook,
    deliver,
    deliveries_of,
    event_body,
    standard_headers,
    wait_for_deliveries,
)
from tests.workflow_helpers import chain, get_run, output, runs_of
from workers.deliveries import deliver_webhooks


async def test_a_delivery_runs_its_workflow_on_each_shape(shaped_api: Api) -> None:
    created = await create_webhook(shaped_api)
    body = event_body(order=7)

    response = await deliver(
        shaped_api, created["webhookId"], body, standard_headers(created["secret"], body)
    )
    assert response.status == 200

    [delivery] = await wait_for_deliveries(shaped_api, created["webhookId"], 1)
    assert delivery["status"] == "succeeded"
    run = await get_run(shaped_api, delivery["runId"])
    assert run["outputs"]["payload"] == {"type": "test.event", "order": 7}


async def test_a_replayed_delivery_runs_once_on_each_shape(shaped_api: Api) -> None:
    created = await create_webhook(shaped_api)
    body = event_body()
    headers = standard_headers(created["secret"], body, msg_id="msg_again")

    for _ in range(3):
        assert (await deliver(shaped_api, created["webhookId"], body, headers)).status == 200
        await shaped_api.run_jobs()  # the first may already have run: still once

    await wait_for_deliveries(shaped_api, created["webhookId"], 1)
    assert len(await runs_of(shaped_api, created["workflowId"])) == 1


async def test_deliveries_accepted_while_redis_is_down_run_once_when_it_is_back(
    start_app: ClientFactory, tmp_path: Path, private_redis: PrivateRedis
) -> None:
    settings = base_settings(tmp_path, redis_url=private_redis.url)
    client = await start_app(settings)
    project_id, key = await new_project()
    api = Api(client, Shape("custom", settings), project_id, key)
    created = await create_webhook(api)

    await asyncio.to_thread(private_redis.stop)
    for n in range(20):
        body = event_body(n=n)
        headers = standard_headers(created["secret"], body)
        response = await deliver(api, created["webhookId"], body, headers)
        assert response.status == 200, await response.text()
    # The sender retried the last one: still one delivery.
    assert (await deliver(api, created["webhookId"], body, headers)).status == 200
    assert {d["status"] for d in await deliveries_of(api, created["webhookId"])} == {"pending"}

    await asyncio.to_thread(private_redis.start)
    delivered = await wait_for_deliveries(api, created["webhookId"], 20)

    assert {d["status"] for d in delivered} == {"succeeded"}
    runs = await runs_of(api, created["workflowId"])
    assert sorted(r["outputs"]["payload"]["n"] for r in runs) == list(range(20))
    assert {d["attempts"] for d in delivered} == {1}


@pytest.fixture
async def postgres_proxy(postgres_url: str) -> AsyncIterator[tuple[TcpProxy, str]]:
    """A proxy in front of the test database, and the database URL through it."""
    upstream = URL(postgres_url)
    proxy = TcpProxy(upstream.host or "127.0.0.1", upstream.port or 5432)
    await proxy.start()
    try:
        yield proxy, str(upstream.with_host("127.0.0.1").with_port(proxy.port))
    finally:
        await proxy.cut()


async def test_the_receiver_answers_503_with_retry_after_while_the_database_is_unreachable(
    start_app: ClientFactory, tmp_path: Path, postgres_proxy: tuple[TcpProxy, str]
) -> None:
    proxy, database_url = postgres_proxy
    settings = base_settings(tmp_path, database_url=database_url)
    client = await start_app(settings)
    project_id, key = await new_project()
    api = Api(client, Shape("custom", settings), project_id, key)
    created = await create_webhook(api)
    body = event_body()
    headers = standard_headers(created["secret"], body)

    await proxy.cut()
    try:
        response = await deliver(api, created["webhookId"], body, headers)
        await assert_error(response, 503, "UNAVAILABLE")
        assert response.headers["Retry-After"].isdigit()
    finally:
        await proxy.start()

    # The sender retries once the database is back: accepted, and run.
    assert (await deliver(api, created["webhookId"], body, headers)).status == 200
    [delivery] = await wait_for_deliveries(api, created["webhookId"], 1)
    assert delivery["status"] == "succeeded"


async def test_a_delivery_job_retries_while_the_database_is_unreachable(
    start_app: ClientFactory,
    tmp_path: Path,
    postgres_proxy: tuple[TcpProxy, str],
    redis_url: str,
) -> None:
    proxy, database_url = postgres_proxy
    settings = base_settings(tmp_path, database_url=database_url, redis_url=redis_url)
    client = await start_app(settings)
    project_id, key = await new_project()
    api = Api(client, Shape("custom", settings), project_id, key)
    created = await create_webhook(api)
    body = event_body()
    await deliver(api, created["webhookId"], body, standard_headers(created["secret"], body))
    assert len(await deliveries_of(api, created["webhookId"])) == 1

    await proxy.cut()
    try:
        with pytest.raises(Retry):
            await deliver_webhooks(job_context(api))
    finally:
        await proxy.start()

    [delivery] = await wait_for_deliveries(api, created["webhookId"], 1)
    assert (delivery["status"], delivery["attempts"]) == ("succeeded", 1)
    assert len(await runs_of(api, created["workflowId"])) == 1


@pytest.mark.parametrize("text", [b"a\\u0000b", b"a\\ud800b"], ids=["nul", "lone-surrogate"])
async def test_a_payload_the_database_cannot_hold_fails_its_delivery_on_each_shape(
    shaped_api: Api, text: bytes
) -> None:
    created = await create_webhook(shaped_api)
    body = b'{"type": "test.event", "text": "' + text + b'"}'

    response = await deliver(
        shaped_api, created["webhookId"], body, standard_headers(created["secret"], body)
    )
    assert response.status == 200  # accepted (and kept): the sender did nothing wrong

    [delivery] = await wait_for_deliveries(shaped_api, created["webhookId"], 1)
    assert delivery["status"] == "failed"
    assert delivery["error"]["code"] == "INVALID_INPUTS"
    assert "cannot be stored" in delivery["error"]["message"]
    assert delivery["runId"] is None
    assert await runs_of(shaped_api, created["workflowId"]) == []


async def test_an_escaped_backslash_before_u0000_is_not_a_nul(api: Api) -> None:
    created = await create_webhook(api)
    body = b'{"type": "test.event", "text": "\\\\u0000"}'  # the text \u0000, six characters

    await deliver(api, created["webhookId"], body, standard_headers(created["secret"], body))

    [delivery] = await wait_for_deliveries(api, created["webhookId"], 1)
    assert delivery["status"] == "succeeded"
    run = await get_run(api, delivery["runId"])
    assert run["outputs"]["payload"]["text"] == "\\u0000"


@pytest.fixture
def nul_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """Outputs keep a NUL a run made, which PostgreSQL refuses in the run record.

    libflow writes such text with U+FFFD (``json_text.storable``); undone here, it stands
    for any value the database refuses, to reach what happens then.
    """
    monkeypatch.setattr(flow_nodes, "storable", lambda value: value)


@pytest.mark.usefixtures("nul_kept")
async def test_a_run_its_database_cannot_record_fails_its_delivery_at_once(
    start_app: ClientFactory, scaled: Shape
) -> None:
    # The workflow itself makes a NUL, which PostgreSQL refuses in the run record.
    api = Api(await start_app(scaled.settings), scaled, *await new_project())
    created = await create_webhook(api, chain(output("text", "{{ 'a\\x00b' }}"), event="webhook"))
    body = event_body()

    await deliver(api, created["webhookId"], body, standard_headers(created["secret"], body))

    [delivery] = await wait_for_deliveries(api, created["webhookId"], 1)
    assert delivery["status"] == "failed"
    assert delivery["error"]["code"] == "INTERNAL"
    assert "could not be recorded" in delivery["error"]["message"]


@pytest.mark.usefixtures("nul_kept")
async def test_a_long_run_its_database_cannot_finish_is_failed_with_its_record(
    start_app: ClientFactory, scaled: Shape
) -> None:
    # Past a second a run is recorded "running"; its end (with a NUL) is then refused.
    api = Api(await start_app(scaled.settings), scaled, *await new_project())
    created = await create_webhook(
        api,
        chain(
            {"id": "wait", "type": "delay", "seconds": 1.3},
            output("text", "{{ 'a\\x00b' }}"),
            event="webhook",
        ),
    )
    body = event_body()

    await deliver(api, created["webhookId"], body, standard_headers(created["secret"], body))

    [delivery] = await wait_for_deliveries(api, created["webhookId"], 1)
    assert (delivery["status"], delivery["error"]["code"]) == ("failed", "INTERNAL")
    run = await get_run(api, delivery["runId"])
    assert (run["status"], run["error"]["code"]) == ("failed", "INTERNAL")
