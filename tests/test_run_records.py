"""Run records: the end of a run is written with its caller's own write, never before it."""

from __future__ import annotations

import pytest
from tortoise.backends.base.client import BaseDBAsyncClient

from libflow import appkeys
from libflow.engine import WorkflowRun as EngineRun
from libflow.ids import new_id
from libflow.models import WorkflowRun
from libflow.workflows.run_events import RunEventLog
from libflow.workflows.runs import _RunRecorder
from libflow.workflows.versions import find_run_target
from tests.conftest import Api
from tests.workflow_helpers import chain, create, output


class Crash(Exception):
    """The process died between the run's end and its caller's write."""


async def test_a_crash_before_the_callers_write_leaves_the_run_running_not_finished(
    shaped_api: Api,
) -> None:
    # A long run's "running" record may still wait in a group commit when the run ends.
    # If that insert carried the end, a worker killed before the delivery's own update
    # would leave a succeeded run beside a delivery the sweep then fails (INTERRUPTED).
    app = shaped_api.client.app
    assert app is not None
    workflow = await create(shaped_api, chain(output("answer", 42)))
    target = await find_run_target(
        shaped_api.project_id, workflow["workflowId"], None, app[appkeys.READS]
    )
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
