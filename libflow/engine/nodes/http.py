"""Nodes that call out: http_request (public addresses only unless the settings allow)."""

from __future__ import annotations

import json
from typing import Any

from libflow.engine.definition import Node
from libflow.engine.nodes.state import NodeFailure, RunState, field_value
from libflow.engine.ssrf import RequestFailed, RequestRefused, guarded_fetch


async def run_http_request(node: Node, state: RunState) -> dict[str, Any]:
    """Call an HTTP API (public addresses only unless the settings allow private ones)."""
    url = field_value(node, state, "url")
    if not isinstance(url, str):
        raise NodeFailure(f"field 'url' must render to text, not {type(url).__name__}")
    headers = field_value(node, state, "headers")
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
            json_body=field_value(node, state, "json"),
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
