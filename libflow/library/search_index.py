"""The search index's rows: one file's passages written, replaced or removed at once."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from tortoise.transactions import in_transaction

from libflow.library.pgvector import has_vector_column, insert_chunks
from libflow.library.vectors import Vector
from libflow.models import Chunk, LibraryFile, SearchIndexChange

# The changes each project's log keeps. A vector cache further behind than this (a process
# that searched nothing for a long while) reads the project's matrix whole again.
KEPT_CHANGES = 1000


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
    def page_name(self) -> str | None:
        """Its page's name, where pages have names (an xlsx sheet)."""
        ...

    @property
    def seq(self) -> int:
        """Its place in the file."""
        ...

    @property
    def tokens(self) -> int | None:
        """Its length in the embedder's word pieces."""
        ...


async def write_file_index(
    file: LibraryFile,
    passages: Sequence[IndexedPassage],
    vectors: Vector | None,
    embedder: str | None,
) -> None:
    """Replace the file's index rows in one transaction.

    With pgvector the vectors go to its column (and its HNSW index); elsewhere they are
    float32 bytes that VectorIndex loads.
    """
    async with in_transaction() as connection:
        in_column = await has_vector_column(connection)
        # The file's folder and metadata read under the write lock (SQLite) or the row's
        # lock (PostgreSQL), so a PATCH that raced this job is kept. The row is locked
        # before its chunks, in the order a PATCH takes them: the other order could
        # deadlock with one on PostgreSQL.
        current = await (
            LibraryFile.filter(id=file.id)
            .using_db(connection)
            .select_for_update()
            .values("folder_id", "metadata")
        )
        if not current:
            return  # deleted while it was processed: nothing of it is indexed again
        await Chunk.filter(file_id=file.id).using_db(connection).delete()
        folder_id, metadata = current[0]["folder_id"], current[0]["metadata"]
        rows = [
            Chunk(
                file_id=file.id,
                project_id=file.project_id,
                folder_id=folder_id,
                seq=passage.seq,
                page=passage.page,
                page_name=passage.page_name,
                text=passage.text,
                tokens=passage.tokens,
                metadata=metadata,
                embedding=(
                    None if vectors is None or in_column else vectors[i].astype("<f4").tobytes()
                ),
                embedder=None if vectors is None else embedder,
            )
            for i, passage in enumerate(passages)
        ]
        if rows and in_column:
            await insert_chunks(connection, rows, vectors)
        elif rows:
            await Chunk.bulk_create(rows, batch_size=500, using_db=connection)
        await bump_index_version(file.project_id, file.id, connection)


async def remove_file_index(file_id: str, project_id: str) -> None:
    """Drop a file's index rows (the file was deleted or is now preventSearch)."""
    async with in_transaction() as connection:
        deleted = await Chunk.filter(file_id=file_id).using_db(connection).delete()
        if deleted:
            await bump_index_version(project_id, file_id, connection)


# The counter's bump, its creation on a project's first write included, in one statement
# that answers with the new version (a write of the index took four before: a read, the
# update, a read back, under a savepoint; about a fifth of a small file's index write).
_BUMP_SQL = (
    'INSERT INTO "search_index_versions" ("project_id", "version") VALUES ({}, 1)'
    ' ON CONFLICT ("project_id") DO UPDATE'
    ' SET "version" = "search_index_versions"."version" + 1 RETURNING "version"'
)
_PLACEHOLDER = {"postgres": "$1", "sqlite": "?"}


async def bump_index_version(project_id: str, file_id: str, connection: Any) -> None:
    """Tell every process's vector cache that this file's index rows changed.

    The version moves under the counter row's lock, so versions are numbered in the
    order their transactions commit and a cache that read version v has every change
    up to v in the log.
    """
    # execute_query would not fetch the RETURNING row on PostgreSQL.
    bumped = await connection.execute_query_dict(
        _BUMP_SQL.format(_PLACEHOLDER[connection.capabilities.dialect]), [project_id]
    )
    version = int(bumped[0]["version"])
    await SearchIndexChange.create(
        project_id=project_id, version=version, file_id=file_id, using_db=connection
    )
    if version % KEPT_CHANGES == 0:
        await (
            SearchIndexChange.filter(project_id=project_id, version__lte=version - KEPT_CHANGES)
            .using_db(connection)
            .delete()
        )
