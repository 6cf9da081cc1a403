"""Workflows that run workflows: call_workflow once, map per item; sub-runs are runs too."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

import pytest

from libflow.engine import run_budget
from libflow.engine.run_budget import MAX_SUB_RUNS_AT_ONCE
from tests.conftest import Api, new_project
from tests.run_helpers import cancel, start, wait_for_status
from tests.workflow_helpers import (
    call,
    chain,
    create,
    get_run,
    mapper,
    nested_maps,
    ok_json,
    output,
    publish,
    runs_of,
    runsync,
)


def doubler(wait: float = 0) -> dict[str, Any]:
    """A workflow that outputs twice its input ``n`` (after ``wait`` seconds)."""
    nodes: list[dict[str, Any]] = [
        {"id": "n", "type": "input", "name": "n", "valueType": "number", "required": True}
    ]
    if wait:
        nodes.append({"id": "wait", "type": "delay", "seconds": wait})
    return chain(*nodes, output("doubled", "{{ inputs.n * 2 }}"))


def caller(workflow_id: str, **fields: Any) -> dict[str, Any]:
    """A workflow whose call node runs ``workflow_id`` and outputs what it returned."""
    node = {"id": "sub", "type": "call_workflow", "workflowId": workflow_id, **fields}
    return chain(node, output("got", "{{ nodes.sub.outputs }}"))


async def test_call_workflow_returns_the_sub_runs_outputs_and_records_it(
    shaped_api: Api,
) -> None:
    api = shaped_api
    child = await create(api, doubler(), name="child")
    parent = await create(api, caller(child["workflowId"], inputs={"n": "{{ 20 + 1 }}"}))
    status, body = await runsync(api, parent["workflowId"])
    assert status == 200, body
    assert body["result"]["outputs"] == {"got": {"doubled": 42}}
    [parent_run] = await runs_of(api, parent["workflowId"])
    [sub_run] = await runs_of(api, child["workflowId"])
    assert (sub_run["trigger"], sub_run["parentRunId"], sub_run["status"]) == (
        "call",
        parent_run["runId"],
        "succeeded",
    )
    assert sub_run["inputs"] == {"n": 21}
    assert parent_run["parentRunId"] is None


async def test_a_call_runs_the_named_version(api: Api) -> None:
    child = await create(api, chain(output("v", 1)), name="child")
    await publish(api, child["workflowId"], chain(output("v", 2)))
    pinned = await create(api, caller(child["workflowId"], version="1"))
    latest = await create(api, caller(child["workflowId"]))
    assert (await runsync(api, pinned["workflowId"]))[1]["result"]["outputs"] == {"got": {"v": 1}}
    assert (await runsync(api, latest["workflowId"]))[1]["result"]["outputs"] == {"got": {"v": 2}}


async def test_a_failed_sub_run_fails_the_calling_node(api: Api) -> None:
    child = await create(api, chain({"id": "boom", "type": "fail", "message": "no stock"}))
    parent = await create(api, caller(child["workflowId"]))
    status, body = await runsync(api, parent["workflowId"])
    error = body["result"]["error"]
    assert (status, error["code"], error["node"]) == (500, "NODE_FAILED", "sub")
    assert "ended failed: no stock" in error["message"]


async def test_a_sub_run_refusing_its_inputs_fails_the_calling_node(api: Api) -> None:
    child = await create(api, doubler(), name="child")
    parent = await create(api, caller(child["workflowId"], inputs={"n": "many"}))
    status, body = await runsync(api, parent["workflowId"])
    assert (status, body["result"]["error"]["node"]) == (500, "sub")
    message = body["result"]["error"]["message"]
    assert message.startswith(f"workflow {child['workflowId']}: "), message  # whose inputs
    assert "input 'n' must be of type number" in message


async def test_a_call_of_a_version_that_does_not_exist_fails_at_run_time(api: Api) -> None:
    child = await create(api, doubler(), name="child")
    parent = await create(api, caller(child["workflowId"], version="7", inputs={"n": 1}))
    status, body = await runsync(api, parent["workflowId"])
    assert status == 500
    assert "has no version '7'" in body["result"]["error"]["message"]


async def test_map_runs_each_item_in_order_at_most_concurrency_at_once(api: Api) -> None:
    # Each item runs the workflow with inputs {item, index}.
    child = await create(
        api,
        chain(
            {"id": "wait", "type": "delay", "seconds": 0.05},
            output("doubled", "{{ inputs.item * 2 }}"),
            output("index", "{{ inputs.index }}"),
        ),
        name="child",
    )
    parent = await create(api, mapper(child["workflowId"], "{{ range(100) | list }}"))
    status, body = await runsync(api, parent["workflowId"])
    assert status == 200, body
    results = body["result"]["outputs"]["results"]
    assert results == [{"doubled": 2 * i, "index": i} for i in range(100)]
    sub_runs = [r for r in await runs_of(api, child["workflowId"]) if r["trigger"] == "call"]
    assert len(sub_runs) == 100
    assert 2 <= _most_at_once(sub_runs) <= 4


def _most_at_once(runs: list[dict[str, Any]]) -> int:
    """The most runs whose [startedDate, finishedDate) overlapped."""
    moments: list[tuple[datetime, int]] = []
    for run in runs:
        moments.append((datetime.fromisoformat(run["startedDate"]), 1))
        moments.append((datetime.fromisoformat(run["finishedDate"]), -1))
    most = current = 0
    for _, change in sorted(moments):  # an end sorts before a start at the same moment
        current += change
        most = max(most, current)
    return most


async def test_a_failing_item_fails_the_map(api: Api) -> None:
    fails_on_three = {
        "nodes": [
            {"id": "start", "type": "event", "event": "run"},
            {"id": "check", "type": "condition", "if": "{{ inputs.item == 3 }}"},
            {"id": "boom", "type": "fail", "message": "item three"},
        ],
        "edges": [
            {"from": "start", "to": "check"},
            {"from": "check", "to": "boom", "when": "true"},
        ],
    }
    child = await create(api, fails_on_three, name="child")
    parent = await create(api, mapper(child["workflowId"], "{{ range(6) | list }}"))
    status, body = await runsync(api, parent["workflowId"])
    assert (status, body["result"]["error"]["node"]) == (500, "each")
    message = body["result"]["error"]["message"]
    assert message.startswith("item 3: sub-run "), message  # which item, to find it
    assert "item three" in message


async def test_a_call_of_a_workflow_without_a_run_event_says_it_starts_there(api: Api) -> None:
    hooked = {"nodes": [{"id": "start", "type": "event", "event": "webhook"}], "edges": []}
    child = await create(api, hooked, name="child")
    parent = await create(api, caller(child["workflowId"]))
    status, body = await runsync(api, parent["workflowId"])
    message = body["result"]["error"]["message"]
    assert (status, body["result"]["error"]["node"]) == (500, "sub")
    assert message.startswith(f"workflow {child['workflowId']}: "), message
    assert message.endswith("(a called workflow starts at its run event)"), message


async def test_a_map_stops_once_its_results_pass_a_nodes_limit(api: Api) -> None:
    # Each item outputs 1 MB: a node's result holds 8 MiB, and 20 items would be 20 MB.
    child = await create(api, chain(output("x", "{{ 'x' * 1000000 }}")), name="child")
    parent = await create(api, mapper(child["workflowId"], "{{ range(20) | list }}", 1))
    status, body = await runsync(api, parent["workflowId"])
    assert (status, body["result"]["error"]["node"]) == (500, "each")
    assert "the map's results would be over the limit" in body["result"]["error"]["message"]
    response = await api.client.get(
        f"/api/publicv1/projects/{api.project_id}/runs?trigger=call", headers=api.headers
    )
    assert len(await ok_json(response)) < 12  # stopped as it passed the limit, not at the end


async def test_map_items_that_are_not_a_list_fail_the_node(api: Api) -> None:
    child = await create(api, chain(output("x", 1)), name="child")
    parent = await create(api, mapper(child["workflowId"], "{{ 'abc' }}"))
    status, body = await runsync(api, parent["workflowId"])
    assert status == 500
    assert "must render to a list" in body["result"]["error"]["message"]


async def test_recursion_past_depth_five_fails_the_calling_node(api: Api) -> None:
    looping = await create(api, chain(output("x", 1)), name="loop")
    await publish(api, looping["workflowId"], caller(looping["workflowId"]))
    status, body = await runsync(api, looping["workflowId"])
    assert status == 500
    assert "calls nest at most 5 deep" in body["result"]["error"]["message"]
    calls = [r for r in await runs_of(api, looping["workflowId"]) if r["trigger"] == "call"]
    assert len(calls) == 5  # depths 1..5; the sixth call was refused


async def test_cancelling_a_parent_cancels_its_sub_run(api: Api) -> None:
    child = await create(api, chain({"id": "wait", "type": "delay", "seconds": 30}), name="child")
    parent = await create(api, caller(child["workflowId"]))
    queued = await start(api, parent["workflowId"])
    sub_run = await _sub_run_running(api, child["workflowId"])
    await ok_json(await cancel(api, queued["runId"]), 202)
    assert (await wait_for_status(api, queued["runId"], timeout=2))["status"] == "cancelled"
    stopped = await wait_for_status(api, sub_run["runId"], timeout=2)
    assert (stopped["status"], stopped["parentRunId"]) == ("cancelled", queued["runId"])


async def test_a_parents_timeout_stops_its_sub_run(api: Api) -> None:
    child = await create(api, chain({"id": "wait", "type": "delay", "seconds": 30}), name="child")
    parent = await create(api, {**caller(child["workflowId"]), "timeoutSeconds": 1.5})
    status, body = await runsync(api, parent["workflowId"])
    assert (status, body["result"]["error"]["code"]) == (504, "RUN_TIMEOUT")
    [sub_run] = await runs_of(api, child["workflowId"])
    assert sub_run["status"] == "cancelled"


async def _sub_run_running(api: Api, workflow_id: str) -> dict[str, Any]:
    """Wait until the workflow has a running sub-run (recorded after a second)."""
    for _ in range(100):
        running = [r for r in await runs_of(api, workflow_id) if r["status"] == "running"]
        if running:
            return running[0]
        await asyncio.sleep(0.05)
    raise AssertionError("no sub-run was recorded as running")


async def test_a_call_of_another_projects_workflow_is_refused_at_publish(api: Api) -> None:
    other_id, other_key = await new_project("other")
    other = Api(api.client, api.shape, other_id, other_key)
    theirs = await create(other, doubler())
    response = await call(
        api, "POST", "", json={"name": "x", "definition": caller(theirs["workflowId"])}
    )
    body = await response.json()
    assert (response.status, body["error"]) == (400, "INVALID_WORKFLOW")
    assert body["details"] == [
        {
            "node": "sub",
            "problem": f"workflow {theirs['workflowId']!r} is not a workflow of this project",
        }
    ]


async def test_a_call_node_without_a_workflow_is_refused_at_publish(api: Api) -> None:
    definition = chain({"id": "sub", "type": "call_workflow"})
    response = await call(api, "POST", "", json={"name": "x", "definition": definition})
    body = await response.json()
    assert (response.status, body["error"]) == (400, "INVALID_WORKFLOW")
    assert body["details"][0]["node"] == "sub"


async def test_sub_runs_are_found_by_the_call_trigger(api: Api) -> None:
    child = await create(api, doubler(), name="child")
    parent = await create(api, caller(child["workflowId"], inputs={"n": 1}))
    await runsync(api, parent["workflowId"])
    response = await api.client.get(
        f"/api/publicv1/projects/{api.project_id}/runs?trigger=call", headers=api.headers
    )
    [sub_run] = await ok_json(response)
    assert sub_run == await get_run(api, sub_run["runId"])


# --- what the sub-runs under one run share ---------------------------------------------------


def pause_then(seconds: float, *nodes: dict[str, Any]) -> dict[str, Any]:
    return chain(*nodes, {"id": "wait", "type": "delay", "seconds": seconds}, output("x", 1))


async def leaf_runs(api: Api) -> list[dict[str, Any]]:
    [leaf] = [w for w in await ok_json(await call(api, "GET", "")) if w["name"] == "leaf"]
    response = await call(api, "GET", f"/{leaf['workflowId']}/runs?limit=1000")
    runs: list[dict[str, Any]] = await ok_json(response)
    return runs


async def test_sub_runs_of_one_depth_run_at_most_32_at_once_whatever_the_maps_allow(
    api: Api,
) -> None:
    # 8 maps of 16 at once would run 128 leaves at once: the run's sub-runs share 32 slots.
    top = await nested_maps(api, pause_then(0.2), 8, 16)
    status, body = await runsync(api, top)
    assert status == 200, body
    leaves = await leaf_runs(api)
    assert len(leaves) == 128
    assert 16 < _most_at_once(leaves) <= MAX_SUB_RUNS_AT_ONCE


async def test_a_run_starts_at_most_max_sub_runs_its_sub_runs_own_included(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_budget, "MAX_SUB_RUNS", 20)
    top = await nested_maps(api, chain(output("x", 1)), 4, 5)  # 4 + 4 * 5 = 24 sub-runs
    status, body = await runsync(api, top)
    assert (status, body["result"]["error"]["code"]) == (500, "NODE_FAILED"), body
    assert (
        "a run starts at most 20 sub-runs, its sub-runs' own included"
        in (body["result"]["error"]["message"])
    )
    assert len(await leaf_runs(api)) <= 20 - 4

    # The limit is each run's: the next run starts its own 20.
    single = await nested_maps(api, chain(output("x", 1)), 10)
    assert (await runsync(api, single))[0] == 200


async def test_the_results_running_sub_runs_hold_together_are_bounded(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each leaf holds a 500 KB text while it waits; together they may hold 1.2 MB.
    monkeypatch.setattr(run_budget, "MAX_SUB_RUN_RESULTS_BYTES", 1_200_000)
    text = {"id": "text", "type": "template", "template": "{{ 'x' * 500000 }}"}
    four_at_once = await nested_maps(api, pause_then(0.3, text), 4)
    status, body = await runsync(api, four_at_once)
    assert status == 500, body
    assert (
        "would take the results the running sub-runs hold over their limit of 1200000"
        in (body["result"]["error"]["message"])
    )


async def test_a_sub_run_that_ended_gives_back_what_it_held(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_budget, "MAX_SUB_RUN_RESULTS_BYTES", 1_200_000)
    text = {"id": "text", "type": "template", "template": "{{ 'x' * 500000 }}"}
    leaf = (await create(api, pause_then(0.05, text), name="leaf"))["workflowId"]
    # Ten leaves of 500 KB, two at a time: 5 MB in all, 1 MB at once.
    two_at_once = await create(api, mapper(leaf, "{{ range(10) | list }}", 2))
    status, body = await runsync(api, two_at_once["workflowId"])
    assert status == 200, body
