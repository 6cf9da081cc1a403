"""The code node: JavaScript in a fresh V8 isolate per script, in a sandbox process."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from libflow.engine.javascript import KILL_GRACE_SECONDS
from libflow.engine.render_budget import MAX_RUN_JSON_VALUES
from libflow.engine.run_budget import MAX_NODE_RESULT_BYTES
from tests.conftest import Api
from tests.hostile.conftest import healthz_stays_responsive, peak_rss_growth
from tests.run_helpers import cancel, start, wait_for_status
from tests.workflow_helpers import call, chain, create, output, run_definition, runsync

# What a script that must be stopped may take beyond its timeoutMs to fail its node: the
# answer goes through the sandbox, the run's record and HTTP.
STOP_BOUND_SECONDS = 1.5


def scripted(source: str, *before: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A workflow: ``before`` nodes, then code node ``js`` running ``source``, its output."""
    node = {"id": "js", "type": "code", "source": source, **fields}
    return chain(*before, node, output("out", "{{ nodes.js }}"))


async def outputs_of(api: Api, source: str, *before: dict[str, Any], **body: Any) -> Any:
    """Run a code node's workflow; the ``out`` output of its successful run."""
    status, answer = await run_definition(api, scripted(source, *before), **body)
    assert (status, answer["success"]) == (200, True), answer
    return answer["result"]["outputs"]["out"]


def node_failure(status: int, answer: dict[str, Any]) -> str:
    """The message of a runsync answer that must be a failure of node ``js``."""
    assert status == 500, answer
    error = answer["result"]["error"]
    assert (error["code"], error["node"]) == ("NODE_FAILED", "js"), error
    message: str = error["message"]
    return message


async def publish_problems(api: Api, node: dict[str, Any]) -> list[dict[str, Any]]:
    """Create a workflow holding ``node``: the details of its 400 INVALID_WORKFLOW."""
    definition = chain(node)
    response = await call(api, "POST", "", json={"name": "flow", "definition": definition})
    body = await response.json()
    assert (response.status, body["error"]) == (400, "INVALID_WORKFLOW"), body
    problems: list[dict[str, Any]] = body["details"]
    return problems


# Results


async def test_the_returned_object_is_the_nodes_output(shaped_api: Api) -> None:
    source = "const total = inputs.items.reduce((a, b) => a + b, 0);\nreturn {total, n: 3};"
    out = await outputs_of(shaped_api, source, inputs={"items": [1, 2, 3]})
    assert out == {"total": 6, "n": 3}


async def test_a_value_that_is_not_an_object_is_the_result_field(api: Api) -> None:
    assert await outputs_of(api, "return [1, 'two', null];") == {"result": [1, "two", None]}
    assert await outputs_of(api, "return 'text';") == {"result": "text"}
    assert await outputs_of(api, "const x = 1;") == {"result": None}


async def test_the_script_sees_inputs_nodes_and_event(api: Api) -> None:
    greet = {"id": "greet", "type": "template", "template": "Hello, {{ inputs.name }}!"}
    source = "return {name: inputs.name, greeting: nodes.greet.text, event: event};"
    out = await outputs_of(api, source, greet, inputs={"name": "Ada"})
    assert out == {"name": "Ada", "greeting": "Hello, Ada!", "event": "run"}


async def test_the_output_is_what_later_nodes_read(api: Api) -> None:
    definition = chain(
        {"id": "js", "type": "code", "source": "return {doubled: inputs.n * 2};"},
        output("doubled", "{{ nodes.js.doubled }}"),
    )
    status, answer = await run_definition(api, definition, inputs={"n": 21})
    assert (status, answer["result"]["outputs"]) == (200, {"doubled": 42})


# Errors


async def test_a_thrown_error_fails_the_node_with_its_message_and_line(api: Api) -> None:
    source = "const order = inputs.order;\nif (!order.id) {\n  throw new Error('no order id');\n}"
    status, answer = await run_definition(api, scripted(source), inputs={"order": {}})
    assert node_failure(status, answer) == "no order id (line 3)"


async def test_an_error_of_the_language_names_its_line(api: Api) -> None:
    status, answer = await run_definition(api, scripted("const a = null;\n\nreturn a.b;"))
    assert node_failure(status, answer) == "Cannot read properties of null (reading 'b') (line 3)"


async def test_a_thrown_value_that_is_not_an_error_is_its_text(api: Api) -> None:
    status, answer = await run_definition(api, scripted("\nthrow 'not today';"))
    assert node_failure(status, answer) == "not today (line 2)"


async def test_an_error_inside_a_built_in_names_the_line_that_called_it(api: Api) -> None:
    status, answer = await run_definition(api, scripted("const text = '{';\nJSON.parse(text);"))
    message = node_failure(status, answer)
    assert message.startswith("Expected property name") and message.endswith("(line 2)")


async def test_a_syntax_error_is_refused_at_publish_naming_node_and_line(api: Api) -> None:
    node = {"id": "js", "type": "code", "source": "let x = 1;\nreturn x +;"}
    [problem] = await publish_problems(api, node)
    assert problem == {
        "node": "js",
        "problem": "field 'source' has a syntax error: Unexpected token ';' (line 2)",
    }


async def test_a_source_that_closes_its_function_is_a_syntax_error(api: Api) -> None:
    node = {"id": "js", "type": "code", "source": "}); globalThis.escaped = 1; (function () {"}
    [problem] = await publish_problems(api, node)
    assert problem["problem"].startswith("field 'source' has a syntax error")


async def test_a_missing_source_and_limits_out_of_range_are_refused_at_publish(api: Api) -> None:
    cases = [
        ({}, "missing required field 'source'"),
        ({"source": "  "}, "field 'source' must not be empty"),
        ({"source": "return 1", "timeoutMs": 0}, "field 'timeoutMs' must be at least 1"),
        ({"source": "return 1", "timeoutMs": 30_001}, "and at most 30000"),
        ({"source": "return 1", "memoryMb": 4}, "field 'memoryMb' must be at least 8"),
        ({"source": "return 1", "memoryMb": 1024}, "and at most 512"),
        ({"source": "return 1", "memoryMb": "64"}, "must be an integer, not string"),
    ]
    for fields, expected in cases:
        [problem] = await publish_problems(api, {"id": "js", "type": "code", **fields})
        assert problem["node"] == "js" and expected in problem["problem"], (fields, problem)


async def test_a_returned_promise_fails_the_node(api: Api) -> None:
    status, answer = await run_definition(api, scripted("return Promise.resolve(1);"))
    assert "returned a Promise" in node_failure(status, answer)


async def test_a_return_value_over_the_node_result_limit_fails_the_node(api: Api) -> None:
    source = f"return 'x'.repeat({MAX_NODE_RESULT_BYTES});"
    status, answer = await run_definition(api, scripted(source, memoryMb=128))
    message = node_failure(status, answer)
    assert f"over the limit of {MAX_NODE_RESULT_BYTES} on a node's result" in message


async def test_a_return_value_of_too_many_json_values_fails_the_node(api: Api) -> None:
    # 2.2 MB of text, within a node's result, but more values than a run may parse.
    source = f"return Array({MAX_RUN_JSON_VALUES + 100_000}).fill(0);"
    status, answer = await run_definition(api, scripted(source, memoryMb=128))
    message = node_failure(status, answer)
    assert f"over the run's limit of {MAX_RUN_JSON_VALUES} values parsed" in message


# Limits: time, memory, the engine itself; the server answers meanwhile


async def test_an_endless_loop_fails_within_its_timeout_while_healthz_answers(api: Api) -> None:
    created = await create(api, scripted("while (true) {}", timeoutMs=500))
    async with healthz_stays_responsive(api.client):
        started = time.monotonic()
        status, answer = await runsync(api, created["workflowId"])
        elapsed = time.monotonic() - started
    assert node_failure(status, answer) == "the script ran longer than its timeoutMs of 500 ms"
    assert 0.5 <= elapsed < 0.5 + STOP_BOUND_SECONDS


async def test_a_memory_bomb_fails_the_node_and_scripts_go_on(api: Api) -> None:
    source = "const kept = [];\nwhile (true) kept.push(new Array(100000).fill(1.5));"
    created = await create(api, scripted(source, memoryMb=16, timeoutMs=10_000))
    async with healthz_stays_responsive(api.client):
        with peak_rss_growth() as growth:  # the server's own: V8's heap is the sandbox's
            status, answer = await runsync(api, created["workflowId"])
    assert node_failure(status, answer) == (
        "the script needed more memory than its memoryMb of 16 MiB"
    )
    assert growth.mib < 50, f"the server's peak RSS grew {growth.mib:.0f} MiB"
    assert await outputs_of(api, "return 1 + 1;") == {"result": 2}


async def test_a_script_that_aborts_v8_fails_the_node_and_scripts_go_on(api: Api) -> None:
    # V8 ends its process on this one (a fatal "invalid size" error): only the sandbox goes.
    source = "const text = 'x'.repeat(2 ** 29 - 30);\nreturn text.split('').length;"
    created = await create(api, scripted(source, timeoutMs=10_000))
    async with healthz_stays_responsive(api.client):
        status, answer = await runsync(api, created["workflowId"])
    assert "stopped the JavaScript engine" in node_failure(status, answer)
    assert await outputs_of(api, "return 1 + 1;") == {"result": 2}


async def test_a_script_v8_cannot_stop_is_killed_past_its_timeout(api: Api) -> None:
    # One regex replace over 512 Mi characters never looks at V8's termination request:
    # alone it runs some 15 s, until V8's heap limit aborts its process.
    source = "const text = 'x'.repeat(2 ** 29 - 30);\nreturn text.replace(/x/g, 'y').length;"
    created = await create(api, scripted(source, timeoutMs=500))
    async with healthz_stays_responsive(api.client):
        started = time.monotonic()
        status, answer = await runsync(api, created["workflowId"])
        elapsed = time.monotonic() - started
    assert node_failure(status, answer) == "the script ran longer than its timeoutMs of 500 ms"
    assert elapsed < 0.5 + KILL_GRACE_SECONDS + STOP_BOUND_SECONDS
    assert await outputs_of(api, "return 1 + 1;") == {"result": 2}


async def test_the_run_timeout_stops_a_script_with_time_left(api: Api) -> None:
    definition = scripted("while (true) {}", timeoutMs=30_000)
    definition["timeoutSeconds"] = 1
    created = await create(api, definition)
    started = time.monotonic()
    status, answer = await runsync(api, created["workflowId"])
    assert (status, answer["result"]["error"]["code"]) == (504, "RUN_TIMEOUT")
    assert time.monotonic() - started < 1 + STOP_BOUND_SECONDS


async def test_a_cancelled_run_stops_its_script(api: Api) -> None:
    created = await create(api, scripted("while (true) {}", timeoutMs=30_000))
    run = await start(api, created["workflowId"])
    await wait_for_status(api, run["runId"], {"running"})
    await asyncio.sleep(0.3)  # the script is in its loop
    cancelled_at = time.monotonic()
    response = await cancel(api, run["runId"])
    assert response.status == 202, await response.text()
    finished = await wait_for_status(api, run["runId"])
    assert finished["status"] == "cancelled"
    assert time.monotonic() - cancelled_at < 1.0
    assert await outputs_of(api, "return 'after';") == {"result": "after"}


# What a script can reach: nothing of the host, nothing of another run


async def test_the_host_is_out_of_reach(api: Api) -> None:
    names = [
        "require", "process", "fetch", "XMLHttpRequest", "WebSocket", "Deno", "Bun",
        "setTimeout", "setInterval", "ArrayBuffer", "SharedArrayBuffer", "Uint8Array",
        "WebAssembly", "Atomics", "load", "read", "readFile", "os",
    ]  # fmt: skip
    source = f"return Object.fromEntries({names!r}.map(n => [n, typeof globalThis[n]]));"
    assert await outputs_of(api, source) == dict.fromkeys(names, "undefined")


async def test_a_module_import_does_not_load_anything(api: Api) -> None:
    status, answer = await run_definition(api, scripted("return import('node:fs');"))
    assert "returned a Promise" in node_failure(status, answer)


async def test_globals_set_by_one_run_are_not_seen_by_the_next(api: Api) -> None:
    polluter = "globalThis.leaked = inputs.secret;\nObject.prototype.polluted = 'yes';\nreturn {}"
    await outputs_of(api, polluter, inputs={"secret": "s3cret"})
    reader = "return {leaked: typeof leaked, polluted: typeof ({}).polluted};"
    assert await outputs_of(api, reader) == {"leaked": "undefined", "polluted": "undefined"}


async def test_several_scripts_run_at_once(api: Api) -> None:
    # Each script waits 300 ms of wall time: four run side by side, not one after another.
    source = "const end = Date.now() + 300;\nwhile (Date.now() < end) {}\nreturn {n: inputs.n};"
    created = await create(api, scripted(source))
    workflow_id = created["workflowId"]
    await asyncio.gather(*(runsync(api, workflow_id, inputs={"n": n}) for n in range(4)))  # warm
    started = time.monotonic()
    answers = await asyncio.gather(*(runsync(api, workflow_id, inputs={"n": n}) for n in range(4)))
    elapsed = time.monotonic() - started
    assert [answer["result"]["outputs"]["out"] for _, answer in answers] == [
        {"n": n} for n in range(4)
    ]
    assert elapsed < 4 * 0.3 - 0.2, f"4 scripts of 0.3 s took {elapsed:.2f} s"
