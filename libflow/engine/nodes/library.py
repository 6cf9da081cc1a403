"""Nodes that read the project's library: library_search, library_file_text."""

from __future__ import annotations

from typing import Any

from libflow.engine.definition import Node
from libflow.engine.nodes.state import RunState, int_field, text_field


async def run_library_search(node: Node, state: RunState) -> dict[str, Any]:
    """Search the project's library."""
    query = await text_field(node, state, "query")
    limit = await int_field(node, state, "limit", 1, 100)
    result = {"results": await state.services.search_library(query, limit)}
    await state.budget.hold_value(result, "the search results")
    return result


async def run_library_file_text(node: Node, state: RunState) -> dict[str, Any]:
    """Read the extracted text of one library file: ``{text, name, type}``."""
    file_id = await text_field(node, state, "fileId")
    result = dict(await state.services.file_text(file_id))
    await state.budget.hold_value(result, "the file's text")
    return result
