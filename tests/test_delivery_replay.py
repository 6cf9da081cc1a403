"""Replaying a webhook delivery: a new run of the payload it stored, whatever its status."""

from __future__ import annotations

from tests.conftest import Api
from tests.run_helpers import wait_for_status
from tests.webhook_helpers import (
    create_webhook,
    deliver,
    deliveries_of,
    echo,
    event_body,
    standard_headers,
    webhooks_path,
)
from tests.workflow_helpers import API, chain, ok_json, output, publish


async def replay(api: Api, webhook_id: str, delivery_id: str) -> object:
    return await api.client.post(
        webhooks_path(api, f"/{webhook_id}/deliveries/{delivery_id}/replay"), headers=api.headers
    )


async def test_a_failed_delivery_replays_as_a_new_run_of_its_payload(shaped_api: Api) -> None:
    api = shaped_api
    failing = chain(
        {"id": "boom", "type": "fail", "message": "downstream was down"}, event="webhook"
    )
    created = await create_webhook(api, failing)
    body = event_body(amount=42)
    headers = {**standard_headers(created["secret"], body), "X-Custom": "yes"}
    assert (await deliver(api, created["webhookId"], body, headers)).status == 200
    await api.run_jobs()
    [delivery] = await deliveries_of(api, created["webhookId"])
    assert delivery["status"] == "failed"

    # The workflow is fixed; the stored delivery runs again on the latest version.
    await publish(api, created["workflowId"], echo())
    response = await replay(api, created["webhookId"], delivery["deliveryId"])
    queued = await ok_json(response, 202)
    assert response.headers["Location"] == f"{API}/projects/{api.project_id}/runs/{queued['runId']}"
    assert (queued["status"], queued["trigger"], queued["event"]) == ("queued", "replay", "webhook")
    await api.run_jobs()
    run = await wait_for_status(api, queued["runId"])
    assert (run["status"], run["version"]) == ("succeeded", "2")
    assert run["outputs"]["payload"] == {"type": "test.event", "amount": 42}
    assert run["outputs"]["headers"]["x-custom"] == "yes"
    # The delivery itself keeps its history: still failed, still its first run.
    [after] = await deliveries_of(api, created["webhookId"])
    assert (after["status"], after["runId"]) == ("failed", delivery["runId"])


async def test_a_succeeded_delivery_replays_too(api: Api) -> None:
    created = await create_webhook(
        api, chain(output("n", "{{ inputs.payload.n }}"), event="webhook")
    )
    body = event_body(n=7)
    await deliver(api, created["webhookId"], body, standard_headers(created["secret"], body))
    await api.run_jobs()
    [delivery] = await deliveries_of(api, created["webhookId"])
    for _ in range(2):
        queued = await ok_json(await replay(api, created["webhookId"], delivery["deliveryId"]), 202)
        await api.run_jobs()
        assert (await wait_for_status(api, queued["runId"]))["outputs"] == {"n": 7}


async def test_replaying_an_unknown_delivery_is_404(api: Api) -> None:
    created = await create_webhook(api)
    response = await replay(api, created["webhookId"], "0" * 32)
    body = await response.json()
    assert (response.status, body["error"]) == (404, "NOT_FOUND")


async def test_replaying_a_delivery_of_another_webhook_is_404(api: Api) -> None:
    first = await create_webhook(api)
    second = await create_webhook(api)
    body = event_body()
    await deliver(api, first["webhookId"], body, standard_headers(first["secret"], body))
    [delivery] = await deliveries_of(api, first["webhookId"])
    response = await replay(api, second["webhookId"], delivery["deliveryId"])
    assert response.status == 404


async def test_replaying_a_payload_no_run_can_hold_is_400_invalid_inputs(api: Api) -> None:
    created = await create_webhook(api)
    body = b'{"amount": NaN}'
    await deliver(api, created["webhookId"], body, standard_headers(created["secret"], body))
    await api.run_jobs()
    [delivery] = await deliveries_of(api, created["webhookId"])
    response = await replay(api, created["webhookId"], delivery["deliveryId"])
    answer = await response.json()
    assert (response.status, answer["error"]) == (400, "INVALID_INPUTS")
