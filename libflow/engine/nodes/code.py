"""The code node: a JavaScript function body run on the run's data in a fresh V8 isolate.

``source`` is a function body that sees ``inputs``, ``nodes`` (the results so far) and
``event`` as JSON; its ``return`` value, as JSON, is the node's output: an object as it is,
anything else (an array, a string, a number, a boolean, null) as ``{"result": value}``, and
no return (undefined) as ``{"result": null}``. The script runs in a sandbox process
(``libflow.engine.javascript``) within its ``timeoutMs`` (never past the run's timeout) and
its ``memoryMb``; a thrown error fails the node as ``<message> (line N)``. Its data and its
result are turned into and from JSON on a CPU thread, their sizes checked first.
"""

from __future__ import annotations

import json
from typing import Any, Final

from libflow.engine.cpu_pool import off_loop
from libflow.engine.definition import MAX_VALUE_DEPTH, Node
from libflow.engine.javascript import MIB, run_script, script_of, thrown_message
from libflow.engine.node_fields import nested_too_deeply
from libflow.engine.nodes.state import NodeFailure, RunState
from libflow.engine.render_budget import MAX_RUN_JSON_VALUES, RunOutOfTime, json_values_bound
from libflow.engine.run_budget import MAX_NODE_RESULT_BYTES, OverBudget

INLINE_JSON_CHARS: Final = 16 * 1024  # a result this small is parsed on the loop
_RESULT_KEY_CHARS: Final = 12  # {"result":} around a value that is not an object


async def run_code(node: Node, state: RunState) -> dict[str, Any]:
    """Run the node's script on the run's inputs, nodes and event: its return value."""
    source: str = node.config["source"]
    timeout_ms: int = node.config["timeoutMs"]
    memory_mb: int = node.config["memoryMb"]
    data = {"inputs": state.inputs, "nodes": dict(state.results), "event": state.event}
    script = await off_loop(_script, source, data, memory_mb * MIB)
    answer = await run_script(
        script,
        timeout_seconds=timeout_ms / 1000,
        deadline=state.budget.renders.deadline,
        memory_bytes=memory_mb * MIB,
    )
    if answer.outcome == "value":
        return await _output(answer.text, state)
    if answer.outcome == "timeout" and answer.cut_by_deadline:
        raise RunOutOfTime("the run's timeout passed while a code node ran")
    raise _failure(answer.outcome, answer.text, node)


def _script(source: str, data: dict[str, Any], memory_bytes: int) -> bytes:
    """The script running ``source`` on ``data``; NodeFailure if the data cannot fit its memory."""
    try:
        data_json = json.dumps(data, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as err:
        raise NodeFailure(f"the script's inputs and nodes are not JSON ({err})") from None
    if len(data_json) >= memory_bytes:  # one copy of the text alone would fill the heap
        raise NodeFailure(
            f"the script's inputs and nodes are {len(data_json)} bytes as JSON, more than its "
            f"memoryMb of {memory_bytes // MIB} MiB can hold"
        )
    return script_of(source, data_json)


def _failure(outcome: str, text: str, node: Node) -> Exception:
    """Why the node failed, from how its script ended."""
    if outcome == "error":
        return NodeFailure(thrown_message(text, node.config["source"]))
    if outcome == "timeout":
        return NodeFailure(
            f"the script ran longer than its timeoutMs of {node.config['timeoutMs']} ms"
        )
    if outcome == "memory":
        return NodeFailure(
            f"the script needed more memory than its memoryMb of {node.config['memoryMb']} MiB"
        )
    if outcome == "too_large":
        return OverBudget(
            f"the script's return value is {text} characters as JSON, over the limit of "
            f"{MAX_NODE_RESULT_BYTES} on a node's result"
        )
    if outcome == "promise":
        return NodeFailure(
            "the script returned a Promise: return the value itself (async code is not run)"
        )
    if outcome == "not_json":
        return NodeFailure(f"the script's return value cannot be turned into JSON: {text}")
    return NodeFailure(
        "the script stopped the JavaScript engine (its sandbox process ended): it built a "
        "value too large for V8"
    )


async def _output(text: str, state: RunState) -> dict[str, Any]:
    """The node's output from its return value's JSON (held by the run before it is parsed)."""
    state.budget.hold(len(text) + _RESULT_KEY_CHARS, "the script's return value")
    # Counted as an HTTP answer's are: 8 MiB of [{}, ...] are hundreds of MB once parsed.
    values = json_values_bound(text)
    if not state.budget.renders.spend_json_values(values):
        raise NodeFailure(
            f"the script's return value holds up to {values} JSON values, over the run's "
            f"limit of {MAX_RUN_JSON_VALUES} values parsed"
        )
    if len(text) <= INLINE_JSON_CHARS:
        value = _parse_value(text)
    else:
        value = await off_loop(_parse_value, text)
    return value if isinstance(value, dict) else {"result": value}


def _parse_value(text: str) -> Any:
    """The returned JSON as a value; NodeFailure when nested deeper than MAX_VALUE_DEPTH."""
    too_deep = f"the script's return value is nested deeper than {MAX_VALUE_DEPTH} levels"
    try:
        value = json.loads(text)
    except RecursionError:
        raise NodeFailure(too_deep) from None
    if nested_too_deeply(value):
        raise NodeFailure(too_deep)
    return value
