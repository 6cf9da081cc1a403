"""Hybrid search: keyword and vector rankings of a project's passages, fused by rank."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tortoise.connection import get_connection

from libflow.library.vectors import PassageFilter, QueryEmbedder, VectorSearch
from libflow.models import Chunk, LibraryFile

RRF_K = 60  # the constant of reciprocal rank fusion (Cormack et al.)
CANDIDATES = 50  # how many hits each ranking contributes to the fusion
_WORD = re.compile(r"\w+", re.UNICODE)


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One passage that matched, with its file."""

    file_id: str
    name: str
    chunk: str
    score: float
    page: int | None

    def to_json(self) -> dict[str, Any]:
        """The hit as the API and the library_search node show it."""
        return {
            "fileId": self.file_id,
            "name": self.name,
            "chunk": self.chunk,
            "score": self.score,
            "page": self.page,
        }


def _terms(query: str) -> list[str]:
    return list(dict.fromkeys(t.lower() for t in _WORD.findall(query)))[:32]


async def keyword_ranking(project_id: str, query: str, folder: str | None, n: int) -> list[int]:
    """Chunk ids matching any term, best first: BM25 on SQLite, ts_rank_cd on PostgreSQL."""
    terms = _terms(query)
    if not terms:
        return []
    connection = get_connection("default")
    # Only the fixed fragments below are interpolated; every value is a parameter.
    folder_clause = ""
    if connection.capabilities.dialect == "sqlite":
        params: list[Any] = [" OR ".join(f'"{t}"' for t in terms), project_id]
        if folder is not None:
            folder_clause = " AND c.folder_id IS ?"
            params.append(None if folder == "root" else folder)
        params.append(n)
        sql = (
            "SELECT c.id FROM library_chunks_fts f JOIN library_chunks c ON c.id = f.rowid"  # noqa: S608
            f" WHERE library_chunks_fts MATCH ? AND c.project_id = ?{folder_clause}"
            " ORDER BY bm25(library_chunks_fts) LIMIT ?"
        )
    else:
        params = [" | ".join(terms), project_id]
        if folder is not None:
            folder_clause = " AND folder_id IS NOT DISTINCT FROM $3"
            params.append(None if folder == "root" else folder)
        params.append(n)
        sql = (
            "SELECT id FROM library_chunks, to_tsquery('simple', $1) query"  # noqa: S608
            " WHERE to_tsvector('simple', text) @@ query AND project_id = $2"
            f"{folder_clause} ORDER BY ts_rank_cd(to_tsvector('simple', text), query) DESC"
            f" LIMIT ${len(params)}"
        )
    rows = await connection.execute_query_dict(sql, params)
    return [int(row["id"]) for row in rows]


def fuse_rankings(rankings: Sequence[Sequence[int]]) -> list[tuple[int, float]]:
    """Reciprocal rank fusion: each ranking adds 1 / (k + rank) to the ids it holds."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, chunk_id in enumerate(ranking, start=1):
            scores[chunk_id] = scores.get(chunk_id, 0.0) + 1.0 / (RRF_K + rank)
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))


async def search(
    project_id: str,
    query: str,
    *,
    limit: int,
    folder: str | None,
    embedder: QueryEmbedder | None,
    vectors: VectorSearch,
) -> list[SearchHit]:
    """The passages of the project best matching ``query``, by keywords and meaning."""
    rankings = [await keyword_ranking(project_id, query, folder, CANDIDATES)]
    if embedder is not None:
        [query_vector] = await embedder.embed([query])
        rankings.append(
            [
                chunk_id
                for chunk_id, _ in await vectors.nearest(
                    project_id, embedder.name, query_vector, PassageFilter(folder), CANDIDATES
                )
            ]
        )
    fused = fuse_rankings(rankings)[:limit]
    if not fused:
        return []
    ids = [chunk_id for chunk_id, _ in fused]
    # By primary key alone, the project checked here: with project_id in the query
    # SQLite may pick the project index and scan every chunk of the project.
    chunks = {
        row["id"]: row
        for row in await Chunk.filter(id__in=ids).values(
            "id", "project_id", "file_id", "text", "page"
        )
        if row["project_id"] == project_id
    }
    names = dict(
        await LibraryFile.filter(
            id__in={row["file_id"] for row in chunks.values()}, project_id=project_id
        ).values_list("id", "name")
    )
    return [
        SearchHit(
            file_id=chunks[chunk_id]["file_id"],
            name=names[chunks[chunk_id]["file_id"]],
            chunk=chunks[chunk_id]["text"],
            score=round(score, 6),
            page=chunks[chunk_id]["page"],
        )
        for chunk_id, score in fused
        if chunk_id in chunks and chunks[chunk_id]["file_id"] in names
    ]
