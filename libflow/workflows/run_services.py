"""What the nodes of one run may reach: the run's project's library, and the outside world."""

from __future__ import annotations

from typing import Any

from aiohttp import ClientSession

from libflow.db.fast_reads import FastReads
from libflow.engine import NodeServices
from libflow.library import search
from libflow.library.embeddings.interface import Embedder
from libflow.library.files import file_text
from libflow.library.search import VectorIndex
from libflow.storage import Storage
from settings import Settings


def run_services(
    project_id: str,
    *,
    settings: Settings,
    http: ClientSession,
    storage: Storage,
    embedder: Embedder | None,
    vectors: VectorIndex,
    reads: FastReads,
) -> NodeServices:
    """The services of one run of ``project_id``'s workflow: its library only."""

    async def search_library(query: str, limit: int) -> list[dict[str, Any]]:
        hits = await search.search(
            project_id, query, limit=limit, folder=None, embedder=embedder, vectors=vectors
        )
        return [hit.to_json() for hit in hits]

    async def library_file_text(file_id: str) -> dict[str, Any]:
        return await file_text(storage, reads, project_id, file_id)

    return NodeServices(
        http=http,
        allow_private_addresses=settings.http_allow_private,
        search_library=search_library,
        file_text=library_file_text,
    )
