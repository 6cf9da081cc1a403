"""Webhooks through the public API: management, the receiver, and the runs deliveries start."""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import pytest

from tests.conftest import Api, linked_pages, new_project
from tests.library_helpers import assert_error
from tests.webhook_helpers import (
    create_webhook,
    deliver,
    deliveries_of,
    echo,
    event_body,
    github_headers,
    standard_headers,
    stripe_headers,
    webhooks_path,
)
from tests.workflow_helpers import API, chain, create, get_run, ok_json, output, publish, runs_of

# Management


async def test_create_returns_the_url_the_secret_and_the_defaults(api: Api) -> None:
    created = await create_webhook(api)

    assert set(created) >= {"webhookId", "url", "secret", "scheme", "event", "workflowId"}
    base = api.shape.settings.resolved_public_base_url
    assert created["url"] == f"{base}/webhooks/{created['webhookId']}"
    assert created["scheme"] == "standard"
    assert created["event"] == "webhook"
    assert created["secret"].startswith("whsec_")
    assert created["createdDate"].endswith("Z")
    assert len(created["webhookId"]) >= 24


async def test_create_without_a_body_takes_the_defaults(api: Api) -> None:
    workflow = await create(api, echo("webhook"))
    response = await api.client.post(
        f"{API}/projects/{api.project_id}/workflows/{workflow['workflowId']}/webhooks",
        headers=api.headers,
    )
    created = await ok_json(response, 201)
    assert (created["scheme"], created["event"]) == ("standard", "webhook")


async def test_create_with_a_scheme_and_an_event(api: Api) -> None:
    created = await create_webhook(api, scheme="github", event="push")

    assert (created["scheme"], created["event"]) == ("github", "push")
    assert not created["secret"].startswith("whsec_")


async def test_create_with_an_unknown_scheme_is_a_validation_error(api: Api) -> None:
    created = await create_webhook(api)
    response = await api.client.post(
        f"{API}/projects/{api.project_id}/workflows/{created['workflowId']}/webhooks",
        json={"scheme": "svix-v2"},
        headers=api.headers,
    )
    body = await assert_error(response, 400, "VALIDATION_ERROR")
    assert body["details"][0]["field"] == "scheme"


async def test_create_on_an_unknown_workflow_is_404(api: Api) -> None:
    response = await api.client.post(
        f"{API}/projects/{api.project_id}/workflows/nosuchworkflow0123456789/webhooks",
        json={},
        headers=api.headers,
    )
    await assert_error(response, 404, "NOT_FOUND")


async def test_list_and_get_show_webhooks_without_their_secret(api: Api) -> None:
    created = await create_webhook(api)
    listed = await ok_json(
        await api.client.get(
            f"{API}/projects/{api.project_id}/workflows/{created['workflowId']}/webhooks",
            headers=api.headers,
        )
    )
    got = await ok_json(
        await api.client.get(webhooks_path(api, f"/{created['webhookId']}"), headers=api.headers)
    )

    assert [w["webhookId"] for w in listed] == [created["webhookId"]]
    assert "secret" not in listed[0]
    assert "secret" not in got
    assert got["url"] == created["url"]


async def test_another_projects_key_is_forbidden(api: Api) -> None:
    created = await create_webhook(api)
    _, other_key = await new_project("other")
    response = await api.client.get(
        webhooks_path(api, f"/{created['webhookId']}"), headers={"Authorization": other_key}
    )
    await assert_error(response, 403, "FORBIDDEN")


async def test_a_deleted_webhook_is_404_to_the_api_and_to_senders(api: Api) -> None:
    created = await create_webhook(api)
    path = webhooks_path(api, f"/{created['webhookId']}")

    response = await api.client.delete(path, headers=api.headers)
    assert response.status == 204

    await assert_error(await api.client.get(path, headers=api.headers), 404, "NOT_FOUND")
    body = event_body()
    response = await deliver(
        api, created["webhookId"], body, standard_headers(created["secret"], body)
    )
    await assert_error(response, 404, "NOT_FOUND")


async def test_rotate_issues_a_new_secret_and_the_old_one_verifies_for_24_hours(
    api: Api,
) -> None:
    created = await create_webhook(api)
    response = await api.client.post(
        webhooks_path(api, f"/{created['webhookId']}/rotate"), headers=api.headers
    )
    rotated = await ok_json(response)

    assert rotated["secret"] != created["secret"]
    expires = datetime.fromisoformat(rotated["previousSecretExpiresDate"])
    assert abs(expires.timestamp() - time.time() - timedelta(hours=24).total_seconds()) < 60
    for secret in (created["secret"], rotated["secret"]):
        body = event_body(secret=secret[-4:])
        response = await deliver(api, created["webhookId"], body, standard_headers(secret, body))
        assert response.status == 200, await response.text()


async def test_after_two_rotations_the_first_secret_no_longer_verifies(api: Api) -> None:
    created = await create_webhook(api)
    for _ in range(2):
        await api.client.post(
            webhooks_path(api, f"/{created['webhookId']}/rotate"), headers=api.headers
        )
    body = event_body()
    response = await deliver(
        api, created["webhookId"], body, standard_headers(created["secret"], body)
    )
    await assert_error(response, 401, "INVALID_SIGNATURE")


# The receiver and the runs


async def test_a_standard_delivery_is_accepted_and_runs_the_workflow_with_its_payload(
    api: Api,
) -> None:
    created = await create_webhook(api)
    body = event_body(amount=42)
    headers = {**standard_headers(created["secret"], body), "X-Custom": "yes"}

    response = await deliver(api, created["webhookId"], body, headers)
    assert response.status == 200
    assert await response.json() == {"ok": True}
    await api.run_jobs()

    [delivery] = await deliveries_of(api, created["webhookId"])
    assert delivery["status"] == "succeeded"
    assert delivery["externalId"] == headers["webhook-id"]
    run = await get_run(api, delivery["runId"])
    assert run["trigger"] == "webhook"
    assert run["event"] == "webhook"
    assert run["status"] == "succeeded"
    assert run["outputs"]["payload"] == {"type": "test.event", "amount": 42}
    seen = run["outputs"]["headers"]
    assert seen["x-custom"] == "yes"
    assert seen["webhook-id"] == headers["webhook-id"]
    assert "webhook-signature" not in seen


async def test_a_github_delivery_is_verified_and_its_delivery_id_kept(api: Api) -> None:
    created = await create_webhook(api, scheme="github", event="push")
    body = event_body(ref="refs/heads/main")
    headers = {**github_headers(created["secret"], body), "Authorization": "token abc"}

    response = await deliver(api, created["webhookId"], body, headers)
    assert response.status == 200, await response.text()
    await api.run_jobs()

    [delivery] = await deliveries_of(api, created["webhookId"])
    assert delivery["externalId"] == headers["X-GitHub-Delivery"]
    run = await get_run(api, delivery["runId"])
    assert run["event"] == "push"
    assert "x-hub-signature-256" not in run["outputs"]["headers"]
    assert "authorization" not in run["outputs"]["headers"]
    assert run["outputs"]["headers"]["x-github-event"] == "push"


async def test_a_stripe_delivery_is_verified_and_keyed_by_its_event_id(api: Api) -> None:
    created = await create_webhook(api, scheme="stripe")
    body = event_body(id="evt_1NG8Du2eZvKYlo2CUI79vXWy", object="event")

    response = await deliver(
        api, created["webhookId"], body, stripe_headers(created["secret"], body)
    )
    assert response.status == 200, await response.text()
    await api.run_jobs()

    [delivery] = await deliveries_of(api, created["webhookId"])
    assert delivery["externalId"] == "evt_1NG8Du2eZvKYlo2CUI79vXWy"
    assert delivery["status"] == "succeeded"


async def test_a_body_that_is_not_json_reaches_the_workflow_as_text(api: Api) -> None:
    created = await create_webhook(api)
    body = b"name=ada&lang=en"
    headers = {
        **standard_headers(created["secret"], body),
        "Content-Type": "application/x-www-form-urlencoded",
    }

    assert (await deliver(api, created["webhookId"], body, headers)).status == 200
    await api.run_jobs()

    [delivery] = await deliveries_of(api, created["webhookId"])
    assert (await get_run(api, delivery["runId"]))["outputs"]["payload"] == "name=ada&lang=en"


async def test_the_same_delivery_three_times_is_acknowledged_each_time_and_runs_once(
    api: Api,
) -> None:
    created = await create_webhook(api)
    body = event_body()
    headers = standard_headers(created["secret"], body, msg_id="msg_replayed")

    for _ in range(3):
        response = await deliver(api, created["webhookId"], body, headers)
        assert response.status == 200
        assert await response.json() == {"ok": True}
    await api.run_jobs()

    assert len(await deliveries_of(api, created["webhookId"])) == 1
    assert len(await runs_of(api, created["workflowId"])) == 1


@pytest.mark.parametrize(
    ("tamper", "message"),
    [
        ("body", "signature does not match"),
        ("secret", "signature does not match"),
        ("stale", "timestamp outside the tolerance"),
        ("future", "timestamp outside the tolerance"),
        ("no-signature", "missing or malformed signature headers: webhook-signature has no "),
        ("no-timestamp", "missing or malformed signature headers: webhook-timestamp must be "),
        ("no-id", "missing or malformed signature headers: webhook-id is missing"),
    ],
)
async def test_a_delivery_that_does_not_verify_is_401_and_stores_nothing(
    api: Api, tamper: str, message: str
) -> None:
    created = await create_webhook(api)
    body = event_body(amount=1)
    secret = created["secret"]
    timestamp = {"stale": time.time() - 301, "future": time.time() + 301}.get(tamper)
    if tamper == "secret":
        secret = "whsec_" + "QUJD" * 8
    headers = standard_headers(secret, body, timestamp=timestamp)
    if tamper == "body":
        body = event_body(amount=1000)
    header = {"no-signature": "webhook-signature", "no-timestamp": "webhook-timestamp"}
    headers.pop(header.get(tamper, "webhook-id") if tamper.startswith("no-") else "", None)

    response = await deliver(api, created["webhookId"], body, headers)

    assert (await assert_error(response, 401, "INVALID_SIGNATURE"))["message"].startswith(message)
    assert await deliveries_of(api, created["webhookId"]) == []


async def test_several_signatures_with_one_valid_are_accepted(api: Api) -> None:
    created = await create_webhook(api)
    body = event_body()
    headers = standard_headers(created["secret"], body)
    wrong = standard_headers("whsec_" + "QUJD" * 8, body, msg_id=headers["webhook-id"])
    headers["webhook-signature"] = f"{wrong['webhook-signature']} {headers['webhook-signature']}"

    assert (await deliver(api, created["webhookId"], body, headers)).status == 200


async def test_an_unknown_webhook_is_404(api: Api) -> None:
    body = event_body()
    response = await deliver(api, "nosuchwebhook0123456789abc", body, {})
    await assert_error(response, 404, "NOT_FOUND")


async def test_a_delivery_over_1_mib_is_413_and_stores_nothing(api: Api) -> None:
    created = await create_webhook(api)
    body = b'{"blob": "' + b"x" * (1024 * 1024) + b'"}'
    headers = standard_headers(created["secret"], body)

    response = await deliver(api, created["webhookId"], body, headers)

    await assert_error(response, 413, "PAYLOAD_TOO_LARGE")
    assert await deliveries_of(api, created["webhookId"]) == []


async def test_a_webhook_for_an_event_the_workflow_lacks_is_400_unknown_event(api: Api) -> None:
    workflow = await create(api, chain(output("x", 1), event="order.created"))
    response = await api.client.post(
        f"{API}/projects/{api.project_id}/workflows/{workflow['workflowId']}/webhooks",
        json={"event": "order.paid"},
        headers=api.headers,
    )
    error = await assert_error(response, 400, "UNKNOWN_EVENT")
    assert error["details"] == {"event": "order.paid", "knownEvents": ["order.created"]}


async def test_a_version_without_the_webhooks_event_records_a_failed_run(api: Api) -> None:
    created = await create_webhook(
        api, chain(output("x", 1), event="order.paid"), event="order.paid"
    )
    await publish(api, created["workflowId"], chain(output("x", 1)))
    body = event_body()

    response = await deliver(
        api, created["webhookId"], body, standard_headers(created["secret"], body)
    )
    assert response.status == 200
    await api.run_jobs()

    [delivery] = await deliveries_of(api, created["webhookId"])
    assert delivery["status"] == "failed"
    assert delivery["error"]["code"] == "UNKNOWN_EVENT"
    run = await get_run(api, delivery["runId"])
    assert (run["status"], run["trigger"], run["error"]["code"]) == (
        "failed",
        "webhook",
        "UNKNOWN_EVENT",
    )


async def test_a_failing_node_fails_the_delivery_and_its_run(api: Api) -> None:
    failing = chain({"id": "boom", "type": "fail", "message": "no thanks"}, event="webhook")
    created = await create_webhook(api, failing)
    body = event_body()

    await deliver(api, created["webhookId"], body, standard_headers(created["secret"], body))
    await api.run_jobs()

    [delivery] = await deliveries_of(api, created["webhookId"])
    assert delivery["status"] == "failed"
    assert delivery["attempts"] == 1
    assert (await get_run(api, delivery["runId"]))["status"] == "failed"


async def test_deliveries_are_listed_newest_first_with_a_limit(api: Api) -> None:
    created = await create_webhook(api)
    for n in range(3):
        body = event_body(n=n)
        await deliver(api, created["webhookId"], body, standard_headers(created["secret"], body))
    await api.run_jobs()

    response = await api.client.get(
        webhooks_path(api, f"/{created['webhookId']}/deliveries?limit=2"), headers=api.headers
    )
    listed = await ok_json(response)

    assert len(listed) == 2
    assert listed[0]["receivedDate"] >= listed[1]["receivedDate"]
    bad = await api.client.get(
        webhooks_path(api, f"/{created['webhookId']}/deliveries?limit=0"), headers=api.headers
    )
    await assert_error(bad, 400, "VALIDATION_ERROR")


async def test_every_delivery_is_reached_by_following_the_link_header(shaped_api: Api) -> None:
    api = shaped_api
    created = await create_webhook(api)
    for n in range(5):
        body = event_body(n=n)
        await deliver(api, created["webhookId"], body, standard_headers(created["secret"], body))

    pages = await linked_pages(
        api, webhooks_path(api, f"/{created['webhookId']}/deliveries?limit=2")
    )
    seen = [delivery["deliveryId"] for page in pages for delivery in page]

    assert len(pages) == 3
    assert len(seen) == len(set(seen)) == 5
    assert seen == [d["deliveryId"] for d in await deliveries_of(api, created["webhookId"])]


async def test_deliveries_with_a_cursor_not_from_a_link_are_400(api: Api) -> None:
    created = await create_webhook(api)
    response = await api.client.get(
        webhooks_path(api, f"/{created['webhookId']}/deliveries?cursor=bogus!"),
        headers=api.headers,
    )
    error = await assert_error(response, 400, "VALIDATION_ERROR")
    assert error["details"] == [{"field": "cursor", "problem": "malformed"}]
