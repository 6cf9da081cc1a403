"""Input hygiene: what a client sends is refused where it arrives, in JSON, on every shape.

NaN, Infinity and numbers beyond a double's range in JSON bodies and deliveries; header
bytes that are not UTF-8; an API key that is not ASCII; bodies that are not the gzip
they claim or that inflate past the route's limit; requests aiohttp's own HTTP parser
refuses; and GitHub deliveries replayed under a new delivery id.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import zlib
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, unused_port

from libflow.api.errors import serve_json_errors
from libflow.ids import utcnow
from libflow.json_text import loads
from libflow.models import WebhookDelivery
from libflow.webhooks.inbox import GITHUB_REPLAY_WINDOW
from tests.conftest import Api
from tests.hostile.conftest import healthz_stays_responsive, peak_rss_growth
from tests.library_helpers import assert_error, raw_http
from tests.webhook_helpers import (
    create_webhook,
    deliver,
    deliveries_of,
    event_body,
    github_headers,
    standard_headers,
    wait_for_deliveries,
)
from tests.workflow_helpers import API, call, chain, create, get_run, output, runs_of

# How far the server's peak RSS may rise while it refuses one hostile input: the inputs
# below inflate to 64 MiB, which must never be held whole (about 15 MiB was seen).
RSS_BOUND_MIB = 32

# Not JSON (RFC 8259), though Python's reader takes each: refused as INVALID_JSON.
NON_FINITE = ["NaN", "Infinity", "-Infinity", "1e999", "-1e999", "1" + "0" * 400]


@contextlib.asynccontextmanager
async def within_bounds(client: TestClient[web.Request, web.Application]) -> AsyncIterator[None]:
    """/healthz answers within 1 s throughout the block, and peak RSS grows under the bound."""
    with peak_rss_growth() as growth:
        async with healthz_stays_responsive(client):
            yield
    assert growth.mib < RSS_BOUND_MIB, f"peak RSS grew {growth.mib:.1f} MiB"


def gzip_bomb(inflated_mib: int) -> bytes:
    """A gzip body of ``inflated_mib`` MiB of spaces, compressed a MiB at a time (~1000:1)."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: the gzip container
    mib = b" " * (1024 * 1024)
    parts = [compressor.compress(mib) for _ in range(inflated_mib)]
    return b"".join([*parts, compressor.flush()])


def signed_delivery(
    webhook_id: str, body: bytes, headers: dict[str, str], extra: bytes = b""
) -> bytes:
    """A raw receiver request: the signed headers, then ``extra`` header lines as bytes."""
    lines = [f"POST /webhooks/{webhook_id} HTTP/1.1", "Host: libflow", "Connection: close"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    lines.append(f"Content-Length: {len(body)}")
    return "\r\n".join(lines).encode() + b"\r\n" + extra + b"\r\n" + body


# 6. NaN, Infinity and numbers beyond a double's range


async def test_non_finite_numbers_in_runsync_inputs_are_invalid_json_and_run_nothing(
    shaped_api: Api,
) -> None:
    created = await create(shaped_api, chain(output("x", "{{ inputs.x }}")))
    path = f"/{created['workflowId']}/runsync"

    async with within_bounds(shaped_api.client):
        for number in NON_FINITE:
            body = f'{{"inputs": {{"x": {number}}}}}'.encode()
            response = await call(shaped_api, "POST", path, data=body)
            error = await assert_error(response, 400, "INVALID_JSON")
            assert "NaN, Infinity" in error["message"]

    assert await runs_of(shaped_api, created["workflowId"]) == []


async def test_non_finite_numbers_in_a_definition_are_invalid_json_and_publish_nothing(
    shaped_api: Api,
) -> None:
    created = await create(shaped_api, chain(output("x", 1)))
    path = f"/{created['workflowId']}/versions"

    async with within_bounds(shaped_api.client):
        for number in NON_FINITE:
            definition = {**chain(output("x", 1)), "timeoutSeconds": "NUMBER"}
            body = json.dumps({"definition": definition}).replace('"NUMBER"', number).encode()
            response = await call(shaped_api, "POST", path, data=body)
            await assert_error(response, 400, "INVALID_JSON")

    workflow = await (await call(shaped_api, "GET", f"/{created['workflowId']}")).json()
    assert [v["version"] for v in workflow["versions"]] == ["1"]


async def test_the_largest_finite_numbers_are_kept_and_answered_as_strict_json(
    shaped_api: Api,
) -> None:
    created = await create(shaped_api, chain(output("x", "{{ inputs.x }}")))
    largest = "1.7976931348623157e308"
    body = f'{{"inputs": {{"x": {largest}, "y": -{largest}}}}}'.encode()

    response = await call(shaped_api, "POST", f"/{created['workflowId']}/runsync", data=body)

    assert response.status == 200, await response.text()
    assert loads(await response.read())["result"]["outputs"]["x"] == float(largest)
    [run] = await runs_of(shaped_api, created["workflowId"])
    record = await shaped_api.client.get(
        f"{API}/projects/{shaped_api.project_id}/runs/{run['runId']}", headers=shaped_api.headers
    )
    inputs = loads(await record.read())["inputs"]  # strict: no bare NaN or Infinity
    # PostgreSQL's jsonb answers the number with all its digits; it is the same double.
    assert (float(inputs["x"]), float(inputs["y"])) == (float(largest), -float(largest))


async def test_a_delivery_holding_non_finite_numbers_fails_with_invalid_inputs_before_it_runs(
    shaped_api: Api,
) -> None:
    created = await create_webhook(shaped_api)
    numbers = ["NaN", "Infinity", "1e999"]

    async with within_bounds(shaped_api.client):
        for number in numbers:
            body = f'{{"type": "test.event", "amount": {number}}}'.encode()
            headers = standard_headers(created["secret"], body)
            # Accepted and kept: the signature is good, the payload is what cannot run.
            assert (await deliver(shaped_api, created["webhookId"], body, headers)).status == 200
        found = await wait_for_deliveries(shaped_api, created["webhookId"], len(numbers))

    for delivery in found:
        assert (delivery["status"], delivery["runId"]) == ("failed", None)
        assert delivery["error"]["code"] == "INVALID_INPUTS"
        assert "NaN, Infinity" in delivery["error"]["message"]
    assert await runs_of(shaped_api, created["workflowId"]) == []


async def test_a_text_delivery_that_only_begins_like_nan_reaches_the_workflow_as_text(
    api: Api,
) -> None:
    created = await create_webhook(api)
    body = b"NaN is not a number"
    headers = {**standard_headers(created["secret"], body), "Content-Type": "text/plain"}

    assert (await deliver(api, created["webhookId"], body, headers)).status == 200

    [delivery] = await wait_for_deliveries(api, created["webhookId"], 1)
    assert delivery["status"] == "succeeded"
    run = await get_run(api, delivery["runId"])
    assert run["outputs"]["payload"] == "NaN is not a number"


# 7. Header bytes that are not UTF-8


async def test_a_delivery_header_byte_that_is_not_utf8_reaches_the_run_as_u_fffd(
    shaped_api: Api,
) -> None:
    created = await create_webhook(shaped_api)
    body = event_body(order=1)
    request = signed_delivery(
        created["webhookId"],
        body,
        standard_headers(created["secret"], body),
        extra=b"X-Custom: caf\xe9 \xff\r\n",
    )

    async with within_bounds(shaped_api.client):
        status, _, answer = await raw_http(shaped_api, request)

    assert status == 200, answer
    [delivery] = await wait_for_deliveries(shaped_api, created["webhookId"], 1)
    assert delivery["status"] == "succeeded", delivery
    run = await get_run(shaped_api, delivery["runId"])
    assert run["outputs"]["headers"]["x-custom"] == "caf\ufffd \ufffd"
    assert run["inputs"]["headers"]["x-custom"] == "caf\ufffd \ufffd"


# 10. The API key, and bodies that are not what their Content-Encoding says


async def test_an_api_key_holding_a_byte_that_is_not_ascii_is_401(shaped_api: Api) -> None:
    path = f"{API}/projects/{shaped_api.project_id}/workflows"
    for key in (b"\xff\xfe", shaped_api.api_key.encode() + b"\xe9", "cl\u00e9".encode()):
        request = (
            f"GET {path} HTTP/1.1\r\nHost: libflow\r\nConnection: close\r\n".encode()
            + b"Authorization: "
            + key
            + b"\r\n\r\n"
        )

        async with within_bounds(shaped_api.client):
            status, head, answer = await raw_http(shaped_api, request)

        assert status == 401, answer
        assert b"application/json" in head
        assert json.loads(answer)["error"] == "UNAUTHORIZED"


async def test_a_json_body_that_is_not_the_gzip_it_claims_is_invalid_json(api: Api) -> None:
    async with within_bounds(api.client):
        response = await call(
            api,
            "POST",
            "",
            data=b'{"name": "flow", "definition": {}}',
            headers={"Content-Encoding": "gzip", "Content-Type": "application/json"},
        )
        error = await assert_error(response, 400, "INVALID_JSON")

    assert "Content-Encoding" in error["message"]
    assert await (await call(api, "GET", "")).json() == []


async def test_a_json_body_in_gzip_within_the_limit_is_read(api: Api) -> None:
    body = json.dumps({"name": "zipped", "definition": chain(output("x", 1))}).encode()

    response = await call(
        api, "POST", "", data=gzip.compress(body), headers={"Content-Encoding": "gzip"}
    )

    assert response.status == 201, await response.text()
    assert (await response.json())["name"] == "zipped"


async def test_a_gzip_json_body_that_inflates_past_1_mib_is_413_while_inflating(
    shaped_api: Api,
) -> None:
    bomb = gzip_bomb(64)  # 64 KiB that inflate to 64 MiB

    async with within_bounds(shaped_api.client):
        response = await call(
            shaped_api, "POST", "", data=bomb, headers={"Content-Encoding": "gzip"}
        )
        await assert_error(response, 413, "PAYLOAD_TOO_LARGE")

    assert await (await call(shaped_api, "GET", "")).json() == []


async def test_a_delivery_that_is_not_the_gzip_it_claims_is_400_and_stores_nothing(
    shaped_api: Api,
) -> None:
    created = await create_webhook(shaped_api)
    body = event_body()
    headers = {**standard_headers(created["secret"], body), "Content-Encoding": "gzip"}

    async with within_bounds(shaped_api.client):
        response = await deliver(shaped_api, created["webhookId"], body, headers)
        error = await assert_error(response, 400, "VALIDATION_ERROR")

    assert "Content-Encoding" in error["message"]
    assert await deliveries_of(shaped_api, created["webhookId"]) == []


async def test_a_gzip_delivery_that_inflates_past_1_mib_is_413_and_stores_nothing(
    shaped_api: Api,
) -> None:
    created = await create_webhook(shaped_api)
    bomb = gzip_bomb(64)
    headers = {**github_headers("any secret", bomb), "Content-Encoding": "gzip"}

    async with within_bounds(shaped_api.client):
        response = await deliver(shaped_api, created["webhookId"], bomb, headers)
        await assert_error(response, 413, "PAYLOAD_TOO_LARGE")

    assert await deliveries_of(shaped_api, created["webhookId"]) == []


# 11. Requests aiohttp's own HTTP parser refuses


@pytest.mark.parametrize(
    ("request_bytes", "problem"),
    [
        (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: libflow\r\n\r\n", "too long"),
        (
            b"POST /healthz HTTP/1.1\r\nHost: libflow\r\nContent-Length: 12x\r\n\r\n",
            "Content-Length",
        ),
        (b"GET /healthz HTTP/1.1\r\nHost: libflow\r\nX-Folded: a\r\n b\r\n\r\n", "whitespace"),
        (b"GET /healthz HTTP/1.1\r\nHost: libflow\r\n" + b"X: y\r\n" * 200 + b"\r\n", "headers"),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 not HTTP\r\n\r\n", "request line"),
    ],
    ids=["long-request-line", "bad-content-length", "folded-header", "many-headers", "tls"],
)
async def test_a_request_the_http_parser_refuses_is_answered_with_the_json_error_body(
    api: Api, request_bytes: bytes, problem: str
) -> None:
    async with within_bounds(api.client):
        status, head, answer = await raw_http(api, request_bytes)

    assert status == 400, answer
    assert b"Content-Type: application/json" in head
    error = json.loads(answer)
    assert error["error"] == "VALIDATION_ERROR"
    assert error["message"].startswith("malformed HTTP request")
    assert problem.lower() in error["message"].lower()


async def _crash(request: web.Request) -> web.Response:
    raise RuntimeError("a bug outside any middleware")


async def test_a_crash_no_middleware_catches_is_the_json_internal_error(
    aiohttp_client: Any,
) -> None:
    app = web.Application()  # no error middleware: aiohttp itself answers the crash
    app.router.add_get("/crash", _crash)
    serve_json_errors(app)
    client: TestClient[web.Request, web.Application] = await aiohttp_client(app)

    response = await client.get("/crash")

    assert response.status == 500
    assert await response.json() == {"error": "INTERNAL", "message": "internal server error"}


async def test_the_runner_run_app_uses_answers_parser_errors_in_json(tmp_path: Path) -> None:
    # run_server.py's web.run_app serves through an AppRunner and a TCPSite, as here.
    app = web.Application()
    serve_json_errors(app)
    runner = web.AppRunner(app)
    await runner.setup()
    port = unused_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: libflow\r\n\r\n")
        raw = await asyncio.wait_for(reader.read(), 10)
        writer.close()
    finally:
        await runner.cleanup()

    head, _, answer = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 400") or head.startswith(b"HTTP/1.1 400")
    assert json.loads(answer)["error"] == "VALIDATION_ERROR"


# 13. GitHub deliveries replayed under a new X-GitHub-Delivery


async def test_a_github_body_replayed_with_new_delivery_ids_is_acknowledged_and_runs_once(
    shaped_api: Api,
) -> None:
    created = await create_webhook(shaped_api, scheme="github")
    body = event_body(ref="refs/heads/main")

    first = await deliver(
        shaped_api, created["webhookId"], body, github_headers(created["secret"], body)
    )
    assert first.status == 200
    async with within_bounds(shaped_api.client):
        replays = await asyncio.gather(
            *(
                deliver(
                    shaped_api, created["webhookId"], body, github_headers(created["secret"], body)
                )
                for _ in range(5)
            )
        )

    assert [r.status for r in replays] == [200] * 5
    [delivery] = await wait_for_deliveries(shaped_api, created["webhookId"], 1)
    assert delivery["status"] == "succeeded"
    assert len(await runs_of(shaped_api, created["workflowId"])) == 1


async def test_concurrent_github_replays_of_a_new_body_run_once(shaped_api: Api) -> None:
    created = await create_webhook(shaped_api, scheme="github")
    body = event_body(ref="refs/heads/release")

    answers = await asyncio.gather(
        *(
            deliver(shaped_api, created["webhookId"], body, github_headers(created["secret"], body))
            for _ in range(8)
        )
    )

    assert [a.status for a in answers] == [200] * 8
    await wait_for_deliveries(shaped_api, created["webhookId"], 1)
    assert len(await runs_of(shaped_api, created["workflowId"])) == 1


async def test_the_same_github_body_after_the_replay_window_runs_again(shaped_api: Api) -> None:
    created = await create_webhook(shaped_api, scheme="github")
    body = event_body(ref="refs/heads/main")
    headers = github_headers(created["secret"], body)
    assert (await deliver(shaped_api, created["webhookId"], body, headers)).status == 200
    [first] = await wait_for_deliveries(shaped_api, created["webhookId"], 1)
    long_ago = utcnow() - GITHUB_REPLAY_WINDOW - timedelta(seconds=1)
    await WebhookDelivery.filter(id=first["deliveryId"]).update(received_at=long_ago)

    again = await deliver(
        shaped_api, created["webhookId"], body, github_headers(created["secret"], body)
    )

    assert again.status == 200
    assert len(await wait_for_deliveries(shaped_api, created["webhookId"], 2)) == 2
    assert len(await runs_of(shaped_api, created["workflowId"])) == 2


async def test_a_github_body_stored_before_body_digests_is_still_a_replay(
    shaped_api: Api,
) -> None:
    created = await create_webhook(shaped_api, scheme="github")
    body = event_body(ref="refs/heads/main")
    headers = github_headers(created["secret"], body)
    assert (await deliver(shaped_api, created["webhookId"], body, headers)).status == 200
    [first] = await wait_for_deliveries(shaped_api, created["webhookId"], 1)
    # As a row written before migration 0012 holds it.
    await WebhookDelivery.filter(id=first["deliveryId"]).update(body_sha256=None)

    again = await deliver(
        shaped_api, created["webhookId"], body, github_headers(created["secret"], body)
    )

    assert again.status == 200
    assert len(await deliveries_of(shaped_api, created["webhookId"])) == 1
    assert len(await runs_of(shaped_api, created["workflowId"])) == 1


async def test_a_different_github_body_in_the_window_runs(api: Api) -> None:
    created = await create_webhook(api, scheme="github")
    for ref in ("main", "release"):
        body = event_body(ref=f"refs/heads/{ref}")
        headers = github_headers(created["secret"], body)
        assert (await deliver(api, created["webhookId"], body, headers)).status == 200

    assert len(await wait_for_deliveries(api, created["webhookId"], 2)) == 2
    assert len(await runs_of(api, created["workflowId"])) == 2


async def test_the_same_body_under_new_ids_runs_again_on_the_timestamped_schemes(
    api: Api,
) -> None:
    # Standard Webhooks signs its id and timestamp too: a new id is a new delivery.
    created = await create_webhook(api)
    body = event_body(order=1)
    for _ in range(2):
        headers = standard_headers(created["secret"], body)
        assert (await deliver(api, created["webhookId"], body, headers)).status == 200

    assert len(await wait_for_deliveries(api, created["webhookId"], 2)) == 2
