"""Nodes that write text: template."""

from __future__ import annotations

from typing import Any

from libflow.engine.definition import Node
from libflow.engine.nodes.state import RunState, field_value


async def run_template(node: Node, state: RunState) -> dict[str, Any]:
    """Render a template to text (on a CPU thread unless it is plain lookups)."""
    text = await field_value(node, state, "template", text=True)
    state.budget.hold(len(text) + 12, "the template's text")
    return {"text": text}
