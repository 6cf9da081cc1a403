"""Nodes that call out: http_request (public addresses only unless the settings allow)."""

from __future__ import annotations

import json
import re
from typing import Any

from libflow.engine.cpu_pool import off_loop
from libflow.engine.definition import Node
from libflow.engine.nodes.state import NodeFailure, RunState, field_value
from libflow.engine.render_budget import MAX_RUN_JSON_VALUES, RunAllowance, json_values_bound
from libflow.engine.ssrf import RequestFailed, RequestRefused, guarded_fetch

# Bodies this small are decoded and parsed inline; larger ones on a CPU thread.
INLINE_BODY_BYTES = 16 * 1024
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# Control characters other than tab: CR and LF would split the request's header section.
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_JSON_START = re.compile(r"\s*[\[{\"0-9tfn-]")


async def run_http_request(node: Node, state: RunState) -> dict[str, Any]:
    """Call an HTTP API (public addresses only unless the settings allow private ones)."""
    url = await field_value(node, state, "url")
    if not isinstance(url, str):
        raise NodeFailure(f"field 'url' must render to text, not {type(url).__name__}")
    headers = await field_value(node, state, "headers")
    if not isinstance(headers, dict):
        raise NodeFailure("field 'headers' must render to an object")
    for name, value in headers.items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            headers[name] = value = str(value)
        elif not isinstance(value, str):
            raise NodeFailure(f"header {name!r} must render to text, not {type(value).__name__}")
        _check_header(name, value)
    json_body = await field_value(node, state, "json")
    budget = state.budget
    try:
        async with budget.requests:
            response = await guarded_fetch(
                state.services.http,
                node.config["method"],
                url,
                headers=headers,
                json_body=json_body,
                timeout_seconds=float(node.config["timeoutSeconds"]),
                allow_private=state.services.allow_private_addresses,
                allowance=budget.responses,
            )
    except (RequestRefused, RequestFailed) as err:
        raise NodeFailure(str(err)) from None
    body, charset = response.body, response.charset
    if len(body) <= INLINE_BODY_BYTES:
        text, parsed = _read_body(body, charset, budget.renders)
    else:
        text, parsed = await off_loop(_read_body, body, charset, budget.renders)
    header_bytes = sum(len(key) + len(value) + 6 for key, value in response.headers.items())
    budget.hold(len(text) + header_bytes + 64, "the response")
    return {"status": response.status, "headers": response.headers, "json": parsed, "text": text}


def _check_header(name: str, value: str) -> None:
    """Refuse a header that is not one line of HTTP: a name that is no token, a CR or LF."""
    if not _TOKEN.fullmatch(name):
        raise NodeFailure(f"header name {name[:100]!r} is not a valid HTTP header name")
    if _CONTROL.search(value):
        raise NodeFailure(
            f"header {name!r} has a control character (such as CR or LF) in its value: "
            "a header value must be one line of text"
        )


def _read_body(body: bytes, charset: str | None, run: RunAllowance) -> tuple[str, Any]:
    """The body as text, and parsed as JSON when it is JSON (None otherwise).

    The values it holds are counted before it is parsed (a 5 MiB body of ``[]`` is over
    100 MB once parsed): past the run's MAX_RUN_JSON_VALUES the node fails.
    """
    try:
        text = body.decode(charset or "utf-8", errors="replace")
    except LookupError:  # a charset Python does not know
        text = body.decode("utf-8", errors="replace")
    if _JSON_START.match(text) is None:  # empty, HTML, plain text: not JSON
        return text, None
    values = json_values_bound(text)
    if not run.spend_json_values(values):
        raise NodeFailure(
            f"the response holds up to {values} JSON values, over the run's limit of "
            f"{MAX_RUN_JSON_VALUES} values parsed"
        )
    try:
        return text, json.loads(text)
    except ValueError:
        return text, None
    except RecursionError:
        raise NodeFailure("the response's JSON is nested too deeply to parse") from None
