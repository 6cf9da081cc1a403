"""Every run has a budget: time, memory of values, outputs, HTTP responses, nesting.

Each hostile case goes through runsync on both shapes and checks four things: the right
error comes back, /healthz stays responsive throughout, the server's peak RSS grows by
less than a documented bound, and the run record says what the answer said.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from libflow.engine.definition import MAX_EDGES, MAX_NODES, MAX_TEMPLATE_TOKENS
from libflow.engine.expressions import evaluate
from libflow.engine.render_budget import RunAllowance, RunOutOfTime
from libflow.engine.run_budget import (
    MAX_CONCURRENT_REQUESTS,
    MAX_ERROR_MESSAGE_CHARS,
    MAX_RUN_OUTPUTS_BYTES,
    MAX_RUN_RESPONSE_BYTES,
    MAX_RUN_RESULTS_BYTES,
    MAX_SUB_RUN_REQUESTS,
    MAX_SUB_RUN_RESPONSE_BYTES,
    MAX_SUB_RUNS_AT_ONCE,
)
from tests.conftest import Api, ClientFactory, Shape, new_project
from tests.hostile.conftest import healthz_stays_responsive, peak_rss_growth
from tests.library_helpers import assert_error
from tests.run_helpers import runs_url
from tests.workflow_helpers import (
    call,
    chain,
    create,
    get_run,
    nested_maps,
    ok_json,
    output,
    runs_of,
    runsync,
)

# How far the server's peak RSS may rise while one hostile run is handled (MiB). The
# attacks below reached 0.5 to 5.7 GB before runs had budgets.
RSS_BOUND_MIB = 100
# The largest single budget a run may hold (MAX_RUN_RESPONSE_BYTES of responses, and
# their text) plus what the in-process test HTTP server buffers on its side.
HTTP_RSS_BOUND_MIB = 200
# How long a run of timeoutSeconds 1 may take to answer (it answered after 20.6 s).
TIMEOUT_ANSWER_BOUND_SECONDS = 3.0
# How long a render started 0.2 s before its run's deadline may go on (alone: about 0.9 s).
RENDER_STOP_BOUND_SECONDS = 0.6
MIB = 1024 * 1024


async def run_hostile(
    api: Api, definition: dict[str, Any], *, rss_bound: float = RSS_BOUND_MIB, **body: Any
) -> tuple[int, dict[str, Any], dict[str, Any]]:
    """Create and run a workflow while /healthz is probed and RSS measured.

    Returns the HTTP status, the runsync body and the run's record.
    """
    created = await create(api, definition)
    async with healthz_stays_responsive(api.client):
        with peak_rss_growth() as growth:
            status, answer = await runsync(api, created["workflowId"], **body)
    assert growth.mib < rss_bound, f"peak RSS grew {growth.mib:.0f} MiB"
    [listed] = await runs_of(api, created["workflowId"])
    record = await get_run(api, listed["runId"])
    assert record["status"] in {"failed", "timed_out"}
    assert record["statusCode"] == status == answer["statusCode"]
    assert record["error"] == answer["result"]["error"]
    assert record["outputs"] == answer["result"]["outputs"]
    return status, answer, record


def failed_node(answer: dict[str, Any]) -> tuple[str, str]:
    """The node and message of a NODE_FAILED answer."""
    error = answer["result"]["error"]
    assert error["code"] == "NODE_FAILED", error
    return error["node"], error["message"]


# --- wall time ------------------------------------------------------------------------------

# About 0.3 s of Jinja each (120,000 loop iterations), under the 1 s render budget.
SLOW_TEMPLATE = "{% for i in range(400) %}{% for j in range(300) %}{{ j }}{% endfor %}{% endfor %}"


async def test_cpu_bound_nodes_time_out_at_timeout_seconds_with_healthz_answering(
    shaped_api: Api,
) -> None:
    slow = [{"id": f"slow{i}", "type": "template", "template": SLOW_TEMPLATE} for i in range(60)]
    began = time.monotonic()
    status, answer, record = await run_hostile(shaped_api, chain(*slow, timeout=1))
    assert time.monotonic() - began < TIMEOUT_ANSWER_BOUND_SECONDS
    assert status == 504
    assert answer["result"]["error"]["code"] == "RUN_TIMEOUT"
    assert record["status"] == "timed_out"
    timings = record["nodeTimings"]
    assert "slow59" not in timings  # the chain never got there
    assert timings[answer["result"]["error"]["node"]]["status"] == "cancelled"


async def test_a_render_still_running_at_the_runs_timeout_stops_itself() -> None:
    # A thread cannot be stopped from outside: the render's own ticks see the deadline.
    run = RunAllowance(deadline=time.monotonic() + 0.2)
    slower = SLOW_TEMPLATE.replace("range(400)", "range(600)")  # about 0.9 s alone
    began = time.monotonic()
    with pytest.raises(RunOutOfTime):
        await evaluate(slower, {}, run=run, text_only=True)
    assert time.monotonic() - began < RENDER_STOP_BOUND_SECONDS


async def test_a_definition_too_costly_to_compile_is_refused_at_publish_before_compiling(
    shaped_api: Api,
) -> None:
    # About 900 KB and 720,000 tokens: compiling it took over 50 s of the event loop.
    definition = chain({"id": "huge", "type": "template", "template": "{{ a.b }}x" * 90_000})
    async with healthz_stays_responsive(shaped_api.client):
        with peak_rss_growth() as growth:
            response = await call(
                shaped_api, "POST", "", json={"name": "huge", "definition": definition}
            )
    assert growth.mib < RSS_BOUND_MIB
    body = await assert_error(response, 400, "INVALID_WORKFLOW")
    assert body["message"] == (
        "invalid workflow: node 'huge': field 'template': the definition's expressions are "
        f"over {MAX_TEMPLATE_TOKENS} tokens in all"
    )


# --- memory of values -------------------------------------------------------------------------

BIG = "{% set s = 'a' * 50000 %}"
MEMORY_BOMBS = {
    "a list of a big string as text": BIG + "{{ [s] * 100000 }}",
    "int.to_bytes of 2 GB": "{{ (1).to_bytes(2000000000, 'big') }}",
    "|tojson of a shared list": BIG + "{{ ([s] * 100000) | tojson }}",
    "|string of a shared list": BIG + "{{ ([s] * 100000) | string }}",
    "~ with a shared list": BIG + "{{ 'x' ~ ([s] * 100000) }}",
    "|join of shared lists": BIG + "{{ ([[s]] * 100000) | join(',') }}",
    "str.format of a shared list": BIG + "{{ '{}{}'.format([s] * 100000, 1) }}",
    "% of a shared list": BIG + "{{ '%s' % ([s] * 100000,) }}",
    "|format of a shared list": BIG + "{{ '%s' | format([s] * 100000) }}",
    "|upper of a shared list": BIG + "{{ ([s] * 100000) | upper }}",
    "|escape of a shared list": BIG + "{{ ([s] * 100000) | escape }}",
    "split into millions of parts": "{{ ('a,' * 4000000).split(',') | length }}",
    "a product of integers doubling": (
        "{% set ns = namespace(n=10 ** 1000) %}{% for i in range(40) %}"
        "{% set ns.n = ns.n * ns.n %}{% endfor %}{{ ns.n }}"
    ),
    "a string doubled by ~ in a loop": (
        "{% set ns = namespace(s='x') %}{% for i in range(64) %}"
        "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}"
    ),
}


@pytest.mark.parametrize("bomb", list(MEMORY_BOMBS))
async def test_a_template_memory_bomb_fails_its_node_before_building_the_value(
    shaped_api: Api, bomb: str
) -> None:
    definition = chain(output("x", MEMORY_BOMBS[bomb], "bomb"))
    status, answer, _ = await run_hostile(shaped_api, definition)
    assert status == 500
    node, message = failed_node(answer)
    assert node == "bomb"
    assert "over the limit" in message


async def test_pprint_is_not_offered(shaped_api: Api) -> None:
    status, answer, _ = await run_hostile(shaped_api, chain(output("x", "{{ [1] | pprint }}", "p")))
    assert status == 500
    assert failed_node(answer) == (
        "p",
        "field 'value': the pprint filter is not available in expressions",
    )


# --- outputs and results ----------------------------------------------------------------------


async def test_outputs_over_their_limit_fail_the_node_and_the_run_is_recorded(
    shaped_api: Api,
) -> None:
    setters = [output(f"x{i}", "{{ 'a' * 8000000 }}", f"set{i}") for i in range(60)]
    status, answer, record = await run_hostile(shaped_api, chain(*setters))
    assert status == 500
    node, message = failed_node(answer)
    assert node == "set0"
    assert f"over their limit of {MAX_RUN_OUTPUTS_BYTES} bytes" in message
    assert record["outputs"] == {}


async def test_outputs_up_to_their_limit_are_kept_and_the_one_past_it_fails(
    shaped_api: Api,
) -> None:
    third = MAX_RUN_OUTPUTS_BYTES // 3
    setters = [output(f"x{i}", f"{{{{ 'a' * {third} }}}}", f"set{i}") for i in range(4)]
    status, answer, record = await run_hostile(shaped_api, chain(*setters))
    assert status == 500
    assert failed_node(answer)[0] == "set2"
    assert record["outputs"] == {"x0": "a" * third, "x1": "a" * third}
    listed = await call(shaped_api, "GET", f"/{record['workflowId']}/runs")
    assert len(await listed.read()) < 2 * MAX_RUN_OUTPUTS_BYTES


async def test_results_a_run_holds_are_bounded(shaped_api: Api) -> None:
    texts = [
        {"id": f"text{i}", "type": "template", "template": "{{ 'a' * 1000000 }}"} for i in range(60)
    ]
    status, answer, _ = await run_hostile(shaped_api, chain(*texts))
    assert status == 500
    node, message = failed_node(answer)
    # Each text holds 1,000,000 characters, counted with its key: 33 fit in 32 MiB.
    assert node == f"text{MAX_RUN_RESULTS_BYTES // 1_000_012}"
    assert f"over their limit of {MAX_RUN_RESULTS_BYTES} bytes" in message


async def test_a_long_failure_message_is_cut_in_the_answer_and_the_record(
    shaped_api: Api,
) -> None:
    fail = {"id": "fail", "type": "fail", "message": "{{ 'why ' * 100000 }}"}
    status, _, record = await run_hostile(shaped_api, chain(fail))
    assert status == 500
    message = record["error"]["message"]
    assert len(message) == MAX_ERROR_MESSAGE_CHARS
    assert message.startswith("why why") and message.endswith("(cut here)")


# --- nesting ------------------------------------------------------------------------------------


def nested(depth: int) -> Any:
    """A value ``depth`` levels of arrays deep."""
    value: Any = "bottom"
    for _ in range(depth):
        value = [value]
    return value


async def test_a_definition_value_nested_too_deeply_is_refused_at_publish(
    shaped_api: Api,
) -> None:
    definition = chain(output("x", nested(900), "deep"))
    response = await call(shaped_api, "POST", "", json={"name": "deep", "definition": definition})
    body = await assert_error(response, 400, "INVALID_WORKFLOW")
    assert "node 'deep'" in body["message"]
    assert "nested deeper than 64 levels" in body["message"]
    created = await create(shaped_api, chain(output("x", nested(64))))
    response = await call(
        shaped_api, "POST", f"/{created['workflowId']}/versions", json={"definition": definition}
    )
    await assert_error(response, 400, "INVALID_WORKFLOW")


async def test_a_definition_of_more_than_500_nodes_is_refused_at_publish(
    shaped_api: Api,
) -> None:
    largest = chain(*(output(f"o{i}", i) for i in range(MAX_NODES - 1)))
    assert (await create(shaped_api, largest))["workflowId"]
    definition = chain(*(output(f"o{i}", i) for i in range(MAX_NODES)))
    response = await call(shaped_api, "POST", "", json={"name": "wide", "definition": definition})
    body = await assert_error(response, 400, "INVALID_WORKFLOW")
    assert f"at most {MAX_NODES} nodes and {MAX_EDGES} edges" in body["message"]


async def test_a_definition_of_more_than_2000_edges_is_refused_at_publish(
    shaped_api: Api,
) -> None:
    definition = chain(output("x", 1))
    definition["edges"] *= MAX_EDGES + 1
    response = await call(shaped_api, "POST", "", json={"name": "dense", "definition": definition})
    body = await assert_error(response, 400, "INVALID_WORKFLOW")
    assert f"at most {MAX_NODES} nodes and {MAX_EDGES} edges" in body["message"]


async def test_a_value_nested_too_deeply_at_run_time_fails_its_node(shaped_api: Api) -> None:
    definition = chain(output("x", "{{ inputs.tree }}", "copy"), output("y", "{{ 1 }}"))
    status, answer, _ = await run_hostile(shaped_api, definition, inputs={"tree": nested(200)})
    assert status == 500
    assert failed_node(answer) == (
        "copy",
        "field 'value': the value is nested deeper than 64 levels",
    )


# --- sub-runs -----------------------------------------------------------------------------------


async def test_maps_of_maps_stay_within_what_one_runs_sub_runs_may_spend(
    shaped_api: Api,
) -> None:
    # Four maps deep, 32 items at once each: a million sub-runs at once (21 KB each) before
    # the sub-runs under one run shared their slots; now 32 per depth.
    api = shaped_api
    leaf = chain({"id": "wait", "type": "delay", "seconds": 0.2}, output("x", 1))
    top = await nested_maps(api, leaf, 32, 32, 32, 32, timeout=3)
    began = time.monotonic()
    async with healthz_stays_responsive(api.client):
        with peak_rss_growth() as growth:
            status, answer = await runsync(api, top)
    assert time.monotonic() - began < TIMEOUT_ANSWER_BOUND_SECONDS + 1
    assert (status, answer["result"]["error"]["code"]) == (504, "RUN_TIMEOUT"), answer
    assert growth.mib < RSS_BOUND_MIB, f"peak RSS grew {growth.mib:.0f} MiB"
    response = await api.client.get(runs_url(api, "?trigger=call&limit=1000"), headers=api.headers)
    calls = await ok_json(response)
    assert len(calls) < 1000  # 3 s of leaves 32 at a time, and the maps above them


# --- HTTP responses -------------------------------------------------------------------------


class Upstream:
    """A local HTTP API serving big bodies, counting the requests in flight."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.most_in_flight = 0
        self.bodies = {
            "big": b"x" * (4 * MIB),
            "empty-lists": b"[" + b"[]," * (1024 * 1024 // 3) + b"[]]",
            "deep": b"[" * 100_000 + b"]" * 100_000,
        }

    async def serve(self, request: web.Request) -> web.Response:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0.05)
            body = self.bodies.get(request.match_info["name"], b"{}")
            return web.Response(body=body, content_type="application/json")
        finally:
            self.in_flight -= 1


@pytest.fixture
async def upstream() -> AsyncIterator[tuple[Upstream, TestServer]]:
    api = Upstream()
    app = web.Application()
    app.router.add_get("/{name}", api.serve)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield api, server
    finally:
        await server.close()


@pytest.fixture
async def private_api(start_app: ClientFactory, shape: Shape) -> Api:
    """A project on each shape, its workflows allowed to call the local upstream."""
    settings = shape.settings.model_copy(update={"http_allow_private": True})
    client = await start_app(settings)
    project_id, key = await new_project()
    return Api(client, Shape(shape.name, settings), project_id, key)


def fan_out(server: TestServer, path: str, count: int) -> dict[str, Any]:
    """``count`` http_request nodes, all started by the event at once."""
    calls = [
        {"id": f"get{i}", "type": "http_request", "url": str(server.make_url(path))}
        for i in range(count)
    ]
    edges = [{"from": "start", "to": node["id"]} for node in calls]
    return {
        "timeoutSeconds": 60,
        "nodes": [{"id": "start", "type": "event", "event": "run"}, *calls],
        "edges": edges,
    }


async def test_a_fan_out_of_big_responses_stops_at_the_runs_response_limit(
    private_api: Api, upstream: tuple[Upstream, TestServer]
) -> None:
    api, server = upstream
    status, answer, record = await run_hostile(
        private_api, fan_out(server, "/big", 400), rss_bound=HTTP_RSS_BOUND_MIB
    )
    assert status == 500
    _, message = failed_node(answer)
    assert f"over their limit of {MAX_RUN_RESPONSE_BYTES} bytes in all" in message
    assert api.most_in_flight <= MAX_CONCURRENT_REQUESTS
    assert sum(t["status"] == "succeeded" for t in record["nodeTimings"].values()) <= 5


async def test_at_most_the_concurrency_limit_of_requests_are_in_flight_per_run(
    private_api: Api, upstream: tuple[Upstream, TestServer]
) -> None:
    api, server = upstream
    created = await create(private_api, fan_out(server, "/small", 3 * MAX_CONCURRENT_REQUESTS))
    status, answer = await runsync(private_api, created["workflowId"])
    assert status == 200, answer
    assert api.most_in_flight == MAX_CONCURRENT_REQUESTS


async def test_responses_holding_too_many_json_values_fail_before_they_are_parsed(
    private_api: Api, upstream: tuple[Upstream, TestServer]
) -> None:
    _, server = upstream
    calls = [
        {"id": f"get{i}", "type": "http_request", "url": str(server.make_url("/empty-lists"))}
        for i in range(4)
    ]
    status, answer, _ = await run_hostile(private_api, chain(*calls))
    assert status == 500
    node, message = failed_node(answer)
    # Each counts as about 700,000 values (an upper bound: every "[]," has a bracket and a
    # comma); the run may parse 1,000,000.
    assert node == "get1"
    assert "over the run's limit of 1000000 values parsed" in message


async def test_a_response_nested_too_deeply_fails_its_node_cleanly(
    private_api: Api, upstream: tuple[Upstream, TestServer], caplog: pytest.LogCaptureFixture
) -> None:
    _, server = upstream
    get = {"id": "get", "type": "http_request", "url": str(server.make_url("/deep"))}
    with caplog.at_level(logging.INFO, "libflow"):
        status, answer, _ = await run_hostile(private_api, chain(get))
    assert status == 500
    assert failed_node(answer) == ("get", "the response's JSON is nested too deeply to parse")
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_the_responses_running_sub_runs_read_together_are_bounded(
    private_api: Api, upstream: tuple[Upstream, TestServer]
) -> None:
    # Five sub-runs at once, each reading 4 MiB and holding it: 20 MiB, over the 16 MiB the
    # sub-runs under one run may read together. Each alone is far within its own limit.
    _, server = upstream
    leaf = chain(
        {"id": "get", "type": "http_request", "url": str(server.make_url("/big"))},
        {"id": "wait", "type": "delay", "seconds": 0.5},
        output("x", 1),
    )
    top = await nested_maps(private_api, leaf, 5)
    async with healthz_stays_responsive(private_api.client):
        with peak_rss_growth() as growth:
            status, answer = await runsync(private_api, top)
    assert growth.mib < HTTP_RSS_BOUND_MIB, f"peak RSS grew {growth.mib:.0f} MiB"
    assert status == 500, answer
    assert (
        "the HTTP responses of the running sub-runs would be over their limit of "
        f"{MAX_SUB_RUN_RESPONSE_BYTES} bytes in all"
    ) in answer["result"]["error"]["message"]


async def test_the_requests_running_sub_runs_make_together_are_bounded(
    private_api: Api, upstream: tuple[Upstream, TestServer]
) -> None:
    # 32 sub-runs at once, each with 8 requests in flight (its own limit): 256 connections
    # from one run, were their requests not bounded together.
    api, server = upstream
    leaf = fan_out(server, "/small", MAX_CONCURRENT_REQUESTS)
    top = await nested_maps(private_api, leaf, MAX_SUB_RUNS_AT_ONCE)
    status, answer = await runsync(private_api, top)
    assert status == 200, answer
    assert api.most_in_flight == MAX_SUB_RUN_REQUESTS


# --- header injection ---------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["a\r\nX-Injected: 1", "a\nb", "a\rb", "a\x0bb"])
async def test_a_control_character_in_a_header_fails_the_node_as_a_node_failure(
    shaped_api: Api, caplog: pytest.LogCaptureFixture, value: str
) -> None:
    request = {
        "id": "call",
        "type": "http_request",
        "url": "http://example.com/",
        "headers": {"X-Note": "{{ inputs.note }}"},
    }
    with caplog.at_level(logging.INFO, "libflow"):
        status, answer, _ = await run_hostile(shaped_api, chain(request), inputs={"note": value})
    assert status == 500
    node, message = failed_node(answer)
    assert node == "call"
    assert "header 'X-Note' has a control character (such as CR or LF)" in message
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert any("node call (http_request) failed" in r.getMessage() for r in caplog.records)


async def test_a_header_name_that_is_no_token_fails_the_node(shaped_api: Api) -> None:
    request = {
        "id": "call",
        "type": "http_request",
        "url": "http://example.com/",
        "headers": {"Bad Name": "x"},
    }
    status, answer, _ = await run_hostile(shaped_api, chain(request))
    assert status == 500
    assert "is not a valid HTTP header name" in failed_node(answer)[1]
