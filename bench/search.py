"""Search latency at 10k and 100k chunks: keyword, vector and hybrid, against bare baselines.

A SQLite database made with ``open_database`` in a temp dir is filled through
``write_file_index`` (100 chunks a file) with Zipf-distributed filler text and random
clustered float32 vectors tagged as the local embedder's, so no model is loaded. Queries
then go through ``keyword_ranking``, ``VectorIndex.nearest`` and ``search`` with an embedder
stub that returns a fixed query vector, and through a bare sqlite3 FTS5 query and a bare
numpy top-k over the same rows. The database grows from 10k to 100k chunks in place.
Run alone with ``python -m bench.search``.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bench._common import Report, Result, percentile, run_alone
from bench._text import Prose
from libflow.db.connection import open_database
from libflow.library.search import (
    CANDIDATES,
    PREFIX_MIN_CHARS,
    fuse_rankings,
    keyword_ranking,
    search,
)
from libflow.library.search_index import write_file_index
from libflow.library.vectors import PassageFilter, VectorIndex
from libflow.models import LibraryFile, Project

NAME = "search"
SIZES = (10_000, 100_000)
CHUNKS_PER_FILE = 100
CHUNK_WORDS = 380  # about 500 estimated tokens, what chunk_segments makes
VOCABULARY = 20_000
QUERY_WORD_RANKS = (100, 5_000)  # query words: neither stop words nor hapaxes
QUERIES = 200
LIMIT = 10
DIMENSIONS = 384
TOPICS = 64
NOISE = 1.0  # a chunk is its topic's centre plus this much noise: cosine ~0.7 to the centre
EMBEDDER = "local:all-MiniLM-L6-v2"
SEED = 11

Matrix = npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class Passage:
    text: str
    page: int | None
    seq: int
    page_name: str | None = None
    tokens: int | None = None


class FixedEmbedder:
    """An embedder stub: every query embeds to the same vector (no model, no model time)."""

    def __init__(self, name: str, vector: Matrix) -> None:
        self.name = name
        self.dimensions = vector.shape[0]
        self._vector = vector

    async def embed(self, texts: Sequence[str], *, truncate: bool = False) -> Matrix:
        return np.tile(self._vector, (len(texts), 1))


@dataclass
class Corpus:
    """What has been written so far, and the generators of what comes next."""

    prose: Prose
    rng: np.random.Generator
    centres: Matrix
    project_id: str = ""
    files: int = 0
    chunks: int = 0

    def vectors(self, count: int) -> Matrix:
        topics = self.rng.integers(0, TOPICS, size=count)
        noise = self.rng.standard_normal((count, DIMENSIONS), dtype=np.float32)
        rows = self.centres[topics] + NOISE * noise / np.sqrt(DIMENSIONS, dtype=np.float32)
        normalized: Matrix = rows / np.linalg.norm(rows, axis=1, keepdims=True)
        return normalized


def _unit_rows(rng: np.random.Generator, count: int) -> Matrix:
    rows = rng.standard_normal((count, DIMENSIONS), dtype=np.float32)
    normalized: Matrix = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    return normalized


async def grow(corpus: Corpus, target: int) -> float:
    """Write files of CHUNKS_PER_FILE chunks through write_file_index until ``target`` chunks."""
    started = time.perf_counter()
    while corpus.chunks < target:
        count = min(CHUNKS_PER_FILE, target - corpus.chunks)
        texts = corpus.prose.passages(count, CHUNK_WORDS)
        vectors = corpus.vectors(count)
        corpus.files += 1
        file = await LibraryFile.create(
            project_id=corpus.project_id,
            name=f"document-{corpus.files}.pdf",
            file_type="pdf",
            mime_type="application/pdf",
            storage_key=f"bench/{corpus.project_id}/{corpus.files}",
            indexed=True,
        )
        passages = [Passage(text, 1 + i // 2, i) for i, text in enumerate(texts)]
        await write_file_index(file, passages, vectors, EMBEDDER)
        corpus.chunks += count
    return time.perf_counter() - started


# -- the bare baselines ---------------------------------------------------------------------


def _match(query: str) -> tuple[str, str]:
    """keyword_ranking's FTS5 expressions: the exact index's (the last term as a prefix), the
    stemmed one's."""
    terms = list(dict.fromkeys(query.lower().split()))
    exact = [f'"{t}"' for t in terms]
    if len(terms[-1]) >= PREFIX_MIN_CHARS:
        exact[-1] = f'"{terms[-1]}"*'
    return " OR ".join(exact), " OR ".join(f'"{t}"' for t in terms)


class Bare:
    """The same queries with sqlite3 and numpy alone, over the same database file."""

    def __init__(self, database: Path) -> None:
        self.db = sqlite3.connect(database)
        started = time.perf_counter()
        rows = self.db.execute(
            "SELECT id, embedding FROM library_chunks WHERE embedding IS NOT NULL"
        ).fetchall()
        self.ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        self.matrix: Matrix = np.frombuffer(b"".join(r[1] for r in rows), dtype="<f4").reshape(
            len(rows), DIMENSIONS
        )
        self.load_seconds = time.perf_counter() - started

    def close(self) -> None:
        self.db.close()

    def keyword(self, query: str) -> list[tuple[int, float]]:
        rows = self.db.execute(
            "SELECT id, sum(score) AS score FROM ("
            " SELECT rowid AS id, -bm25(library_chunks_fts) AS score FROM library_chunks_fts"
            " WHERE library_chunks_fts MATCH ?"
            " UNION ALL SELECT rowid, -bm25(library_chunks_fts_stemmed)"
            " FROM library_chunks_fts_stemmed WHERE library_chunks_fts_stemmed MATCH ?"
            ") GROUP BY id ORDER BY score DESC, id LIMIT ?",
            (*_match(query), CANDIDATES),
        ).fetchall()
        best = max((r[1] for r in rows), default=0.0)
        return [(r[0], r[1] / best if best > 0 else 1.0) for r in rows]

    def nearest(self, vector: Matrix) -> list[tuple[int, float]]:
        scores = self.matrix @ vector
        top = np.argpartition(-scores, CANDIDATES - 1)[:CANDIDATES]
        top = top[np.argsort(-scores[top])]
        return [(int(self.ids[i]), float(scores[i])) for i in top]

    def hybrid(self, query: str, vector: Matrix) -> list[tuple[Any, ...]]:
        fused = fuse_rankings(self.keyword(query), self.nearest(vector))[:LIMIT]
        ids = [hit.chunk_id for hit in fused]
        marks = ",".join("?" * len(ids))
        return self.db.execute(
            "SELECT c.id, c.file_id, c.text, c.page, f.name FROM library_chunks c"
            f" JOIN library_files f ON f.id = c.file_id WHERE c.id IN ({marks})",
            ids,
        ).fetchall()


# -- measuring ------------------------------------------------------------------------------


@dataclass
class Timings:
    samples: dict[str, list[float]] = field(default_factory=dict)

    @contextlib.contextmanager
    def timed(self, label: str) -> Iterator[None]:
        """Add the milliseconds the block takes to ``label``'s samples."""
        started = time.perf_counter()
        yield
        self.samples.setdefault(label, []).append((time.perf_counter() - started) * 1000)

    def p(self, label: str, q: float) -> float:
        return percentile(self.samples[label], q)


@dataclass(frozen=True)
class SizeRun:
    chunks: int
    build_seconds: float
    timings: Timings
    load_ms: float  # VectorIndex's first query: the whole matrix from the database
    update_ms: float  # its first query after one more file was written: that file's rows
    bare_load_ms: float
    keyword_hits: float  # mean FTS matches of a query (before the LIMIT)
    hybrid_hits: float
    same_keyword: int  # queries whose ranking equals the bare one
    same_vector: int


async def measure(
    corpus: Corpus, database: Path, queries: list[str], vector: Matrix, build: float
) -> SizeRun:
    """Every query through our six paths in turn (ours and bare interleaved)."""
    embedder = FixedEmbedder(EMBEDDER, vector)
    index = VectorIndex()
    started = time.perf_counter()
    await index.nearest(corpus.project_id, EMBEDDER, vector, PassageFilter(), CANDIDATES)
    load_ms = (time.perf_counter() - started) * 1000
    await grow(corpus, corpus.chunks + CHUNKS_PER_FILE)  # one more file, as an upload adds
    started = time.perf_counter()
    await index.nearest(corpus.project_id, EMBEDDER, vector, PassageFilter(), CANDIDATES)
    update_ms = (time.perf_counter() - started) * 1000
    bare = Bare(database)
    try:
        timings = Timings()
        project = corpus.project_id
        hybrid_hits = same_keyword = same_vector = 0
        everywhere = PassageFilter()
        for query in queries[:5]:  # warm-up: caches, statements, pages
            await keyword_ranking(project, query, everywhere, CANDIDATES)
            await search(
                project, query, limit=LIMIT, where=everywhere, embedder=embedder, vectors=index
            )
            bare.hybrid(query, vector)
        for query in queries:
            with timings.timed("keyword"):
                ours = [i for i, _ in await keyword_ranking(project, query, everywhere, CANDIDATES)]
            with timings.timed("bare keyword"):
                bare_ids = [i for i, _ in bare.keyword(query)]
            same_keyword += ours == bare_ids
            with timings.timed("vector"):
                ours = [
                    i
                    for i, _ in await index.nearest(
                        project, EMBEDDER, vector, PassageFilter(), CANDIDATES
                    )
                ]
            with timings.timed("bare vector"):
                bare_ids = [i for i, _ in bare.nearest(vector)]
            same_vector += ours == bare_ids
            with timings.timed("hybrid"):
                hits = await search(
                    project, query, limit=LIMIT, where=everywhere, embedder=embedder, vectors=index
                )
            with timings.timed("bare hybrid"):
                bare.hybrid(query, vector)
            hybrid_hits += len(hits)
        matches = [
            bare.db.execute(
                "SELECT count(*) FROM library_chunks_fts WHERE library_chunks_fts MATCH ?",
                (_match(q)[0],),
            ).fetchone()[0]
            for q in queries[:20]
        ]
    finally:
        bare.close()
    return SizeRun(
        corpus.chunks,
        build,
        timings,
        load_ms,
        update_ms,
        bare.load_seconds * 1000,
        statistics.mean(matches),
        hybrid_hits / len(queries),
        same_keyword,
        same_vector,
    )


def make_queries(prose: Prose, rng: np.random.Generator) -> list[str]:
    """QUERIES queries of 2-3 words drawn uniformly from vocabulary ranks QUERY_WORD_RANKS."""
    low, high = QUERY_WORD_RANKS
    return [
        " ".join(prose.vocabulary[int(i)] for i in rng.integers(low, high, size=rng.integers(2, 4)))
        for _ in range(QUERIES)
    ]


async def _run(work: Path) -> list[SizeRun]:
    database = work / "libflow.sqlite3"
    rng = np.random.default_rng(SEED)
    corpus = Corpus(Prose(VOCABULARY, seed=SEED), rng, _unit_rows(rng, TOPICS))
    queries = make_queries(corpus.prose, rng)
    vector = corpus.centres[0].copy()
    runs: list[SizeRun] = []
    async with open_database(f"sqlite://{database}"):
        project = await Project.create(name="bench")
        corpus.project_id = project.id
        for size in SIZES:
            build = await grow(corpus, size)
            runs.append(await measure(corpus, database, queries, vector, build))
    return runs


def run() -> Report:
    """Build, measure at 10k, grow to 100k, measure again."""
    work = Path(tempfile.mkdtemp(prefix="libflow-bench-search-"))
    try:
        runs = asyncio.run(_run(work))
        db_mib = sum(p.stat().st_size for p in work.iterdir()) / 2**20
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows: list[Result] = []
    for size_run in runs:
        t = size_run.timings
        size = f"{size_run.chunks // 1000}k"
        for mode, baseline_label in (
            ("keyword", "bare FTS5 MATCH"),
            ("vector", "bare numpy @ top-k"),
            ("hybrid", "bare FTS5+numpy+fetch"),
        ):
            for q in (50, 99):
                rows.append(
                    Result(
                        NAME,
                        f"{mode} p{q} @ {size} chunks",
                        t.p(mode, q),
                        "ms",
                        baseline=t.p(f"bare {mode}", q),
                        baseline_label=baseline_label,
                    )
                )
        rows.append(
            Result(
                NAME,
                f"vector matrix load @ {size} chunks",
                size_run.load_ms,
                "ms",
                baseline=size_run.bare_load_ms,
                baseline_label="bare sqlite3+numpy",
            )
        )
        rows.append(
            Result(
                NAME,
                f"vector cache update after a write @ {size} chunks",
                size_run.update_ms,
                "ms",
                baseline=size_run.load_ms,
                baseline_label="the whole matrix's load",
            )
        )
    notes = [
        f"search: {QUERIES} queries of 2-3 words (vocabulary ranks {QUERY_WORD_RANKS[0]}-"
        f"{QUERY_WORD_RANKS[1]} of {VOCABULARY:,} Zipf-distributed words; chunks of "
        f"{CHUNK_WORDS} words, {CHUNKS_PER_FILE} a file), one project, no folder filter; each "
        "query runs keyword_ranking, bare FTS5, VectorIndex.nearest, bare numpy, search() and "
        "the bare hybrid in turn; candidates "
        f"{CANDIDATES}, limit {LIMIT}",
        "search: the query embedder is a stub returning one fixed vector (a topic centre of "
        f"{TOPICS} clusters of random {DIMENSIONS}-d vectors tagged {EMBEDDER}): this times the "
        "index, not the model (the processing benchmark's notes give a query's embedding time)",
        "search: vector matrix load = VectorIndex's first nearest() (the project's whole "
        "matrix); vector cache update = its first nearest() after one more file of "
        f"{CHUNKS_PER_FILE} chunks was written (it reads that file's rows again)",
        "search: "
        + "; ".join(
            f"{r.chunks // 1000}k: built in {r.build_seconds:.1f} s through write_file_index, "
            f"a query matches {r.keyword_hits:,.0f} chunks on average, hybrid returns "
            f"{r.hybrid_hits:.1f} hits, keyword / vector rankings equal to the bare ones for "
            f"{r.same_keyword} / {r.same_vector} of {QUERIES} queries"
            for r in runs
        )
        + f"; database {db_mib:.0f} MiB",
    ]
    return Report(rows, notes)


if __name__ == "__main__":
    sys.exit(run_alone(NAME, run))
