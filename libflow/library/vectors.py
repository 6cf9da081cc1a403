"""Nearest passages by meaning: the vector search interface and its in-memory exact backend."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from libflow.models import Chunk, SearchIndexChange, SearchIndexVersion

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


# A stored row as the cache reads it: (chunk id, file id, folder id, float32 bytes, metadata).
_StoredRow = tuple[int, str, str | None, bytes, Mapping[str, MetadataValue] | None]
_COLUMNS = ("id", "file_id", "folder_id", "embedding", "metadata")
# A cache this many files behind reads the whole matrix rather than the files one by one.
MAX_FILES_READ_AGAIN = 200


@dataclass
class _ProjectVectors:
    """One project's vectors in one embedder's space, as rows of a growing matrix.

    Rows are appended in place (the arrays keep a quarter of spare room) and
    retired by a mask, so a write costs the rows it wrote: reading the whole matrix
    again after every upload churned the process's memory by its size each time.
    """

    version: int
    size: int = 0
    retired: int = 0
    ids: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    live: Mask = field(default_factory=lambda: np.zeros(0, dtype=np.bool_))
    folders: npt.NDArray[np.object_] = field(default_factory=lambda: np.zeros(0, dtype=object))
    matrix: Vector = field(default_factory=lambda: np.zeros((0, 0), dtype=np.float32))
    metadata: list[Mapping[str, MetadataValue] | None] = field(default_factory=list)
    rows_of_file: dict[str, list[int]] = field(default_factory=dict)
    # (key, typed value) -> the rows holding it; built at the first filtered search.
    postings: dict[tuple[str, TypedValue], list[int]] | None = None

    def replace_files(self, file_ids: Collection[str], rows: Sequence[_StoredRow]) -> None:
        """Retire the rows of ``file_ids`` and append ``rows``, their rows as stored now."""
        for file_id in file_ids:
            retiring = self.rows_of_file.pop(file_id, [])
            self.live[retiring] = False
            self.retired += len(retiring)
        self.append(rows)
        if self.retired > self.size // 2:
            self._compact()

    def append(self, rows: Sequence[_StoredRow]) -> None:
        """Add ``rows`` after the last row, growing the arrays when they are full."""
        if not rows:
            return
        dimensions = len(rows[0][3]) // 4  # one embedder's vectors all have its size
        if len(self.ids) == 0:
            self.matrix = np.zeros((0, dimensions), dtype=np.float32)
        end = self.size + len(rows)
        if end > len(self.ids):
            # Room for a quarter more: a whole read leaves some, so the next upload's rows
            # are written in place rather than after a copy of every vector.
            self._grow(end + max(end // 4, 64))
        vectors = np.frombuffer(b"".join(row[3] for row in rows), dtype="<f4")
        self.matrix[self.size : end] = vectors.reshape(len(rows), dimensions)
        self.ids[self.size : end] = [row[0] for row in rows]
        self.live[self.size : end] = True
        self.folders[self.size : end] = [row[2] for row in rows]
        for index, row in enumerate(rows, start=self.size):
            self.rows_of_file.setdefault(row[1], []).append(index)
        self.metadata.extend(row[4] for row in rows)
        if self.postings is not None:
            self._post(range(self.size, end))
        self.size = end

    def _grow(self, capacity: int) -> None:
        def grown(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
            bigger = np.zeros((capacity, *array.shape[1:]), dtype=array.dtype)
            bigger[: self.size] = array[: self.size]
            return bigger

        self.ids, self.live, self.folders, self.matrix = (
            grown(self.ids),
            grown(self.live),
            grown(self.folders),
            grown(self.matrix),
        )

    def _compact(self) -> None:
        """Drop the retired rows once they are half of the matrix."""
        kept = np.flatnonzero(self.live[: self.size])
        new_row = np.full(self.size, -1, dtype=np.intp)
        new_row[kept] = np.arange(len(kept))
        self.rows_of_file = {
            file_id: [int(new_row[row]) for row in rows]
            for file_id, rows in self.rows_of_file.items()
        }
        self.ids, self.folders, self.matrix = (
            self.ids[kept],
            self.folders[kept],
            self.matrix[kept],
        )
        self.live = np.ones(len(kept), dtype=np.bool_)
        self.metadata = [self.metadata[row] for row in kept]
        self.size, self.retired, self.postings = len(kept), 0, None

    def _post(self, rows: Iterable[int]) -> None:
        assert self.postings is not None
        for row in rows:
            for key, value in (self.metadata[row] or {}).items():
                self.postings.setdefault((key, typed_value(value)), []).append(row)

    def metadata_mask(self, wanted: Mapping[str, tuple[MetadataValue, ...]]) -> Mask:
        """Rows whose metadata has, for every key, one of the values wanted."""
        if self.postings is None:
            self.postings = {}
            self._post(range(self.size))
        mask = np.ones(self.size, dtype=np.bool_)
        for key, values in wanted.items():
            admitted = np.zeros(self.size, dtype=np.bool_)
            for value in values:
                admitted[self.postings.get((key, typed_value(value)), [])] = True
            mask &= admitted
        return mask


class VectorIndex:
    """Exact cosine search over each project's vectors, cached in memory per process.

    When a project's index version moved (a worker anywhere wrote to it), the cache reads
    again only the rows of the files the change log names; a cache too far behind, or one
    the log cannot bring up to date, reads the project's matrix whole. The least recently
    used projects leave the cache first.
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
            # A cache at or past the version read (a search moved it meanwhile) serves as is.
            if cached is None:
                cached = await self._read_whole(project_id, embedder, version)
            elif cached.version < version:
                changed = await self._changed_files(project_id, cached.version, version)
                if changed is None:
                    cached = await self._read_whole(project_id, embedder, version)
                else:
                    cached.replace_files(
                        changed, await _stored_rows(project_id, embedder, file_id__in=changed)
                    )
                    cached.version = version
            self._cache[key] = cached
            self._cache.move_to_end(key)
            while len(self._cache) > self._max_projects:
                self._cache.popitem(last=False)
            return cached

    @staticmethod
    async def _read_whole(project_id: str, embedder: str, version: int) -> _ProjectVectors:
        vectors = _ProjectVectors(version=version)
        vectors.append(await _stored_rows(project_id, embedder))
        return vectors

    @staticmethod
    async def _changed_files(project_id: str, since: int, until: int) -> set[str] | None:
        """The files changed after version ``since`` up to ``until``; None: read all."""
        if until - since > MAX_FILES_READ_AGAIN:
            return None
        logged = await SearchIndexChange.filter(
            project_id=project_id, version__gt=since, version__lte=until
        ).values_list("file_id", flat=True)
        # Versions missing from the log: pruned, or written before the log existed.
        return {str(file_id) for file_id in logged} if len(logged) == until - since else None

    async def nearest(
        self, project_id: str, embedder: str, query: Vector, where: PassageFilter, n: int
    ) -> list[tuple[int, float]]:
        """(chunk id, cosine similarity) nearest ``query``, best first (VectorSearch)."""
        vectors = await self._vectors(project_id, embedder)
        if vectors.size == vectors.retired or vectors.matrix.shape[1] != query.shape[0]:
            return []
        scores = vectors.matrix[: vectors.size] @ query
        if vectors.retired:
            scores = np.where(vectors.live[: vectors.size], scores, -1.0)
        # Passages the filter refuses score below any similarity kept, before the top n.
        if where.folder is not None:
            wanted = None if where.folder == "root" else where.folder
            scores = np.where(vectors.folders[: vectors.size] == wanted, scores, -1.0)
        if where.metadata:
            scores = np.where(vectors.metadata_mask(where.metadata), scores, -1.0)
        count = min(n, len(scores))
        top = np.argpartition(-scores, count - 1)[:count]
        top = top[np.argsort(-scores[top])]
        return [(int(vectors.ids[i]), float(scores[i])) for i in top if scores[i] >= MIN_SIMILARITY]


async def _stored_rows(project_id: str, embedder: str, **where: Any) -> list[_StoredRow]:
    """The project's embedded chunks in ``embedder``'s space (those ``where`` admits)."""
    rows: list[_StoredRow] = await Chunk.filter(
        project_id=project_id, embedder=embedder, embedding__isnull=False, **where
    ).values_list(*_COLUMNS)
    return rows
