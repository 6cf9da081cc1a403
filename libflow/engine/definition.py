"""The parsed workflow definition: frozen dataclasses of its nodes and edges, and its limits.

``libflow.engine.validation`` builds one from the JSON a client sends.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from libflow.errors import LibflowError

DEFAULT_TIMEOUT_SECONDS: Final = 30
MAX_TIMEOUT_SECONDS: Final = 300
MAX_NODES: Final = 500
MAX_EDGES: Final = 2000
# Levels of nesting of a value: a field of a definition (refused at publish) or a value an
# expression builds or converts (refused at run time), so nothing recurses without bound.
MAX_VALUE_DEPTH: Final = 64
# Tokens of all the expressions of a definition, as Jinja's lexer counts them (whitespace
# too), counted before anything is compiled: compiling costs about 20 to 60 us a token.
MAX_TEMPLATE_TOKENS: Final = 10_000
VALUE_TYPES: Final = ("string", "number", "boolean", "object", "array")


class InvalidWorkflow(LibflowError):
    """The definition cannot run; ``details`` lists every ``{node, problem}`` found."""

    code = "INVALID_WORKFLOW"


@dataclass(frozen=True, slots=True)
class Node:
    """One node: its id, its type and its fields (defaults applied)."""

    id: str
    type: str
    config: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Edge:
    """A directed edge; ``when`` picks a condition node's branch (None: always)."""

    source: str
    target: str
    when: bool | None = None


@dataclass(frozen=True, slots=True)
class RunPlan:
    """A run of one event: its event nodes, and how many edges from nodes the run can reach
    each node it can reach waits for."""

    starts: tuple[Node, ...]
    waiting: Mapping[str, int]
    id_chars: int = 0  # the length of all the node ids it can reach (their timings' keys)


@dataclass(frozen=True, slots=True)
class WorkflowDefinition:
    """A validated workflow: nodes, edges, the run timeout and adjacency by node id."""

    timeout_seconds: float
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]
    by_id: Mapping[str, Node] = field(repr=False, compare=False)
    outgoing: Mapping[str, tuple[Edge, ...]] = field(repr=False, compare=False)
    incoming: Mapping[str, tuple[Edge, ...]] = field(repr=False, compare=False)
    input_nodes: tuple[Node, ...] = field(repr=False, compare=False)
    # Worked out on first use and kept: a definition is run many times, never changed.
    _plans: dict[str, RunPlan] = field(default_factory=dict, init=False, repr=False, compare=False)

    def event_names(self) -> list[str]:
        """The events this workflow can be run with, sorted."""
        return sorted({node.config["event"] for node in self.nodes if node.type == "event"})

    def plan(self, event: str) -> RunPlan | None:
        """The plan of a run of ``event``, or None when no event node starts one."""
        plan = self._plans.get(event)
        if plan is None:
            starts = tuple(
                node
                for node in self.nodes
                if node.type == "event" and node.config["event"] == event
            )
            if not starts:
                return None  # not kept: callers choose the event, and may choose many
            reached = self._reachable(node.id for node in starts)
            waiting = {
                node_id: sum(1 for edge in self.incoming[node_id] if edge.source in reached)
                for node_id in reached
            }
            plan = self._plans[event] = RunPlan(
                starts, MappingProxyType(waiting), sum(map(len, reached))
            )
        return plan

    def _reachable(self, starts: Iterable[str]) -> set[str]:
        """The nodes some path leads to from ``starts``."""
        seen = set(starts)
        queue = deque(seen)
        while queue:
            for edge in self.outgoing[queue.popleft()]:
                if edge.target not in seen:
                    seen.add(edge.target)
                    queue.append(edge.target)
        return seen


def value_matches(value: Any, value_type: str) -> bool:
    """Whether a JSON value is of an input's ``valueType``."""
    if value_type == "string":
        return isinstance(value, str)
    if value_type == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if value_type == "boolean":
        return isinstance(value, bool)
    if value_type == "object":
        return isinstance(value, dict)
    if value_type == "array":
        return isinstance(value, list)
    return False
