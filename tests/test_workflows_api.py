"""Workflows through the public HTTP API: management, versions, runsync and run records."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from tests.conftest import (
    Api,
    ClientFactory,
    Shape,
    base_settings,
    fixture_bytes,
    linked_pages,
    new_project,
    wait_until_processed,
)
from tests.library_helpers import assert_error
from tests.workflow_helpers import (
    SPEC_EXAMPLE,
    call,
    chain,
    create,
    get_run,
    ok_json,
    output,
    publish,
    run_definition,
    runs_of,
    runsync,
    version_marker,
    workflows_url,
)

API = "/api/publicv1"

# Management


async def test_create_returns_201_with_id_name_version_1_and_date(api: Api) -> None:
    created = await create(api, SPEC_EXAMPLE, name="Greeter")
    assert set(created) == {"workflowId", "name", "version", "createdDate"}
    assert created["name"] == "Greeter"
    assert created["version"] == "1"
    assert isinstance(created["workflowId"], str)
    assert len(created["workflowId"]) >= 16
    assert created["createdDate"].endswith("Z")


async def test_publish_numbers_versions_2_then_3(api: Api) -> None:
    created = await create(api, version_marker("1"))
    second = await publish(api, created["workflowId"], version_marker("2"))
    third = await publish(api, created["workflowId"], version_marker("3"))
    assert second["version"] == "2"
    assert third["version"] == "3"


async def test_list_shows_the_projects_workflows_with_their_latest_version(api: Api) -> None:
    first = await create(api, version_marker("1"), name="first")
    second = await create(api, version_marker("1"), name="second")
    await publish(api, second["workflowId"], version_marker("2"))

    listed = await ok_json(await call(api, "GET", ""))

    by_id = {w["workflowId"]: w for w in listed}
    assert set(by_id) == {first["workflowId"], second["workflowId"]}
    assert by_id[first["workflowId"]]["name"] == "first"
    assert by_id[first["workflowId"]]["version"] == "1"
    assert by_id[second["workflowId"]]["version"] == "2"


async def test_workflows_are_paged_newest_first_by_link(api: Api) -> None:
    made = [await create(api, version_marker("1"), name=f"w{n}") for n in range(5)]
    pages = await linked_pages(api, f"{API}/projects/{api.project_id}/workflows?limit=2")
    assert [len(page) for page in pages] == [2, 2, 1]
    listed = [w["workflowId"] for page in pages for w in page]
    assert listed == [w["workflowId"] for w in reversed(made)]


async def test_a_workflow_page_with_a_bad_limit_or_cursor_is_400(api: Api) -> None:
    for params in ({"limit": "0"}, {"cursor": "nope"}):
        response = await api.client.get(
            f"{API}/projects/{api.project_id}/workflows", params=params, headers=api.headers
        )
        error = await assert_error(response, 400, "VALIDATION_ERROR")
        assert [d["field"] for d in error["details"]] == list(params)


async def test_get_returns_the_latest_definition_and_every_version(api: Api) -> None:
    created = await create(api, version_marker("1"))
    await publish(api, created["workflowId"], version_marker("2"))

    got = await ok_json(await call(api, "GET", f"/{created['workflowId']}"))

    assert got["workflowId"] == created["workflowId"]
    assert got["version"] == "2"
    assert got["definition"] == version_marker("2")
    assert [v["version"] for v in got["versions"]] == ["1", "2"]
    assert all(v["createdDate"].endswith("Z") for v in got["versions"])


async def test_publishing_a_version_moves_the_workflows_updated_date_to_it(api: Api) -> None:
    created = await create(api, version_marker("1"))
    await asyncio.sleep(0.01)  # dates are in milliseconds
    await publish(api, created["workflowId"], version_marker("2"))

    got = await ok_json(await call(api, "GET", f"/{created['workflowId']}"))
    [listed] = await ok_json(await call(api, "GET", ""))

    assert got["updatedDate"] == got["versions"][-1]["createdDate"] != created["createdDate"]
    assert listed["updatedDate"] == got["updatedDate"]


async def test_each_version_is_read_with_the_definition_it_was_published_with(api: Api) -> None:
    created = await create(api, version_marker("1"))
    second = await publish(api, created["workflowId"], version_marker("2"))
    first = await ok_json(await call(api, "GET", f"/{created['workflowId']}/versions/1"))
    latest = await ok_json(await call(api, "GET", f"/{created['workflowId']}/versions/2"))
    assert first["definition"] == version_marker("1")
    assert first["version"] == "1"
    assert latest == {**second, "definition": version_marker("2")}


@pytest.mark.parametrize("version", ["3", "0", "latest", "1.0"])
async def test_a_version_that_does_not_exist_is_404(api: Api, version: str) -> None:
    created = await create(api, version_marker("1"))
    response = await call(api, "GET", f"/{created['workflowId']}/versions/{version}")
    await assert_error(response, 404, "NOT_FOUND")


async def test_rename_changes_the_name_and_keeps_versions_and_runs(api: Api) -> None:
    created = await create(api, SPEC_EXAMPLE, name="Greeter")
    await runsync(api, created["workflowId"], inputs={"name": "Ada"})
    await asyncio.sleep(0.01)  # dates are in milliseconds
    renamed = await ok_json(
        await call(api, "PATCH", f"/{created['workflowId']}", json={"name": "Welcomer"})
    )
    assert (renamed["name"], renamed["version"]) == ("Welcomer", "1")
    assert renamed["updatedDate"] > created["createdDate"]
    assert [w["name"] for w in await ok_json(await call(api, "GET", ""))] == ["Welcomer"]
    assert len(await runs_of(api, created["workflowId"])) == 1


@pytest.mark.parametrize("body", [{}, {"name": ""}, {"name": "n" * 201}])
async def test_rename_with_a_bad_name_is_400_and_keeps_the_old_one(
    api: Api, body: dict[str, str]
) -> None:
    created = await create(api, SPEC_EXAMPLE, name="Greeter")
    response = await call(api, "PATCH", f"/{created['workflowId']}", json=body)
    error = await assert_error(response, 400, "VALIDATION_ERROR")
    assert [d["field"] for d in error["details"]] == ["name"]
    assert (await ok_json(await call(api, "GET", f"/{created['workflowId']}")))["name"] == "Greeter"


async def test_rename_of_an_unknown_workflow_is_404(api: Api) -> None:
    response = await call(api, "PATCH", "/nosuchworkflow", json={"name": "x"})
    await assert_error(response, 404, "NOT_FOUND")


async def test_create_with_a_name_of_200_characters_keeps_it(api: Api) -> None:
    created = await create(api, SPEC_EXAMPLE, name="n" * 200)
    got = await ok_json(await call(api, "GET", f"/{created['workflowId']}"))
    assert got["name"] == "n" * 200


async def test_create_with_a_name_over_200_characters_is_400_naming_the_field(api: Api) -> None:
    response = await call(api, "POST", "", json={"name": "n" * 201, "definition": SPEC_EXAMPLE})
    error = await assert_error(response, 400, "VALIDATION_ERROR")
    assert [d["field"] for d in error["details"]] == ["name"]
    assert await ok_json(await call(api, "GET", "")) == []


async def test_get_of_an_unknown_workflow_is_404(api: Api) -> None:
    await assert_error(await call(api, "GET", "/nosuchworkflow"), 404, "NOT_FOUND")


# Validation on create and publish


async def test_create_with_an_unknown_node_type_is_invalid_workflow_naming_the_node(
    api: Api,
) -> None:
    definition = chain({"id": "mystery", "type": "teleport"})
    response = await call(api, "POST", "", json={"name": "bad", "definition": definition})
    body = await assert_error(response, 400, "INVALID_WORKFLOW")
    assert {"node": "mystery", "problem": "unknown node type 'teleport'"} in body["details"]
    assert await ok_json(await call(api, "GET", "")) == []


async def test_create_with_a_cycle_is_invalid_workflow_naming_the_node(api: Api) -> None:
    definition = chain(
        {"id": "a", "type": "template", "template": "a"},
        {"id": "b", "type": "template", "template": "b"},
    )
    definition["edges"].append({"from": "b", "to": "a"})
    response = await call(api, "POST", "", json={"name": "bad", "definition": definition})
    body = await assert_error(response, 400, "INVALID_WORKFLOW")
    assert [d["node"] for d in body["details"]] == ["a"]
    assert "cycle" in body["details"][0]["problem"]


async def test_publish_with_bad_template_syntax_is_invalid_workflow_and_adds_no_version(
    api: Api,
) -> None:
    created = await create(api, version_marker("1"))
    definition = chain({"id": "greet", "type": "template", "template": "Hello {{ inputs.name "})
    response = await call(
        api, "POST", f"/{created['workflowId']}/versions", json={"definition": definition}
    )
    body = await assert_error(response, 400, "INVALID_WORKFLOW")
    assert [d["node"] for d in body["details"]] == ["greet"]
    assert "template" in body["details"][0]["problem"]
    got = await ok_json(await call(api, "GET", f"/{created['workflowId']}"))
    assert [v["version"] for v in got["versions"]] == ["1"]


async def test_publish_with_a_dangling_edge_is_invalid_workflow(api: Api) -> None:
    created = await create(api, version_marker("1"))
    definition = version_marker("2")
    definition["edges"].append({"from": "out_version", "to": "ghost"})
    response = await call(
        api, "POST", f"/{created['workflowId']}/versions", json={"definition": definition}
    )
    body = await assert_error(response, 400, "INVALID_WORKFLOW")
    assert body["details"] == [
        {
            "node": "out_version",
            "problem": "edge out_version -> ghost refers to unknown node 'ghost'",
        }
    ]


# runsync: versions and events


async def test_runsync_without_a_version_runs_the_latest(api: Api) -> None:
    created = await create(api, version_marker("1"))
    await publish(api, created["workflowId"], version_marker("2"))
    status, body = await runsync(api, created["workflowId"])
    assert status == 200
    assert body["result"]["outputs"] == {"version": "2"}


async def test_runsync_with_an_explicit_version_runs_that_version(api: Api) -> None:
    created = await create(api, version_marker("1"))
    await publish(api, created["workflowId"], version_marker("2"))
    status, body = await runsync(api, created["workflowId"], version="1")
    assert status == 200
    assert body["result"]["outputs"] == {"version": "1"}


# Versions are named "1", "2", ...: "01" or "1_0" name none of them, though int() reads them.
@pytest.mark.parametrize("version", ["7", "0", "-1", "01", "1_0", " 1", "1.0", "one"])
async def test_runsync_with_an_unknown_version_is_404(api: Api, version: str) -> None:
    created = await create(api, version_marker("1"))
    response = await call(
        api, "POST", f"/{created['workflowId']}/runsync", json={"version": version}
    )
    await assert_error(response, 404, "NOT_FOUND")
    assert await runs_of(api, created["workflowId"]) == []


def two_events() -> dict[str, Any]:
    """A workflow with a "run" event and a custom "refund" event, each with its own output."""
    return {
        "nodes": [
            {"id": "on_run", "type": "event", "event": "run"},
            {"id": "on_refund", "type": "event", "event": "refund"},
            output("path", "run", "ran"),
            output("path", "refund", "refunded"),
        ],
        "edges": [{"from": "on_run", "to": "ran"}, {"from": "on_refund", "to": "refunded"}],
    }


async def test_runsync_without_run_event_starts_at_the_run_event(api: Api) -> None:
    status, body = await run_definition(api, two_events())
    assert status == 200
    assert body["result"]["outputs"] == {"path": "run"}


async def test_runsync_with_a_custom_event_starts_at_its_event_node(api: Api) -> None:
    status, body = await run_definition(api, two_events(), runEvent="refund")
    assert status == 200
    assert body["result"]["outputs"] == {"path": "refund"}


async def test_runsync_with_an_unknown_event_is_400_unknown_event(api: Api) -> None:
    created = await create(api, two_events())
    response = await call(
        api, "POST", f"/{created['workflowId']}/runsync", json={"runEvent": "explode"}
    )
    body = await assert_error(response, 400, "UNKNOWN_EVENT")
    assert "explode" in body["message"]
    # Refused, and recorded as a failed run, as a webhook's refused run is.
    [run] = await runs_of(api, created["workflowId"])
    assert (run["status"], run["trigger"], run["event"]) == ("failed", "api", "explode")
    assert run["error"]["code"] == "UNKNOWN_EVENT"


async def test_runsync_with_invalid_inputs_is_400_with_one_detail_each(api: Api) -> None:
    definition = chain(
        {"id": "n", "type": "input", "name": "name", "valueType": "string", "required": True},
        {"id": "c", "type": "input", "name": "count", "valueType": "number"},
    )
    created = await create(api, definition)
    response = await call(
        api,
        "POST",
        f"/{created['workflowId']}/runsync",
        json={"inputs": {"count": "three"}},
    )
    body = await assert_error(response, 400, "INVALID_INPUTS")
    assert body["details"] == [
        {"input": "name", "problem": "is required"},
        {"input": "count", "problem": "must be of type number"},
    ]
    [run] = await runs_of(api, created["workflowId"])
    assert (run["status"], run["statusCode"], run["inputs"]) == ("failed", 400, {"count": "three"})
    assert run["error"]["code"] == "INVALID_INPUTS"


# runsync: results


async def test_runsync_success_body_and_status(api: Api) -> None:
    definition = chain(
        {"id": "n", "type": "input", "name": "n", "valueType": "number", "default": 2},
        output("doubled", "{{ inputs.n * 2 }}"),
        output("label", "n={{ inputs.n }}"),
    )
    status, body = await run_definition(api, definition, inputs={"n": 21})
    assert status == 200
    assert body == {
        "success": True,
        "result": {"outputs": {"doubled": 42, "label": "n=21"}},
        "statusCode": 200,
    }


@pytest.mark.parametrize("code", [201, 202])
async def test_respond_node_sets_the_http_status(api: Api, code: int) -> None:
    definition = chain(
        {"id": "accepted", "type": "respond", "statusCode": code}, output("ok", True)
    )
    status, body = await run_definition(api, definition)
    assert status == code
    assert body == {"success": True, "result": {"outputs": {"ok": True}}, "statusCode": code}


async def test_node_failure_is_500_node_failed_with_the_outputs_so_far(api: Api) -> None:
    definition = chain(
        output("before", "set"),
        {"id": "broken", "type": "template", "template": "{{ inputs.missing.deeper }}"},
        output("after", "never"),
    )
    status, body = await run_definition(api, definition)
    assert status == 500
    assert body["success"] is False
    assert body["statusCode"] == 500
    assert body["result"]["outputs"] == {"before": "set"}
    error = body["result"]["error"]
    assert error["code"] == "NODE_FAILED"
    assert error["node"] == "broken"
    assert error["message"]


async def test_fail_node_answers_with_its_status_code_and_message(api: Api) -> None:
    definition = chain(
        output("checked", "yes"),
        {"id": "reject", "type": "fail", "message": "not allowed: {{ event }}", "statusCode": 422},
    )
    status, body = await run_definition(api, definition)
    assert status == 422
    assert body == {
        "success": False,
        "result": {
            "outputs": {"checked": "yes"},
            "error": {"code": "NODE_FAILED", "node": "reject", "message": "not allowed: run"},
        },
        "statusCode": 422,
    }


async def test_run_past_its_timeout_is_504_with_the_outputs_so_far(api: Api) -> None:
    definition = chain(
        output("early", "done"),
        {"id": "wait", "type": "delay", "seconds": 5},
        output("late", "never"),
        timeout=1,
    )
    started = time.monotonic()
    status, body = await run_definition(api, definition)
    elapsed = time.monotonic() - started
    assert status == 504
    assert body["success"] is False
    assert body["statusCode"] == 504
    assert body["result"]["outputs"] == {"early": "done"}
    assert body["result"]["error"]["code"] == "RUN_TIMEOUT"
    assert body["result"]["error"]["node"] == "wait"
    assert 1 <= elapsed < 3


async def test_independent_branches_run_concurrently(api: Api) -> None:
    definition = {
        "nodes": [
            {"id": "start", "type": "event", "event": "run"},
            {"id": "left", "type": "delay", "seconds": 1},
            {"id": "right", "type": "delay", "seconds": 1},
            output("left", "done", "left_out"),
            output("right", "done", "right_out"),
        ],
        "edges": [
            {"from": "start", "to": "left"},
            {"from": "start", "to": "right"},
            {"from": "left", "to": "left_out"},
            {"from": "right", "to": "right_out"},
        ],
    }
    created = await create(api, definition)
    started = time.monotonic()
    status, body = await runsync(api, created["workflowId"])
    elapsed = time.monotonic() - started
    assert status == 200
    assert body["result"]["outputs"] == {"left": "done", "right": "done"}
    assert 1 <= elapsed < 1.7


async def test_spec_example_workflow_greets(api: Api) -> None:
    status, body = await run_definition(api, SPEC_EXAMPLE, inputs={"name": "Ada"})
    assert status == 200
    assert body == {
        "success": True,
        "result": {"outputs": {"greeting": "Hello, Ada!"}},
        "statusCode": 200,
    }


# Run records


async def test_every_run_is_recorded_and_listed_newest_first(api: Api) -> None:
    created = await create(api, SPEC_EXAMPLE)
    workflow_id = created["workflowId"]
    for name in ("first", "second", "third"):
        status, _ = await runsync(api, workflow_id, inputs={"name": name})
        assert status == 200
    runs = await runs_of(api, workflow_id)
    assert [r["inputs"]["name"] for r in runs] == ["third", "second", "first"]
    assert len({r["runId"] for r in runs}) == 3


async def test_run_record_of_a_success(api: Api) -> None:
    created = await create(api, SPEC_EXAMPLE)
    await publish(api, created["workflowId"], SPEC_EXAMPLE)
    await runsync(api, created["workflowId"], version="1", inputs={"name": "Ada", "extra": 1})
    [listed] = await runs_of(api, created["workflowId"])

    run = await get_run(api, listed["runId"])

    assert run == listed
    assert run["workflowId"] == created["workflowId"]
    assert run["trigger"] == "api"
    assert run["version"] == "1"
    assert run["event"] == "run"
    assert run["status"] == "succeeded"
    assert run["inputs"] == {"name": "Ada", "extra": 1}
    assert run["outputs"] == {"greeting": "Hello, Ada!"}
    assert run["error"] is None
    assert set(run["nodeTimings"]) == {"start", "greet", "out"}
    assert all(t["status"] == "succeeded" for t in run["nodeTimings"].values())
    assert run["startedDate"] <= run["finishedDate"]


async def test_run_record_of_a_failure(api: Api) -> None:
    definition = chain(
        output("before", "set"),
        {"id": "reject", "type": "fail", "message": "no", "statusCode": 409},
    )
    created = await create(api, definition)
    await runsync(api, created["workflowId"])
    [run] = await runs_of(api, created["workflowId"])
    assert run["status"] == "failed"
    assert run["outputs"] == {"before": "set"}
    assert run["error"] == {"code": "NODE_FAILED", "node": "reject", "message": "no"}
    assert run["nodeTimings"]["reject"]["status"] == "failed"


async def test_run_record_of_a_timeout(api: Api) -> None:
    definition = chain({"id": "wait", "type": "delay", "seconds": 5}, timeout=1)
    created = await create(api, definition)
    await runsync(api, created["workflowId"])
    [run] = await runs_of(api, created["workflowId"])
    assert run["status"] == "timed_out"
    assert run["error"]["code"] == "RUN_TIMEOUT"
    assert run["nodeTimings"]["wait"]["status"] == "cancelled"


async def test_a_runner_failure_is_answered_and_recorded_as_an_internal_failure(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A bug of the runner itself (not of a node): the caller gets the runsync shape with
    # INTERNAL, and the run is recorded as failed, not left to look "running".
    async def broken_walk(self: object) -> None:
        raise RuntimeError("a bug in the runner")

    monkeypatch.setattr("libflow.engine.runner.WorkflowRun._walk", broken_walk)
    created = await create(api, SPEC_EXAMPLE)

    status, body = await runsync(api, created["workflowId"], inputs={"name": "Ada"})

    assert status == 500
    assert body["success"] is False
    assert body["statusCode"] == 500
    assert body["result"]["error"]["code"] == "INTERNAL"
    assert "RuntimeError" not in str(body)  # no internals in the answer
    [run] = await runs_of(api, created["workflowId"])
    assert run["status"] == "failed"
    assert run["error"]["code"] == "INTERNAL"
    assert run["finishedDate"] is not None


async def test_get_run_of_an_unknown_run_is_404(api: Api) -> None:
    response = await api.client.get(
        f"{API}/projects/{api.project_id}/runs/nosuchrun", headers=api.headers
    )
    await assert_error(response, 404, "NOT_FOUND")


# Bad requests and other projects


async def test_runsync_with_a_body_that_is_not_json_is_400(api: Api) -> None:
    created = await create(api, SPEC_EXAMPLE)
    response = await call(
        api,
        "POST",
        f"/{created['workflowId']}/runsync",
        data=b"{not json",
        headers={"Content-Type": "application/json"},
    )
    await assert_error(response, 400, "INVALID_JSON")


@pytest.mark.parametrize(
    ("body", "field"),
    [({"inputs": "Ada"}, "inputs"), ({"version": 2}, "version"), ({"runEvent": 1}, "runEvent")],
)
async def test_runsync_with_a_field_of_the_wrong_type_is_400(
    api: Api, body: dict[str, Any], field: str
) -> None:
    created = await create(api, SPEC_EXAMPLE)
    response = await call(api, "POST", f"/{created['workflowId']}/runsync", json=body)
    error = await assert_error(response, 400, "VALIDATION_ERROR")
    assert field in {d["field"].split(".")[0] for d in error["details"]}
    assert await runs_of(api, created["workflowId"]) == []


async def test_workflow_of_another_project_is_404_with_its_own_key(api: Api) -> None:
    created = await create(api, SPEC_EXAMPLE)
    other_project, other_key = await new_project("other")
    other = Api(api.client, api.shape, other_project, other_key)
    for method, path in (
        ("GET", f"/{created['workflowId']}"),
        ("GET", f"/{created['workflowId']}/runs"),
        ("POST", f"/{created['workflowId']}/runsync"),
    ):
        await assert_error(await call(other, method, path, json={}), 404, "NOT_FOUND")
    assert await ok_json(await call(other, "GET", "")) == []


async def test_another_projects_key_is_403(api: Api) -> None:
    created = await create(api, SPEC_EXAMPLE)
    _, other_key = await new_project("other")
    response = await call(
        api,
        "POST",
        f"/{created['workflowId']}/runsync",
        json={"inputs": {"name": "x"}},
        headers={"Authorization": other_key},
    )
    await assert_error(response, 403, "FORBIDDEN")
    assert await runs_of(api, created["workflowId"]) == []


# Client disconnect


async def test_client_disconnect_cancels_the_run_and_records_it(api: Api) -> None:
    # aiohttp's TestServer cancels handlers when their client goes away, as run_server.py
    # asks its server to (handler_cancellation=True).
    definition = chain(
        output("before", "set"),
        {"id": "wait", "type": "delay", "seconds": 5},
        output("after", "never"),
    )
    created = await create(api, definition)
    workflow_id = created["workflowId"]

    url = api.client.make_url(workflows_url(api.project_id, f"/{workflow_id}/runsync"))
    started = time.monotonic()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=0.5)) as session:
        with pytest.raises(asyncio.TimeoutError):
            await session.post(url, json={}, headers=api.headers)

    deadline = time.monotonic() + 4
    while True:
        runs = await runs_of(api, workflow_id)
        if runs and runs[0]["status"] != "running":
            break
        assert time.monotonic() < deadline, runs
        await asyncio.sleep(0.05)
    [run] = runs
    assert run["status"] == "cancelled"
    assert run["outputs"] == {"before": "set"}
    assert run["nodeTimings"]["wait"]["status"] == "cancelled"
    assert "after" not in run["nodeTimings"]
    assert time.monotonic() - started < 4.5  # not the delay's 5 s


# Library nodes


async def test_library_search_finds_a_file_uploaded_in_the_test(api: Api) -> None:
    phrase = "periwinkle armadillo sextant"
    record = await api.upload(
        f"Meeting notes.\nThe {phrase} was found in the attic.\n".encode(),
        name="attic.txt",
        file_type="txt",
    )
    await wait_until_processed(api, record["id"])
    definition = chain(
        {"id": "q", "type": "input", "name": "q", "valueType": "string", "required": True},
        {"id": "find", "type": "library_search", "query": "{{ inputs.q }}", "limit": 5},
        output("results", "{{ nodes.find.results }}"),
    )
    status, body = await run_definition(api, definition, inputs={"q": phrase})
    assert status == 200, body
    results = body["result"]["outputs"]["results"]
    assert results
    assert results[0]["fileId"] == record["id"]
    assert phrase in results[0]["chunk"]


@pytest.mark.parametrize(
    ("name", "file_type", "data", "phrase"),
    [
        ("notes.txt", "txt", b"Plain text with a lilac narwhal compass inside.\n", "lilac narwhal"),
        ("report.docx", "docx", fixture_bytes("report.docx"), "zephyr quokka alignment"),
    ],
)
async def test_library_file_text_returns_the_text_of_an_uploaded_file(
    api: Api, name: str, file_type: str, data: bytes, phrase: str
) -> None:
    record = await api.upload(data, name=name, file_type=file_type)
    await wait_until_processed(api, record["id"])
    definition = chain(
        {"id": "f", "type": "input", "name": "fileId", "valueType": "string", "required": True},
        {"id": "read", "type": "library_file_text", "fileId": "{{ inputs.fileId }}"},
        output("text", "{{ nodes.read.text }}"),
        output("name", "{{ nodes.read.name }}"),
    )
    status, body = await run_definition(api, definition, inputs={"fileId": record["id"]})
    assert status == 200, body
    outputs = body["result"]["outputs"]
    assert phrase in outputs["text"]
    assert outputs["name"] == name


# http_request


@pytest.fixture
async def echo_server() -> AsyncIterator[TestServer]:
    """A local HTTP API that echoes the JSON it is sent."""

    async def echo(request: web.Request) -> web.Response:
        return web.json_response({"got": await request.json(), "method": request.method})

    app = web.Application()
    app.router.add_post("/echo", echo)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield server
    finally:
        await server.close()


def echo_definition(server: TestServer) -> dict[str, Any]:
    """input -> http_request POST to the echo server -> outputs of its answer."""
    return chain(
        {
            "id": "call",
            "type": "http_request",
            "method": "POST",
            "url": str(server.make_url("/echo")),
            "json": {"hello": "{{ event }}"},
            "timeoutSeconds": 5,
        },
        output("status", "{{ nodes.call.status }}"),
        output("answer", "{{ nodes.call.json }}"),
    )


async def test_http_request_reaches_a_private_address_when_the_settings_allow_it(
    start_app: ClientFactory, tmp_path: Path, echo_server: TestServer
) -> None:
    settings = base_settings(tmp_path, http_allow_private=True)
    client = await start_app(settings)
    project_id, key = await new_project()
    api = Api(client, Shape("embedded", settings), project_id, key)
    status, body = await run_definition(api, echo_definition(echo_server))
    assert status == 200, body
    assert body["result"]["outputs"] == {
        "status": 200,
        "answer": {"got": {"hello": "run"}, "method": "POST"},
    }


async def test_http_request_to_a_private_address_is_refused_by_default(
    api: Api, echo_server: TestServer
) -> None:
    status, body = await run_definition(api, echo_definition(echo_server))
    assert status == 500
    error = body["result"]["error"]
    assert error["code"] == "NODE_FAILED"
    assert error["node"] == "call"
    assert "127.0.0.1" in error["message"]
    assert "loopback" in error["message"]
    assert body["result"]["outputs"] == {}
