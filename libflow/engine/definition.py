"""Workflow definitions: JSON parsed and validated into frozen dataclasses."""

from __future__ import annotations

import copy
import math
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from libflow.engine.expressions import check_syntax, has_expressions
from libflow.errors import LibflowError

DEFAULT_TIMEOUT_SECONDS: Final = 30
MAX_TIMEOUT_SECONDS: Final = 300
MAX_NODES: Final = 500
MAX_EDGES: Final = 2000
VALUE_TYPES: Final = ("string", "number", "boolean", "object", "array")
HTTP_METHODS: Final = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
_ABSENT: Final = object()


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
            plan = self._plans[event] = RunPlan(starts, MappingProxyType(waiting))
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


Check = Callable[[Any], str | None]


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """One field of a node type: accepted JSON kinds, presence, default, templating."""

    kinds: tuple[str, ...]
    required: bool = False
    default: Any = _ABSENT
    templated: bool = False
    check: Check | None = None


def _non_empty(value: Any) -> str | None:
    """Names must not be empty."""
    return None if value.strip() else "must not be empty"


def _one_of(*choices: str, upper: bool = False) -> Check:
    """A check that a string is one of ``choices``."""

    def check(value: Any) -> str | None:
        """None when the value is a choice, else the reason."""
        if (value.upper() if upper else value) in choices:
            return None
        return f"must be one of {', '.join(choices)}"

    return check


def _between(low: float, high: float, *, low_open: bool = False) -> Check:
    """A check that a number lies in a range."""

    def check(value: Any) -> str | None:
        """None when the value is in range, else the reason."""
        if (value > low if low_open else value >= low) and value <= high:
            return None
        return f"must be {'over' if low_open else 'at least'} {low:g} and at most {high:g}"

    return check


def _string_values(value: Any) -> str | None:
    """Header values must be strings."""
    if all(isinstance(item, str) for item in value.values()):
        return None
    return "must map header names to strings"


_STRING = ("string",)
NODE_FIELDS: Final[Mapping[str, Mapping[str, FieldSpec]]] = {
    "event": {"event": FieldSpec(_STRING, required=True, check=_non_empty)},
    "input": {
        "name": FieldSpec(_STRING, required=True, check=_non_empty),
        "valueType": FieldSpec(_STRING, required=True, check=_one_of(*VALUE_TYPES)),
        "required": FieldSpec(("boolean",), default=False),
        "default": FieldSpec(("any",), default=None),
    },
    "set_output": {
        "name": FieldSpec(_STRING, required=True, check=_non_empty),
        "value": FieldSpec(("any",), required=True, templated=True),
    },
    "template": {"template": FieldSpec(_STRING, required=True, templated=True)},
    "condition": {"if": FieldSpec(("string", "boolean"), required=True, templated=True)},
    "http_request": {
        "method": FieldSpec(_STRING, default="GET", check=_one_of(*HTTP_METHODS, upper=True)),
        "url": FieldSpec(_STRING, required=True, templated=True),
        "headers": FieldSpec(("object",), default={}, templated=True, check=_string_values),
        "json": FieldSpec(("any",), default=None, templated=True),
        "timeoutSeconds": FieldSpec(
            ("number",), default=30, check=_between(0, MAX_TIMEOUT_SECONDS, low_open=True)
        ),
    },
    "library_search": {
        "query": FieldSpec(_STRING, required=True, templated=True),
        "limit": FieldSpec(("integer",), default=10, templated=True, check=_between(1, 100)),
    },
    "library_file_text": {"fileId": FieldSpec(_STRING, required=True, templated=True)},
    "delay": {
        "seconds": FieldSpec(
            ("number",), required=True, templated=True, check=_between(0, MAX_TIMEOUT_SECONDS)
        )
    },
    "respond": {
        "statusCode": FieldSpec(
            ("integer",), required=True, templated=True, check=_between(200, 599)
        )
    },
    "fail": {
        "message": FieldSpec(_STRING, required=True, templated=True),
        "statusCode": FieldSpec(
            ("integer",), default=500, templated=True, check=_between(400, 599)
        ),
    },
}
NODE_TYPES: Final = frozenset(NODE_FIELDS)


def _kind(value: Any) -> str:
    """The JSON kind of a value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    return type(value).__name__


def _accepts(kinds: tuple[str, ...], value: Any) -> bool:
    """Whether a value is one of the accepted kinds (an integer is a number too)."""
    kind = _kind(value)
    if "any" in kinds:
        return kind in {"null", "boolean", "integer", "number", "string", "object", "array"}
    if kind == "number" and not math.isfinite(value):
        return False
    return kind in kinds or (kind == "integer" and "number" in kinds)


def _strings_in(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """Every string inside a value with its path, e.g. ``json.items[0].name``."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings_in(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings_in(item, f"{path}[{index}]")


class _Problems:
    """The problems found so far, each naming its node (or None)."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []

    def add(self, node: str | None, problem: str) -> None:
        """Record one problem."""
        self.items.append({"node": node, "problem": problem})


def _describe_kinds(kinds: tuple[str, ...], templated: bool) -> str:
    """Human text for the accepted kinds of a field."""
    names = [
        {"integer": "an integer", "object": "an object", "array": "an array"}.get(k, f"a {k}")
        for k in kinds
    ]
    if templated and "string" not in kinds:
        names.append("an expression")
    return " or ".join(names)


def _parse_fields(
    node_id: str, node_type: str, raw: dict[str, Any], problems: _Problems
) -> dict[str, Any]:
    """Check a node's fields against its type; return them with defaults applied."""
    specs = NODE_FIELDS[node_type]
    config: dict[str, Any] = {}
    for name in raw:
        if name not in specs and name not in {"id", "type"}:
            problems.add(node_id, f"unknown field '{name}' for a {node_type} node")
    for name, spec in specs.items():
        if name not in raw:
            if spec.required:
                problems.add(node_id, f"missing required field '{name}'")
            elif spec.default is not _ABSENT:
                config[name] = copy.deepcopy(spec.default)
            continue
        value = raw[name]
        # A templated number or boolean field may hold an expression instead (checked at run).
        expression = spec.templated and isinstance(value, str) and not _accepts(spec.kinds, value)
        if expression and not has_expressions(value):
            problems.add(node_id, f"field '{name}' must be {_describe_kinds(spec.kinds, True)}")
            continue
        if not expression and not _accepts(spec.kinds, value):
            expected = _describe_kinds(spec.kinds, spec.templated)
            problems.add(node_id, f"field '{name}' must be {expected}, not {_kind(value)}")
            continue
        reason = None if expression or spec.check is None else spec.check(value)
        if reason is not None:
            problems.add(node_id, f"field '{name}' {reason}")
            continue
        if spec.templated:
            for path, text in _strings_in(value, name):
                syntax = check_syntax(text)
                if syntax is not None:
                    problems.add(node_id, f"field '{path}': {syntax}")
        config[name] = value
    if node_type == "http_request" and isinstance(config.get("method"), str):
        config["method"] = config["method"].upper()
    if node_type == "input":
        _check_input_default(node_id, config, problems)
    return config


def _check_input_default(node_id: str, config: dict[str, Any], problems: _Problems) -> None:
    """An input's default must be of its valueType."""
    value_type, default = config.get("valueType"), config.get("default")
    if default is not None and value_type in VALUE_TYPES and not value_matches(default, value_type):
        problems.add(node_id, f"field 'default' must be of valueType {value_type}")


def _parse_nodes(raw_nodes: list[Any], problems: _Problems) -> dict[str, Node]:
    """The nodes that parsed well enough to be referred to, by id."""
    by_id: dict[str, Node] = {}
    seen: set[str] = set()
    input_names: dict[str, str] = {}
    for index, raw in enumerate(raw_nodes):
        if not isinstance(raw, dict):
            problems.add(None, f"nodes[{index}] must be an object")
            continue
        node_id = raw.get("id")
        if not isinstance(node_id, str) or not node_id.strip():
            problems.add(None, f"nodes[{index}] needs an id, a non-empty string")
            continue
        if node_id in seen:
            problems.add(node_id, f"duplicate node id '{node_id}'")
            continue
        seen.add(node_id)
        node_type = raw.get("type")
        if not isinstance(node_type, str):
            problems.add(node_id, "missing required field 'type'")
            continue
        if node_type not in NODE_TYPES:
            problems.add(node_id, f"unknown node type '{node_type}'")
            continue
        config = _parse_fields(node_id, node_type, raw, problems)
        if node_type == "input" and isinstance(config.get("name"), str):
            other = input_names.setdefault(config["name"], node_id)
            if other != node_id:
                problems.add(node_id, f"input '{config['name']}' is declared by node '{other}' too")
        by_id[node_id] = Node(id=node_id, type=node_type, config=MappingProxyType(config))
    return by_id


def _parse_when(value: Any) -> bool | None:
    """An edge's ``when``: "true"/"false" (JSON booleans accepted too)."""
    if value in ("true", True):
        return True
    if value in ("false", False):
        return False
    raise ValueError(value)


def _parse_edges(
    raw_edges: list[Any], by_id: dict[str, Node], known: set[str], problems: _Problems
) -> list[Edge]:
    """The edges between known nodes; dangling and malformed ones are problems."""
    edges: list[Edge] = []
    seen: set[Edge] = set()
    for index, raw in enumerate(raw_edges):
        if not isinstance(raw, dict):
            problems.add(None, f"edges[{index}] must be an object")
            continue
        source, target = raw.get("from"), raw.get("to")
        named = source if isinstance(source, str) else None
        extra = sorted(set(raw) - {"from", "to", "when"})
        if extra:
            problems.add(named, f"edges[{index}] has unknown field '{extra[0]}'")
        if not isinstance(source, str) or not isinstance(target, str):
            problems.add(named, f"edges[{index}] needs 'from' and 'to' node ids")
            continue
        dangling = [end for end in (source, target) if end not in known]
        for end in dangling:
            problems.add(
                source if source in known else None,
                f"edge {source} -> {target} refers to unknown node '{end}'",
            )
        when: bool | None = None
        if "when" in raw:
            try:
                when = _parse_when(raw["when"])
            except ValueError:
                problems.add(
                    source, f'edge {source} -> {target}: \'when\' must be "true" or "false"'
                )
                continue
        if dangling or source not in by_id or target not in by_id:
            continue
        if when is not None and by_id[source].type != "condition":
            problems.add(
                source, f"edge {source} -> {target} has 'when' but {source} is not a condition node"
            )
        if by_id[target].type == "event":
            problems.add(target, f"edge {source} -> {target} leads into an event node")
        edge = Edge(source=source, target=target, when=when)
        if edge in seen:
            problems.add(source, f"duplicate edge {source} -> {target}")
            continue
        seen.add(edge)
        edges.append(edge)
    return edges


def _cycles(order: list[str], successors: Mapping[str, list[str]]) -> list[list[str]]:
    """The cycles of the graph: strongly connected components (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in order:
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(successors[root]))]
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(successors[child])))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component: list[str] = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1 or node in successors[node]:
                        position = {node_id: i for i, node_id in enumerate(order)}
                        found.append(sorted(component, key=position.__getitem__))
    return found


def _parse_timeout(raw: dict[str, Any], problems: _Problems) -> float:
    """``timeoutSeconds``: a number over 0 and at most MAX_TIMEOUT_SECONDS."""
    value = raw.get("timeoutSeconds", DEFAULT_TIMEOUT_SECONDS)
    if not _accepts(("number",), value):
        problems.add(None, f"timeoutSeconds must be a number, not {_kind(value)}")
    elif not 0 < value <= MAX_TIMEOUT_SECONDS:
        problems.add(None, f"timeoutSeconds must be over 0 and at most {MAX_TIMEOUT_SECONDS}")
    else:
        return float(value)
    return float(DEFAULT_TIMEOUT_SECONDS)


def parse_definition(raw: Any) -> WorkflowDefinition:
    """Validate a definition as sent by a client; raise InvalidWorkflow naming every problem."""
    if not isinstance(raw, dict):
        raise InvalidWorkflow(
            "the workflow definition must be an object",
            details=[{"node": None, "problem": "the definition must be an object"}],
        )
    problems = _Problems()
    for key in sorted(set(raw) - {"timeoutSeconds", "nodes", "edges"}):
        problems.add(None, f"unknown field '{key}' in the definition")
    timeout = _parse_timeout(raw, problems)
    raw_nodes, raw_edges = raw.get("nodes"), raw.get("edges", [])
    if not isinstance(raw_nodes, list) or not raw_nodes:
        problems.add(None, "nodes must be a non-empty array")
        raw_nodes = []
    if not isinstance(raw_edges, list):
        problems.add(None, "edges must be an array")
        raw_edges = []
    if len(raw_nodes) > MAX_NODES or len(raw_edges) > MAX_EDGES:
        problems.add(None, f"a workflow has at most {MAX_NODES} nodes and {MAX_EDGES} edges")
        raise _invalid(problems)
    by_id = _parse_nodes(raw_nodes, problems)
    known = by_id.keys() | {
        n["id"] for n in raw_nodes if isinstance(n, dict) and isinstance(n.get("id"), str)
    }
    edges = _parse_edges(raw_edges, by_id, known, problems)
    if raw_nodes and not any(node.type == "event" for node in by_id.values()):
        problems.add(None, "the workflow has no event node")
    successors: dict[str, list[str]] = {node_id: [] for node_id in by_id}
    for edge in edges:
        successors[edge.source].append(edge.target)
    for cycle in _cycles(list(by_id), successors):
        problems.add(cycle[0], f"cycle through nodes {', '.join(cycle)}")
    if problems.items:
        raise _invalid(problems)
    return WorkflowDefinition(
        timeout_seconds=timeout,
        nodes=tuple(by_id.values()),
        edges=tuple(edges),
        by_id=MappingProxyType(by_id),
        outgoing=MappingProxyType(_adjacent(by_id, edges, lambda edge: edge.source)),
        incoming=MappingProxyType(_adjacent(by_id, edges, lambda edge: edge.target)),
        input_nodes=tuple(node for node in by_id.values() if node.type == "input"),
    )


def _adjacent(
    by_id: Mapping[str, Node], edges: list[Edge], end: Callable[[Edge], str]
) -> dict[str, tuple[Edge, ...]]:
    """Edges grouped by one of their ends."""
    grouped: dict[str, list[Edge]] = {node_id: [] for node_id in by_id}
    for edge in edges:
        grouped[end(edge)].append(edge)
    return {node_id: tuple(group) for node_id, group in grouped.items()}


def _invalid(problems: _Problems) -> InvalidWorkflow:
    """The error for a list of problems, the first one in its message."""
    first = problems.items[0]
    where = f"node '{first['node']}': " if first["node"] else ""
    more = f" (and {len(problems.items) - 1} more)" if len(problems.items) > 1 else ""
    return InvalidWorkflow(
        f"invalid workflow: {where}{first['problem']}{more}", details=problems.items
    )
