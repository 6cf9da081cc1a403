"""The processing pipeline: finalize -> searchable through a real server, extraction, embedding.

1. finalize -> searchable: a real server (embedded shape, local embedder) receives 10-page
   docx files made here with python-docx; each is created, PUT and finalized, then the
   search route is polled for a phrase only that upload holds. Baseline: the same
   extract + chunk + embed done on a worker thread of this process, on the same files.
2. extraction pages/s per type with ``extract_text`` (libflow.library.processing.extract)
   against the raw library calls on the same file.
3. embedding chunks/s through ``LocalEmbedder.embed`` against the model's own ``encode``.

Run alone with ``python -m bench.processing``.
"""

from __future__ import annotations

import asyncio
import secrets
import shutil
import statistics
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import docx
import numpy as np
import pptx
import pypdfium2 as pdfium

from bench._common import (
    LOG_LEVEL,
    ROOT,
    BenchError,
    Report,
    Result,
    create_project,
    free_port,
    libflow_env,
    libflow_server,
    percentile,
    request_json,
    run_alone,
)
from bench._text import Prose
from libflow.library.embeddings.local import LocalEmbedder
from libflow.library.processing.chunking import chunk_segments
from libflow.library.processing.extract import Segment, extract_text
from settings import Settings

NAME = "processing"
UPLOADS = 10
DOCX_PAGES = 10
WORDS_PER_PAGE = 300
PARAGRAPHS_PER_PAGE = 5
LATENCY_GOAL_SECONDS = 1.5
POLL_SECONDS = 0.05
SETTLE_SECONDS = 0.2
SEARCHABLE_TIMEOUT = 60.0
EXTRACT_PAGES = 100
EXTRACT_ROUNDS = 5
SLIDE_WORDS = 90
NOTES_WORDS = 40
EMBED_CHUNKS = 256
WARM_UP_CHUNKS = 8
EMBED_GOAL = 0.8
QUERY_ROUNDS = 20
QUERY_WORDS = 4
BATCH_SIZE = Settings().embedding_batch_size  # what the server uses
HUNDRED_PAGES_PDF = ROOT / "tests" / "fixtures" / "hundred_pages.pdf"
STEPS = ("started", "downloaded", "extracted", "embedded", "indexed", "finished")


# -- documents ----------------------------------------------------------------------------


def make_docx(path: Path, prose: Prose, pages: int, phrase: str | None = None) -> Path:
    """A docx of ``pages`` pages (heading, paragraphs, page break); ``phrase`` on the last."""
    document = docx.Document()
    per_paragraph = WORDS_PER_PAGE // PARAGRAPHS_PER_PAGE
    for number in range(1, pages + 1):
        document.add_heading(f"Section {number}", level=1)
        for _ in range(PARAGRAPHS_PER_PAGE):
            document.add_paragraph(prose.text(per_paragraph))
        if number == pages and phrase is not None:
            document.add_paragraph(f"Marker for this upload: {phrase}.")
        if number < pages:
            document.add_page_break()  # type: ignore[no-untyped-call]
    document.save(str(path))
    return path


def make_pptx(path: Path, prose: Prose, slides: int) -> Path:
    """A pptx of ``slides`` title-and-content slides with speaker notes."""
    presentation = pptx.Presentation()
    layout = presentation.slide_layouts[1]
    for number in range(1, slides + 1):
        slide = presentation.slides.add_slide(layout)
        slide.shapes.title.text = f"Slide {number}"
        slide.placeholders[1].text_frame.text = prose.text(SLIDE_WORDS)
        slide.notes_slide.notes_text_frame.text = prose.text(NOTES_WORDS)
    presentation.save(str(path))
    return path


def make_txt(path: Path, prose: Prose, pages: int, encoding: str) -> Path:
    """``pages`` nominal pages of ``WORDS_PER_PAGE`` words; cp1252 gets accented words."""
    text = "\n\n".join(prose.text(WORDS_PER_PAGE) for _ in range(pages))
    if encoding != "utf-8":
        text = text.replace(" the ", " the café ").replace(" and ", " and naïve ")
    path.write_bytes(text.encode(encoding))
    return path


# -- finalize -> searchable -----------------------------------------------------------------


@dataclass(frozen=True)
class Upload:
    path: Path
    phrase: str


@dataclass(frozen=True)
class Searchable:
    seconds: float  # POST :complete sent -> the search route lists the file
    polls: int
    step_offsets: dict[str, float]  # seconds from POST :complete to each server-side step


def _parse_iso(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _finalize_until_searchable(base: str, project: str, key: str, upload: Upload) -> Searchable:
    api = f"{base}/api/publicv1/projects/{project}/library"
    created = request_json(
        "POST",
        f"{api}/files",
        body={"originalname": upload.path.name, "fileType": "docx", "dir": "root"},
        api_key=key,
    )
    request_json(
        "PUT",
        created["storageLink"],
        data=upload.path.read_bytes(),
        content_type=created["mimeType"],
    )
    search_url = f"{api}/search?" + urllib.parse.urlencode({"q": upload.phrase})
    wall_started = time.time()
    started = time.perf_counter()
    request_json("POST", f"{api}/files:complete", body={"path": created["path"]}, api_key=key)
    polls = 0
    while time.perf_counter() - started < SEARCHABLE_TIMEOUT:
        hits = request_json("GET", search_url, api_key=key)
        polls += 1
        if any(hit["fileId"] == created["documentId"] for hit in hits):
            seconds = time.perf_counter() - started
            break
        time.sleep(POLL_SECONDS)
    else:
        raise BenchError(f"{upload.path.name} not searchable after {SEARCHABLE_TIMEOUT}s")
    detail = request_json("GET", f"{api}/files/{created['documentId']}", api_key=key)
    processing = detail["processing"]
    if processing["status"] != "done":
        raise BenchError(f"{upload.path.name} found by search but {processing}")
    steps = processing["steps"]
    offsets = {s: _parse_iso(steps[s]) - wall_started for s in ("queued", *STEPS) if s in steps}
    return Searchable(seconds, polls, offsets)


def latency(
    work: Path, uploads: list[Upload], embedder: LocalEmbedder
) -> tuple[Searchable, list[Searchable], list[PipelineRun]]:
    """Warm-up upload, then per upload: the in-process pipeline, then the server's.

    Alternating the two keeps a burst of load from elsewhere from landing on one side only.
    """
    data_dir = work / "data"
    env = libflow_env(data_dir)
    project, key = create_project(env)
    port = free_port()
    # The server runs extraction and inference on worker threads; so does the baseline
    # (under load from elsewhere, torch in the main thread ran up to 1.5x slower here).
    with (
        libflow_server(port, data_dir, env),
        ThreadPoolExecutor(1, thread_name_prefix="bench-pipeline") as worker,
    ):
        base = f"http://127.0.0.1:{port}"
        worker.submit(in_process_pipeline, embedder, uploads[0].path).result()
        warm = _finalize_until_searchable(base, project, key, uploads[0])
        measured: list[Searchable] = []
        pipeline: list[PipelineRun] = []
        for upload in uploads[1:]:
            pipeline.append(worker.submit(in_process_pipeline, embedder, upload.path).result())
            time.sleep(SETTLE_SECONDS)  # let this process's torch threads stop spinning
            measured.append(_finalize_until_searchable(base, project, key, upload))
    return warm, measured, pipeline


@dataclass(frozen=True)
class PipelineRun:
    extract: float
    chunk: float
    embed: float
    chunks: int

    @property
    def total(self) -> float:
        return self.extract + self.chunk + self.embed


def in_process_pipeline(embedder: LocalEmbedder, path: Path) -> PipelineRun:
    """extract_text + chunk_segments + the model's encode, timed step by step, in this process."""
    t0 = time.perf_counter()
    extraction = extract_text(path, "docx")
    t1 = time.perf_counter()
    chunks = chunk_segments(extraction.segments, embedder.passage_sizing)
    t2 = time.perf_counter()
    _encode(embedder, [c.text for c in chunks])
    t3 = time.perf_counter()
    return PipelineRun(t1 - t0, t2 - t1, t3 - t2, len(chunks))


def _encode(embedder: LocalEmbedder, texts: list[str]) -> np.ndarray[Any, Any]:
    """The model called directly, as the embedder calls it (same batch size, normalized)."""
    return np.asarray(
        embedder.model.encode(
            texts,
            batch_size=BATCH_SIZE,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
    )


# -- extraction -----------------------------------------------------------------------------


def _raw_pdf(path: Path) -> None:
    document = pdfium.PdfDocument(path)
    try:
        for index in range(len(document)):
            page = document[index]
            textpage = page.get_textpage()
            textpage.get_text_range()
            textpage.close()
            page.close()
    finally:
        document.close()


def _raw_docx(path: Path) -> str:
    document = docx.Document(str(path))
    return "\n".join(paragraph.text for paragraph in document.paragraphs)


def _raw_pptx(path: Path) -> None:
    presentation = pptx.Presentation(str(path))
    for slide in presentation.slides:
        texts = [shape.text_frame.text for shape in slide.shapes if shape.has_text_frame]
        if slide.has_notes_slide:
            texts.append(slide.notes_slide.notes_text_frame.text)


@dataclass(frozen=True)
class ExtractCase:
    label: str
    file_type: str
    path: Path
    pages: int
    raw: Callable[[Path], object]
    raw_label: str
    unit: str = "pages"


@dataclass(frozen=True)
class ExtractRun:
    case: ExtractCase
    ours: float  # median seconds per file
    raw: float


def extraction_cases(work: Path, prose: Prose) -> list[ExtractCase]:
    """One 100-page document per type (pdf: the committed fixture)."""
    return [
        ExtractCase("pdf", "pdf", HUNDRED_PAGES_PDF, 100, _raw_pdf, "raw pypdfium2 get_text_range"),
        ExtractCase(
            "docx",
            "docx",
            make_docx(work / "extract.docx", prose, EXTRACT_PAGES),
            EXTRACT_PAGES,
            _raw_docx,
            "raw python-docx paragraphs",
        ),
        ExtractCase(
            "pptx",
            "pptx",
            make_pptx(work / "extract.pptx", prose, EXTRACT_PAGES),
            EXTRACT_PAGES,
            _raw_pptx,
            "raw python-pptx shapes+notes",
            "slides",
        ),
        ExtractCase(
            "txt UTF-8",
            "txt",
            make_txt(work / "extract-utf8.txt", prose, EXTRACT_PAGES, "utf-8"),
            EXTRACT_PAGES,
            lambda p: p.read_bytes().decode("utf-8"),
            "read+decode utf-8",
        ),
        ExtractCase(
            "txt cp1252",
            "txt",
            make_txt(work / "extract-cp1252.txt", prose, EXTRACT_PAGES, "cp1252"),
            EXTRACT_PAGES,
            lambda p: p.read_bytes().decode("cp1252"),
            "read+decode cp1252",
        ),
    ]


def measure_extraction(case: ExtractCase) -> ExtractRun:
    """One warm-up each, then EXTRACT_ROUNDS alternating runs; median seconds per file."""
    ours: list[float] = []
    raw: list[float] = []
    extraction = extract_text(case.path, case.file_type)
    if not any(s.text.strip() for s in extraction.segments):
        raise BenchError(f"no text extracted from {case.path.name}")
    case.raw(case.path)
    for _ in range(EXTRACT_ROUNDS):
        started = time.perf_counter()
        extract_text(case.path, case.file_type)
        ours.append(time.perf_counter() - started)
        started = time.perf_counter()
        case.raw(case.path)
        raw.append(time.perf_counter() - started)
    return ExtractRun(case, statistics.median(ours), statistics.median(raw))


# -- embedding ------------------------------------------------------------------------------


@dataclass(frozen=True)
class EmbedRun:
    ours: float  # seconds for all chunks
    direct: float
    query_ms: float  # median LocalEmbedder.embed of one short search query
    chunks: int
    mean_chars: float
    torch_threads: int


def measure_embedding(embedder: LocalEmbedder, prose: Prose) -> EmbedRun:
    """LocalEmbedder.embed vs model.encode on the same EMBED_CHUNKS chunks, alternating."""
    import torch

    segment = Segment(prose.text(EMBED_CHUNKS * 400), None)
    texts = [c.text for c in chunk_segments([segment], embedder.passage_sizing)][:EMBED_CHUNKS]
    if len(texts) < EMBED_CHUNKS:
        raise BenchError(f"only {len(texts)} chunks of generated text")

    async def measure() -> tuple[list[float], list[float], list[float]]:
        ours: list[float] = []
        direct: list[float] = []
        queries: list[float] = []
        # warm-up, and the reference
        expected = await asyncio.to_thread(_encode, embedder, texts[:WARM_UP_CHUNKS])
        got = await embedder.embed(texts[:WARM_UP_CHUNKS])
        if not np.allclose(expected, got, atol=1e-4):
            raise BenchError("LocalEmbedder.embed and model.encode disagree")
        # Batch by batch, alternating which side goes first, so that load from elsewhere
        # lands on both sides alike.
        for index in range(0, len(texts), BATCH_SIZE):
            batch = texts[index : index + BATCH_SIZE]
            first_direct = (index // BATCH_SIZE) % 2 == 0
            for side in ("direct", "ours") if first_direct else ("ours", "direct"):
                started = time.perf_counter()
                if side == "direct":
                    await asyncio.to_thread(_encode, embedder, batch)
                else:
                    await embedder.embed(batch)
                (direct if side == "direct" else ours).append(time.perf_counter() - started)
        for _ in range(QUERY_ROUNDS):
            started = time.perf_counter()
            await embedder.embed([prose.text(QUERY_WORDS)])
            queries.append(time.perf_counter() - started)
        return ours, direct, queries

    ours, direct, queries = asyncio.run(measure())
    return EmbedRun(
        sum(ours),
        sum(direct),
        statistics.median(queries) * 1000,
        len(texts),
        statistics.mean(len(t) for t in texts),
        torch.get_num_threads(),
    )


# -- the benchmark --------------------------------------------------------------------------


def run() -> Report:
    """Latency against a real server, then extraction and embedding in this process."""
    work = Path(tempfile.mkdtemp(prefix="libflow-bench-processing-"))
    try:
        prose = Prose(seed=3)
        uploads = []
        for index in range(UPLOADS + 1):
            tag = f"{index:02d}{secrets.token_hex(3)}"
            phrase = f"vexil{tag} orrin{tag} plumet{tag}"
            path = make_docx(work / f"report-{index}.docx", prose, DOCX_PAGES, phrase)
            uploads.append(Upload(path, phrase))
        embedder = LocalEmbedder(batch_size=BATCH_SIZE)
        warm, measured, pipeline = latency(work, uploads, embedder)
        extraction = [measure_extraction(c) for c in extraction_cases(work, prose)]
        embedding = measure_embedding(embedder, prose)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return _report(warm, measured, pipeline, extraction, embedding)


def _report(
    warm: Searchable,
    measured: list[Searchable],
    pipeline: list[PipelineRun],
    extraction: list[ExtractRun],
    embedding: EmbedRun,
) -> Report:
    latencies = [m.seconds for m in measured]
    totals = [p.total for p in pipeline]
    p50 = percentile(latencies, 50)
    rows = [
        Result(
            NAME,
            f"finalize -> searchable p50 ({DOCX_PAGES}-page docx)",
            p50,
            "s",
            baseline=percentile(totals, 50),
            baseline_label="in-process",
            goal=f"< {LATENCY_GOAL_SECONDS} s",
            met=p50 < LATENCY_GOAL_SECONDS,
        ),
        Result(
            NAME,
            f"finalize -> searchable p90 ({DOCX_PAGES}-page docx)",
            percentile(latencies, 90),
            "s",
            baseline=percentile(totals, 90),
            baseline_label="in-process",
        ),
    ]
    for run in extraction:
        rows.append(
            Result(
                NAME,
                f"extract {run.case.label} ({run.case.pages} {run.case.unit})",
                run.case.pages / run.ours,
                "pages/s",
                baseline=run.case.pages / run.raw,
                baseline_label=run.case.raw_label,
            )
        )
    embed_ratio = embedding.direct / embedding.ours
    rows.append(
        Result(
            NAME,
            f"LocalEmbedder.embed ({embedding.chunks} chunks)",
            embedding.chunks / embedding.ours,
            "chunks/s",
            baseline=embedding.chunks / embedding.direct,
            baseline_label="model.encode",
            goal=f">= {EMBED_GOAL}x",
            met=embed_ratio >= EMBED_GOAL,
        )
    )
    chunks = {p.chunks for p in pipeline}
    step_medians = {
        step: statistics.median(m.step_offsets[step] for m in measured)
        for step in ("queued", *STEPS)
        if all(step in m.step_offsets for m in measured)
    }
    notes = [
        f"processing: {UPLOADS} docx uploads of {DOCX_PAGES} pages (~{WORDS_PER_PAGE} words a "
        f"page, page breaks, a unique phrase each) made with python-docx, not LibreOffice; "
        f"{'/'.join(str(c) for c in sorted(chunks))} chunks each; one warm-up upload first "
        f"({warm.seconds:.2f} s: the server loads the model at start-up, so this only warms "
        "torch and the caches)",
        f"processing: finalize -> searchable = POST files:complete sent -> GET library/search?q="
        f"<phrase> lists the file, polled every {POLL_SECONDS * 1000:.0f} ms (each poll also "
        f"embeds the query on the server); real server, embedded shape, SQLite, local embedder, "
        f"LIBFLOW_LOG_LEVEL={LOG_LEVEL}, not pinned; per upload (s): "
        + ", ".join(f"{m.seconds:.2f}" for m in measured),
        "processing: median server-side step times after POST files:complete (ms): "
        + ", ".join(f"{step} +{seconds * 1000:.0f}" for step, seconds in step_medians.items())
        + f"; searchable +{statistics.median(latencies) * 1000:.0f}; "
        f"{statistics.median(m.polls for m in measured):.0f} polls",
        "processing: in-process baseline = extract_text + chunk_segments + model.encode on a "
        "worker thread of the benchmark process, on the same file just before each upload, "
        "medians (ms): extract "
        f"{statistics.median(p.extract for p in pipeline) * 1000:.0f}, chunk "
        f"{statistics.median(p.chunk for p in pipeline) * 1000:.0f}, embed "
        f"{statistics.median(p.embed for p in pipeline) * 1000:.0f}",
        f"processing: extraction = median of {EXTRACT_ROUNDS} alternating runs after a warm-up; "
        f"pdf is tests/fixtures/hundred_pages.pdf (reportlab), docx (page breaks, "
        f"~{WORDS_PER_PAGE} words a page) and pptx (title + {SLIDE_WORDS} words + "
        f"{NOTES_WORDS} words of notes a slide) made with python-docx / python-pptx, txt pages "
        f"are nominal {WORDS_PER_PAGE}-word pages; ratio = ours / raw library call",
        f"processing: embedding = the same {embedding.chunks} chunks through both, one "
        f"{BATCH_SIZE}-chunk embed() / encode() call at a time (the server's batch size), "
        "alternating which goes first, encode() also called through asyncio.to_thread; "
        "chunk_segments of generated prose, mean "
        f"{embedding.mean_chars:.0f} chars (the model reads the first 256 word pieces); "
        f"normalized both ways; torch threads {embedding.torch_threads}; "
        f"a {QUERY_WORDS}-word search query embeds in {embedding.query_ms:.1f} ms (median of "
        f"{QUERY_ROUNDS})",
    ]
    return Report(rows, notes)


if __name__ == "__main__":
    sys.exit(run_alone(NAME, run))
