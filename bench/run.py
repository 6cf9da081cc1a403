"""Run every benchmark in turn and print one table of figures, baselines and goals."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from bench import (
    async_runs,
    code_node,
    embedding,
    get_file,
    llm_node,
    processes,
    processing,
    retrieval_quality,
    run_history,
    runsync,
    search,
    upload,
    vector_scale,
    webhooks,
)
from bench._common import Report, Result, install_sigterm_handler, render_table

BENCHMARKS: tuple[tuple[str, Callable[[], Report]], ...] = (
    (upload.NAME, upload.run),
    (get_file.NAME, get_file.run),
    (processing.NAME, processing.run),
    (embedding.NAME, embedding.run),
    (search.NAME, search.run),
    (vector_scale.NAME, vector_scale.run),
    (retrieval_quality.NAME, retrieval_quality.run),
    (runsync.NAME, runsync.run),
    (processes.NAME, processes.run),
    (webhooks.NAME, webhooks.run),
    (async_runs.NAME, async_runs.run),
    (llm_node.NAME, llm_node.run),
    (code_node.NAME, code_node.run),
    (run_history.NAME, run_history.run),
)


def main() -> int:
    """Run all benchmarks; exit 1 if any of them failed to produce its figures."""
    install_sigterm_handler()
    reports: list[Report] = []
    started = time.monotonic()
    for name, run in BENCHMARKS:
        print(f"running {name} ...", file=sys.stderr, flush=True)
        try:
            reports.append(run())
        except Exception as err:
            reports.append(Report([Result.failed(name, err)]))
    elapsed = time.monotonic() - started
    reports.append(Report(notes=[f"whole run took {elapsed:.0f}s"]))
    print(render_table(reports))
    return 1 if any(r.error for report in reports for r in report.rows) else 0
