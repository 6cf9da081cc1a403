"""Embedding throughput: the local model's runtimes in this process, and ingest through a server.

1. chunks/s of ``LocalEmbedder.embed`` per configuration on the same passages (cut for the
   model, up to 256 word pieces): PyTorch with batches of 32 (the configuration before
   ONNX Runtime), the default, and the other graphs (ONNX Runtime int8 and fp32, OpenVINO
   int8); each graph against its raw session called directly (tokenize, pad, run, pool) on
   the same batches (``batching.padding_runs`` of the passages sorted by length).
2. ingest: DOCS txt documents of ~WORDS words each through the public API of a real server
   (embedded shape): all created and PUT first, then all finalized; docs/s from the first
   finalize until every file is processed; PyTorch batch 32 against each int8 backend
   (the default first), in turn.
3. ``--quality``: nDCG@10 of semantic and hybrid search on the retrieval benchmark's FAQ
   collection (all 174 queries over 1,905 documents; ``--quick``: its 60-query sample, too
   few to tell 1% apart), fp32 against each int8 backend, each on a server of its own.

Run alone with ``python -m bench.embedding [--quick] [--quality]``.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench import _faq_collection, retrieval_quality
from bench._common import (
    BenchError,
    Report,
    Result,
    create_project,
    free_port,
    install_sigterm_handler,
    libflow_env,
    libflow_server,
    render_table,
    request_json,
)
from bench._text import Prose
from libflow.library.embeddings import int8_runtime
from libflow.library.embeddings.batching import padding_runs
from libflow.library.embeddings.local import LocalBackend, LocalEmbedder
from libflow.library.embeddings.onnx_export import mean_pooled
from libflow.library.processing.chunking import chunk_segments
from libflow.library.processing.extract import Segment
from settings import Settings

NAME = "embedding"
CHUNKS, QUICK_CHUNKS = 192, 48
ROUNDS = 3
DOCS, QUICK_DOCS = 1_000, 100
WORDS = 300
UPLOAD_THREADS = 4
POLL_SECONDS = 0.5
INGEST_TIMEOUT = 1_800.0
RAW_GOAL = 0.95
INGEST_GOAL = 3.0
INGEST_ROUNDS = 2  # each configuration, alternating; the faster of its runs counts
QUALITY_GOAL = 0.01  # nDCG@10 may drop at most 1% (relative) with int8
DEFAULT = Settings()
BEFORE: tuple[LocalBackend, int] = ("torch", 32)  # the configuration before ONNX Runtime
# The default, ``auto``, runs the int8 runtime this CPU runs faster.
AUTO_CHOICE = int8_runtime.for_this_cpu()
DEFAULT_BACKEND: LocalBackend = (
    AUTO_CHOICE[0] if DEFAULT.embedding_backend == "auto" else DEFAULT.embedding_backend
)
_DEFAULT_CONFIG: tuple[LocalBackend, int] = (DEFAULT_BACKEND, DEFAULT.embedding_batch_size)
# The int8 graphs, the default's first: each is ingested and judged against fp32.
INT8: tuple[tuple[LocalBackend, int], ...] = (
    _DEFAULT_CONFIG,
    *(
        (backend, DEFAULT.embedding_batch_size)
        for backend in ("onnx-int8", "openvino-int8")
        if backend != DEFAULT_BACKEND
    ),
)
CONFIGS: tuple[tuple[LocalBackend, int], ...] = (
    BEFORE,
    *INT8,
    ("onnx", DEFAULT.embedding_batch_size),
)


# -- in this process ------------------------------------------------------------------------


def passages(count: int) -> list[str]:
    """``count`` passages of generated prose cut for the model (about 200-256 word pieces)."""
    sizing = LocalEmbedder(backend="torch").passage_sizing
    texts = [
        c.text for c in chunk_segments([Segment(Prose(seed=3).text(count * 220), None)], sizing)
    ]
    if len(texts) < count:
        raise BenchError(f"only {len(texts)} passages of generated text")
    return texts[:count]


def raw_onnx(embedder: LocalEmbedder, texts: Sequence[str]) -> None:
    """The session called directly: tokenize, sort by length, pad, run and pool each batch.

    The batches are those the embedder cuts (runs of about one length, up to its batch size),
    run as many at once as the embedder runs (its threads, one each), so the comparison is
    of everything around the model, not of the batching.
    """
    session = embedder.session
    if session is None:
        raise BenchError("no ONNX Runtime session")
    tokenizer = embedder.tokenizer
    encodings = sorted(tokenizer.encode_batch(list(texts)), key=lambda e: -len(e.ids))
    lengths = [len(e.ids) for e in encodings]

    def run(batch: Sequence[Any]) -> None:
        width = len(batch[0].ids)
        ids = np.zeros((len(batch), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        for row, encoding in enumerate(batch):
            ids[row, : len(encoding.ids)] = encoding.ids
            mask[row, : len(encoding.ids)] = 1
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        feed = {name: array for name, array in feed.items() if name in session.input_names}
        mean_pooled(session.last_hidden_state(feed), mask)

    batches = [encodings[s:e] for s, e in padding_runs(lengths, embedder.batch_size)]
    with ThreadPoolExecutor(embedder.threads) as pool:
        list(pool.map(run, batches))


def raw_torch(embedder: LocalEmbedder, texts: Sequence[str]) -> None:
    """sentence-transformers' own encode, batched as the embedder batches."""
    embedder.model.encode(
        list(texts),
        batch_size=embedder.batch_size,
        normalize_embeddings=True,
        convert_to_numpy=True,
        show_progress_bar=False,
    )


@dataclass(frozen=True)
class Throughput:
    backend: str
    batch_size: int
    ours: float  # median seconds for all the passages
    raw: float


def throughput(texts: list[str], cache_dir: Path) -> list[Throughput]:
    """Each configuration and its raw call, alternating, ROUNDS times: median seconds."""
    embedders = [
        LocalEmbedder(backend=backend, batch_size=size, cache_dir=cache_dir)
        for backend, size in CONFIGS
    ]
    times: dict[int, tuple[list[float], list[float]]] = {i: ([], []) for i in range(len(CONFIGS))}

    async def measure() -> None:
        for embedder in embedders:  # warm-up
            await embedder.embed(texts[:4])
        for round_ in range(ROUNDS):
            for index, embedder in enumerate(embedders):
                ours, raw = times[index]
                sides = ("ours", "raw") if round_ % 2 == 0 else ("raw", "ours")
                for side in sides:
                    started = time.perf_counter()
                    if side == "ours":
                        await embedder.embed(texts)
                        ours.append(time.perf_counter() - started)
                    else:
                        direct = raw_torch if embedder.backend == "torch" else raw_onnx
                        await asyncio.to_thread(direct, embedder, texts)
                        raw.append(time.perf_counter() - started)

    asyncio.run(measure())
    return [
        Throughput(backend, size, statistics.median(times[i][0]), statistics.median(times[i][1]))
        for i, (backend, size) in enumerate(CONFIGS)
    ]


# -- through a server -----------------------------------------------------------------------


@dataclass(frozen=True)
class Ingest:
    backend: str
    batch_size: int
    docs: int
    seconds: float  # first finalize sent -> every file processed
    chunks: int
    load: tuple[str, str]  # the 1-minute load average when the run started and ended


def ingest(work: Path, backend: str, batch_size: int, count: int) -> Ingest:
    """``count`` txt documents created and PUT, then finalized; seconds until all are done."""
    data_dir = work / f"data-{backend}-{batch_size}"
    # The export of the ONNX model is made once, not timed: what a restart finds.
    data_dir.mkdir(parents=True)
    shutil.copytree(work.parent / "models", data_dir / "models")
    env = libflow_env(
        data_dir,
        LIBFLOW_EMBEDDING_BACKEND=backend,
        LIBFLOW_EMBEDDING_BATCH_SIZE=str(batch_size),
    )
    project, key = create_project(env)
    port = free_port()
    prose = Prose(seed=11)
    texts = [prose.text(WORDS) for _ in range(count)]
    with libflow_server(port, data_dir, env):
        api = f"http://127.0.0.1:{port}/api/publicv1/projects/{project}/library"

        def create(index: int) -> str:
            created = request_json(
                "POST",
                f"{api}/files",
                body={"originalname": f"doc-{index}.txt", "fileType": "txt", "dir": "root"},
                api_key=key,
            )
            request_json(
                "PUT",
                created["storageLink"],
                data=texts[index].encode(),
                content_type=created["mimeType"],
            )
            path: str = created["path"]
            return path

        def finalize(path: str) -> None:
            request_json("POST", f"{api}/files:complete", body={"path": path}, api_key=key)

        with ThreadPoolExecutor(UPLOAD_THREADS) as pool:
            paths = list(pool.map(create, range(count)))
            load_before = _load_average()
            started = time.perf_counter()
            list(pool.map(finalize, paths))
        files = _wait_all_processed(api, key, count, started)
        seconds = time.perf_counter() - started
    failed = [f for f in files if (f.get("processing") or {}).get("status") == "failed"]
    if failed:
        raise BenchError(f"{len(failed)} of {count} files failed")
    chunks = _count_chunks(data_dir)
    return Ingest(backend, batch_size, count, seconds, chunks, (load_before, _load_average()))


def _load_average() -> str:
    """The machine's 1-minute load average (the runs share its 2 cores with other work)."""
    return Path("/proc/loadavg").read_text().split()[0]


def _wait_all_processed(api: str, key: str, count: int, started: float) -> list[dict[str, Any]]:
    while time.perf_counter() - started < INGEST_TIMEOUT:
        files: list[dict[str, Any]] = request_json("GET", f"{api}/files?limit=1000", api_key=key)
        if len(files) >= count and not any(f.get("updating") for f in files):
            return files
        time.sleep(POLL_SECONDS)
    raise BenchError(f"files not processed after {INGEST_TIMEOUT:.0f} s")


def _count_chunks(data_dir: Path) -> int:
    import sqlite3

    with sqlite3.connect(data_dir / "libflow.sqlite3") as db:
        return int(db.execute("SELECT count(*) FROM library_chunks").fetchone()[0])


# -- retrieval quality ------------------------------------------------------------------------


def quality(work: Path, backend: str, quick: bool) -> dict[str, float]:
    """nDCG@10 of semantic and hybrid search over the FAQ collection (or its quick sample)."""
    collection = _faq_collection.load()
    if quick:
        collection = retrieval_quality.quick_sample(collection)
    place = work / f"quality-{backend}"
    place.mkdir()
    env = libflow_env(place / "data", LIBFLOW_EMBEDDING_BACKEND=backend)
    library = retrieval_quality.Library()
    library.project, library.key = create_project(env)
    with retrieval_quality.running(place, env, library):
        docs = sorted(collection.documents.items())
        with ThreadPoolExecutor(UPLOAD_THREADS) as pool:
            list(pool.map(lambda item: retrieval_quality.upload(library, *item), docs))
        retrieval_quality.wait_processed(library, len(docs))
        return {
            mode: retrieval_quality.ask_all(library, collection, mode).scores.ndcg
            for mode in ("semantic", "hybrid")
        }


# -- the benchmark --------------------------------------------------------------------------


def run(quick: bool = False, with_quality: bool = False) -> Report:
    """Throughput in this process, then ingest (and quality) through real servers."""
    work = Path(tempfile.mkdtemp(prefix="libflow-bench-embedding-"))
    try:
        texts = passages(QUICK_CHUNKS if quick else CHUNKS)
        measured = throughput(texts, work / "models")
        count = QUICK_DOCS if quick else DOCS
        ingested = (BEFORE, *INT8)
        runs = [
            ingest(work / f"round-{r}", b, s, count)
            for r in range(INGEST_ROUNDS)
            for b, s in ingested
        ]
        ingests = [
            min(runs[i :: len(ingested)], key=lambda run: run.seconds) for i in range(len(ingested))
        ]
        judged: tuple[str, ...] = ("onnx", *(b for b, _ in INT8))
        scores = {b: quality(work, b, quick) for b in judged} if with_quality else {}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return _report(texts, measured, ingests, scores, runs)


def _report(
    texts: list[str],
    measured: list[Throughput],
    ingests: list[Ingest],
    scores: dict[str, dict[str, float]],
    runs: Sequence[Ingest] = (),
) -> Report:
    count = len(texts)
    before = measured[0]
    rows = []
    for m in measured:
        label = f"{m.backend} batch {m.batch_size}"
        if (m.backend, m.batch_size) == _DEFAULT_CONFIG:
            rows.append(
                Result(
                    NAME,
                    f"LocalEmbedder.embed, {label} (default)",
                    count / m.ours,
                    "chunks/s",
                    baseline=count / m.raw,
                    baseline_label="raw session",
                    goal=f">= {RAW_GOAL}x",
                    met=m.raw / m.ours >= RAW_GOAL,
                )
            )
        else:
            raw_label = "model.encode" if m.backend == "torch" else "raw session"
            rows.append(
                Result(
                    NAME,
                    f"LocalEmbedder.embed, {label}",
                    count / m.ours,
                    "chunks/s",
                    baseline=count / m.raw,
                    baseline_label=raw_label,
                )
            )
    for m in measured[1:]:
        rows.append(
            Result(
                NAME,
                f"{m.backend} batch {m.batch_size} vs {before.backend} batch {before.batch_size}",
                count / m.ours,
                "chunks/s",
                baseline=count / before.ours,
                baseline_label="before",
            )
        )
    old, *news = ingests
    for new in news:
        rows.append(
            Result(
                NAME,
                f"ingest {new.docs} txt of ~{WORDS} words, {new.backend} batch {new.batch_size}",
                new.docs / new.seconds,
                "docs/s",
                baseline=old.docs / old.seconds,
                baseline_label=f"{old.backend} batch {old.batch_size}",
                goal=f">= {INGEST_GOAL}x",
                met=old.seconds / new.seconds >= INGEST_GOAL,
            )
        )
    for backend in (b for b in scores if b != "onnx"):
        for mode in ("semantic", "hybrid"):
            fp32, int8 = scores["onnx"][mode], scores[backend][mode]
            rows.append(
                Result(
                    NAME,
                    f"nDCG@10 {mode}, {backend}",
                    int8,
                    "",
                    baseline=fp32,
                    baseline_label="onnx fp32",
                    goal=f">= {1 - QUALITY_GOAL:.2f}x",
                    met=int8 >= (1 - QUALITY_GOAL) * fp32,
                )
            )
    mean_tokens = statistics.mean(len(t.split()) for t in texts)
    notes = [
        f"{NAME}: {count} passages of generated prose cut for all-MiniLM-L6-v2 (mean "
        f"{mean_tokens:.0f} words, at most 256 word pieces), {ROUNDS} rounds alternating "
        "LocalEmbedder.embed and the raw call, median; "
        f"threads: {measured and LocalEmbedder(backend='torch').threads} (the CPU budget); "
        f"the default (auto) runs {AUTO_CHOICE[0]} here, as {AUTO_CHOICE[1]}",
        f"{NAME}: ingest = the first POST files:complete sent -> GET files lists none "
        f"updating (polled every {POLL_SECONDS} s); {UPLOAD_THREADS} client threads; the faster "
        f"of {INGEST_ROUNDS} runs each, alternating; chunks "
        f"indexed: {old.chunks} ({old.backend}) / "
        + " / ".join(f"{new.chunks} ({new.backend})" for new in news)
        + "; every run cuts "
        "passages with the model's tokenizer (the estimate-sized chunker of before, whose "
        "passages the model truncated, is gone)",
        f"{NAME}: ingest runs in order (docs/s, load average at start -> end): "
        + "; ".join(
            f"{r.backend} {r.docs / r.seconds:.2f} ({r.load[0]} -> {r.load[1]})" for r in runs
        ),
    ]
    return Report(rows, notes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_DOCS} documents")
    parser.add_argument("--quality", action="store_true", help="also nDCG@10, fp32 vs each int8")
    args = parser.parse_args(argv)
    install_sigterm_handler()
    try:
        report = run(quick=args.quick, with_quality=args.quality)
    except Exception as err:
        report = Report([Result.failed(NAME, err)])
    print(render_table([report]))
    return 1 if any(r.error for r in report.rows) else 0


if __name__ == "__main__":
    sys.exit(main())
