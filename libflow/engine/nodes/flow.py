"""Nodes that steer a run: event, input, set_output, condition, delay, respond, fail."""

from __future__ import annotations

import asyncio
from typing import Any

from libflow.engine.definition import MAX_TIMEOUT_SECONDS, Node
from libflow.engine.nodes.state import (
    NodeFailure,
    RunState,
    field_value,
    int_field,
    number_field,
    text_field,
)
from libflow.json_text import storable


async def run_event(node: Node, state: RunState) -> dict[str, Any]:
    """Where a run starts: its result names the event."""
    return {"event": state.event}


async def run_input(node: Node, state: RunState) -> dict[str, Any]:
    """Inputs are checked before the run; reached by an edge, an input passes its value on."""
    return {"value": state.inputs.get(node.config["name"])}


async def run_set_output(node: Node, state: RunState) -> dict[str, Any]:
    """Set one of the run's outputs (measured against the run's limits before it is kept)."""
    name = node.config["name"]
    # A run's outputs are stored: text PostgreSQL refuses is written with U+FFFD instead.
    value = storable(await field_value(node, state, "value"))
    await state.budget.set_output(name, value, state.inputs)
    state.outputs[name] = value
    if state.listener is not None:
        state.listener("output", {"name": name, "value": value}, "value")
    return {"value": value}


async def run_condition(node: Node, state: RunState) -> dict[str, Any]:
    """Decide a branch: a native value by its truth, text only as "true" or "false"."""
    value = await field_value(node, state, "if")
    if isinstance(value, str):
        word = value.strip().lower()
        if word not in {"true", "false", ""}:
            raise NodeFailure(f"field 'if' rendered the text {value[:100]!r}, not true or false")
        return {"result": word == "true"}
    return {"result": bool(value)}


async def run_delay(node: Node, state: RunState) -> dict[str, Any]:
    """Wait; the run's timeout still applies."""
    seconds = await number_field(node, state, "seconds", 0, MAX_TIMEOUT_SECONDS)
    await asyncio.sleep(seconds)
    return {"seconds": seconds}


async def run_respond(node: Node, state: RunState) -> dict[str, Any]:
    """Set the status code a successful run answers with."""
    state.status_code = await int_field(node, state, "statusCode", 200, 599)
    return {"statusCode": state.status_code}


async def run_fail(node: Node, state: RunState) -> dict[str, Any]:
    """Fail the run with a message and a status code."""
    status_code = await int_field(node, state, "statusCode", 400, 599)
    raise NodeFailure(await text_field(node, state, "message"), status_code=status_code)
