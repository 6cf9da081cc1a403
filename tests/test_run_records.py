"""Run records: the end of a run is written with its caller's own write, never before it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp import web
from tortoise.backends.base.client import BaseDBAsyncClient

from libflow import appkeys
from libflow.db import group_commit
from libflow.engine import WorkflowRun as EngineRun
from libflow.ids import new_id
from libflow.models import WorkflowRun
from libflow.workflows.run_events import RunEventLog
from libflow.workflows.runs import _RunRecorder, run_version
from libflow.workflows.versions import RunTarget, find_run_target
from tests.conftest import Api
from tests.workflow_helpers import call, chain, create, ok_json, output, runsync


class Crash(Exception):
    """The process died between the run's end and its caller's write."""


async def _answer_42(api: Api) -> tuple[web.Application, RunTarget]:
    """The api's app, and the run target of a new workflow answering 42."""
    app = api.client.app
    assert app is not None
    workflow = await create(api, chain(output("answer", 42)))
    target = await find_run_target(api.project_id, workflow["workflowId"], None, app[appkeys.READS])
    return app, target


async def test_a_crash_before_the_callers_write_leaves_the_run_running_not_finished(
    shaped_api: Api,
) -> None:
    # A long run's "running" record may still wait in a group commit when the run ends.
    # If that insert carried the end, a worker killed before the delivery's own update
    # would leave a succeeded run beside a delivery the sweep then fails (INTERRUPTED).
    app, target = await _answer_42(shaped_api)
    run = EngineRun(
        target.definition,
        event="run",
        inputs={},
        services=app[appkeys.RESOURCES].node_services(shaped_api.project_id),
    )

    async def crash(db: BaseDBAsyncClient, record: WorkflowRun) -> None:
        raise Crash

    control = app[appkeys.RESOURCES].runs
    recorder = _RunRecorder(
        target, run, "webhook", crash, control, RunEventLog(new_id()), None, None
    )
    result = await run.execute()
    assert result.status == "succeeded"
    recorder.record_running()  # queued, not yet written, as the run ends
    with pytest.raises(Crash):
        await recorder.record_end(result)

    stored = await WorkflowRun.get(id=recorder.run_id)
    assert stored.status == "running"
    assert stored.outputs in ({}, None)


async def test_an_integer_beyond_64_bits_is_answered_and_recorded_exactly(shaped_api: Api) -> None:
    # Answers and JSON columns are written by orjson, which refuses such an integer, and
    # orjson would read one back as a float: both fall back to the standard library.
    big = 2**70 + 1
    workflow = await create(shaped_api, chain(output("big", big), output("keys", {"1": big})))
    status, answer = await runsync(shaped_api, workflow["workflowId"])
    assert status == 200, answer
    assert answer["result"]["outputs"] == {"big": big, "keys": {"1": big}}
    runs = await ok_json(await call(shaped_api, "GET", f"/{workflow['workflowId']}/runs"))
    assert runs[0]["outputs"] == {"big": big, "keys": {"1": big}}


async def test_a_caller_cancelled_while_its_run_is_saved_still_leaves_the_run_recorded(
    shaped_api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The end of most runs is their only write, handed to the group commit unshielded: a
    # client that leaves while that batch commits must not take the record with it.
    app, target = await _answer_42(shaped_api)
    committing, commit = asyncio.Event(), asyncio.Event()
    commit_batch = group_commit._commit_batch

    async def held_commit(batch: Any) -> None:
        committing.set()
        await commit.wait()
        await commit_batch(batch)

    monkeypatch.setattr(group_commit, "_commit_batch", held_commit)
    caller = asyncio.create_task(
        run_version(
            target,
            event="run",
            inputs={},
            trigger="api",
            services=app[appkeys.RESOURCES].node_services(shaped_api.project_id),
            control=app[appkeys.RESOURCES].runs,
        )
    )
    await asyncio.wait_for(committing.wait(), 10)
    caller.cancel()  # the client left: aiohttp cancels its handler
    with pytest.raises(asyncio.CancelledError):
        await caller
    commit.set()

    async def recorded() -> list[WorkflowRun]:
        while not (found := await WorkflowRun.filter(workflow_id=target.workflow_id)):
            await asyncio.sleep(0.01)
        return found

    [stored] = await asyncio.wait_for(recorded(), 10)
    assert (stored.status, stored.outputs) == ("succeeded", {"answer": 42})
