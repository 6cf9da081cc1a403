"""Nodes that write text: template."""

from __future__ import annotations

from typing import Any

from libflow.engine.definition import Node
from libflow.engine.expressions import render_text
from libflow.engine.nodes.state import NodeFailure, RunState
from libflow.engine.render_budget import ExpressionError


async def run_template(node: Node, state: RunState) -> dict[str, Any]:
    """Render a template to text."""
    try:
        return {"text": render_text(node.config["template"], state.expression_context())}
    except ExpressionError as err:
        raise NodeFailure(f"field 'template': {err}") from None
