"""Nodes that read the project's library: library_search, library_file_text."""

from __future__ import annotations

from typing import Any

from libflow.engine.definition import Node
from libflow.engine.nodes.state import RunState, int_field, text_field


async def run_library_search(node: Node, state: RunState) -> dict[str, Any]:
    """Search the project's library."""
    query = text_field(node, state, "query")
    limit = int_field(node, state, "limit", 1, 100)
    return {"results": await state.services.search_library(query, limit)}


async def run_library_file_text(node: Node, state: RunState) -> dict[str, Any]:
    """Read the extracted text of one library file: ``{text, name, type}``."""
    file_id = text_field(node, state, "fileId")
    return dict(await state.services.file_text(file_id))
