"""Vectors in PostgreSQL with pgvector: a ``vector`` column, an HNSW index, nearest() in SQL.

The column is untyped (``vector``, any dimension) because the embedder can change (local
384, openai 1536, ...). HNSW needs a fixed dimension, so each (embedder, dimension) gets a
partial expression index, ``(embedding_vector::vector(D))`` over the rows that embedder
wrote, made when that embedder opens. A query names the same expression and the same
predicate, literally, so the planner can prove the index covers it (EXPLAIN in the tests).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from typing import Any

from tortoise.backends.base.client import BaseDBAsyncClient
from tortoise.connection import get_connection
from tortoise.exceptions import OperationalError
from tortoise.transactions import in_transaction

from libflow.library.embeddings.interface import Embedder
from libflow.library.vectors import (
    MIN_SIMILARITY,
    PassageFilter,
    Vector,
    VectorIndex,
    VectorSearch,
)
from libflow.models import Chunk

logger = logging.getLogger("libflow.search")

TABLE = "library_chunks"
COLUMN = "embedding_vector"
# The HNSW graph: links per node (pgvector's default) and the candidates kept while linking a
# new node (pgvector's default is 64). ef_construction decides how well the graph finds a
# query's true neighbours where passages crowd (topics of a thousand near-identical ones):
# on the scale benchmark's vectors at 300k chunks, recall@10 at ef_search 200 was 0.91 with
# 64 and 0.995 with 128, for a build 1.6 times as long. (Changing either names a new index.)
HNSW_M = 16
HNSW_EF_CONSTRUCTION = 128
# Candidates the graph walk keeps (pgvector's default is 40), and at least the n asked for:
# at 100 recall@10 fell to 0.96 at 300k chunks, for about the same time.
EF_SEARCH = 200
EF_SEARCH_MAX = 1000  # pgvector's own limit
# pgvector's HNSW takes `vector` up to 2,000 dimensions; past that, search stays exact (in SQL).
HNSW_MAX_DIMENSIONS = 2000
# Iterative index scans (pgvector 0.8): a filtered query still finds n rows.
ITERATIVE_SCAN_SINCE = (0, 8)
# Serializes the DDL of processes starting at once (any constant, the same everywhere).
_DDL_LOCK_ID = 0x6C66766563


async def has_vector_column(connection: BaseDBAsyncClient) -> bool:
    """The chunks table has the pgvector column (PostgreSQL with the extension enabled)."""
    if connection.capabilities.dialect != "postgres":
        return False
    rows = await connection.execute_query_dict(
        "SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1)"
        " AND attname = $2 AND NOT attisdropped",
        [TABLE, COLUMN],
    )
    return bool(rows)


async def _enable_vector_column(connection: BaseDBAsyncClient) -> bool:
    """Create the extension and the column where the server has pgvector; whether they exist.

    Migration 0010 does this at install; this covers pgvector installed on the server later.
    """
    if await has_vector_column(connection):
        return True
    if not await connection.execute_query_dict(
        "SELECT 1 FROM pg_available_extensions WHERE name = 'vector'"
    ):
        return False
    try:
        async with in_transaction() as transaction:
            await transaction.execute_query("SELECT pg_advisory_xact_lock($1)", [_DDL_LOCK_ID])
            await transaction.execute_script(
                "CREATE EXTENSION IF NOT EXISTS vector;"
                f" ALTER TABLE {TABLE} ADD COLUMN IF NOT EXISTS {COLUMN} vector"
            )
    except OperationalError as err:
        # pgvector is not a trusted extension: only a superuser may create it.
        logger.warning(
            "PostgreSQL has the vector extension but libflow could not enable it (%s): run "
            "CREATE EXTENSION vector as a superuser in this database and restart",
            err,
        )
        return False
    return True


async def _pgvector_version(connection: BaseDBAsyncClient) -> tuple[int, ...]:
    rows = await connection.execute_query_dict(
        "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
    )
    return tuple(int(part) for part in str(rows[0]["extversion"]).split(".") if part.isdigit())


def _literal(text: str) -> str:
    """``text`` as an SQL string literal (standard_conforming_strings is on since 9.1)."""
    return "'" + text.replace("'", "''") + "'"


def index_name(embedder: str, dimensions: int) -> str:
    """The HNSW index of one (embedder, dimension) and the graph's settings.

    New settings make a new name, so an index built with the old ones is replaced rather
    than kept under a name that lies.
    """
    return _hashed_name(
        f"{embedder}\0{dimensions}\0m={HNSW_M}\0ef_construction={HNSW_EF_CONSTRUCTION}"
    )


def _first_index_name(embedder: str, dimensions: int) -> str:
    """The name of the index built with pgvector's defaults (m 16, ef_construction 64)."""
    return _hashed_name(f"{embedder}\0{dimensions}")


def _hashed_name(key: str) -> str:
    """An index name from a digest of ``key``: PostgreSQL's names hold 63 bytes."""
    return f"{TABLE}_hnsw_{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def _typed(dimensions: int) -> str:
    return f"{COLUMN}::vector({int(dimensions)})"


def _predicate(embedder: str, dimensions: int) -> str:
    """The rows of one vector space: the index's WHERE, repeated verbatim in every query."""
    return f"embedder = {_literal(embedder)} AND vector_dims({COLUMN}) = {int(dimensions)}"


async def ensure_hnsw_index(connection: BaseDBAsyncClient, embedder: str, dimensions: int) -> None:
    """Create the HNSW index of ``embedder``'s vectors unless it exists (once per embedder)."""
    if dimensions > HNSW_MAX_DIMENSIONS:
        logger.warning(
            "%s has %d dimensions, more than pgvector's HNSW takes (%d): vector search is "
            "exact, in the database",
            embedder,
            dimensions,
            HNSW_MAX_DIMENSIONS,
        )
        return
    name = index_name(embedder, dimensions)
    async with in_transaction() as transaction:
        await transaction.execute_query("SELECT pg_advisory_xact_lock($1)", [_DDL_LOCK_ID])
        # Built on an empty set in practice: the embedder opens before it writes a vector
        # (replacing an index of other settings reads every row of the embedder, once).
        await transaction.execute_script(
            f"CREATE INDEX IF NOT EXISTS {name} ON {TABLE}"
            f" USING hnsw (({_typed(dimensions)}) vector_cosine_ops)"
            f" WITH (m = {HNSW_M}, ef_construction = {HNSW_EF_CONSTRUCTION})"
            f" WHERE {_predicate(embedder, dimensions)};"
            # Its predecessor, same rows and queries, with a sparser graph: the planner
            # would otherwise be free to walk either.
            f" DROP INDEX IF EXISTS {_first_index_name(embedder, dimensions)}"
        )


async def open_vector_search(embedder: Embedder | None) -> VectorSearch:
    """The database's own vector search where it has pgvector, else exact search in memory."""
    connection = get_connection("default")
    if connection.capabilities.dialect != "postgres":
        return VectorIndex()
    if not await _enable_vector_column(connection):
        logger.warning(
            "PostgreSQL without the vector extension (pgvector): vector search is exact, over "
            "each project's vectors held in memory by every API process; install pgvector on "
            "the database server for an HNSW index and search in the database"
        )
        return VectorIndex()
    if embedder is not None:
        await ensure_hnsw_index(connection, embedder.name, embedder.dimensions)
    iterative = await _pgvector_version(connection) >= ITERATIVE_SCAN_SINCE
    logger.info("vector search in PostgreSQL (pgvector, HNSW)")
    return PgVectorSearch(iterative_scan=iterative)


def nearest_query(
    project_id: str, embedder: str, query: Vector, where: PassageFilter, n: int
) -> tuple[str, list[Any]]:
    """The SQL of nearest() and its parameters (also what the tests EXPLAIN)."""
    dimensions = int(query.shape[0])
    params: list[Any] = [query.astype(float).tolist(), project_id]
    clauses = [_predicate(embedder, dimensions), "project_id = $2"]
    if where.folder is not None:
        if where.folder == "root":
            clauses.append("folder_id IS NULL")
        else:
            params.append(where.folder)
            clauses.append(f"folder_id = ${len(params)}")
    for key, values in where.metadata.items():
        # JSON equality as jsonb has it: 1 and "1" and true differ; no value admits no row.
        alternatives = []
        for value in values:
            params.append(json.dumps({key: value}))
            alternatives.append(f"metadata @> ${len(params)}::jsonb")
        clauses.append("(" + (" OR ".join(alternatives) or "FALSE") + ")")
    params.append(n)
    distance = f"{_typed(dimensions)} <=> ($1::real[])::vector({dimensions})"
    # Only fixed fragments and integers are interpolated; every value is a parameter.
    sql = (
        f"WITH nearest AS MATERIALIZED (SELECT id, {distance} AS distance FROM {TABLE}"  # noqa: S608
        f" WHERE {' AND '.join(clauses)} ORDER BY {distance} LIMIT ${len(params)})"
        # relaxed_order may return rows slightly out of order: sort the few it found.
        " SELECT id, distance FROM nearest ORDER BY distance, id"
    )
    return sql, params


class PgVectorSearch:
    """nearest() in PostgreSQL over the HNSW index of the embedder's vectors (VectorSearch)."""

    def __init__(self, *, ef_search: int = EF_SEARCH, iterative_scan: bool = True) -> None:
        self._ef_search = ef_search
        self._iterative_scan = iterative_scan

    async def nearest(
        self, project_id: str, embedder: str, query: Vector, where: PassageFilter, n: int
    ) -> list[tuple[int, float]]:
        """(chunk id, cosine similarity) of the ``n`` chunks nearest ``query``, best first."""
        if n <= 0 or query.shape[0] == 0:
            return []
        sql, params = nearest_query(project_id, embedder, query, where, n)
        settings = [f"SET LOCAL hnsw.ef_search = {min(max(self._ef_search, n), EF_SEARCH_MAX)}"]
        if self._iterative_scan:
            settings.append("SET LOCAL hnsw.iterative_scan = relaxed_order")
        async with in_transaction() as connection:
            await connection.execute_script("; ".join(settings))
            rows = await connection.execute_query_dict(sql, params)
        found = [(int(row["id"]), 1.0 - float(row["distance"])) for row in rows]
        return [(chunk_id, score) for chunk_id, score in found if score >= MIN_SIMILARITY]


def _vector_param(vector: Vector | None) -> list[float] | None:
    return None if vector is None else vector.astype(float).tolist()


async def insert_chunks(
    connection: BaseDBAsyncClient, rows: Sequence[Chunk], vectors: Vector | None
) -> None:
    """INSERT ``rows`` with their vectors in the vector column: one write per row.

    The columns are the model's own (a field added to Chunk is written too), plus the
    vector; the bytea copy stays empty on this backend.
    """
    meta = Chunk._meta
    fields = [
        name
        for name, column in meta.fields_db_projection.items()
        if column not in meta.generated_db_fields
    ]
    columns = [meta.fields_db_projection[name] for name in fields]
    marks = [f"${i}" for i in range(1, len(columns) + 1)]
    sql = (
        f"INSERT INTO {TABLE} ({', '.join(columns)}, {COLUMN})"  # noqa: S608
        f" VALUES ({', '.join(marks)}, (${len(columns) + 1}::real[])::vector)"
    )
    values = [
        [
            *(meta.fields_map[name].to_db_value(getattr(row, name), row) for name in fields),
            _vector_param(None if vectors is None else vectors[i]),
        ]
        for i, row in enumerate(rows)
    ]
    await connection.execute_many(sql, values)


async def update_vectors(
    connection: BaseDBAsyncClient, chunk_ids: Sequence[int], vectors: Vector, embedder: str
) -> None:
    """Set the vectors (and their embedder) of existing chunks, as a re-embedding does."""
    await connection.execute_many(
        f"UPDATE {TABLE} SET embedder = $1, embedding = NULL,"  # noqa: S608
        f" {COLUMN} = ($2::real[])::vector WHERE id = $3",
        [
            [embedder, _vector_param(vector), chunk_id]
            for chunk_id, vector in zip(chunk_ids, vectors, strict=True)
        ],
    )


async def stale_file_ids(connection: BaseDBAsyncClient, embedder: str, limit: int) -> list[str]:
    """Files with chunks another (or no) embedder wrote, or whose vector is not in the column."""
    rows = await connection.execute_query_dict(
        f"SELECT DISTINCT file_id FROM {TABLE}"  # noqa: S608
        f" WHERE embedder IS DISTINCT FROM $1 OR {COLUMN} IS NULL LIMIT $2",
        [embedder, limit],
    )
    return [str(row["file_id"]) for row in rows]
