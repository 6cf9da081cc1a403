"""Validating a definition as a client sends it: nodes, edges and cycles, every problem named."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from libflow.engine.cpu_pool import off_loop
from libflow.engine.definition import (
    DEFAULT_TIMEOUT_SECONDS,
    MAX_EDGES,
    MAX_NODES,
    MAX_TIMEOUT_SECONDS,
    Edge,
    InvalidWorkflow,
    Node,
    WorkflowDefinition,
)
from libflow.engine.node_fields import NODE_TYPES, Problems, accepts, json_kind, parse_fields


def _parse_nodes(raw_nodes: list[Any], problems: Problems) -> dict[str, Node]:
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
        config = parse_fields(node_id, node_type, raw, problems)
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
    raw_edges: list[Any], by_id: dict[str, Node], known: set[str], problems: Problems
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


def _parse_timeout(raw: dict[str, Any], problems: Problems) -> float:
    """``timeoutSeconds``: a number over 0 and at most MAX_TIMEOUT_SECONDS."""
    value = raw.get("timeoutSeconds", DEFAULT_TIMEOUT_SECONDS)
    if not accepts(("number",), value):
        problems.add(None, f"timeoutSeconds must be a number, not {json_kind(value)}")
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
    problems = Problems()
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


async def parse_definition_off_loop(raw: Any) -> WorkflowDefinition:
    """``parse_definition`` on a CPU thread: compiling a definition's expressions is CPU work."""
    return await off_loop(parse_definition, raw)


def _adjacent(
    by_id: Mapping[str, Node], edges: list[Edge], end: Callable[[Edge], str]
) -> dict[str, tuple[Edge, ...]]:
    """Edges grouped by one of their ends."""
    grouped: dict[str, list[Edge]] = {node_id: [] for node_id in by_id}
    for edge in edges:
        grouped[end(edge)].append(edge)
    return {node_id: tuple(group) for node_id, group in grouped.items()}


def _invalid(problems: Problems) -> InvalidWorkflow:
    """The error for a list of problems, the first one in its message."""
    first = problems.items[0]
    where = f"node '{first['node']}': " if first["node"] else ""
    more = f" (and {len(problems.items) - 1} more)" if len(problems.items) > 1 else ""
    return InvalidWorkflow(
        f"invalid workflow: {where}{first['problem']}{more}", details=problems.items
    )
