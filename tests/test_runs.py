"""Runs as resources: started asynchronously, found by filters, cancelled, watched live."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import pytest

from tests.conftest import Api, ClientFactory, Shape, linked_pages, new_project
from tests.run_helpers import (
    cancel,
    events_of,
    read_events,
    runs_url,
    start,
    wait_for_status,
)
from tests.workflow_helpers import (
    SPEC_EXAMPLE,
    call,
    chain,
    create,
    get_run,
    ok_json,
    output,
    publish,
    runs_of,
    runsync,
)

THREE_NODES = chain(
    {"id": "n", "type": "input", "name": "n", "valueType": "number", "default": 2},
    {"id": "twice", "type": "template", "template": "{{ inputs.n * 2 }}"},
    output("doubled", "{{ nodes.twice.text }}"),
)


def slow(seconds: float) -> dict[str, Any]:
    """Sets ``before``, waits ``seconds``, sets ``after``."""
    return chain(
        output("before", 1),
        {"id": "wait", "type": "delay", "seconds": seconds},
        output("after", 2),
    )


async def assert_error(response: Any, status: int, code: str) -> dict[str, Any]:
    body: dict[str, Any] = await response.json()
    assert (response.status, body["error"]) == (status, code), body
    return body


# Starting a run


async def test_an_async_run_succeeds_and_its_record_matches_runsyncs(shaped_api: Api) -> None:
    created = await create(shaped_api, THREE_NODES)
    queued = await start(shaped_api, created["workflowId"], inputs={"n": 21})
    assert (queued["status"], queued["trigger"], queued["finishedDate"]) == (
        "queued",
        "api_async",
        None,
    )
    await shaped_api.run_jobs()
    run = await wait_for_status(shaped_api, queued["runId"])
    await runsync(shaped_api, created["workflowId"], inputs={"n": 21})
    sync = next(
        r for r in await runs_of(shaped_api, created["workflowId"]) if r["trigger"] == "api"
    )
    same = ("status", "statusCode", "outputs", "error", "inputs", "version", "event")
    assert {k: run[k] for k in same} == {k: sync[k] for k in same}
    assert run["outputs"] == {"doubled": "42"}
    assert set(run["nodeTimings"]) == {"start", "n", "twice", "out_doubled"}


async def test_an_async_run_with_an_empty_body_runs_with_defaults(api: Api) -> None:
    created = await create(api, THREE_NODES)
    response = await call(api, "POST", f"/{created['workflowId']}/runs", data=b"")
    queued = await ok_json(response, 202)
    await api.run_jobs()
    assert (await wait_for_status(api, queued["runId"]))["outputs"] == {"doubled": "4"}


async def test_runsync_with_an_empty_body_runs_with_defaults(api: Api) -> None:
    created = await create(api, THREE_NODES)
    response = await call(api, "POST", f"/{created['workflowId']}/runsync", data=b"")
    assert (await ok_json(response))["result"]["outputs"] == {"doubled": "4"}


async def test_an_async_run_of_a_named_version_runs_that_version(api: Api) -> None:
    created = await create(api, chain(output("v", 1)))
    await publish(api, created["workflowId"], chain(output("v", 2)))
    queued = await start(api, created["workflowId"], version="1")
    await api.run_jobs()
    run = await wait_for_status(api, queued["runId"])
    assert (run["version"], run["outputs"]) == ("1", {"v": 1})


async def test_an_async_run_with_an_unknown_event_is_400_and_recorded_failed(api: Api) -> None:
    created = await create(api, THREE_NODES)
    response = await call(api, "POST", f"/{created['workflowId']}/runs", json={"runEvent": "x"})
    await assert_error(response, 400, "UNKNOWN_EVENT")
    [run] = await runs_of(api, created["workflowId"])
    assert (run["status"], run["trigger"], run["error"]["code"]) == (
        "failed",
        "api_async",
        "UNKNOWN_EVENT",
    )


async def test_an_async_run_with_invalid_inputs_is_400(api: Api) -> None:
    created = await create(api, THREE_NODES)
    response = await call(
        api, "POST", f"/{created['workflowId']}/runs", json={"inputs": {"n": "two"}}
    )
    body = await assert_error(response, 400, "INVALID_INPUTS")
    assert body["details"] == [{"input": "n", "problem": "must be of type number"}]


@pytest.mark.parametrize("version", ["9", "99999999999999999999", "\u00b2"])
async def test_an_async_run_of_an_unknown_version_is_404(api: Api, version: str) -> None:
    created = await create(api, THREE_NODES)
    response = await call(api, "POST", f"/{created['workflowId']}/runs", json={"version": version})
    await assert_error(response, 404, "NOT_FOUND")
    assert await runs_of(api, created["workflowId"]) == []


async def test_an_async_run_with_a_malformed_body_is_400(api: Api) -> None:
    created = await create(api, THREE_NODES)
    response = await call(api, "POST", f"/{created['workflowId']}/runs", data=b"{nope")
    await assert_error(response, 400, "INVALID_JSON")


# History


async def runs_page(api: Api, query: str = "") -> tuple[list[dict[str, Any]], str | None]:
    response = await api.client.get(runs_url(api, query), headers=api.headers)
    page: list[dict[str, Any]] = await ok_json(response)
    link = response.headers.get("Link")
    return page, link


async def test_runs_are_listed_newest_first_with_filters(shaped_api: Api) -> None:
    api = shaped_api
    first = await create(api, THREE_NODES, name="first")
    second = await create(api, chain({"id": "boom", "type": "fail", "message": "no"}))
    for n in range(3):
        await runsync(api, first["workflowId"], inputs={"n": n})
    await asyncio.sleep(0.01)
    boundary = quote(datetime.now(UTC).isoformat())
    await asyncio.sleep(0.01)
    await runsync(api, second["workflowId"])
    await publish(api, first["workflowId"], THREE_NODES)
    await runsync(api, first["workflowId"])

    everything, _ = await runs_page(api)
    assert len(everything) == 5
    started = [run["startedDate"] for run in everything]
    assert started == sorted(started, reverse=True)

    failed, _ = await runs_page(api, "?status=failed")
    assert [run["workflowId"] for run in failed] == [second["workflowId"]]
    of_first, _ = await runs_page(api, f"?workflowId={first['workflowId']}")
    assert len(of_first) == 4
    version_two, _ = await runs_page(api, f"?workflowId={first['workflowId']}&version=2")
    assert [run["version"] for run in version_two] == ["2"]
    by_trigger, _ = await runs_page(api, "?trigger=webhook")
    assert by_trigger == []
    before, _ = await runs_page(api, f"?startedBefore={boundary}")
    assert [run["runId"] for run in before] == [run["runId"] for run in everything[2:]]
    after, _ = await runs_page(api, f"?startedAfter={boundary}&status=succeeded")
    assert [run["runId"] for run in after] == [everything[0]["runId"]]
    workflow_route = await ok_json(
        await call(api, "GET", f"/{first['workflowId']}/runs?status=succeeded")
    )
    assert len(workflow_route) == 4


async def test_a_few_hundred_runs_page_through_link_without_gaps(
    start_app: ClientFactory, embedded: Shape
) -> None:
    unlimited = Shape("embedded", embedded.settings.model_copy(update={"rate_limit": 0}))
    client = await start_app(unlimited.settings)
    api = Api(client, unlimited, *await new_project())
    created = await create(api, chain(output("x", 1)))
    await asyncio.gather(*(runsync(api, created["workflowId"]) for _ in range(230)))
    pages = await linked_pages(api, runs_url(api, "?limit=100"))
    seen = [run["runId"] for page in pages for run in page]
    assert len(pages) == 3
    assert len(seen) == len(set(seen)) == 230


async def test_the_workflow_route_pages_too(api: Api) -> None:
    created = await create(api, chain(output("x", 1)))
    for _ in range(3):
        await runsync(api, created["workflowId"])
    response = await call(api, "GET", f"/{created['workflowId']}/runs?limit=2")
    assert len(await ok_json(response)) == 2
    assert 'rel="next"' in response.headers["Link"]


@pytest.mark.parametrize(
    "query",
    [
        "?limit=0",
        "?limit=1001",
        "?limit=ten",
        "?status=done",
        "?trigger=cron",
        "?version=0",
        "?version=one",
        "?version=%C2%B2",  # "²": a digit to str.isdigit, not to int()
        "?version=99999999999",  # more than an integer column holds
        "?startedAfter=yesterday",
        "?startedBefore=2026-13-01",
        "?startedAfter=0001-01-01T00:00%2B01:00",  # no such moment in UTC
        "?cursor=not-a-cursor",
    ],
)
async def test_a_bad_filter_is_400(api: Api, query: str) -> None:
    response = await api.client.get(runs_url(api, query), headers=api.headers)
    await assert_error(response, 400, "VALIDATION_ERROR")


async def test_runs_of_an_unknown_workflow_are_404(api: Api) -> None:
    response = await api.client.get(runs_url(api, "?workflowId=nope"), headers=api.headers)
    await assert_error(response, 404, "NOT_FOUND")


async def test_runs_of_another_project_are_not_listed(api: Api) -> None:
    created = await create(api, SPEC_EXAMPLE)
    await runsync(api, created["workflowId"], inputs={"name": "a"})
    other_id, other_key = await new_project("other")
    other = Api(api.client, api.shape, other_id, other_key)
    assert (await runs_page(other))[0] == []


# Cancel


async def test_cancelling_a_running_run_ends_it_cancelled_with_its_outputs_so_far(
    api: Api,
) -> None:
    created = await create(api, slow(30))
    queued = await start(api, created["workflowId"])
    await wait_for_status(api, queued["runId"], {"running"})
    await asyncio.sleep(0.2)  # into the delay
    began = time.monotonic()
    response = await cancel(api, queued["runId"])
    assert (await ok_json(response, 202))["runId"] == queued["runId"]
    run = await wait_for_status(api, queued["runId"], timeout=2)
    assert time.monotonic() - began < 2
    assert (run["status"], run["statusCode"], run["error"]["code"]) == (
        "cancelled",
        499,
        "CANCELLED",
    )
    assert run["outputs"] == {"before": 1}
    assert run["nodeTimings"]["wait"]["status"] == "cancelled"


async def test_cancelling_a_queued_run_ends_it_before_it_runs(scaled: Any, start_app: Any) -> None:
    client = await start_app(scaled.settings)
    project_id, key = await new_project()
    api = Api(client, scaled, project_id, key)
    created = await create(api, chain(output("ran", True)))
    queued = await start(api, created["workflowId"])  # no worker runs: it stays queued
    response = await cancel(api, queued["runId"])
    assert (await ok_json(response, 202))["status"] == "cancelled"
    await api.run_jobs()
    run = await get_run(api, queued["runId"])
    assert (run["status"], run["outputs"]) == ("cancelled", {})


async def test_cancelling_a_finished_run_is_409_run_finished(api: Api) -> None:
    created = await create(api, THREE_NODES)
    queued = await start(api, created["workflowId"])
    await api.run_jobs()
    await wait_for_status(api, queued["runId"])
    await assert_error(await cancel(api, queued["runId"]), 409, "RUN_FINISHED")


async def test_cancelling_an_unknown_run_is_404(api: Api) -> None:
    await assert_error(await cancel(api, "0" * 32), 404, "NOT_FOUND")


async def test_a_long_runsync_run_can_be_cancelled_and_answers_499(api: Api) -> None:
    created = await create(api, slow(30))
    answer = asyncio.create_task(runsync(api, created["workflowId"]))
    [running] = [r for r in await _running_runs(api, created["workflowId"])]
    await assert_error(await cancel(api, "f" * 32), 404, "NOT_FOUND")
    await ok_json(await cancel(api, running["runId"]), 202)
    status, body = await asyncio.wait_for(answer, 2)
    assert (status, body["success"], body["result"]["error"]["code"]) == (499, False, "CANCELLED")
    assert body["result"]["outputs"] == {"before": 1}


async def _running_runs(api: Api, workflow_id: str, timeout: float = 5) -> list[dict[str, Any]]:
    """Wait until the workflow has a running run (runsync records one after a second)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        running = [r for r in await runs_of(api, workflow_id) if r["status"] == "running"]
        if running:
            return running
        await asyncio.sleep(0.05)
    raise AssertionError("no run was recorded as running")


# Events

SLOW_EVENTS = [
    "run.queued",
    "run.started",
    "node.started",
    "node.finished",
    "node.started",
    "output",
    "node.finished",
    "node.started",
    "node.finished",
    "node.started",
    "output",
    "node.finished",
    "run.finished",
]


async def test_a_late_watcher_gets_every_event_in_order_then_run_finished(
    shaped_api: Api,
) -> None:
    api = shaped_api
    created = await create(api, slow(0.8))
    queued = await start(api, created["workflowId"])
    worker = asyncio.create_task(api.run_jobs())
    await wait_for_status(api, queued["runId"], {"running"})
    events = await events_of(api, queued["runId"])
    await worker
    assert [e.name for e in events] == SLOW_EVENTS
    assert [e.id for e in events] == list(range(1, len(SLOW_EVENTS) + 1))
    assert events[1].data == {"runId": queued["runId"]}
    assert events[5].data == {"name": "before", "value": 1}
    wait_finished = events[8].data
    assert wait_finished["node"] == "wait" and wait_finished["ms"] >= 700
    assert wait_finished["output"] == {"seconds": 0.8}
    assert events[-1].data["status"] == "succeeded"
    assert events[-1].data == await get_run(api, queued["runId"])


async def test_last_event_id_resumes_without_gaps_or_repeats(shaped_api: Api) -> None:
    api = shaped_api
    created = await create(api, slow(0.5))
    queued = await start(api, created["workflowId"])
    worker = asyncio.create_task(api.run_jobs())
    first = await events_of(api, queued["runId"], limit=4)
    rest = await events_of(api, queued["runId"], last_event_id=first[-1].id)
    await worker
    ids = [e.id for e in first + rest]
    assert ids == list(range(1, len(SLOW_EVENTS) + 1))
    assert [e.name for e in first + rest] == SLOW_EVENTS


async def test_a_failing_node_sends_node_failed(api: Api) -> None:
    created = await create(api, chain({"id": "boom", "type": "fail", "message": "no luck"}))
    queued = await start(api, created["workflowId"])
    events = await events_of(api, queued["runId"])
    failed = [e for e in events if e.name == "node.failed"]
    assert [e.data for e in failed] == [{"node": "boom", "error": "no luck"}]
    assert events[-1].data["status"] == "failed"


async def test_events_of_a_short_runsync_run_end_with_run_finished(api: Api) -> None:
    created = await create(api, THREE_NODES)
    await runsync(api, created["workflowId"])
    [run] = await runs_of(api, created["workflowId"])
    events = await events_of(api, run["runId"])
    assert [e.name for e in events] == ["run.finished"]
    assert events[0].data == run


async def test_a_last_event_id_that_is_no_number_replays_from_the_start(api: Api) -> None:
    created = await create(api, THREE_NODES)
    queued = await start(api, created["workflowId"])
    await api.run_jobs()
    everything = await events_of(api, queued["runId"])
    headers = {**api.headers, "Last-Event-ID": "\u00b2"}  # a digit to str.isdigit only
    url = runs_url(api, f"/{queued['runId']}/events")
    async with api.client.get(url, headers=headers) as response:
        assert response.status == 200
        assert [e.id for e in await read_events(response)] == [e.id for e in everything]


async def test_events_of_an_unknown_run_are_404(api: Api) -> None:
    response = await api.client.get(runs_url(api, f"/{'0' * 32}/events"), headers=api.headers)
    await assert_error(response, 404, "NOT_FOUND")


async def test_a_large_node_output_is_truncated_in_its_event_not_in_the_record(
    api: Api,
) -> None:
    created = await create(api, chain(output("big", "{{ 'x' * 300000 }}")))
    queued = await start(api, created["workflowId"])
    events = await events_of(api, queued["runId"])
    [out] = [e for e in events if e.name == "output"]
    assert out.data == {"name": "big", "value": None, "truncated": True}
    assert len((await get_run(api, queued["runId"]))["outputs"]["big"]) == 300000


async def test_runsync_with_an_event_stream_streams_the_run(shaped_api: Api) -> None:
    api = shaped_api
    created = await create(api, slow(0.2))
    async with api.client.post(
        f"/api/publicv1/projects/{api.project_id}/workflows/{created['workflowId']}/runsync",
        headers={**api.headers, "Accept": "text/event-stream"},
        json={},
    ) as response:
        events = await read_events(response)
    assert [e.name for e in events] == SLOW_EVENTS[1:]
    assert [e.id for e in events] == list(range(1, len(SLOW_EVENTS)))
    record = events[-1].data
    assert (record["status"], record["trigger"], record["outputs"]) == (
        "succeeded",
        "api",
        {"before": 1, "after": 2},
    )
    assert record == await get_run(api, events[0].data["runId"])


async def test_an_event_stream_carries_the_request_id_as_every_answer_does(api: Api) -> None:
    created = await create(api, chain(output("x", 1)))
    async with api.client.post(
        f"/api/publicv1/projects/{api.project_id}/workflows/{created['workflowId']}/runsync",
        headers={**api.headers, "Accept": "text/event-stream", "X-Request-Id": "trace-sse-1"},
        json={},
    ) as response:
        await read_events(response)
    assert response.headers["X-Request-Id"] == "trace-sse-1"


async def test_text_with_an_unpaired_surrogate_streams_and_is_stored_replaced(
    shaped_api: Api,
) -> None:
    # As a response header aiohttp kept undecoded would hold: text UTF-8 cannot carry.
    template = {"id": "t", "type": "template", "template": "a{{ '\\udcff' }}b"}
    created = await create(shaped_api, chain(template, output("odd", "{{ nodes.t.text }}")))
    async with shaped_api.client.post(
        f"/api/publicv1/projects/{shaped_api.project_id}/workflows/{created['workflowId']}/runsync",
        headers={**shaped_api.headers, "Accept": "text/event-stream"},
        json={},
    ) as response:
        events = await read_events(response)
    # The node's own result goes out as it was, escaped in the event's JSON ...
    finished = [e.data for e in events if e.name == "node.finished" and e.data["node"] == "t"]
    assert finished[0]["output"]["text"] == "a\udcffb"
    # ... and the run's output, which is stored (PostgreSQL refuses the surrogate), as U+FFFD.
    assert events[-1].name == "run.finished"
    assert events[-1].data["status"] == "succeeded"
    assert events[-1].data["outputs"] == {"odd": "a\ufffdb"}
    assert (await get_run(shaped_api, events[-1].data["runId"]))["outputs"] == {"odd": "a\ufffdb"}


async def test_a_runsync_stream_client_can_cancel_its_own_run(api: Api) -> None:
    created = await create(api, slow(30))
    async with api.client.post(
        f"/api/publicv1/projects/{api.project_id}/workflows/{created['workflowId']}/runsync",
        headers={**api.headers, "Accept": "text/event-stream"},
    ) as response:
        [started] = await read_events(response, limit=1)
        assert started.name == "run.started"
        await ok_json(await cancel(api, started.data["runId"]), 202)
        rest = await asyncio.wait_for(read_events(response), 2)
    assert rest[-1].name == "run.finished"
    assert (rest[-1].data["status"], rest[-1].data["outputs"]) == ("cancelled", {"before": 1})


async def test_runsync_with_an_event_stream_refuses_bad_inputs_with_json(api: Api) -> None:
    created = await create(api, THREE_NODES)
    response = await call(
        api,
        "POST",
        f"/{created['workflowId']}/runsync",
        json={"inputs": {"n": "two"}},
        headers={"Accept": "text/event-stream"},
    )
    await assert_error(response, 400, "INVALID_INPUTS")
