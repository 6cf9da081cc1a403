"""Running workflows (libflow.engine.runner and nodes): one test per node type and behaviour."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from libflow.engine import (
    InvalidInputs,
    NodeServices,
    RunResult,
    UnknownEvent,
    WorkflowRun,
    parse_definition,
    run_workflow,
)
from libflow.engine.expressions import render
from libflow.engine.render_budget import ExpressionError
from libflow.engine.run_budget import (
    MAX_NODE_RESULT_BYTES,
    MAX_RUN_OUTPUTS_BYTES,
    MAX_RUN_RECORD_BYTES,
)
from libflow.ids import epoch_iso, iso


class Library:
    """The caller's project-scoped library functions, recording what nodes asked."""

    def __init__(self) -> None:
        self.searches: list[tuple[str, int]] = []

    async def search(self, query: str, limit: int, **options: Any) -> list[dict[str, Any]]:
        self.searches.append((query, limit))
        return [{"fileId": "f1", "name": "notes.txt", "text": f"about {query}"}][:limit]

    async def file_text(self, file_id: str) -> dict[str, Any]:
        if file_id != "f1":
            from libflow.errors import NotFound

            raise NotFound(f"no file {file_id}")
        return {"text": "the text", "name": "notes.txt", "type": "txt"}


@pytest.fixture
def library() -> Library:
    return Library()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


@pytest.fixture
def services(http: aiohttp.ClientSession, library: Library) -> NodeServices:
    return NodeServices(
        http=http,
        allow_private_addresses=False,
        search_library=library.search,
        file_text=library.file_text,
    )


def chain(*nodes: dict[str, Any], timeout: float = 30, event: str = "run") -> dict[str, Any]:
    """A definition: an event node, then ``nodes`` one after the other."""
    all_nodes = [{"id": "start", "type": "event", "event": event}, *nodes]
    edges = [{"from": a["id"], "to": b["id"]} for a, b in itertools.pairwise(all_nodes)]
    return {"timeoutSeconds": timeout, "nodes": all_nodes, "edges": edges}


async def run(
    raw: dict[str, Any],
    services: NodeServices,
    inputs: dict[str, Any] | None = None,
    event: str = "run",
) -> RunResult:
    return await run_workflow(parse_definition(raw), event=event, inputs=inputs, services=services)


def output(name: str, value: Any, node_id: str | None = None) -> dict[str, Any]:
    return {"id": node_id or f"out_{name}", "type": "set_output", "name": name, "value": value}


# --- one test per node type -------------------------------------------------------------


async def test_event_node_starts_the_run_and_names_the_event(services: NodeServices) -> None:
    result = await run(
        chain(output("event", "{{ nodes.start.event }}"), event="order.paid"),
        services,
        event="order.paid",
    )
    assert result.success and result.outputs == {"event": "order.paid"}
    assert result.response_body() == {
        "success": True,
        "result": {"outputs": {"event": "order.paid"}},
        "statusCode": 200,
    }


async def test_the_design_example(services: NodeServices) -> None:
    raw = {
        "timeoutSeconds": 30,
        "nodes": [
            {"id": "start", "type": "event", "event": "run"},
            {"id": "who", "type": "input", "name": "name", "valueType": "string", "required": True},
            {"id": "greet", "type": "template", "template": "Hello, {{ inputs.name }}!"},
            output("greeting", "{{ nodes.greet.text }}", "out"),
        ],
        "edges": [{"from": "start", "to": "greet"}, {"from": "greet", "to": "out"}],
    }
    result = await run(raw, services, {"name": "Ada"})
    assert (result.status, result.status_code) == ("succeeded", 200)
    assert result.outputs == {"greeting": "Hello, Ada!"}
    assert set(result.timings) == {"start", "greet", "out"}  # "who" only declares an input
    assert all(timing.status == "succeeded" for timing in result.timings.values())
    timing = result.timings_json()["greet"]
    assert timing["status"] == "succeeded" and timing["startedDate"].endswith("Z")


@pytest.mark.parametrize(
    "seconds",
    # Whole seconds, the rounding edges of a millisecond and of a microsecond, a leap day.
    [0.0, 1_700_000_000.0, 1_700_000_000.0009995, 1_700_000_000.9999996, 1_709_164_799.123456],
)
def test_node_timings_are_written_as_every_other_date(seconds: float) -> None:
    # Timings are kept as time.time() readings and written without a datetime: the text
    # must be what iso() writes of the same moment.
    assert epoch_iso(seconds) == iso(datetime.fromtimestamp(seconds, UTC))


async def test_input_node_declares_and_passes_on_its_value(services: NodeServices) -> None:
    raw = chain(
        {"id": "count", "type": "input", "name": "count", "valueType": "number", "default": 3},
        output("value", "{{ nodes.count.value }}"),
    )
    assert (await run(raw, services)).outputs == {"value": 3}
    assert (await run(raw, services, {"count": 7.5})).outputs == {"value": 7.5}


async def test_set_output_keeps_native_types(services: NodeServices) -> None:
    inputs = {"n": 3, "flag": False, "items": [1, "a"], "obj": {"k": None}, "name": "Ada"}
    raw = chain(
        output("n", "{{ inputs.n }}"),
        output("flag", "{{ inputs.flag }}"),
        output("items", "{{ inputs.items }}"),
        output("obj", "{{ inputs.obj }}"),
        output("sum", "{{ inputs.n + 1 }}"),
        output("text", "n = {{ inputs.n }}"),
        output("spaced", " {{ inputs.n }} "),
        output("nested", {"list": ["{{ inputs.n }}", "{{ inputs.name }}!"], "plain": 2}),
        output("literal", [1, True, None]),
    )
    result = await run(raw, services, inputs)
    assert result.outputs == {
        "n": 3,
        "flag": False,
        "items": [1, "a"],
        "obj": {"k": None},
        "sum": 4,
        "text": "n = 3",
        "spaced": " 3 ",
        "nested": {"list": [3, "Ada!"], "plain": 2},
        "literal": [1, True, None],
    }


async def test_template_node_renders_text(services: NodeServices) -> None:
    raw = chain(
        {
            "id": "list",
            "type": "template",
            "template": "{% for i in inputs.items %}[{{ i }}]{% endfor %} {{ inputs.n }}",
        },
        {"id": "alone", "type": "template", "template": "{{ inputs.n }}"},
        output("list", "{{ nodes.list.text }}"),
        output("alone", "{{ nodes.alone.text }}"),
    )
    result = await run(raw, services, {"items": [1, 2], "n": 5})
    assert result.outputs == {"list": "[1][2] 5", "alone": "5"}


def branching(condition: Any) -> dict[str, Any]:
    """start -> check -(true)-> yes -> after_yes; -(false)-> no; yes and no both -> join."""
    return {
        "nodes": [
            {"id": "start", "type": "event", "event": "run"},
            {"id": "check", "type": "condition", "if": condition},
            output("branch", "yes", "yes"),
            output("after", "yes", "after_yes"),
            output("branch", "no", "no"),
            output("joined", "{{ nodes.check.result }}", "join"),
        ],
        "edges": [
            {"from": "start", "to": "check"},
            {"from": "check", "to": "yes", "when": "true"},
            {"from": "check", "to": "no", "when": "false"},
            {"from": "yes", "to": "after_yes"},
            {"from": "yes", "to": "join"},
            {"from": "no", "to": "join"},
        ],
    }


async def test_condition_true_skips_the_false_branch(services: NodeServices) -> None:
    result = await run(branching("{{ inputs.n > 2 }}"), services, {"n": 3})
    assert result.outputs == {"branch": "yes", "after": "yes", "joined": True}
    statuses = {node: timing.status for node, timing in result.timings.items()}
    assert statuses == {
        "start": "succeeded",
        "check": "succeeded",
        "yes": "succeeded",
        "after_yes": "succeeded",
        "no": "skipped",
        "join": "succeeded",
    }


async def test_condition_false_skips_everything_behind_the_true_branch(
    services: NodeServices,
) -> None:
    result = await run(branching("{{ inputs.n > 2 }}"), services, {"n": 1})
    assert result.outputs == {"branch": "no", "joined": False}
    statuses = {node: timing.status for node, timing in result.timings.items()}
    assert statuses["yes"] == statuses["after_yes"] == "skipped"
    assert statuses["no"] == statuses["join"] == "succeeded"


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        (True, True),
        ("{{ inputs.items }}", True),
        ("{{ inputs.empty }}", False),
        ("{{ inputs.none }}", False),
        ("true", True),
        (" False ", False),
        ("{{ 'yes' if inputs.items else 'no' }} ", None),
    ],
)
async def test_condition_truth(
    services: NodeServices, condition: Any, expected: bool | None
) -> None:
    inputs = {"items": [1], "empty": [], "none": None}
    result = await run(branching(condition), services, inputs)
    if expected is None:
        assert result.status == "failed"
        assert result.error is not None and "not true or false" in result.error.message
    else:
        assert result.outputs["joined"] is expected


async def test_http_request_node_to_a_local_server(http: aiohttp.ClientSession) -> None:
    seen: list[dict[str, Any]] = []

    async def echo(request: web.Request) -> web.Response:
        seen.append({"body": await request.json(), "token": request.headers.get("X-Token")})
        return web.json_response({"echo": seen[-1]["body"]}, status=201, headers={"X-Reply": "1"})

    app = web.Application()
    app.router.add_post("/echo", echo)
    async with TestServer(app, host="127.0.0.1") as server:
        allowed = NodeServices(
            http=http,
            allow_private_addresses=True,
            search_library=Library().search,
            file_text=Library().file_text,
        )
        raw = chain(
            {
                "id": "call",
                "type": "http_request",
                "method": "POST",
                "url": str(server.make_url("/echo")),
                "headers": {"X-Token": "{{ inputs.token }}"},
                "json": {"n": "{{ inputs.n }}"},
                "timeoutSeconds": 5,
            },
            output("status", "{{ nodes.call.status }}"),
            output("echo", "{{ nodes.call.json.echo }}"),
            output("reply", "{{ nodes.call.headers['x-reply'] }}"),
            output("text", "{{ nodes.call.text }}"),
        )
        result = await run(raw, allowed, {"token": "t0k", "n": 4})
    assert result.success, result.error
    assert result.outputs == {
        "status": 201,
        "echo": {"n": 4},
        "reply": "1",
        "text": '{"echo": {"n": 4}}',
    }
    assert seen == [{"body": {"n": 4}, "token": "t0k"}]


async def test_http_request_node_refuses_loopback_before_connecting(
    services: NodeServices,
) -> None:
    hits: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        hits.append(request.path)
        return web.Response(text="should not be reached")

    app = web.Application()
    app.router.add_get("/", handler)
    async with TestServer(app, host="127.0.0.1") as server:
        raw = chain({"id": "call", "type": "http_request", "url": str(server.make_url("/"))})
        result = await run(raw, services)
    assert (result.status, result.status_code) == ("failed", 500)
    assert result.error is not None and result.error.node == "call"
    assert "loopback" in result.error.message
    assert hits == []


async def test_library_search_node(services: NodeServices, library: Library) -> None:
    raw = chain(
        {"id": "find", "type": "library_search", "query": "{{ inputs.q }}", "limit": "{{ 2 }}"},
        output("hits", "{{ nodes.find.results }}"),
    )
    result = await run(raw, services, {"q": "otters"})
    assert result.outputs == {
        "hits": [{"fileId": "f1", "name": "notes.txt", "text": "about otters"}]
    }
    assert library.searches == [("otters", 2)]


async def test_library_file_text_node(services: NodeServices) -> None:
    raw = chain(
        {"id": "read", "type": "library_file_text", "fileId": "{{ inputs.id }}"},
        output("file", "{{ nodes.read }}"),
    )
    result = await run(raw, services, {"id": "f1"})
    assert result.outputs == {"file": {"text": "the text", "name": "notes.txt", "type": "txt"}}
    missing = await run(raw, services, {"id": "nope"})
    assert missing.status == "failed"
    assert missing.error is not None and missing.error.message == "no file nope"


async def test_delay_node(services: NodeServices) -> None:
    began = time.monotonic()
    result = await run(
        chain({"id": "wait", "type": "delay", "seconds": "{{ inputs.s }}"}), services, {"s": 0.2}
    )
    assert result.success and time.monotonic() - began >= 0.2


async def test_respond_node_sets_the_status_code(services: NodeServices) -> None:
    result = await run(chain({"id": "r", "type": "respond", "statusCode": 202}), services)
    assert (result.success, result.status_code) == (True, 202)
    assert result.response_body()["statusCode"] == 202


async def test_fail_node_fails_with_its_code(services: NodeServices) -> None:
    raw = chain(
        output("before", 1),
        {"id": "stop", "type": "fail", "message": "no {{ inputs.what }}", "statusCode": 422},
        output("after", 2),
    )
    result = await run(raw, services, {"what": "otters"})
    assert (result.status, result.success, result.status_code) == ("failed", False, 422)
    assert result.outputs == {"before": 1}
    assert result.response_body() == {
        "success": False,
        "result": {
            "outputs": {"before": 1},
            "error": {"code": "NODE_FAILED", "node": "stop", "message": "no otters"},
        },
        "statusCode": 422,
    }
    assert "out_after" not in result.timings


async def test_fail_node_defaults_to_500(services: NodeServices) -> None:
    result = await run(chain({"id": "stop", "type": "fail", "message": "boom"}), services)
    assert result.status_code == 500


# --- events and inputs ------------------------------------------------------------------


async def test_unknown_event_is_refused_before_running(services: NodeServices) -> None:
    definition = parse_definition(chain(output("x", 1)))
    with pytest.raises(UnknownEvent) as caught:
        WorkflowRun(definition, event="deploy", inputs=None, services=services)
    assert (caught.value.code, caught.value.status) == ("UNKNOWN_EVENT", 400)
    assert caught.value.details == {"event": "deploy", "knownEvents": ["run"]}


async def test_custom_events_pick_their_event_nodes(services: NodeServices) -> None:
    raw = {
        "nodes": [
            {"id": "on_run", "type": "event", "event": "run"},
            {"id": "on_hook", "type": "event", "event": "webhook"},
            output("via", "run", "a"),
            output("via", "webhook", "b"),
        ],
        "edges": [{"from": "on_run", "to": "a"}, {"from": "on_hook", "to": "b"}],
    }
    hook = await run(raw, services, event="webhook")
    assert hook.outputs == {"via": "webhook"}
    assert set(hook.timings) == {"on_hook", "b"}


WITH_INPUTS = chain(
    {"id": "a", "type": "input", "name": "name", "valueType": "string", "required": True},
    {"id": "b", "type": "input", "name": "count", "valueType": "number", "default": 2},
    {"id": "c", "type": "input", "name": "tags", "valueType": "array"},
    {"id": "d", "type": "input", "name": "opts", "valueType": "object"},
    {"id": "e", "type": "input", "name": "on", "valueType": "boolean"},
    output("all", "{{ inputs }}"),
)


async def test_inputs_defaults_and_pass_through(services: NodeServices) -> None:
    result = await run(WITH_INPUTS, services, {"name": "x", "extra": [1]})
    assert result.outputs["all"] == {
        "name": "x",
        "count": 2,
        "tags": None,
        "opts": None,
        "on": None,
        "extra": [1],
    }


@pytest.mark.parametrize(
    ("inputs", "problems"),
    [
        (None, [{"input": "name", "problem": "is required"}]),
        ({"name": None}, [{"input": "name", "problem": "is required"}]),
        (
            {"name": 5, "count": "2", "tags": {}, "opts": [], "on": "yes"},
            [
                {"input": "name", "problem": "must be of type string"},
                {"input": "count", "problem": "must be of type number"},
                {"input": "tags", "problem": "must be of type array"},
                {"input": "opts", "problem": "must be of type object"},
                {"input": "on", "problem": "must be of type boolean"},
            ],
        ),
        ({"name": "x", "count": True}, [{"input": "count", "problem": "must be of type number"}]),
    ],
)
async def test_invalid_inputs_are_refused_before_running(
    services: NodeServices, inputs: dict[str, Any] | None, problems: list[dict[str, Any]]
) -> None:
    with pytest.raises(InvalidInputs) as caught:
        WorkflowRun(parse_definition(WITH_INPUTS), event="run", inputs=inputs, services=services)
    assert (caught.value.code, caught.value.status) == ("INVALID_INPUTS", 400)
    assert caught.value.details == problems


# --- concurrency, failure, timeout, cancellation ----------------------------------------


def parallel_delays(timeout: float = 30) -> dict[str, Any]:
    """Two 1 s delays on independent branches, joined by one output."""
    return {
        "timeoutSeconds": timeout,
        "nodes": [
            {"id": "start", "type": "event", "event": "run"},
            output("first", "set", "early"),
            {"id": "left", "type": "delay", "seconds": 1},
            {"id": "right", "type": "delay", "seconds": 1},
            output("both", "{{ nodes.left.seconds + nodes.right.seconds }}", "join"),
        ],
        "edges": [
            {"from": "start", "to": "early"},
            {"from": "early", "to": "left"},
            {"from": "early", "to": "right"},
            {"from": "left", "to": "join"},
            {"from": "right", "to": "join"},
        ],
    }


async def test_independent_branches_run_concurrently(services: NodeServices) -> None:
    began = time.monotonic()
    result = await run(parallel_delays(), services)
    elapsed = time.monotonic() - began
    assert result.outputs == {"first": "set", "both": 2.0}
    assert 1.0 <= elapsed < 1.6
    left, right = result.timings["left"], result.timings["right"]
    assert abs(left.started - right.started) < 0.2


async def test_a_failing_node_stops_the_other_branches(services: NodeServices) -> None:
    raw = {
        "nodes": [
            {"id": "start", "type": "event", "event": "run"},
            {"id": "slow", "type": "delay", "seconds": 5},
            output("bad", "{{ nodes.nothing.here }}", "broken"),
        ],
        "edges": [{"from": "start", "to": "slow"}, {"from": "start", "to": "broken"}],
    }
    began = time.monotonic()
    result = await run(raw, services)
    assert time.monotonic() - began < 1
    assert (result.status, result.status_code) == ("failed", 500)
    assert result.error is not None
    assert (result.error.code, result.error.node) == ("NODE_FAILED", "broken")
    assert "nothing" in result.error.message  # the typo is named
    assert result.timings["broken"].status == "failed"
    assert result.timings["slow"].status == "cancelled"


async def test_timeout_keeps_the_outputs_set_so_far(services: NodeServices) -> None:
    began = time.monotonic()
    result = await run(parallel_delays(timeout=0.3), services)
    assert time.monotonic() - began < 1
    assert (result.status, result.success, result.status_code) == ("timed_out", False, 504)
    assert result.outputs == {"first": "set"}
    assert result.error is not None
    assert result.error.code == "RUN_TIMEOUT" and result.error.node in {"left", "right"}
    assert result.timings["left"].status == result.timings["right"].status == "cancelled"
    assert result.response_body()["result"] == {
        "outputs": {"first": "set"},
        "error": result.error.to_json(),
    }


async def test_cancellation_keeps_what_happened(services: NodeServices) -> None:
    run_ = WorkflowRun(
        parse_definition(parallel_delays()), event="run", inputs={}, services=services
    )
    task = asyncio.create_task(run_.execute())
    await asyncio.sleep(0.2)
    assert run_.status == "running" and run_.outputs == {"first": "set"}
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    snapshot = run_.result()
    assert snapshot.status == "cancelled" and not snapshot.success
    assert snapshot.outputs == {"first": "set"}
    assert snapshot.timings["early"].status == "succeeded"
    assert snapshot.timings["left"].status == "cancelled"
    assert snapshot.finished_date is not None


async def test_a_run_executes_once(services: NodeServices) -> None:
    run_ = WorkflowRun(parse_definition(chain()), event="run", inputs=None, services=services)
    await run_.execute()
    with pytest.raises(RuntimeError):
        await run_.execute()


# --- the sandbox ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ('{{ "".__class__.__mro__ }}', "unsafe"),
        ("{{ ''.__class__.__mro__[1].__subclasses__() }}", "unsafe"),
        ("{{ cycler.__init__.__globals__ }}", "unsafe"),
        ("{{ self._TemplateReference__context }}", "unsafe"),
        ("x {{ joiner.__init__.__globals__.os }}", "unsafe"),
        ("{{ range(10**9) | list }}", "range() of 1000000000 items"),
        ("{{ 'a' * 10**10 }}", "over the limit"),
        ("{{ 'a'|center(10**10) }}", "over the limit"),
        ("{{ '%999999999d' % 1 }}", "over the limit"),
        ("{{ '{:>999999999}'.format(1) }}", "over the limit"),
        ("{{ 2 ** 1000000000 }}", "over the limit"),
        # More digits than Python writes of an integer as text: never storable as JSON.
        ("{{ 10 ** 5000 }}", "over the limit"),
        ("{{ (10 ** 2500) * (10 ** 2500) }}", "over the limit"),
        (
            "{% for i in range(10000) %}{% for j in range(10000) %}{% endfor %}{% endfor %}",
            "iterations",
        ),
        (
            "{% set ns = namespace(s='x') %}{% for i in range(64) %}"
            "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
            "over the limit",
        ),
        ("{% for i in range(10000) %}{{ inputs.big }}{% endfor %}", "characters"),
        ("{{ inputs.items.append(1) }}", "unsafe"),
        ("{{ lipsum(100000) }}", "undefined"),
    ],
)
async def test_sandbox_escapes_and_abuse_fail_the_node_fast(
    services: NodeServices, expression: str, reason: str
) -> None:
    inputs = {"big": "x" * 1000, "items": [1]}
    began = time.monotonic()
    result = await run(chain(output("x", expression, "evil")), services, inputs)
    assert time.monotonic() - began < 1.5
    assert (result.status, result.status_code) == ("failed", 500)
    assert result.error is not None and result.error.node == "evil"
    assert reason in result.error.message
    assert inputs["items"] == [1]


def test_expression_errors_name_the_problem() -> None:
    with pytest.raises(ExpressionError, match=r"nodes\.gret is undefined: no node 'gret' ran"):
        render("{{ nodes.gret.text }}", {"nodes": {"greet": {}}})
    with pytest.raises(ExpressionError, match="ZeroDivisionError"):
        render("{{ 1 / 0 }}", {})


def test_dict_keys_win_over_dict_methods() -> None:
    assert render("{{ inputs.items }}", {"inputs": {"items": [1, 2]}}) == [1, 2]
    assert render("{{ inputs.keys }}", {"inputs": {"keys": "k"}}) == "k"


# --- run budgets ---------------------------------------------------------------------------


async def test_setting_an_output_again_counts_its_last_value_only(services: NodeServices) -> None:
    third = MAX_RUN_OUTPUTS_BYTES // 3
    big = f"{{{{ 'a' * {third} }}}}"
    raw = chain(*(output("x", big, f"set{i}") for i in range(5)), output("y", big, "other"))
    result = await run(raw, services)
    assert result.success, result.error
    assert result.outputs == {"x": "a" * third, "y": "a" * third}


async def test_an_output_that_would_overflow_the_record_fails_its_node(
    services: NodeServices,
) -> None:
    # Inputs come from a body of at most 1 MiB through the API; callers of the engine may
    # pass more, and the record's limit still holds.
    inputs = {"pad": "p" * (MAX_RUN_RECORD_BYTES - 100_000)}
    result = await run(chain(output("x", "{{ 'a' * 200000 }}", "big")), services, inputs)
    assert result.status == "failed" and result.error is not None
    assert result.error.node == "big"
    assert f"over its limit of {MAX_RUN_RECORD_BYTES} bytes" in result.error.message
    assert result.outputs == {}


async def test_a_library_result_over_a_nodes_limit_fails_its_node(
    http: aiohttp.ClientSession,
) -> None:
    async def huge_text(file_id: str) -> dict[str, Any]:
        return {"text": "t" * (MAX_NODE_RESULT_BYTES + 1), "name": "big.txt", "type": "txt"}

    services = NodeServices(
        http=http,
        allow_private_addresses=False,
        search_library=Library().search,
        file_text=huge_text,
    )
    raw = chain({"id": "read", "type": "library_file_text", "fileId": "f1"})
    result = await run(raw, services)
    assert result.error is not None and result.error.node == "read"
    assert f"over the limit of {MAX_NODE_RESULT_BYTES} bytes on a node's result" in (
        result.error.message
    )


async def test_a_run_timing_out_inside_a_render_records_the_node_cancelled(
    services: NodeServices,
) -> None:
    slow = "{% for i in range(500) %}{% for j in range(300) %}{{ j }}{% endfor %}{% endfor %}"
    raw = chain({"id": "slow", "type": "template", "template": slow}, timeout=0.1)
    result = await run(raw, services)
    assert (result.status, result.status_code) == ("timed_out", 504)
    assert result.error is not None and result.error.node == "slow"
    assert result.timings["slow"].status == "cancelled"
