"""Runs and jobs leave no reference cycles: what they made is freed by reference counts as
they end.

A libflow process collects its young objects only every 20,000 new ones
(libflow/garbage_collection.py): a cycle made by every run or job would pile up between
collections, and each collection would walk it. A run that reads a secret and calls
another workflow touches every service a run has. The work of workers is censused as a
worker process does it: the in-process queue of the embedded shape, and on the scaled
shape an arq worker that keeps polling (a burst worker per batch of jobs would count its
own start and stop).
"""

from __future__ import annotations

import gc
import types
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from libflow.garbage_collection import YOUNG_THRESHOLD
from tests.conftest import Api, ClientFactory, Shape, jobs_running
from tests.library_helpers import until
from tests.processing_helpers import get_record, upload_fixture
from tests.run_helpers import start, wait_for_status
from tests.test_secrets import stored
from tests.webhook_helpers import (
    create_webhook,
    deliver,
    deliveries_of,
    event_body,
    standard_headers,
)
from tests.workflow_helpers import chain, create, output, runsync

Work = Callable[[], Awaitable[None]]


def made_by_libflow(thing: Any) -> bool:
    """Whether ``thing`` is an instance of a libflow class, or a function of libflow's."""
    module = thing.__module__ if isinstance(thing, types.FunctionType) else type(thing).__module__
    return isinstance(module, str) and module.startswith("libflow.")


async def left_in_cycles(work: Work) -> set[str]:
    """The libflow classes of what three rounds of ``work`` left for the cyclic GC (the
    first round, before them, fills what is kept on purpose: a parsed version, a cached key)."""
    await work()
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds unreachable is kept to be seen
    try:
        for _ in range(3):
            await work()
        gc.collect()
        return {type(thing).__qualname__ for thing in gc.garbage if made_by_libflow(thing)}
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


@pytest.fixture
async def working_api(shaped_api: Api) -> AsyncIterator[Api]:
    """A project whose jobs run as they are queued: on the scaled shape a worker polls."""
    async with jobs_running(shaped_api.shape):
        yield shaped_api


async def test_a_run_leaves_nothing_for_the_cyclic_garbage_collector(shaped_api: Api) -> None:
    await stored(shaped_api, "TOKEN", "s3cr3t-value")
    called = await create(shaped_api, chain(output("greeting", "Hello, {{ inputs.name }}!")))
    caller = await create(
        shaped_api,
        chain(
            {
                "id": "sub",
                "type": "call_workflow",
                "workflowId": called["workflowId"],
                "inputs": {"name": "{{ inputs.name }}"},
            },
            output("greeting", "{{ nodes.sub.outputs.greeting }}"),
            output("token", "{{ secrets.TOKEN }}"),
        ),
    )
    expected = {"greeting": "Hello, Ada!", "token": "[secret:TOKEN]"}

    async def run() -> None:
        status, answer = await runsync(shaped_api, caller["workflowId"], inputs={"name": "Ada"})
        assert (status, answer["result"]["outputs"]) == (200, expected)

    assert await left_in_cycles(run) == set()


async def test_a_queued_run_leaves_nothing_for_the_cyclic_garbage_collector(
    working_api: Api,
) -> None:
    await stored(working_api, "TOKEN", "s3cr3t-value")
    workflow = await create(
        working_api,
        chain(
            output("greeting", "Hello, {{ inputs.name }}!"),
            output("token", "{{ secrets.TOKEN }}"),
        ),
    )

    async def queued_run() -> None:
        run = await start(working_api, workflow["workflowId"], inputs={"name": "Ada"})
        assert (await wait_for_status(working_api, run["runId"]))["status"] == "succeeded"

    assert await left_in_cycles(queued_run) == set()


async def test_a_delivery_leaves_nothing_for_the_cyclic_garbage_collector(
    working_api: Api,
) -> None:
    webhook = await create_webhook(working_api)
    sent = 0

    async def all_finished() -> bool:
        found = await deliveries_of(working_api, webhook["webhookId"])
        return len(found) == sent and all(d["status"] == "succeeded" for d in found)

    async def delivery() -> None:
        nonlocal sent
        sent += 1
        body = event_body(n=sent)
        headers = standard_headers(webhook["secret"], body)
        response = await deliver(working_api, webhook["webhookId"], body, headers)
        assert response.status == 200, await response.text()
        await until(all_finished, f"delivery {sent} ran")

    assert await left_in_cycles(delivery) == set()


async def test_a_file_s_processing_leaves_nothing_for_the_cyclic_garbage_collector(
    working_api: Api,
) -> None:
    async def processed_file() -> None:
        file_id = (await upload_fixture(working_api, "cp1252.txt"))["id"]

        async def processed() -> bool:
            return (await get_record(working_api, file_id))["updating"] is None

        await until(processed, f"file {file_id} processed")

    assert await left_in_cycles(processed_file) == set()


async def test_a_started_server_collects_its_young_objects_past_what_requests_hold(
    start_app: ClientFactory, embedded: Shape
) -> None:
    default = gc.get_threshold()
    gc.set_threshold(700, *default[1:])  # as in a new process (an earlier app set it here)
    try:
        await start_app(embedded.settings)
        assert gc.get_threshold()[0] == YOUNG_THRESHOLD
        assert gc.get_freeze_count() > 0  # what start-up made is out of the collector's way
    finally:
        gc.set_threshold(*default)
