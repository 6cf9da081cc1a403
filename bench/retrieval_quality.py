"""Retrieval quality: nDCG@10 and Recall@10 of hybrid search against BM25 alone and dense alone.

A real server (embedded shape: SQLite, local storage, in-process jobs, the local MiniLM
embedder) gets every document of a test collection through the public three-step upload,
one .txt file a document named after its id: ``python-faq`` (``bench._faq_collection``, the
default: the Python FAQ's questions over Python documentation) or ``manpages``
(``bench._manpage_collection``: man page descriptions over the man pages installed, built
when the benchmark runs). When all are processed, every query goes through
``POST .../library/search`` once per mode (hybrid, keyword, semantic), and the hits' files,
in the order of their best passage, are the ranking scored against the judgements.

The same server, restarted on the same data with reciprocal rank fusion (k=60) in place of
libflow's fusion (``bench._retrieval_server``, a hook of this benchmark, not of libflow),
gives the RRF row; ``--grid`` also runs hybrid under each fusion setting of FUSION_GRID.
Each restarted server must first rank some queries as the first one did in semantic mode.

Run alone with ``python -m bench.retrieval_quality [--quick] [--grid] [--collection NAME]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import _faq_collection, _manpage_collection
from bench._common import (
    PYTHON,
    BenchError,
    Report,
    Result,
    create_project,
    free_port,
    install_sigterm_handler,
    libflow_env,
    render_table,
    request_json,
    server,
)
from bench._faq_collection import Collection
from bench._retrieval_server import FUSION_ENV

NAME = "retrieval_quality"
COLLECTIONS = ("python-faq", _manpage_collection.NAME)  # the first, shipped, is the default
CUTOFF = 10
# Passages asked for per query: enough distinct files for the top CUTOFF documents when a
# document has several passages. At most the service's candidate count (50), so asking for
# them does not change what the rankings fuse.
HITS = 50
MODES = ("hybrid", "keyword", "semantic")
RRF = "rrf:60"
# libflow's fusion is a weighted mean of the keyword score (BM25 over the query's best) and
# the cosine put between MIN_SIMILARITY and the query's best; the grid varies the keyword
# weight, the semantic one is 1 - it.
FUSION_GRID = (0.2, 0.3, 0.4, 0.43, 0.5, 0.6)
# Each restarted server first re-asks this many queries in semantic mode and must rank as
# the first server did: a server whose query vectors differ from the stored ones (another
# model, another runtime) would make every fused figure after it meaningless.
RESTART_CHECK_QUERIES = 20
QUICK_QUERIES = 60
QUICK_DISTRACTORS = 400
UPLOAD_THREADS = 8
PROCESSING_TIMEOUT = 1800.0
# The server loads the model (and the first time exports it to ONNX) before it answers:
# on a busy 2-core machine that took more than _common's 30 s.
SERVER_START_SECONDS = 300.0
POLL_SECONDS = 2.0


# -- the measures ---------------------------------------------------------------------------


def ndcg(ranking: Sequence[str], judged: Mapping[str, int], cutoff: int = CUTOFF) -> float:
    """nDCG@cutoff with graded gains (2^rel - 1) and the log2(rank + 1) discount."""
    dcg = sum(
        (2 ** judged.get(doc, 0) - 1) / math.log2(rank + 1)
        for rank, doc in enumerate(ranking[:cutoff], start=1)
    )
    ideal = sorted((rel for rel in judged.values() if rel > 0), reverse=True)[:cutoff]
    idcg = sum((2**rel - 1) / math.log2(rank + 1) for rank, rel in enumerate(ideal, start=1))
    return dcg / idcg if idcg > 0 else 0.0


def recall(ranking: Sequence[str], judged: Mapping[str, int], cutoff: int = CUTOFF) -> float:
    """The share of the relevant documents found in the top ``cutoff``."""
    relevant = {doc for doc, rel in judged.items() if rel > 0}
    if not relevant:
        return 0.0
    return len(relevant & set(ranking[:cutoff])) / len(relevant)


@dataclass(frozen=True)
class Scores:
    ndcg: float
    recall: float


def score(rankings: Mapping[str, Sequence[str]], qrels: Mapping[str, Mapping[str, int]]) -> Scores:
    """Mean nDCG@10 and Recall@10 over the judged queries (an unanswered query scores 0)."""
    queries = sorted(qrels)
    return Scores(
        sum(ndcg(rankings.get(q, []), qrels[q]) for q in queries) / len(queries),
        sum(recall(rankings.get(q, []), qrels[q]) for q in queries) / len(queries),
    )


# -- the collection -------------------------------------------------------------------------


def quick_sample(collection: Collection) -> Collection:
    """The first QUICK_QUERIES queries, every document they judge and QUICK_DISTRACTORS more.

    Document ids are in a hashed order (see the collection's build), so the first ones
    are a fixed sample, the same on every run.
    """
    queries = dict(sorted(collection.queries.items())[:QUICK_QUERIES])
    qrels = {q: collection.qrels[q] for q in queries}
    judged = {doc for q in qrels for doc in collection.qrels[q]}
    all_judged = {doc for judged_docs in collection.qrels.values() for doc in judged_docs}
    others = [doc for doc in sorted(collection.documents) if doc not in all_judged]
    keep = judged | set(others[:QUICK_DISTRACTORS])
    documents = {doc: text for doc, text in collection.documents.items() if doc in keep}
    return Collection(f"{collection.name} (quick)", documents, queries, qrels)


# -- the server -----------------------------------------------------------------------------


@dataclass
class Library:
    """One project on a server that holds the collection."""

    base: str = ""
    project: str = ""
    key: str = ""

    @property
    def api(self) -> str:
        return f"{self.base}/api/publicv1/projects/{self.project}/library"


@contextlib.contextmanager
def running(
    work: Path, env: Mapping[str, str], library: Library, fusion: str = ""
) -> Iterator[None]:
    """The benchmark's server on the data dir in ``work`` with ``fusion`` (see the hook)."""
    port = free_port()
    data_dir = work / "data"
    extra = dict(env)
    if fusion:
        extra[FUSION_ENV] = fusion
    command = [PYTHON, "-m", "bench._retrieval_server", "--port", str(port)]
    command += ["--data-dir", str(data_dir)]
    log = work / f"server-{port}.log"
    with server(command, port=port, env=extra, log_path=log, start_timeout=SERVER_START_SECONDS):
        library.base = f"http://127.0.0.1:{port}"
        yield


def upload(library: Library, doc_id: str, text: str) -> str:
    """Create, PUT and finalize ``<doc_id>.txt``; its file id."""
    created = request_json(
        "POST",
        f"{library.api}/files",
        body={"originalname": f"{doc_id}.txt", "fileType": "txt", "dir": "root"},
        api_key=library.key,
    )
    request_json(
        "PUT", created["storageLink"], data=text.encode(), content_type=created["mimeType"]
    )
    request_json(
        "POST", f"{library.api}/files:complete", body={"path": created["path"]}, api_key=library.key
    )
    file_id: str = created["documentId"]
    return file_id


def _list_page(url: str, key: str) -> tuple[list[dict[str, Any]], str | None]:
    request = urllib.request.Request(url, headers={"Authorization": key})
    with urllib.request.urlopen(request, timeout=60) as response:
        page: list[dict[str, Any]] = json.loads(response.read())
        link = response.headers.get("Link")
    next_url = None
    if link and 'rel="next"' in link:
        next_url = link.split(";", 1)[0].strip().strip("<>")
    return page, next_url


def wait_processed(library: Library, count: int) -> None:
    """Until every one of the ``count`` files has finished processing (``updating`` null)."""
    deadline = time.monotonic() + PROCESSING_TIMEOUT
    while time.monotonic() < deadline:
        files: list[dict[str, Any]] = []
        url: str | None = f"{library.api}/files?limit=1000"
        while url is not None:
            page, url = _list_page(url, library.key)
            files += page
        pending = sum(1 for f in files if f.get("updating"))
        if len(files) >= count and pending == 0:
            return
        print(f"  {count - pending}/{count} processed", file=sys.stderr, flush=True)
        time.sleep(POLL_SECONDS)
    raise BenchError(f"files not processed after {PROCESSING_TIMEOUT:.0f}s")


def failed_files(library: Library, file_ids: Sequence[str]) -> list[str]:
    """The files whose processing failed (each one's state from get-one)."""
    failed = []
    for file_id in file_ids:
        detail = request_json("GET", f"{library.api}/files/{file_id}", api_key=library.key)
        if detail["processing"]["status"] != "done":
            failed.append(f"{detail['name']}: {str(detail['processing']['error'])[:300]}")
    return failed


def ask(library: Library, query: str, mode: str) -> list[str]:
    """The documents the search answers, in the order of each one's best passage."""
    hits = request_json(
        "POST",
        f"{library.api}/search",
        body={"query": query, "limit": HITS, "mode": mode},
        api_key=library.key,
        timeout=60,
    )
    ranking: list[str] = []
    for hit in hits:
        doc_id = hit["name"].removesuffix(".txt")
        if doc_id not in ranking:
            ranking.append(doc_id)
    return ranking


@dataclass
class Measured:
    """What one fusion setting or mode scored, and how long its queries took."""

    label: str
    scores: Scores
    seconds: float
    rankings: dict[str, list[str]] = field(default_factory=dict)


def ask_all(
    library: Library, collection: Collection, mode: str, label: str | None = None
) -> Measured:
    started = time.perf_counter()
    rankings = {q: ask(library, text, mode) for q, text in sorted(collection.queries.items())}
    seconds = time.perf_counter() - started
    return Measured(label or mode, score(rankings, collection.qrels), seconds, rankings)


def check_restart(library: Library, collection: Collection, semantic: Measured) -> None:
    """Raise unless this server ranks the first queries as the first server did (semantic)."""
    for q, text in sorted(collection.queries.items())[:RESTART_CHECK_QUERIES]:
        again = ask(library, text, "semantic")
        if again[:CUTOFF] != semantic.rankings[q][:CUTOFF]:
            raise BenchError(
                f"the restarted server ranks {q} ({text!r}) differently in semantic mode: "
                f"{again[:CUTOFF]} != {semantic.rankings[q][:CUTOFF]}"
            )


@dataclass
class Run:
    collection: Collection
    modes: dict[str, Measured] = field(default_factory=dict)
    rrf: Measured | None = None
    grid: list[tuple[float, Measured]] = field(default_factory=list)
    upload_seconds: float = 0.0
    processing_seconds: float = 0.0
    chunks: int = 0


def count_chunks(work: Path) -> int:
    """Passages in the index (read from the server's SQLite file after it stopped)."""
    database = next((work / "data").glob("*.sqlite3"), None)
    if database is None:
        return 0
    with contextlib.closing(sqlite3.connect(database)) as db:
        row = db.execute("SELECT count(*) FROM library_chunks").fetchone()
    return int(row[0])


def measure(collection: Collection, grid: Sequence[float]) -> Run:
    """Upload, wait, ask in every mode; then RRF and each grid setting on restarts."""
    work = Path(tempfile.mkdtemp(prefix="libflow-bench-retrieval-"))
    try:
        env = libflow_env(work / "data")
        library = Library()
        library.project, library.key = create_project(env)
        run = Run(collection)
        with running(work, env, library):
            _check_search_route(library)
            started = time.perf_counter()
            docs = sorted(collection.documents.items())
            with ThreadPoolExecutor(UPLOAD_THREADS) as pool:
                file_ids = list(pool.map(lambda item: upload(library, *item), docs))
            run.upload_seconds = time.perf_counter() - started
            wait_processed(library, len(docs))
            run.processing_seconds = time.perf_counter() - started
            failed = failed_files(library, file_ids)
            if failed:
                raise BenchError(
                    f"{len(failed)} of {len(docs)} files failed processing, first: {failed[0]}"
                )
            for mode in MODES:
                run.modes[mode] = ask_all(library, collection, mode)
        run.chunks = count_chunks(work)
        with running(work, env, library, RRF):
            check_restart(library, collection, run.modes["semantic"])
            run.rrf = ask_all(library, collection, "hybrid", "hybrid, RRF k=60")
        for weight in grid:
            fusion = json.dumps({"keyword_weight": weight, "semantic_weight": round(1 - weight, 6)})
            with running(work, env, library, fusion):
                check_restart(library, collection, run.modes["semantic"])
                run.grid.append((weight, ask_all(library, collection, "hybrid")))
        return run
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _check_search_route(library: Library) -> None:
    try:
        request_json(
            "POST",
            f"{library.api}/search",
            body={"query": "probe", "limit": 1, "mode": "keyword"},
            api_key=library.key,
        )
    except BenchError as err:
        raise BenchError(f"POST library/search with a mode is needed: {err}") from err


# -- the report -----------------------------------------------------------------------------


def _about(collection: Collection) -> str:
    """What the collection is, for the report's notes."""
    if collection.name.startswith(_manpage_collection.NAME):
        return (
            "the one-line descriptions of man pages installed on this machine over those "
            "pages rendered by groff without their NAME section (built when the benchmark "
            "runs, nothing shipped; bench/_manpage_collection.py)"
        )
    return (
        "the Python FAQ's questions over Python 3.11's documentation (Debian python3.11-doc, "
        "PSF license; bench/data/README.md): no standard test collection is reachable from "
        "this machine's package registries"
    )


def report(run: Run, grid_asked: bool) -> Report:
    c = run.collection
    hybrid = run.modes["hybrid"].scores
    keyword = run.modes["keyword"].scores
    semantic = run.modes["semantic"].scores
    rows: list[Result] = []
    for measure_name, attr in (("nDCG@10", "ndcg"), ("Recall@10", "recall")):
        best_alone = max(getattr(keyword, attr), getattr(semantic, attr))
        value = getattr(hybrid, attr)
        rows.append(
            Result(
                NAME,
                f"{c.name}: {measure_name} hybrid (libflow's fusion)",
                value,
                "",
                baseline=best_alone,
                baseline_label="best alone",
                goal="> both alone",
                met=value > best_alone,
            )
        )
        rows.append(
            Result(
                NAME, f"{c.name}: {measure_name} keyword (BM25) alone", getattr(keyword, attr), ""
            )
        )
        rows.append(
            Result(
                NAME,
                f"{c.name}: {measure_name} semantic (MiniLM) alone",
                getattr(semantic, attr),
                "",
            )
        )
        if run.rrf is not None:
            rows.append(
                Result(
                    NAME,
                    f"{c.name}: {measure_name} hybrid, RRF k=60",
                    getattr(run.rrf.scores, attr),
                    "",
                    baseline=value,
                    baseline_label="libflow's fusion",
                )
            )
    judged = sum(len(j) for j in c.qrels.values())
    notes = [
        f"{NAME}: collection {c.name}: {len(c.documents):,} documents ({run.chunks:,} passages "
        f"after chunking), {len(c.queries)} queries, {judged} judgements (one relevant document "
        f"a query); {_about(c)}",
        f"{NAME}: real server (embedded shape, SQLite, local embedder), every document uploaded "
        f"as a .txt through create + PUT + files:complete ({UPLOAD_THREADS} at a time, "
        f"{run.upload_seconds:.0f} s; all processed after {run.processing_seconds:.0f} s), "
        f"every query through POST library/search (limit {HITS}, mode hybrid / keyword / "
        "semantic); a document ranks where its best passage does; nDCG@10 (gain 2^rel - 1, "
        "log2 discount) and Recall@10 averaged over the queries",
        f"{NAME}: "
        + ", ".join(
            f"{m.label} nDCG@10 {m.scores.ndcg:.3f} / R@10 {m.scores.recall:.3f} "
            f"({1000 * m.seconds / len(c.queries):.0f} ms a query, first ones cold)"
            for m in [*run.modes.values(), *([run.rrf] if run.rrf else [])]
        ),
        f"{NAME}: RRF k=60 = the same server restarted on the same data with search's "
        "fuse_rankings replaced by reciprocal rank fusion over the same two candidate lists "
        "(bench/_retrieval_server.py)",
    ]
    if grid_asked:
        notes.append(
            f"{NAME}: fusion grid (hybrid, keyword_weight / semantic_weight = 1 - it): "
            + ", ".join(
                f"{w:g}: nDCG@10 {m.scores.ndcg:.3f} R@10 {m.scores.recall:.3f}"
                for w, m in run.grid
            )
        )
        if run.grid:
            best_weight, best = max(
                run.grid, key=lambda item: (item[1].scores.ndcg, item[1].scores.recall)
            )
            notes.append(
                f"{NAME}: best grid setting keyword_weight {best_weight:g} "
                f"(nDCG@10 {best.scores.ndcg:.3f}, R@10 {best.scores.recall:.3f})"
            )
    return Report(rows, notes)


def load(name: str, quick: bool) -> Collection:
    """The collection called ``name``; with ``quick``, QUICK_QUERIES queries of it."""
    if name == _manpage_collection.NAME:
        if not quick:
            return _manpage_collection.build()
        # Built small rather than cut down: each page taken costs a groff run.
        return _manpage_collection.build(
            queries=QUICK_QUERIES,
            total=QUICK_QUERIES + QUICK_DISTRACTORS,
            name=f"{_manpage_collection.NAME} (quick)",
        )
    collection = _faq_collection.load()
    return quick_sample(collection) if quick else collection


def run(quick: bool = False, grid: bool = False, collection: str = COLLECTIONS[0]) -> Report:
    """The benchmark as ``python -m bench`` runs it: every mode and RRF, no grid, the FAQ."""
    started = time.perf_counter()
    chosen = load(collection, quick)
    built = time.perf_counter() - started
    settings = FUSION_GRID if grid else ()
    result = report(measure(chosen, settings), grid)
    if collection == _manpage_collection.NAME:
        result.notes.append(f"{NAME}: the man page collection was built in {built:.0f} s")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"{QUICK_QUERIES} queries, their documents and {QUICK_DISTRACTORS} others",
    )
    parser.add_argument(
        "--grid", action="store_true", help="also run hybrid under each fusion setting"
    )
    parser.add_argument(
        "--collection",
        choices=COLLECTIONS,
        default=COLLECTIONS[0],
        help="the test collection (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    install_sigterm_handler()
    try:
        result = run(quick=args.quick, grid=args.grid, collection=args.collection)
    except (BenchError, OSError, subprocess.SubprocessError) as err:
        result = Report([Result.failed(NAME, err)])
    print(render_table([result]))
    return 1 if any(r.error for r in result.rows) else 0


if __name__ == "__main__":
    sys.exit(main())
