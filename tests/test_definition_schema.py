"""The workflow definition's JSON Schema: one schema per node type, true to what publishing
checks, so an editor that validates with it agrees with the server."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from libflow.api.openapi.definition import (
    FIELD_RULES,
    NODE_DOCS,
    node_schema_name,
    standalone_definition_schema,
)
from libflow.engine.definition import InvalidWorkflow
from libflow.engine.node_fields import NODE_FIELDS, Problems, parse_fields
from libflow.engine.validation import parse_definition
from tests.conftest import Api
from tests.workflow_helpers import SPEC_EXAMPLE

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = standalone_definition_schema("https://libflow.test/workflow-definition.schema.json")
DEFINITIONS = jsonschema.Draft202012Validator(SCHEMA)
NODES = jsonschema.Draft202012Validator(
    {"$defs": SCHEMA["$defs"], **SCHEMA["properties"]["nodes"]["items"]}
)
JSON_BLOCK = re.compile(r"^```json\n(.*?)^```", re.S | re.M)

# The smallest node of each type that publishing accepts.
MINIMAL: dict[str, dict[str, Any]] = {
    "event": {"event": "run"},
    "input": {"name": "n", "valueType": "string"},
    "set_output": {"name": "n", "value": 1},
    "template": {"template": "hi"},
    "condition": {"if": True},
    "http_request": {"url": "https://example.com/"},
    "library_search": {"query": "q"},
    "library_file_text": {"fileId": "f"},
    "llm": {"messages": [{"role": "user", "content": "hi"}]},
    "code": {"source": "return 1;"},
    "call_workflow": {"workflowId": "w"},
    "map": {"items": [], "workflowId": "w"},
    "delay": {"seconds": 0},
    "respond": {"statusCode": 200},
    "fail": {"message": "no"},
}


def _node(node_type: str, **fields: Any) -> dict[str, Any]:
    return {"id": "n", "type": node_type, **MINIMAL[node_type], **fields}


def _publishing_accepts(node: dict[str, Any]) -> bool:
    problems = Problems()
    parse_fields(node["id"], node["type"], node, problems)
    return not problems.items


def _schema_accepts(node: dict[str, Any]) -> bool:
    return NODES.is_valid(node)


def _documented_examples() -> list[tuple[str, Any]]:
    """Every JSON example of the docs and the README that is a definition or a node."""
    found: list[tuple[str, Any]] = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in JSON_BLOCK.findall(page.read_text()):
            value = json.loads(block)
            if isinstance(value, dict) and ("nodes" in value or {"id", "type"} <= set(value)):
                found.append((f"{page.name}: {block[:60]}", value))
    for example in sorted((ROOT / "examples").glob("*.json")):
        value = json.loads(example.read_text())
        found.append((example.name, value.get("definition", value)))
    found.append(("the spec's example", SPEC_EXAMPLE))
    return found


def test_every_node_type_and_field_is_described_in_user_words() -> None:
    assert set(NODE_DOCS) == set(NODE_FIELDS)
    for node_type, fields in NODE_FIELDS.items():
        assert set(NODE_DOCS[node_type].fields) == set(fields), node_type
        schema = SCHEMA["$defs"][node_schema_name(node_type)]
        assert schema["description"]
        for name in fields:
            assert schema["properties"][name]["description"], (node_type, name)


def test_every_rule_names_a_declared_field() -> None:
    assert {key for key in FIELD_RULES if key[1] not in NODE_FIELDS.get(key[0], {})} == set()


def test_the_schema_is_valid_json_schema_with_one_branch_per_node_type() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    branches = SCHEMA["properties"]["nodes"]["items"]
    assert len(branches["oneOf"]) == len(NODE_FIELDS)
    assert set(branches["discriminator"]["mapping"]) == set(NODE_FIELDS)


@pytest.mark.parametrize(("where", "example"), _documented_examples(), ids=lambda v: str(v)[:50])
def test_every_documented_example_validates(where: str, example: Any) -> None:
    validator = DEFINITIONS if "nodes" in example else NODES
    problems = [error.message for error in validator.iter_errors(example)]
    assert not problems, f"{where}: {problems}"


def test_the_documented_examples_include_every_node_type() -> None:
    types = set()
    for _where, example in _documented_examples():
        for node in example.get("nodes", [example]):
            types.add(node["type"])
    assert types >= set(NODE_FIELDS)


@pytest.mark.parametrize("node_type", sorted(NODE_FIELDS))
def test_the_minimal_node_of_each_type_is_valid_to_both(node_type: str) -> None:
    node = _node(node_type)
    assert _publishing_accepts(node) and _schema_accepts(node)


@pytest.mark.parametrize("node_type", sorted(NODE_FIELDS))
def test_both_refuse_an_unknown_field_and_a_missing_required_one(node_type: str) -> None:
    extra = _node(node_type, colour="blue")
    assert not _publishing_accepts(extra) and not _schema_accepts(extra)
    for name, spec in NODE_FIELDS[node_type].items():
        if spec.required:
            node = _node(node_type)
            del node[name]
            assert not _publishing_accepts(node) and not _schema_accepts(node), name


def _boundaries(rule: dict[str, Any]) -> list[tuple[Any, bool]]:
    """Values at and past each bound of a rule, with whether they are allowed."""
    cases: list[tuple[Any, bool]] = []
    if "minimum" in rule:
        cases += [(rule["minimum"], True), (rule["minimum"] - 1, False)]
    if "maximum" in rule:
        cases += [(rule["maximum"], True), (rule["maximum"] + 1, False)]
    if "exclusiveMinimum" in rule:
        cases += [(rule["exclusiveMinimum"], False), (rule["exclusiveMinimum"] + 0.5, True)]
    if "enum" in rule:
        cases += [(choice, True) for choice in rule["enum"]] + [("not-a-choice", False)]
    if rule.get("pattern") == r"\S":
        cases += [("x", True), ("  ", False)]
    if rule.get("pattern") == "^[1-9][0-9]*$":
        cases += [("12", True), ("01", False), ("latest", False)]
    if "maxLength" in rule:
        cases += [("x" * (rule["maxLength"] + 1), False)]
    if "minLength" in rule:
        cases += [("", False)]
    if "minItems" in rule:
        cases += [([], False)]
    if "additionalProperties" in rule:
        cases += [({"X-A": "b"}, True), ({"X-A": 1}, False)]
    return cases


@pytest.mark.parametrize(("node_type", "field"), sorted(FIELD_RULES))
def test_each_rule_accepts_and_refuses_what_publishing_does(node_type: str, field: str) -> None:
    cases = _boundaries(FIELD_RULES[(node_type, field)])
    assert cases, "a rule this test cannot check"
    for value, allowed in cases:
        node = _node(node_type, **{field: value})
        assert _publishing_accepts(node) is allowed, (value, allowed)
        assert _schema_accepts(node) is allowed, (value, allowed)


@pytest.mark.parametrize("node_type", sorted(NODE_FIELDS))
def test_both_refuse_a_value_of_the_wrong_kind(node_type: str) -> None:
    for name, spec in NODE_FIELDS[node_type].items():
        if "any" in spec.kinds:
            continue
        wrong = [] if "array" not in spec.kinds else {"not": "a list"}
        node = _node(node_type, **{name: wrong})
        assert not _publishing_accepts(node) and not _schema_accepts(node), name


def test_a_templated_number_takes_an_expression_and_refuses_plain_text() -> None:
    assert _schema_accepts(_node("library_search", limit="{{ inputs.limit }}"))
    assert _publishing_accepts(_node("library_search", limit="{{ inputs.limit }}"))
    assert not _schema_accepts(_node("library_search", limit="ten"))
    assert not _publishing_accepts(_node("library_search", limit="ten"))


def test_an_invalid_definition_does_not_validate_and_publishing_refuses_it_too() -> None:
    invalid = {
        "nodes": [
            {"id": "start", "type": "event", "event": "run"},
            {"id": "wait", "type": "delay", "seconds": 301},
            {"id": "x", "type": "teleport"},
        ],
        "edges": [{"from": "start", "to": "wait", "when": "maybe"}],
        "colour": "blue",
    }
    assert len(list(DEFINITIONS.iter_errors(invalid))) >= 3
    with pytest.raises(InvalidWorkflow):
        parse_definition(invalid)


async def test_the_served_schema_is_the_document_for_editors(api: Api) -> None:
    response = await api.client.get("/api/publicv1/workflow-definition.schema.json")
    assert response.status == 200
    served = await response.json()
    assert served["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert served["$id"].endswith("/api/publicv1/workflow-definition.schema.json")
    assert jsonschema.Draft202012Validator(served).is_valid(SPEC_EXAMPLE)


async def test_the_openapi_document_validates_request_definitions_with_the_schema(
    api: Api,
) -> None:
    document = await (await api.client.get("/api/publicv1/openapi.json")).json()
    schemas = document["components"]["schemas"]
    create = document["paths"]["/api/publicv1/projects/{projectId}/workflows"]["post"]
    body = create["requestBody"]["content"]["application/json"]["schema"]
    resolver = jsonschema.Draft202012Validator({**body, "components": document["components"]})
    assert resolver.is_valid({"name": "hello", "definition": SPEC_EXAMPLE})
    assert not resolver.is_valid({"name": "hello", "definition": {"nodes": [{"id": "a"}]}})
    assert schemas["WorkflowDefinition"]["properties"]["nodes"]["items"]["discriminator"]


def test_the_node_reference_has_a_section_naming_every_field_of_each_type() -> None:
    text = (ROOT / "docs" / "nodes.md").read_text()
    sections = dict(re.findall(r"^## (\w+)\n(.*?)(?=^## |\Z)", text, re.S | re.M))
    assert set(sections) >= set(NODE_FIELDS)
    for node_type, fields in NODE_FIELDS.items():
        unnamed = [
            name
            for name in fields
            if f"`{name}`" not in sections[node_type] and f'"{name}"' not in sections[node_type]
        ]
        assert not unnamed, (node_type, unnamed)
