"""The search index: writes per file, and hybrid keyword + vector queries fused by rank."""

from __future__ import annotations

import asyncio
import re
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
from tortoise.connection import get_connection
from tortoise.expressions import F
from tortoise.transactions import in_transaction

from libflow.models import Chunk, LibraryFile, SearchIndexVersion

RRF_K = 60  # the constant of reciprocal rank fusion (Cormack et al.)
CANDIDATES = 50  # how many hits each ranking contributes to the fusion
# Nearest neighbours below this cosine are noise, not meaning (all-MiniLM puts unrelated
# sentences around 0.0-0.15): they would otherwise fill every result list.
MIN_SIMILARITY = 0.2
_WORD = re.compile(r"\w+", re.UNICODE)

Vector = npt.NDArray[np.float32]


class QueryEmbedder(Protocol):
    """What search needs of an embedder: its vector space's name and query vectors."""

    name: str

    async def embed(self, texts: Sequence[str]) -> Vector:
        """Vectors of ``texts``, L2-normalized rows."""
        ...


class IndexedPassage(Protocol):
    """A chunk as the processing pipeline produces it."""

    @property
    def text(self) -> str:
        """The passage."""
        ...

    @property
    def page(self) -> int | None:
        """Its page or slide number."""
        ...

    @property
    def seq(self) -> int:
        """Its place in the file."""
        ...


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


async def write_file_index(
    file: LibraryFile,
    passages: Sequence[IndexedPassage],
    vectors: Vector | None,
    embedder: str | None,
) -> None:
    """Replace the file's index rows in one transaction."""
    rows = [
        Chunk(
            file_id=file.id,
            project_id=file.project_id,
            folder_id=file.folder_id,
            seq=passage.seq,
            page=passage.page,
            text=passage.text,
            embedding=None if vectors is None else vectors[i].astype("<f4").tobytes(),
            embedder=None if vectors is None else embedder,
        )
        for i, passage in enumerate(passages)
    ]
    async with in_transaction() as connection:
        await Chunk.filter(file_id=file.id).using_db(connection).delete()
        if rows:
            await Chunk.bulk_create(rows, batch_size=500, using_db=connection)
        await bump_index_version(file.project_id, connection)


async def remove_file_index(file_id: str, project_id: str) -> None:
    """Drop a file's index rows (the file was deleted or is now preventSearch)."""
    async with in_transaction() as connection:
        deleted = await Chunk.filter(file_id=file_id).using_db(connection).delete()
        if deleted:
            await bump_index_version(project_id, connection)


async def bump_index_version(project_id: str, connection: Any) -> None:
    """Tell every process's vector cache that this project's index changed."""
    await SearchIndexVersion.get_or_create(project_id=project_id, using_db=connection)
    await (
        SearchIndexVersion.filter(project_id=project_id)
        .using_db(connection)
        .update(version=F("version") + 1)
    )


@dataclass
class _ProjectVectors:
    version: int
    ids: npt.NDArray[np.int64]
    folders: npt.NDArray[np.object_]
    matrix: Vector


class VectorIndex:
    """Exact cosine search over each project's vectors, cached in memory per process.

    A project's matrix is reloaded when its index version moved (a worker anywhere
    wrote to it); the least recently used projects leave the cache first.
    """

    def __init__(self, max_projects: int = 16) -> None:
        self._cache: OrderedDict[tuple[str, str], _ProjectVectors] = OrderedDict()
        self._max_projects = max_projects
        self._lock = asyncio.Lock()

    async def _vectors(self, project_id: str, embedder: str) -> _ProjectVectors:
        row = await SearchIndexVersion.get_or_none(project_id=project_id)
        version = row.version if row else 0
        key = (project_id, embedder)
        async with self._lock:
            cached = self._cache.get(key)
            if cached is None or cached.version != version:
                rows = await Chunk.filter(
                    project_id=project_id, embedder=embedder, embedding__isnull=False
                ).values_list("id", "folder_id", "embedding")
                cached = _ProjectVectors(
                    version=version,
                    ids=np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows)),
                    folders=np.array([r[1] for r in rows], dtype=object),
                    matrix=(
                        np.frombuffer(b"".join(r[2] for r in rows), dtype="<f4")
                        .reshape(len(rows), -1)
                        .astype(np.float32)
                        if rows
                        else np.zeros((0, 0), dtype=np.float32)
                    ),
                )
                self._cache[key] = cached
            self._cache.move_to_end(key)
            while len(self._cache) > self._max_projects:
                self._cache.popitem(last=False)
            return cached

    async def nearest(
        self, project_id: str, embedder: str, query: Vector, folder: str | None, n: int
    ) -> list[int]:
        """Chunk ids most similar to ``query``, best first; ``folder`` "root" or an id."""
        vectors = await self._vectors(project_id, embedder)
        if len(vectors.ids) == 0 or vectors.matrix.shape[1] != query.shape[0]:
            return []
        scores = vectors.matrix @ query
        if folder is not None:
            wanted = None if folder == "root" else folder
            scores = np.where(vectors.folders == wanted, scores, -1.0)
        count = min(n, len(scores))
        top = np.argpartition(-scores, count - 1)[:count]
        top = top[np.argsort(-scores[top])]
        return [int(vectors.ids[i]) for i in top if scores[i] >= MIN_SIMILARITY]


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
    vectors: VectorIndex,
) -> list[SearchHit]:
    """The passages of the project best matching ``query``, by keywords and meaning."""
    rankings = [await keyword_ranking(project_id, query, folder, CANDIDATES)]
    if embedder is not None:
        [query_vector] = await embedder.embed([query])
        rankings.append(
            await vectors.nearest(project_id, embedder.name, query_vector, folder, CANDIDATES)
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
