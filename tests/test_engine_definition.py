"""Parsing and validating workflow definitions (libflow.engine.validation, node_fields)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from libflow.api.errors import STATUS_BY_CODE
from libflow.engine.definition import (
    DEFAULT_TIMEOUT_SECONDS,
    MAX_TEMPLATE_TOKENS,
    InvalidWorkflow,
)
from libflow.engine.node_fields import NODE_FIELDS
from libflow.engine.nodes import NODE_HANDLERS
from libflow.engine.validation import parse_definition, parse_definition_off_loop

GREETING: dict[str, Any] = {
    "timeoutSeconds": 30,
    "nodes": [
        {"id": "start", "type": "event", "event": "run"},
        {"id": "who", "type": "input", "name": "name", "valueType": "string", "required": True},
        {"id": "greet", "type": "template", "template": "Hello, {{ inputs.name }}!"},
        {"id": "out", "type": "set_output", "name": "greeting", "value": "{{ nodes.greet.text }}"},
    ],
    "edges": [{"from": "start", "to": "greet"}, {"from": "greet", "to": "out"}],
}


def with_nodes(*nodes: dict[str, Any], edges: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A definition with a start event node plus ``nodes``, each reached from the start."""
    all_nodes = [{"id": "start", "type": "event", "event": "run"}, *nodes]
    if edges is None:
        edges = [{"from": "start", "to": node["id"]} for node in nodes if "id" in node]
    return {"nodes": all_nodes, "edges": edges}


def problems_of(raw: Any) -> list[dict[str, Any]]:
    """The details of the InvalidWorkflow that parsing ``raw`` raises."""
    with pytest.raises(InvalidWorkflow) as caught:
        parse_definition(raw)
    assert caught.value.code == "INVALID_WORKFLOW"
    assert caught.value.status == 400
    details: list[dict[str, Any]] = caught.value.details
    assert all(set(problem) == {"node", "problem"} for problem in details)
    return details


def test_the_design_example_parses() -> None:
    definition = parse_definition(GREETING)
    assert definition.timeout_seconds == 30
    assert [node.id for node in definition.nodes] == ["start", "who", "greet", "out"]
    assert definition.by_id["greet"].config["template"] == "Hello, {{ inputs.name }}!"
    assert [edge.target for edge in definition.outgoing["start"]] == ["greet"]
    assert [edge.source for edge in definition.incoming["out"]] == ["greet"]
    assert definition.event_names() == ["run"]
    assert [node.id for node in definition.input_nodes] == ["who"]


def test_a_run_plan_counts_only_edges_from_nodes_its_event_reaches() -> None:
    definition = parse_definition(
        {
            "nodes": [
                {"id": "a", "type": "event", "event": "run"},
                {"id": "b", "type": "event", "event": "other"},
                {"id": "mid", "type": "set_output", "name": "x", "value": 1},
                {"id": "end", "type": "set_output", "name": "y", "value": 2},
            ],
            "edges": [
                {"from": "a", "to": "mid"},
                {"from": "mid", "to": "end"},
                {"from": "b", "to": "end"},
            ],
        }
    )

    plan = definition.plan("run")

    assert plan is not None
    assert [node.id for node in plan.starts] == ["a"]
    assert dict(plan.waiting) == {"a": 0, "mid": 1, "end": 1}  # not b -> end
    assert definition.plan("run") is plan  # worked out once
    assert definition.plan("no such event") is None


def test_defaults_are_applied() -> None:
    definition = parse_definition(
        with_nodes(
            {"id": "call", "type": "http_request", "url": "https://example.com", "method": "post"},
            {"id": "stop", "type": "fail", "message": "no"},
            {"id": "find", "type": "library_search", "query": "q"},
            {"id": "opt", "type": "input", "name": "x", "valueType": "number"},
        )
    )
    assert definition.timeout_seconds == DEFAULT_TIMEOUT_SECONDS
    call = definition.by_id["call"].config
    assert (call["method"], call["headers"], call["json"], call["timeoutSeconds"]) == (
        "POST",
        {},
        None,
        30,
    )
    assert definition.by_id["stop"].config["statusCode"] == 500
    assert definition.by_id["find"].config["limit"] == 10
    assert definition.by_id["opt"].config == {
        "name": "x",
        "valueType": "number",
        "required": False,
        "default": None,
    }


def test_parsed_definitions_are_frozen() -> None:
    definition = parse_definition(GREETING)
    with pytest.raises(AttributeError):
        definition.timeout_seconds = 5  # type: ignore[misc]
    with pytest.raises(TypeError):
        definition.by_id["greet"].config["template"] = "x"  # type: ignore[index]


def test_every_node_type_has_a_handler() -> None:
    assert set(NODE_FIELDS) == set(NODE_HANDLERS)


def test_every_problem_is_reported_not_just_the_first() -> None:
    raw = {
        "timeoutSeconds": 0,
        "nodes": [
            {"id": "a", "type": "teleport"},
            {"id": "a", "type": "template", "template": "x"},
            {"id": "t", "type": "template", "template": "{{ oops "},
        ],
        "edges": [{"from": "t", "to": "ghost"}],
    }
    with pytest.raises(InvalidWorkflow) as caught:
        parse_definition(raw)
    texts = [problem["problem"] for problem in caught.value.details]
    assert len(texts) == 6, texts
    assert "timeoutSeconds must be over 0" in texts[0]
    assert "unknown node type 'teleport'" in texts[1]
    assert "duplicate node id 'a'" in texts[2]
    assert "template syntax error" in texts[3]
    assert "unknown node 'ghost'" in texts[4]
    assert "no event node" in texts[5]
    assert caught.value.message.endswith("(and 5 more)")


@pytest.mark.parametrize(
    ("raw", "node", "fragment"),
    [
        pytest.param(
            with_nodes({"id": "x", "type": "teleport"}),
            "x",
            "unknown node type 'teleport'",
            id="unknown-type",
        ),
        pytest.param(
            with_nodes({"id": "start", "type": "template", "template": "x"}, edges=[]),
            "start",
            "duplicate node id 'start'",
            id="duplicate-id",
        ),
        pytest.param(
            with_nodes(edges=[{"from": "start", "to": "ghost"}]),
            "start",
            "refers to unknown node 'ghost'",
            id="dangling-to",
        ),
        pytest.param(
            with_nodes(
                {"id": "t", "type": "template", "template": "x"},
                edges=[{"from": "ghost", "to": "t"}],
            ),
            None,
            "refers to unknown node 'ghost'",
            id="dangling-from",
        ),
        pytest.param(
            with_nodes(
                {"id": "a", "type": "template", "template": "x"},
                {"id": "b", "type": "template", "template": "y"},
                {"id": "c", "type": "template", "template": "z"},
                edges=[
                    {"from": "start", "to": "a"},
                    {"from": "a", "to": "b"},
                    {"from": "b", "to": "c"},
                    {"from": "c", "to": "a"},
                ],
            ),
            "a",
            "cycle through nodes a, b, c",
            id="cycle",
        ),
        pytest.param(
            with_nodes(
                {"id": "a", "type": "template", "template": "x"},
                edges=[{"from": "start", "to": "a"}, {"from": "a", "to": "a"}],
            ),
            "a",
            "cycle through nodes a",
            id="self-loop",
        ),
        pytest.param(
            with_nodes({"id": "t", "type": "template"}),
            "t",
            "missing required field 'template'",
            id="missing-field",
        ),
        pytest.param(
            with_nodes({"id": "t", "type": "template", "template": 5}),
            "t",
            "field 'template' must be a string, not integer",
            id="wrong-field-type",
        ),
        pytest.param(
            with_nodes({"id": "d", "type": "delay", "seconds": "soon"}),
            "d",
            "field 'seconds' must be a number or an expression",
            id="text-where-a-number-goes",
        ),
        pytest.param(
            with_nodes({"id": "d", "type": "delay", "seconds": 301}),
            "d",
            "field 'seconds' must be at least 0 and at most 300",
            id="out-of-range",
        ),
        pytest.param(
            with_nodes({"id": "m", "type": "llm", "messages": [], "maxTokens": 0}),
            "m",
            "field 'maxTokens' must be at least 1 and at most 1000000",  # not 1e+06
            id="bounds-written-out",
        ),
        pytest.param(
            with_nodes({"id": "h", "type": "http_request", "url": "x", "method": "BREW"}),
            "h",
            "field 'method' must be one of GET",
            id="bad-method",
        ),
        pytest.param(
            with_nodes({"id": "h", "type": "http_request", "url": "x", "headers": {"a": 1}}),
            "h",
            "field 'headers' must map header names to strings",
            id="header-not-text",
        ),
        pytest.param(
            with_nodes({"id": "t", "type": "template", "template": "x", "tempalte": "y"}),
            "t",
            "unknown field 'tempalte'",
            id="unknown-field",
        ),
        pytest.param(
            with_nodes({"id": "t", "type": "template", "template": "Hi {{ inputs.name "}),
            "t",
            "field 'template': template syntax error at line 1",
            id="bad-template",
        ),
        pytest.param(
            with_nodes({"id": "t", "type": "template", "template": "{% for x in y %}"}),
            "t",
            "template syntax error",
            id="unclosed-block",
        ),
        pytest.param(
            with_nodes(
                {"id": "o", "type": "set_output", "name": "x", "value": {"a": [1, "{{ }}"]}}
            ),
            "o",
            "field 'value.a[1]': template syntax error",
            id="bad-template-nested",
        ),
        pytest.param(
            with_nodes(
                {"id": "t", "type": "template", "template": "{{ " + "(" * 300 + ")" * 300 + " }}"}
            ),
            "t",
            "nested too deeply",
            id="nested-too-deep",
        ),
        pytest.param(
            with_nodes({"id": "t", "type": "template", "template": "{% include 'other' %}"}),
            "t",
            "include and import are not supported",
            id="include",
        ),
        pytest.param(
            {"nodes": [{"id": "t", "type": "template", "template": "x"}], "edges": []},
            None,
            "the workflow has no event node",
            id="no-event-node",
        ),
        pytest.param(
            with_nodes(
                {"id": "t", "type": "template", "template": "x"},
                edges=[{"from": "start", "to": "t", "when": "true"}],
            ),
            "start",
            "has 'when' but start is not a condition node",
            id="when-off-condition",
        ),
        pytest.param(
            with_nodes(
                {"id": "c", "type": "condition", "if": "{{ true }}"},
                {"id": "t", "type": "template", "template": "x"},
                edges=[{"from": "start", "to": "c"}, {"from": "c", "to": "t", "when": "maybe"}],
            ),
            "c",
            '\'when\' must be "true" or "false"',
            id="bad-when",
        ),
        pytest.param(
            with_nodes(
                {"id": "other", "type": "event", "event": "second"},
                edges=[{"from": "start", "to": "other"}],
            ),
            "other",
            "leads into an event node",
            id="edge-into-event",
        ),
        pytest.param(
            with_nodes(
                {"id": "t", "type": "template", "template": "x"},
                edges=[{"from": "start", "to": "t"}, {"from": "start", "to": "t"}],
            ),
            "start",
            "duplicate edge start -> t",
            id="duplicate-edge",
        ),
        pytest.param(
            with_nodes(
                {"id": "a", "type": "input", "name": "x", "valueType": "string"},
                {"id": "b", "type": "input", "name": "x", "valueType": "number"},
                edges=[],
            ),
            "b",
            "input 'x' is declared by node 'a' too",
            id="duplicate-input",
        ),
        pytest.param(
            with_nodes(
                {"id": "a", "type": "input", "name": "x", "valueType": "number", "default": "1"},
                edges=[],
            ),
            "a",
            "field 'default' must be of valueType number",
            id="default-of-wrong-type",
        ),
        pytest.param(
            with_nodes({"id": "a", "type": "input", "name": "x", "valueType": "date"}, edges=[]),
            "a",
            "field 'valueType' must be one of string, number, boolean, object, array",
            id="bad-value-type",
        ),
        pytest.param({**GREETING, "timeoutSeconds": 0}, None, "timeoutSeconds", id="timeout-0"),
        pytest.param({**GREETING, "timeoutSeconds": 301}, None, "at most 300", id="timeout-301"),
        pytest.param(
            {**GREETING, "timeoutSeconds": "30"},
            None,
            "timeoutSeconds must be a number",
            id="timeout-text",
        ),
        pytest.param({**GREETING, "timeoutSeconds": True}, None, "number", id="timeout-bool"),
        pytest.param(
            {**GREETING, "nodes": []}, None, "nodes must be a non-empty array", id="empty"
        ),
        pytest.param({**GREETING, "edges": {}}, None, "edges must be an array", id="edges-object"),
        pytest.param({**GREETING, "title": "x"}, None, "unknown field 'title'", id="top-level-key"),
        pytest.param(
            {"nodes": [{"type": "event", "event": "run"}]}, None, "needs an id", id="no-id"
        ),
        pytest.param(with_nodes({"id": "x"}), "x", "missing required field 'type'", id="no-type"),
        pytest.param([], None, "must be an object", id="not-an-object"),
    ],
)
def test_each_validation_problem(raw: Any, node: str | None, fragment: str) -> None:
    problems = problems_of(copy.deepcopy(raw))
    matching = [p for p in problems if fragment in p["problem"]]
    assert matching, problems
    assert matching[0]["node"] == node, problems


def test_a_cycle_names_only_its_own_nodes() -> None:
    raw = with_nodes(
        {"id": "a", "type": "template", "template": "x"},
        {"id": "b", "type": "template", "template": "x"},
        {"id": "after", "type": "template", "template": "x"},
        edges=[
            {"from": "start", "to": "a"},
            {"from": "a", "to": "b"},
            {"from": "b", "to": "a"},
            {"from": "b", "to": "after"},
        ],
    )
    assert [p["problem"] for p in problems_of(raw)] == ["cycle through nodes a, b"]


def test_expressions_are_allowed_where_numbers_go() -> None:
    definition = parse_definition(
        with_nodes(
            {"id": "d", "type": "delay", "seconds": "{{ inputs.wait }}"},
            {"id": "r", "type": "respond", "statusCode": "{{ 201 }}"},
            {"id": "c", "type": "condition", "if": True},
        )
    )
    assert definition.by_id["d"].config["seconds"] == "{{ inputs.wait }}"


def test_condition_edges_carry_when() -> None:
    definition = parse_definition(
        with_nodes(
            {"id": "c", "type": "condition", "if": "{{ inputs.ok }}"},
            {"id": "yes", "type": "template", "template": "y"},
            {"id": "no", "type": "template", "template": "n"},
            edges=[
                {"from": "start", "to": "c"},
                {"from": "c", "to": "yes", "when": "true"},
                {"from": "c", "to": "no", "when": "false"},
            ],
        )
    )
    assert [(e.target, e.when) for e in definition.outgoing["c"]] == [("yes", True), ("no", False)]


def test_invalid_workflow_maps_to_400() -> None:
    assert STATUS_BY_CODE[InvalidWorkflow.code] == 400


def nested(depth: int) -> Any:
    """A value ``depth`` levels of arrays and objects deep."""
    value: Any = "bottom"
    for level in range(depth):
        value = [value] if level % 2 else {"next": value}
    return value


@pytest.mark.parametrize(
    ("node", "field"),
    [
        ({"id": "deep", "type": "set_output", "name": "x", "value": nested(65)}, "value"),
        (
            {
                "id": "deep",
                "type": "input",
                "name": "x",
                "valueType": "array",
                "default": nested(900),
            },
            "default",
        ),
        (
            {"id": "deep", "type": "http_request", "url": "http://x.test", "json": nested(70)},
            "json",
        ),
    ],
)
def test_a_value_nested_deeper_than_64_levels_is_refused_naming_its_node(
    node: dict[str, Any], field: str
) -> None:
    [problem] = problems_of(with_nodes(node))
    assert problem == {
        "node": "deep",
        "problem": f"field '{field}' is nested deeper than 64 levels",
    }


def test_a_value_nested_64_levels_deep_is_accepted() -> None:
    node = {"id": "deep", "type": "set_output", "name": "x", "value": nested(64)}
    assert parse_definition(with_nodes(node)).by_id["deep"].config["value"] == nested(64)


def test_expressions_over_the_token_budget_are_refused_before_they_are_compiled() -> None:
    per_node = MAX_TEMPLATE_TOKENS // 4  # "{{ a }}" is 5 tokens: 4 nodes of these are over
    nodes = [
        {"id": f"t{i}", "type": "template", "template": "{{ a }}" * (per_node // 5)}
        for i in range(5)
    ]
    assert problems_of(with_nodes(*nodes)) == [
        {
            "node": "t4",
            "problem": f"field 'template': the definition's expressions are over "
            f"{MAX_TEMPLATE_TOKENS} tokens in all",
        }
    ]


def test_expressions_within_the_token_budget_compile() -> None:
    nodes = [
        {"id": f"t{i}", "type": "template", "template": "{{ a }}" * (MAX_TEMPLATE_TOKENS // 25)}
        for i in range(5)
    ]
    assert len(parse_definition(with_nodes(*nodes)).nodes) == 6


async def test_a_definition_parses_off_the_event_loop_alike() -> None:
    assert await parse_definition_off_loop(GREETING) == parse_definition(GREETING)
