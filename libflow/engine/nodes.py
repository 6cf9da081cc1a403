"""What each node type does when a run reaches it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import aiohttp

from libflow.engine.definition import MAX_TIMEOUT_SECONDS, Node
from libflow.engine.expressions import render, render_text
from libflow.engine.sandbox import ExpressionError
from libflow.engine.ssrf import RequestFailed, RequestRefused, guarded_fetch
from libflow.errors import LibflowError

logger = logging.getLogger("libflow.engine")

SearchLibrary = Callable[[str, int], Awaitable[list[dict[str, Any]]]]
FileText = Callable[[str], Awaitable[dict[str, Any]]]


@dataclass(frozen=True, slots=True)
class NodeServices:
    """What nodes may reach outside the run; the caller scopes the library to one project."""

    http: aiohttp.ClientSession
    allow_private_addresses: bool
    search_library: SearchLibrary
    file_text: FileText


class NodeFailure(Exception):
    """A node could not do its work; the run fails with ``status_code``."""

    def __init__(self, message: str, *, status_code: int = 500) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.node_id: str | None = None  # set by the runner


@dataclass(slots=True)
class RunState:
    """What nodes read and write during one run."""

    event: str
    inputs: dict[str, Any]
    services: NodeServices
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)
    status_code: int = 200

    def expression_context(self) -> dict[str, Any]:
        """The names expressions see: inputs, nodes (results so far) and event."""
        return {"inputs": self.inputs, "nodes": self.results, "event": self.event}


def _field(node: Node, state: RunState, name: str) -> Any:
    """A field of the node with its expressions rendered."""
    try:
        return render(node.config[name], state.expression_context())
    except ExpressionError as err:
        raise NodeFailure(f"field '{name}': {err}") from None


def _text_field(node: Node, state: RunState, name: str) -> str:
    """A rendered field as text (a native non-string value is written as JSON)."""
    value = _field(node, state, name)
    return value if isinstance(value, str) else json.dumps(value)


def _int_field(node: Node, state: RunState, name: str, low: int, high: int) -> int:
    """A rendered field that must be an integer within [low, high]."""
    value = _field(node, state, name)
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            value = int(value.strip())
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise NodeFailure(f"field '{name}' must be an integer from {low} to {high}, not {value!r}")
    return value


def _number_field(node: Node, state: RunState, name: str, low: float, high: float) -> float:
    """A rendered field that must be a number within [low, high]."""
    value = _field(node, state, name)
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            value = float(value.strip())
    if not isinstance(value, int | float) or isinstance(value, bool) or not low <= value <= high:
        raise NodeFailure(
            f"field '{name}' must be a number from {low:g} to {high:g}, not {value!r}"
        )
    return float(value)


async def run_event(node: Node, state: RunState) -> dict[str, Any]:
    """Where a run starts: its result names the event."""
    return {"event": state.event}


async def run_input(node: Node, state: RunState) -> dict[str, Any]:
    """Inputs are checked before the run; reached by an edge, an input passes its value on."""
    return {"value": state.inputs.get(node.config["name"])}


async def run_set_output(node: Node, state: RunState) -> dict[str, Any]:
    """Set one of the run's outputs."""
    value = _field(node, state, "value")
    state.outputs[node.config["name"]] = value
    return {"value": value}


async def run_template(node: Node, state: RunState) -> dict[str, Any]:
    """Render a template to text."""
    try:
        return {"text": render_text(node.config["template"], state.expression_context())}
    except ExpressionError as err:
        raise NodeFailure(f"field 'template': {err}") from None


async def run_condition(node: Node, state: RunState) -> dict[str, Any]:
    """Decide a branch: a native value by its truth, text only as "true" or "false"."""
    value = _field(node, state, "if")
    if isinstance(value, str):
        word = value.strip().lower()
        if word not in {"true", "false", ""}:
            raise NodeFailure(f"field 'if' rendered the text {value[:100]!r}, not true or false")
        return {"result": word == "true"}
    return {"result": bool(value)}


async def run_http_request(node: Node, state: RunState) -> dict[str, Any]:
    """Call an HTTP API (public addresses only unless the settings allow private ones)."""
    url = _field(node, state, "url")
    if not isinstance(url, str):
        raise NodeFailure(f"field 'url' must render to text, not {type(url).__name__}")
    headers = _field(node, state, "headers")
    if not isinstance(headers, dict):
        raise NodeFailure("field 'headers' must render to an object")
    for name, value in headers.items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            headers[name] = str(value)
        elif not isinstance(value, str):
            raise NodeFailure(f"header {name!r} must render to text, not {type(value).__name__}")
    try:
        response = await guarded_fetch(
            state.services.http,
            node.config["method"],
            url,
            headers=headers,
            json_body=_field(node, state, "json"),
            timeout_seconds=float(node.config["timeoutSeconds"]),
            allow_private=state.services.allow_private_addresses,
        )
    except (RequestRefused, RequestFailed) as err:
        raise NodeFailure(str(err)) from None
    try:
        text = response.body.decode(response.charset or "utf-8", errors="replace")
    except LookupError:  # a charset Python does not know
        text = response.body.decode("utf-8", errors="replace")
    try:
        parsed = json.loads(text) if text.strip() else None
    except ValueError:
        parsed = None
    return {"status": response.status, "headers": response.headers, "json": parsed, "text": text}


async def run_library_search(node: Node, state: RunState) -> dict[str, Any]:
    """Search the project's library."""
    query = _text_field(node, state, "query")
    limit = _int_field(node, state, "limit", 1, 100)
    return {"results": await state.services.search_library(query, limit)}


async def run_library_file_text(node: Node, state: RunState) -> dict[str, Any]:
    """Read the extracted text of one library file: ``{text, name, type}``."""
    file_id = _text_field(node, state, "fileId")
    return dict(await state.services.file_text(file_id))


async def run_delay(node: Node, state: RunState) -> dict[str, Any]:
    """Wait; the run's timeout still applies."""
    seconds = _number_field(node, state, "seconds", 0, MAX_TIMEOUT_SECONDS)
    await asyncio.sleep(seconds)
    return {"seconds": seconds}


async def run_respond(node: Node, state: RunState) -> dict[str, Any]:
    """Set the status code a successful run answers with."""
    state.status_code = _int_field(node, state, "statusCode", 200, 599)
    return {"statusCode": state.status_code}


async def run_fail(node: Node, state: RunState) -> dict[str, Any]:
    """Fail the run with a message and a status code."""
    status_code = _int_field(node, state, "statusCode", 400, 599)
    raise NodeFailure(_text_field(node, state, "message"), status_code=status_code)


NodeHandler = Callable[[Node, RunState], Awaitable[dict[str, Any]]]
NODE_HANDLERS: Final[Mapping[str, NodeHandler]] = {
    "event": run_event,
    "input": run_input,
    "set_output": run_set_output,
    "template": run_template,
    "condition": run_condition,
    "http_request": run_http_request,
    "library_search": run_library_search,
    "library_file_text": run_library_file_text,
    "delay": run_delay,
    "respond": run_respond,
    "fail": run_fail,
}
# These never wait on anything: the runner runs them inline instead of in a task of their own.
INSTANT_TYPES: Final = frozenset(
    {"event", "input", "set_output", "template", "condition", "respond", "fail"}
)


async def run_node(node: Node, state: RunState) -> dict[str, Any]:
    """Run one node; every failure of its own becomes a NodeFailure."""
    try:
        return await NODE_HANDLERS[node.type](node, state)
    except NodeFailure:
        raise
    except LibflowError as err:
        raise NodeFailure(err.message) from err
    except Exception as err:
        logger.exception("node %s (%s) crashed", node.id, node.type)
        raise NodeFailure(f"internal error in a {node.type} node") from err
