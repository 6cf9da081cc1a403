"""Nodes that read the project's library: library_search, library_file_text."""

from __future__ import annotations

from typing import Any

from libflow.engine.definition import Node
from libflow.engine.nodes.state import (
    NodeFailure,
    RunState,
    field_value,
    int_field,
    text_field,
)


async def run_library_search(node: Node, state: RunState) -> dict[str, Any]:
    """Search the project's library."""
    query = await text_field(node, state, "query")
    limit = await int_field(node, state, "limit", 1, 100)
    folder = await field_value(node, state, "dir")
    if folder is not None and not isinstance(folder, str):
        raise NodeFailure("dir must render to a folder id or root")
    found = await state.services.search_library(
        query,
        limit,
        folder=folder or None,
        metadata_filter=await field_value(node, state, "filter"),
        mode=node.config["mode"],
    )
    result = {"results": found}
    await state.budget.hold_value(result, "the search results")
    return result


async def run_library_file_text(node: Node, state: RunState) -> dict[str, Any]:
    """Read the extracted text of one library file: ``{text, name, type}``."""
    file_id = await text_field(node, state, "fileId")
    result = dict(await state.services.file_text(file_id))
    await state.budget.hold_value(result, "the file's text")
    return result
