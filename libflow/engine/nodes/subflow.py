"""Nodes that run another workflow of the project: call_workflow (once) and map (per item).

A sub-run is a run of its own (trigger ``call``, its parent's run id, its own record) that
runs inside the calling node: the parent's timeout and cancel stop it as they stop the
node. Calls nest at most MAX_CALL_DEPTH deep, so a workflow calling itself ends, and all
the sub-runs under one run share one budget (``run_budget.SubRunBudget``): how many start,
how many run at once, what the running ones hold.
"""

from __future__ import annotations

import asyncio
from typing import Any

from libflow.engine.definition import Node
from libflow.engine.nodes.state import NodeFailure, RunState, field_value, int_field
from libflow.engine.run_budget import MAX_NODE_RESULT_BYTES, measure
from libflow.engine.value_size import TooBig
from libflow.errors import LibflowError

MAX_CALL_DEPTH = 5
MAX_MAP_ITEMS = 10_000
MAX_MAP_CONCURRENCY = 32


async def run_call_workflow(node: Node, state: RunState) -> dict[str, Any]:
    """Run the workflow once with the node's inputs: ``{outputs}``."""
    inputs = await field_value(node, state, "inputs")
    if not isinstance(inputs, dict):
        raise NodeFailure("field 'inputs' must render to an object")
    result = {"outputs": await _call(node, state, inputs)}
    await state.budget.hold_value(result, "the sub-run's outputs")
    return result


async def run_map(node: Node, state: RunState) -> dict[str, Any]:
    """Run the workflow once per item, ``concurrency`` at a time: ``{results}`` in item order.

    The first failing item fails the node, and the items still running are stopped.
    """
    items = await field_value(node, state, "items")
    if not isinstance(items, list):
        raise NodeFailure("field 'items' must render to a list")
    if len(items) > MAX_MAP_ITEMS:
        raise NodeFailure(f"field 'items' holds {len(items)} items; a map takes {MAX_MAP_ITEMS}")
    slots = asyncio.Semaphore(await int_field(node, state, "concurrency", 1, MAX_MAP_CONCURRENCY))
    held = 0  # bytes of the results so far, against a node's limit

    async def one(index: int, item: Any) -> dict[str, Any]:
        nonlocal held
        async with slots:
            try:
                outputs = await _call(node, state, {"item": item, "index": index})
            except NodeFailure as failure:  # which item, so it can be found in the list
                raise NodeFailure(
                    f"item {index}: {failure.message}", status_code=failure.status_code
                ) from None
        # Measured as each item ends, not once all have: 10,000 items of a few MiB each
        # would be held in memory long before the whole could be refused.
        try:
            held += await measure(outputs, max(MAX_NODE_RESULT_BYTES - held, 0))
        except TooBig:
            raise NodeFailure(
                f"the map's results would be over the limit of {MAX_NODE_RESULT_BYTES} bytes "
                "on a node's result"
            ) from None
        return outputs

    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(one(index, item)) for index, item in enumerate(items)]
    except* NodeFailure as failures:
        raise failures.exceptions[0] from None
    result = {"results": [task.result() for task in tasks]}
    await state.budget.hold_value(result, "the map's results")
    return result


async def _call(node: Node, state: RunState, inputs: dict[str, Any]) -> dict[str, Any]:
    """One sub-run; its outputs, or NodeFailure saying how it ended."""
    if state.depth >= MAX_CALL_DEPTH:
        raise NodeFailure(f"calls nest at most {MAX_CALL_DEPTH} deep: this one would be deeper")
    version = node.config.get("version")
    try:
        async with state.services.sub_runs.running(state.depth + 1):
            return await state.services.call_workflow(
                node.config["workflowId"],
                None if version is None else str(version),
                inputs,
                services=state.services,
                parent_run_id=state.run_id,
                depth=state.depth + 1,
            )
    except LibflowError as err:  # the workflow or version is gone, its inputs refused, or
        raise NodeFailure(err.message) from None  # the run's sub-runs are over their limits
