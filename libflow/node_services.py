"""What a workflow run's nodes may reach, scoped to one project (runsync and deliveries)."""

from __future__ import annotations

from typing import Any

from aiohttp import ClientSession

from libflow import search
from libflow.api.render import hit_json
from libflow.engine import NodeServices
from libflow.file_lookup import FileLookup
from libflow.files import file_text
from libflow.search import VectorIndex
from libflow.storage import Storage
from settings import Settings
from workers.embeddings import Embedder


def node_services(
    project_id: str,
    *,
    settings: Settings,
    http: ClientSession,
    storage: Storage,
    embedder: Embedder | None,
    vectors: VectorIndex,
    file_lookup: FileLookup,
) -> NodeServices:
    """The services of one run of ``project_id``'s workflow: its library only."""

    async def search_library(query: str, limit: int) -> list[dict[str, Any]]:
        hits = await search.search(
            project_id, query, limit=limit, folder=None, embedder=embedder, vectors=vectors
        )
        return [hit_json(hit) for hit in hits]

    async def library_file_text(file_id: str) -> dict[str, Any]:
        return await file_text(storage, file_lookup, project_id, file_id)

    return NodeServices(
        http=http,
        allow_private_addresses=settings.http_allow_private,
        search_library=search_library,
        file_text=library_file_text,
    )
