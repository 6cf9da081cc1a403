"""A run leaves no reference cycles: what it made is freed by reference counts as it ends.

A libflow process collects its young objects only every 20,000 new ones
(libflow/garbage_collection.py): a cycle made by every run would pile up between
collections, and each collection would walk it. A run that reads a secret and calls
another workflow touches every service a run has.
"""

from __future__ import annotations

import gc
import types
from typing import Any

from libflow.garbage_collection import YOUNG_THRESHOLD
from tests.conftest import Api, ClientFactory, Shape
from tests.test_secrets import stored
from tests.workflow_helpers import chain, create, output, runsync


def made_by_libflow(thing: Any) -> bool:
    """Whether ``thing`` is an instance of a libflow class, or a function of libflow's."""
    module = thing.__module__ if isinstance(thing, types.FunctionType) else type(thing).__module__
    return isinstance(module, str) and module.startswith("libflow.")


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
    # The first run fills what is kept on purpose (a parsed version, a cached key).
    status, answer = await runsync(shaped_api, caller["workflowId"], inputs={"name": "Ada"})
    assert (status, answer["result"]["outputs"]) == (200, expected)

    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds unreachable is kept to be seen
    try:
        for _ in range(3):
            status, answer = await runsync(shaped_api, caller["workflowId"], inputs={"name": "Ada"})
            assert (status, answer["result"]["outputs"]) == (200, expected)
        gc.collect()
        cyclic = {type(thing).__qualname__ for thing in gc.garbage if made_by_libflow(thing)}
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert cyclic == set()


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
