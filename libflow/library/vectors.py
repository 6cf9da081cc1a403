"""Nearest passages by meaning: the vector search interface and its in-memory exact backend."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

from libflow.models import Chunk, SearchIndexVersion

# Nearest neighbours below this cosine are noise, not meaning (all-MiniLM puts unrelated
# sentences around 0.0-0.15): they would otherwise fill every result list.
MIN_SIMILARITY = 0.2

Vector = npt.NDArray[np.float32]


class QueryEmbedder(Protocol):
    """What search needs of an embedder: its vector space's name and query vectors."""

    name: str

    async def embed(self, texts: Sequence[str], *, truncate: bool = False) -> Vector:
        """Vectors of ``texts``, L2-normalized rows (``truncate``: a long query's start)."""
        ...


MetadataValue = str | int | float | bool


@dataclass(frozen=True, slots=True)
class PassageFilter:
    """Which passages a search may return.

    ``folder`` is "root", a folder id, or None for every folder. ``metadata`` maps a key to
    the values it may have (any of them); every key must match, by JSON equality (so 1 and
    "1" and true are three different values).
    """

    folder: str | None = None
    metadata: Mapping[str, tuple[MetadataValue, ...]] = field(default_factory=dict)


class VectorSearch(Protocol):
    """Where chunk vectors are searched: in this process's memory, or in the database."""

    async def nearest(
        self, project_id: str, embedder: str, query: Vector, where: PassageFilter, n: int
    ) -> list[tuple[int, float]]:
        """(chunk id, cosine similarity) of the ``n`` chunks nearest ``query``, best first.

        Only chunks ``where`` admits, and only those at least MIN_SIMILARITY similar.
        """
        ...


Mask = npt.NDArray[np.bool_]
# A metadata value as JSON compares it: a boolean is never the number 1, while 1 and 1.0
# are one number (Python's True == 1 would otherwise conflate them).
TypedValue = tuple[str, MetadataValue]


def typed_value(value: MetadataValue) -> TypedValue:
    """``value`` tagged with its JSON kind, for comparisons by JSON equality."""
    if isinstance(value, bool):
        return ("boolean", value)
    if isinstance(value, int | float):
        return ("number", value)
    return ("string", value)


@dataclass
class _ProjectVectors:
    version: int
    ids: npt.NDArray[np.int64]
    folders: npt.NDArray[np.object_]
    matrix: Vector
    metadata: list[Mapping[str, MetadataValue] | None]
    # (key, typed value) -> the rows holding it; built at the first filtered search.
    postings: dict[tuple[str, TypedValue], list[int]] | None = None

    def metadata_mask(self, wanted: Mapping[str, tuple[MetadataValue, ...]]) -> Mask:
        """Rows whose metadata has, for every key, one of the values wanted."""
        if self.postings is None:
            postings: dict[tuple[str, TypedValue], list[int]] = {}
            for row, labels in enumerate(self.metadata):
                for key, value in (labels or {}).items():
                    postings.setdefault((key, typed_value(value)), []).append(row)
            self.postings = postings
        mask = np.ones(len(self.ids), dtype=np.bool_)
        for key, values in wanted.items():
            admitted = np.zeros(len(self.ids), dtype=np.bool_)
            for value in values:
                admitted[self.postings.get((key, typed_value(value)), [])] = True
            mask &= admitted
        return mask


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
                ).values_list("id", "folder_id", "embedding", "metadata")
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
                    metadata=[r[3] for r in rows],
                )
                self._cache[key] = cached
            self._cache.move_to_end(key)
            while len(self._cache) > self._max_projects:
                self._cache.popitem(last=False)
            return cached

    async def nearest(
        self, project_id: str, embedder: str, query: Vector, where: PassageFilter, n: int
    ) -> list[tuple[int, float]]:
        """(chunk id, cosine similarity) nearest ``query``, best first (VectorSearch)."""
        vectors = await self._vectors(project_id, embedder)
        if len(vectors.ids) == 0 or vectors.matrix.shape[1] != query.shape[0]:
            return []
        scores = vectors.matrix @ query
        # Passages the filter refuses score below any similarity kept, before the top n.
        if where.folder is not None:
            wanted = None if where.folder == "root" else where.folder
            scores = np.where(vectors.folders == wanted, scores, -1.0)
        if where.metadata:
            scores = np.where(vectors.metadata_mask(where.metadata), scores, -1.0)
        count = min(n, len(scores))
        top = np.argpartition(-scores, count - 1)[:count]
        top = top[np.argsort(-scores[top])]
        return [(int(vectors.ids[i]), float(scores[i])) for i in top if scores[i] >= MIN_SIMILARITY]
