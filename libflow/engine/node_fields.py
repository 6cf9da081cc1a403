"""The fields of each node type: what each accepts, its default, and how a node's are checked."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from libflow.engine.definition import (
    MAX_TEMPLATE_TOKENS,
    MAX_TIMEOUT_SECONDS,
    MAX_VALUE_DEPTH,
    VALUE_TYPES,
    value_matches,
)
from libflow.engine.expressions import check_syntax, count_tokens, has_expressions
from libflow.engine.javascript import source_problem
from libflow.ids import version_number

HTTP_METHODS: Final = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
SEARCH_MODES: Final = ("hybrid", "keyword", "semantic")
_ABSENT: Final = object()

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
        least = "over" if low_open else "at least"
        return f"must be {least} {_number(low)} and at most {_number(high)}"

    return check


def _number(value: float) -> str:
    """A bound as a person writes it: 1000000, 0.5 (not 1e+06)."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _string_values(value: Any) -> str | None:
    """Header values must be strings."""
    if all(isinstance(item, str) for item in value.values()):
        return None
    return "must map header names to strings"


LLM_ROLES: Final = ("system", "developer", "user", "assistant")
MAX_LLM_MESSAGES: Final = 1000  # messages of one llm node's request


def message_problem(value: Any) -> str | None:
    """Why an llm node's messages are not a list of ``{role, content}``, or None (ok)."""
    if not isinstance(value, list) or not value:
        return "must be a non-empty array of {role, content} messages"
    if len(value) > MAX_LLM_MESSAGES:
        return f"must hold at most {MAX_LLM_MESSAGES} messages"
    for index, message in enumerate(value):
        if not isinstance(message, dict) or set(message) != {"role", "content"}:
            return f"item {index} must be an object of exactly role and content"
        if message["role"] not in LLM_ROLES:
            return f"item {index}: role must be one of {', '.join(LLM_ROLES)}"
        if not isinstance(message["content"], str):
            return f"item {index}: content must be a string"
    return None


_STRING = ("string",)


def _version(value: Any) -> str | None:
    """A version is named by its number: "1", "2", ..."""
    return None if version_number(value) is not None else "must be a version number"


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
        # As POST .../library/search's: checked when the node runs (NODE_FAILED).
        "dir": FieldSpec(_STRING, default=None, templated=True),
        "filter": FieldSpec(("object",), default=None, templated=True),
        "mode": FieldSpec(_STRING, default="hybrid", check=_one_of(*SEARCH_MODES)),
    },
    "library_file_text": {"fileId": FieldSpec(_STRING, required=True, templated=True)},
    "llm": {
        # Unset: LIBFLOW_LLM_MODEL, and LIBFLOW_LLM_API_KEY for the key.
        "model": FieldSpec(_STRING, default=None, templated=True),
        "messages": FieldSpec(("array",), required=True, templated=True, check=message_problem),
        "temperature": FieldSpec(("number",), default=None, templated=True, check=_between(0, 2)),
        "maxTokens": FieldSpec(
            ("integer",), default=None, templated=True, check=_between(1, 1_000_000)
        ),
        "responseFormat": FieldSpec(_STRING, default="text", check=_one_of("text", "json")),
        "apiKey": FieldSpec(_STRING, default=None, templated=True),
    },
    "code": {
        # V8 compiles it (blocking: publishing runs on a CPU thread).
        "source": FieldSpec(_STRING, required=True, check=source_problem),
        # At most 30 s of a script's own (never past its run's timeout). 8 MiB is what V8
        # needs to start with room to work; 4 scripts at once of 512 MiB fit the machine.
        "timeoutMs": FieldSpec(("integer",), default=1000, check=_between(1, 30_000)),
        "memoryMb": FieldSpec(("integer",), default=64, check=_between(8, 512)),
    },
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
    "call_workflow": {
        # Not templated: publishing checks that it names a workflow of the project.
        "workflowId": FieldSpec(_STRING, required=True, check=_non_empty),
        "version": FieldSpec(_STRING, default=None, check=_version),
        "inputs": FieldSpec(("object",), default={}, templated=True),
    },
    "map": {
        "items": FieldSpec(("array", "string"), required=True, templated=True),
        "workflowId": FieldSpec(_STRING, required=True, check=_non_empty),
        "version": FieldSpec(_STRING, default=None, check=_version),
        "concurrency": FieldSpec(("integer",), default=4, templated=True, check=_between(1, 32)),
    },
    "fail": {
        "message": FieldSpec(_STRING, required=True, templated=True),
        "statusCode": FieldSpec(
            ("integer",), default=500, templated=True, check=_between(400, 599)
        ),
    },
}
NODE_TYPES: Final = frozenset(NODE_FIELDS)


def json_kind(value: Any) -> str:
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


def accepts(kinds: tuple[str, ...], value: Any) -> bool:
    """Whether a value is one of the accepted kinds (an integer is a number too)."""
    kind = json_kind(value)
    if "any" in kinds:
        return kind in {"null", "boolean", "integer", "number", "string", "object", "array"}
    if kind == "number" and not math.isfinite(value):
        return False
    return kind in kinds or (kind == "integer" and "number" in kinds)


def nested_too_deeply(value: Any, limit: int = MAX_VALUE_DEPTH) -> bool:
    """Whether a value holds more than ``limit`` levels of arrays and objects (iteratively)."""
    pending = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if not isinstance(item, dict | list):
            continue
        if depth > limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        pending.extend((child, depth + 1) for child in children)
    return False


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


class Problems:
    """The problems found so far, each naming its node (or None).

    It also keeps the expression tokens the definition may still hold (MAX_TEMPLATE_TOKENS).
    """

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        self.tokens_left = MAX_TEMPLATE_TOKENS

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


def parse_fields(
    node_id: str, node_type: str, raw: dict[str, Any], problems: Problems
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
        if nested_too_deeply(value):
            problems.add(node_id, f"field '{name}' is nested deeper than {MAX_VALUE_DEPTH} levels")
            continue
        # A templated number or boolean field may hold an expression instead (checked at run).
        expression = spec.templated and isinstance(value, str) and not accepts(spec.kinds, value)
        if expression and not has_expressions(value):
            problems.add(node_id, f"field '{name}' must be {_describe_kinds(spec.kinds, True)}")
            continue
        if not expression and not accepts(spec.kinds, value):
            expected = _describe_kinds(spec.kinds, spec.templated)
            problems.add(node_id, f"field '{name}' must be {expected}, not {json_kind(value)}")
            continue
        reason = None if expression or spec.check is None else spec.check(value)
        if reason is not None:
            problems.add(node_id, f"field '{name}' {reason}")
            continue
        if spec.templated:
            _check_expressions(node_id, node_type, name, value, problems)
        config[name] = value
    if node_type == "http_request" and isinstance(config.get("method"), str):
        config["method"] = config["method"].upper()
    if node_type == "input":
        _check_input_default(node_id, config, problems)
    return config


def _check_expressions(
    node_id: str, node_type: str, name: str, value: Any, problems: Problems
) -> None:
    """Check the syntax of a field's expressions, within the definition's token budget."""
    for path, text in _strings_in(value, name):
        if problems.tokens_left < 0:
            return  # over the budget already: compiling more would cost what it guards
        problems.tokens_left -= count_tokens(text, problems.tokens_left)
        if problems.tokens_left < 0:
            problems.add(
                node_id,
                f"field '{path}': the definition's expressions are over "
                f"{MAX_TEMPLATE_TOKENS} tokens in all",
            )
            return
        syntax = check_syntax(text, text_only=node_type == "template")
        if syntax is not None:
            problems.add(node_id, f"field '{path}': {syntax}")


def _check_input_default(node_id: str, config: dict[str, Any], problems: Problems) -> None:
    """An input's default must be of its valueType."""
    value_type, default = config.get("valueType"), config.get("default")
    if default is not None and value_type in VALUE_TYPES and not value_matches(default, value_type):
        problems.add(node_id, f"field 'default' must be of valueType {value_type}")
