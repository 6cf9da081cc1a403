"""What each node type does when a run reaches it: one module per node family, and dispatch."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from libflow.engine.definition import Node
from libflow.engine.nodes import flow, http, library, llm, subflow, text
from libflow.engine.nodes.code import run_code
from libflow.engine.nodes.state import NodeFailure, NodeServices, RunState
from libflow.engine.render_budget import RunOutOfTime
from libflow.errors import LibflowError

__all__ = [
    "INSTANT_TYPES",
    "NODE_HANDLERS",
    "USAGE_TYPES",
    "NodeFailure",
    "NodeServices",
    "RunState",
    "run_node",
]

logger = logging.getLogger("libflow.engine")

NodeHandler = Callable[[Node, RunState], Awaitable[dict[str, Any]]]
NODE_HANDLERS: Final[Mapping[str, NodeHandler]] = {
    "event": flow.run_event,
    "input": flow.run_input,
    "set_output": flow.run_set_output,
    "template": text.run_template,
    "condition": flow.run_condition,
    "http_request": http.run_http_request,
    "library_search": library.run_library_search,
    "library_file_text": library.run_library_file_text,
    "llm": llm.run_llm,
    "code": run_code,
    "delay": flow.run_delay,
    "respond": flow.run_respond,
    "fail": flow.run_fail,
    "call_workflow": subflow.run_call_workflow,
    "map": subflow.run_map,
}
# These never wait on I/O (at most on a CPU thread rendering a field): the runner runs them
# inline instead of in a task of their own.
INSTANT_TYPES: Final = frozenset(
    {"event", "input", "set_output", "template", "condition", "respond", "fail"}
)
# These record a model's token usage in their node timing (the run keeps room for it).
USAGE_TYPES: Final = frozenset({"llm"})


async def run_node(node: Node, state: RunState) -> dict[str, Any]:
    """Run one node; every failure of its own becomes a NodeFailure (logged, no traceback).

    RunOutOfTime passes through: the run's timeout passed, which the runner reports.
    """
    try:
        return await NODE_HANDLERS[node.type](node, state)
    except RunOutOfTime:
        raise
    except NodeFailure as failure:
        _log_failure(node, failure.message)
        raise
    except LibflowError as err:
        _log_failure(node, err.message)
        raise NodeFailure(err.message) from err
    except Exception as err:
        logger.exception("node %s (%s) crashed", node.id, node.type)
        raise NodeFailure(f"internal error in a {node.type} node") from err


def _log_failure(node: Node, message: str) -> None:
    """A node failed for a reason of its own (its input, its limits): one line, no traceback."""
    logger.info("node %s (%s) failed: %.300s", node.id, node.type, message)
