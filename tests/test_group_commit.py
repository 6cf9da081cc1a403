"""Group commit: concurrent writes share a transaction, and each caller still gets its own end."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest
from tortoise.backends.base.client import BaseDBAsyncClient
from tortoise.exceptions import DBConnectionError, IntegrityError

from libflow.db.group_commit import commit_together, insert_together
from libflow.ids import new_id
from libflow.models import Project, WorkflowRun
from tests.conftest import Api
from tests.workflow_helpers import SPEC_EXAMPLE, create, runs_of, runsync


async def test_concurrent_runs_are_each_recorded_once(shaped_api: Api) -> None:
    # Their records are inserted together, batch by batch: none may be lost or doubled.
    workflow_id = (await create(shaped_api, SPEC_EXAMPLE))["workflowId"]
    names = [f"caller {i}" for i in range(60)]

    answers = await asyncio.gather(
        *(runsync(shaped_api, workflow_id, inputs={"name": name}) for name in names)
    )

    assert [status for status, _ in answers] == [200] * len(names)
    runs = await runs_of(shaped_api, workflow_id)
    assert sorted(r["inputs"]["name"] for r in runs) == sorted(names)
    assert {r["status"] for r in runs} == {"succeeded"}
    assert all(r["outputs"]["greeting"] == f"Hello, {r['inputs']['name']}!" for r in runs)


async def test_a_duplicate_row_fails_alone_and_its_batch_is_kept(api: Api) -> None:
    taken = new_id()
    await Project.create(id=taken, name="first")
    fresh = [new_id() for _ in range(5)]
    rows = [Project(id=project_id, name="new") for project_id in fresh]

    results = await asyncio.gather(
        *(insert_together(row) for row in rows),
        insert_together(Project(id=taken, name="second")),
        return_exceptions=True,
    )

    assert results[:5] == [None] * 5
    assert isinstance(results[5], IntegrityError)
    assert await Project.filter(id__in=fresh).count() == 5
    assert (await Project.get(id=taken)).name == "first"


async def test_a_row_that_cannot_be_written_fails_alone(shaped_api: Api) -> None:
    workflow_id = (await create(shaped_api, SPEC_EXAMPLE))["workflowId"]

    def run(outputs: dict[str, Any]) -> WorkflowRun:
        return WorkflowRun(
            workflow_id=workflow_id,
            project_id=shaped_api.project_id,
            version=1,
            event="run",
            trigger="api",
            status="succeeded",
            outputs=outputs,
        )

    fine = [run({"n": n}) for n in range(5)]
    # An integer of 5,001 digits: more than Python writes as JSON text.
    results = await asyncio.gather(
        *(insert_together(row) for row in fine),
        insert_together(run({"n": 10**5000})),
        return_exceptions=True,
    )

    assert results[:5] == [None] * 5
    assert isinstance(results[5], ValueError)
    assert await WorkflowRun.filter(id__in=[row.id for row in fine]).count() == 5


async def test_rows_and_callable_writes_commit_in_one_batch(api: Api) -> None:
    project_id = new_id()

    async def rename(db: BaseDBAsyncClient) -> str:
        return "renamed"

    results = await asyncio.gather(
        insert_together(Project(id=project_id, name="row")),
        commit_together(rename),
    )

    assert results == [None, "renamed"]
    assert await Project.exists(id=project_id)


async def test_a_failing_callable_write_does_not_take_the_rows_with_it(api: Api) -> None:
    project_id = new_id()

    async def broken(db: BaseDBAsyncClient) -> None:
        raise RuntimeError("this write fails")

    results = await asyncio.gather(
        insert_together(Project(id=project_id, name="row")),
        commit_together(broken),
        return_exceptions=True,
    )

    assert results[0] is None
    assert isinstance(results[1], RuntimeError)
    assert await Project.exists(id=project_id)


@pytest.mark.parametrize("count", [1, 300])
async def test_every_row_of_a_burst_is_inserted(api: Api, count: int) -> None:
    # 300 rows exceed one batch (MAX_BATCH = 256): the rest go in the next.
    ids = [new_id() for _ in range(count)]
    await asyncio.gather(*(insert_together(Project(id=i, name="burst")) for i in ids))
    assert await Project.filter(id__in=ids).count() == count


async def test_a_batch_that_loses_the_database_is_not_written_again(api: Api) -> None:
    # Whether a batch committed is unknown when the connection goes: every write of it
    # gets the outage (503 to an API caller) rather than a second attempt.
    project_id = new_id()
    calls = 0

    async def outage(db: BaseDBAsyncClient) -> None:
        nonlocal calls
        calls += 1
        raise DBConnectionError("connection was closed in the middle of operation")

    results = await asyncio.gather(
        insert_together(Project(id=project_id, name="row")),
        commit_together(outage),
        return_exceptions=True,
    )

    assert all(isinstance(result, DBConnectionError) for result in results)
    assert calls == 1
    assert not await Project.exists(id=project_id)  # its transaction was rolled back


async def test_a_cancelled_callers_failed_write_is_logged_once_not_as_never_retrieved(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    # A client that leaves cancels its request while its write is queued; the write still
    # runs with its batch, and if it fails nobody reads the error: one warning says so,
    # not asyncio's "Future exception was never retrieved".
    loop = asyncio.get_running_loop()
    unhandled: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: unhandled.append(context))
    taken = new_id()
    await Project.create(id=taken, name="first")

    caller = asyncio.create_task(insert_together(Project(id=taken, name="second")))
    await asyncio.sleep(0)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    await commit_together(_nothing)  # the next batch: the failed one has ended
    del caller
    gc.collect()

    assert unhandled == []
    assert (await Project.get(id=taken)).name == "first"
    warnings = [r for r in caplog.records if "after its caller had left" in r.getMessage()]
    assert len(warnings) == 1
    assert "IntegrityError" in warnings[0].getMessage()


async def _nothing(db: BaseDBAsyncClient) -> None:
    return None
