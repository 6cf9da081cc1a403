"""The JSON Schema of a workflow definition, one schema per node type.

The structure (which fields a node type has, their JSON kinds, which are required, their
defaults, which take expressions) is generated from ``libflow.engine.node_fields.NODE_FIELDS``,
the declarations publishing checks against, so the schema cannot drift from them. What those
declarations keep in code (ranges, choices) is restated in ``FIELD_RULES`` beside the words a user
reads; ``tests/test_definition_schema.py`` holds each rule to what publishing accepts and
refuses, and refuses a node type or field without its words.

A definition the schema accepts can still be refused at publish for what only the server can
check: expression syntax, a ``code`` node's JavaScript, the graph (dangling edges, cycles, an
event node), and whether a called workflow exists.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from libflow.engine.definition import (
    DEFAULT_TIMEOUT_SECONDS,
    MAX_EDGES,
    MAX_NODES,
    MAX_TIMEOUT_SECONDS,
    VALUE_TYPES,
)
from libflow.engine.javascript import MAX_SOURCE_CHARS
from libflow.engine.node_fields import HTTP_METHODS, LLM_ROLES, MAX_LLM_MESSAGES, NODE_FIELDS
from libflow.engine.nodes.subflow import MAX_MAP_ITEMS

Ref = Callable[[str], dict[str, str]]

# Text with at least one character that is not white space (names, events, ids).
_NOT_BLANK: Final = {"type": "string", "pattern": r"\S"}
# What a field that takes an expression in place of its number or list may hold instead.
_EXPRESSION: Final = {
    "type": "string",
    "pattern": r"\{[{%#]",
    "description": "an expression, e.g. `{{ inputs.limit }}`, checked when the node runs",
}
_MESSAGE: Final = {
    "type": "object",
    "required": ["role", "content"],
    "additionalProperties": False,
    "properties": {
        "role": {"enum": list(LLM_ROLES)},
        "content": {"type": "string", "description": "templated"},
    },
}


class NodeDoc:
    """A node type in user words: what it does, what it outputs, what each field means."""

    def __init__(self, does: str, output: str, fields: dict[str, str]) -> None:
        self.does = does
        self.output = output
        self.fields = fields


NODE_DOCS: Final[dict[str, NodeDoc]] = {
    "event": NodeDoc(
        "Where a run starts: a run of `runEvent` starts at every event node whose `event` "
        "equals it (none: 400 UNKNOWN_EVENT). Webhook deliveries start at their webhook's "
        "event (default `webhook`), schedules at theirs (default `schedule`).",
        "`{event}`",
        {"event": "The event name this node starts runs of, e.g. `run`."},
    ),
    "input": NodeDoc(
        "Declares one input of the workflow. Inputs are checked before the run starts "
        "(400 INVALID_INPUTS); inputs that no input node declares pass through.",
        "`{value}`",
        {
            "name": "The input's name: the run reads it as `{{ inputs.NAME }}`.",
            "valueType": "The JSON type the input must have.",
            "required": "Whether a run without this input is refused.",
            "default": "The value used when the run does not send one (of `valueType`).",
        },
    ),
    "set_output": NodeDoc(
        "Sets one of the run's outputs: runsync answers them and the run record keeps them.",
        "`{value}`",
        {
            "name": "The output's name.",
            "value": "Any JSON value; strings may hold expressions, and a string that is "
            "exactly one `{{ ... }}` keeps the type of its value.",
        },
    ),
    "template": NodeDoc(
        "Renders text from a template.",
        "`{text}`",
        {"template": "Text with expressions, e.g. `Hello, {{ inputs.name }}!`."},
    ),
    "condition": NodeDoc(
        'Chooses a branch: its edges carry `"when": "true"` or `"when": "false"`.',
        "`{result}`",
        {
            "if": "A boolean, or an expression: a native value counts by its truth, text only "
            "as `true` or `false`."
        },
    ),
    "http_request": NodeDoc(
        "Calls a URL. Loopback, private, link-local and cloud-metadata addresses are refused "
        "unless the server sets LIBFLOW_HTTP_ALLOW_PRIVATE; the response body is at most 5 MiB.",
        "`{status, headers, json, text}`: the body parsed as JSON (or null) and as text",
        {
            "method": "The HTTP method (case does not matter).",
            "url": "The URL to call (templated).",
            "headers": "Request headers, names to text values (templated: "
            "`Bearer {{ secrets.TOKEN }}`).",
            "json": "A JSON body to send (templated).",
            "timeoutSeconds": "How long to wait for the answer.",
        },
    ),
    "library_search": NodeDoc(
        "Searches the project's library (keyword and semantic).",
        "`{results}`: the passages found, best first, each with its file",
        {
            "query": "What to search for (templated).",
            "limit": "How many passages at most.",
            "dir": "Only passages of files in this folder (a folder id or `root`).",
            "filter": "Only passages of files whose metadata matches: per key a value or "
            '`{"in": [values]}`, as POST .../library/search takes it.',
            "mode": "`hybrid` (keyword and semantic), `keyword` or `semantic`.",
        },
    ),
    "library_file_text": NodeDoc(
        "Reads the extracted text of one library file. The node fails while the file is "
        "not processed yet, or when its processing failed.",
        "`{text, name, type}`",
        {"fileId": "The file's id (templated)."},
    ),
    "llm": NodeDoc(
        "Asks the server's OpenAI-compatible chat completions API (LIBFLOW_LLM_BASE_URL) and "
        "streams the answer as `llm.delta` run events. 429 and 5xx answers are retried "
        "within the run's timeout; other errors fail the node with the provider's message.",
        "`{text, json, usage: {promptTokens, completionTokens}, model, finishReason}`",
        {
            "model": "The model to ask; unset: the server's LIBFLOW_LLM_MODEL.",
            "messages": "The conversation: `{role, content}` objects (content templated), or "
            "one expression giving such a list.",
            "temperature": "Sampling temperature.",
            "maxTokens": "The most tokens the answer may have (sent as `max_tokens`).",
            "responseFormat": "`json` asks for a JSON object and parses it into `json` (an "
            "answer that is not JSON fails the node).",
            "apiKey": "The provider's key; unset: the server's LIBFLOW_LLM_API_KEY. Take it "
            "from a secret: `{{ secrets.OPENAI_KEY }}`.",
        },
    ),
    "code": NodeDoc(
        "Runs JavaScript in a fresh V8 isolate with no file, network or process access. A "
        "thrown error fails the node with `<message> (line N)`.",
        "the script's return value: an object as it is, anything else as `{result}`",
        {
            "source": "The body of a function that sees `inputs`, `nodes` and `event` and "
            "returns the output; publishing compiles it.",
            "timeoutMs": "The script's time limit, in milliseconds (never past the run's timeout).",
            "memoryMb": "The script's memory limit, in MiB.",
        },
    ),
    "call_workflow": NodeDoc(
        "Runs another workflow of the project as a sub-run (trigger `call`, with "
        "`parentRunId`); calls nest at most 5 deep. The sub-runs under one run share one "
        "budget: at most 10,000 start, at most 32 of one depth at once.",
        "`{outputs}`: the sub-run's outputs",
        {
            "workflowId": "A workflow of this project (checked at publish).",
            "version": "The version to run; unset: the latest.",
            "inputs": "The sub-run's inputs: an object whose values may be expressions.",
        },
    ),
    "map": NodeDoc(
        "Runs a workflow of the project once per item, each with inputs `{item, index}`; the "
        "first item that fails fails the node.",
        "`{results}`: each sub-run's outputs, in item order",
        {
            "items": f"A list, or an expression giving one (at most {MAX_MAP_ITEMS:,} items).",
            "workflowId": "A workflow of this project (checked at publish).",
            "version": "The version to run; unset: the latest.",
            "concurrency": "How many sub-runs at once.",
        },
    ),
    "delay": NodeDoc(
        "Waits (the run's timeout still applies).",
        "`{seconds}`",
        {"seconds": "How long to wait."},
    ),
    "respond": NodeDoc(
        "Sets the status code a successful runsync answers with.",
        "`{statusCode}`",
        {"statusCode": "The HTTP status."},
    ),
    "fail": NodeDoc(
        "Fails the run with a message and a status code.",
        "none: the run ends failed",
        {
            "message": "The error message (templated).",
            "statusCode": "The HTTP status runsync answers with.",
        },
    ),
}

_NO_WORDS: Final = NodeDoc("", "", {})

# The checks node_fields keeps in code, as JSON Schema (tests/test_definition_schema.py
# holds each to what publishing accepts).
FIELD_RULES: Final[dict[tuple[str, str], dict[str, Any]]] = {
    ("event", "event"): _NOT_BLANK,
    ("input", "name"): _NOT_BLANK,
    ("input", "valueType"): {"enum": list(VALUE_TYPES)},
    ("set_output", "name"): _NOT_BLANK,
    ("http_request", "method"): {
        "enum": [*HTTP_METHODS, *(method.lower() for method in HTTP_METHODS)]
    },
    ("http_request", "headers"): {"additionalProperties": {"type": "string"}},
    ("http_request", "timeoutSeconds"): {
        "exclusiveMinimum": 0,
        "maximum": MAX_TIMEOUT_SECONDS,
    },
    ("library_search", "limit"): {"minimum": 1, "maximum": 100},
    ("library_search", "mode"): {"enum": ["hybrid", "keyword", "semantic"]},
    ("llm", "messages"): {"minItems": 1, "maxItems": MAX_LLM_MESSAGES, "items": _MESSAGE},
    ("llm", "temperature"): {"minimum": 0, "maximum": 2},
    ("llm", "maxTokens"): {"minimum": 1, "maximum": 1_000_000},
    ("llm", "responseFormat"): {"enum": ["text", "json"]},
    ("code", "source"): {"minLength": 1, "maxLength": MAX_SOURCE_CHARS},
    ("code", "timeoutMs"): {"minimum": 1, "maximum": 30_000},
    ("code", "memoryMb"): {"minimum": 8, "maximum": 512},
    ("call_workflow", "workflowId"): _NOT_BLANK,
    ("call_workflow", "version"): {"pattern": "^[1-9][0-9]*$"},
    ("map", "workflowId"): _NOT_BLANK,
    ("map", "version"): {"pattern": "^[1-9][0-9]*$"},
    ("map", "concurrency"): {"minimum": 1, "maximum": 32},
    ("delay", "seconds"): {"minimum": 0, "maximum": MAX_TIMEOUT_SECONDS},
    ("respond", "statusCode"): {"minimum": 200, "maximum": 599},
    ("fail", "statusCode"): {"minimum": 400, "maximum": 599},
}


def node_schema_name(node_type: str) -> str:
    """The component name of a node type's schema: ``http_request`` -> ``HttpRequestNode``."""
    return "".join(part.capitalize() for part in node_type.split("_")) + "Node"


def _field_schema(node_type: str, name: str) -> dict[str, Any]:
    """One field: its kinds (or an expression in their place) with its rule and words."""
    spec = NODE_FIELDS[node_type][name]
    rule = FIELD_RULES.get((node_type, name), {})
    kinds = [kind for kind in spec.kinds if kind != "any"]
    schema: dict[str, Any] = {}
    if kinds:
        schema["type"] = kinds[0] if len(kinds) == 1 else kinds
    schema.update(rule)
    if spec.templated and kinds and "string" not in kinds:
        schema = {"anyOf": [schema, _EXPRESSION]}
    # A field declared without words yet still gets its schema (the app must start);
    # tests/test_definition_schema.py fails until it has them.
    words = NODE_DOCS.get(node_type, _NO_WORDS).fields.get(name, "")
    schema["description"] = f"{words} May hold expressions." if spec.templated else words
    if spec.default is not None and type(spec.default) is not object:  # not the "no default"
        schema["default"] = spec.default
    return schema


def node_schemas() -> dict[str, dict[str, Any]]:
    """One schema per node type, by component name."""
    schemas: dict[str, dict[str, Any]] = {}
    for node_type, fields in NODE_FIELDS.items():
        doc = NODE_DOCS.get(node_type, _NO_WORDS)
        schemas[node_schema_name(node_type)] = {
            "type": "object",
            "title": f"{node_type} node",
            "description": f"{doc.does} Output: {doc.output}.",
            "required": ["id", "type", *(name for name, spec in fields.items() if spec.required)],
            "additionalProperties": False,
            "properties": {
                "id": {
                    **_NOT_BLANK,
                    "description": "The node's id, unique in the definition: later nodes read "
                    "its output as `{{ nodes.ID... }}`.",
                },
                "type": {"const": node_type, "description": "The node's type."},
                **{name: _field_schema(node_type, name) for name in fields},
            },
        }
    return schemas


def definition_schema(ref: Ref) -> dict[str, Any]:
    """The schema of a whole definition; ``ref`` names where the node schemas are."""
    names = {node_type: node_schema_name(node_type) for node_type in NODE_FIELDS}
    return {
        "type": "object",
        "title": "Workflow definition",
        "description": "Nodes and the edges between them. A run starts at the event nodes "
        "of its event and follows the edges; a node runs once every node before it that the "
        "run reached has finished. Expressions are Jinja2 (`{{ ... }}`) and see `inputs`, "
        "`nodes` (each finished node's output, by id), `event` and `secrets`.",
        "required": ["nodes"],
        "additionalProperties": False,
        "properties": {
            "timeoutSeconds": {
                "type": "number",
                "exclusiveMinimum": 0,
                "maximum": MAX_TIMEOUT_SECONDS,
                "default": DEFAULT_TIMEOUT_SECONDS,
                "description": "The run's time limit: past it the run ends 504 RUN_TIMEOUT "
                "with the outputs set so far.",
            },
            "nodes": {
                "type": "array",
                "minItems": 1,
                "maxItems": MAX_NODES,
                "description": "The nodes, each chosen by its `type`.",
                "items": {
                    "oneOf": [ref(name) for name in names.values()],
                    "discriminator": {
                        "propertyName": "type",
                        "mapping": {t: ref(name)["$ref"] for t, name in names.items()},
                    },
                },
            },
            "edges": {
                "type": "array",
                "maxItems": MAX_EDGES,
                "default": [],
                "description": "Which node runs after which; a node that no path from the "
                "run's event nodes reaches does not run.",
                "items": ref("WorkflowEdge"),
            },
        },
    }


EDGE_SCHEMA: Final = {
    "type": "object",
    "description": "A node that runs after another.",
    "required": ["from", "to"],
    "additionalProperties": False,
    "properties": {
        "from": {"type": "string", "description": "The id of the node that runs first."},
        "to": {"type": "string", "description": "The id of the node that runs after it."},
        "when": {
            "enum": ["true", "false", True, False],
            "description": "From a condition node only: the branch this edge follows.",
        },
    },
}


def standalone_definition_schema(schema_id: str) -> dict[str, Any]:
    """The definition schema as one JSON Schema document (draft 2020-12), for editors."""

    def local(name: str) -> dict[str, str]:
        return {"$ref": f"#/$defs/{name}"}

    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": schema_id,
        **definition_schema(local),
        "$defs": {"WorkflowEdge": EDGE_SCHEMA, **node_schemas()},
    }
