"""Run history at scale: a filtered page of a project with a million runs, on both databases.

The runs are written straight into the table (as a year of traffic would leave them: 1% failed,
four triggers, three versions, two workflows), then each page the API serves is timed through
the service it calls (``run_history.list_runs``), against a primary-key read of one run in
the same database and run: the ratio says what paging and filtering add to the cheapest read.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import asyncpg
from tortoise.connection import get_connection

from bench._common import Report, Result
from libflow.db.connection import open_database
from libflow.models import Project, Workflow, WorkflowRun
from libflow.paging import encode_cursor
from libflow.workflows.run_history import RunFilter, get_run, list_runs

NAME = "run history"
RUNS = 1_000_000
CALLS = 40
POSTGRES_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
DATABASE = "libflow_bench_history"

_POSTGRES_INSERT = """
INSERT INTO workflow_runs (id, workflow_id, project_id, version, event, trigger, status,
    status_code, inputs, outputs, node_timings, started_at, finished_at)
SELECT md5(g::text), CASE WHEN g % 2 = 0 THEN $1 ELSE $2 END, $3, 1 + g % 3, 'run',
    (ARRAY['api', 'api_async', 'webhook', 'schedule'])[1 + g % 4],
    CASE WHEN g % 100 = 0 THEN 'failed' ELSE 'succeeded' END, 200, '{}', '{}', '{}',
    now() - make_interval(secs => g * 30), now() - make_interval(secs => g * 30)
FROM generate_series(1, $4) AS g
"""
_SQLITE_INSERT = """
WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < ?)
INSERT INTO workflow_runs (id, workflow_id, project_id, version, event, trigger, status,
    status_code, inputs, outputs, node_timings, started_at, finished_at)
SELECT lower(hex(randomblob(16))), CASE WHEN n % 2 = 0 THEN ? ELSE ? END, ?, 1 + n % 3, 'run',
    CASE n % 4 WHEN 0 THEN 'api' WHEN 1 THEN 'api_async' WHEN 2 THEN 'webhook' ELSE 'schedule' END,
    CASE WHEN n % 100 = 0 THEN 'failed' ELSE 'succeeded' END, 200, '{}', '{}', '{}',
    strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || (n * 30) || ' seconds') || '000+00:00',
    strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || (n * 30) || ' seconds') || '000+00:00'
FROM g
"""


async def _timed(call: Callable[[], Awaitable[Any]]) -> tuple[float, float]:
    """Median and worst of CALLS calls, in ms (after one warm-up call)."""
    await call()
    times = []
    for _ in range(CALLS):
        started = time.perf_counter()
        await call()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), max(times)


async def _measure(
    database_url: str, insert: Callable[[str, str, str], Awaitable[None]]
) -> dict[str, tuple[float, float]]:
    async with open_database(database_url):
        project = await Project.create(name="history")
        first = await Workflow.create(project=project, name="first")
        second = await Workflow.create(project=project, name="second")
        started = time.monotonic()
        await insert(first.id, second.id, project.id)
        print(f"  {RUNS:,} runs written in {time.monotonic() - started:.0f}s", flush=True)
        [newest], _ = await list_runs(project.id, RunFilter(), limit=1, cursor=None)
        # A run every 30 s: a million runs span about a year; this window is a week of it.
        window = RunFilter(
            started_after=newest.started_at - timedelta(days=107),
            started_before=newest.started_at - timedelta(days=100),
        )
        # A cursor half way down: the page after the 500,000th run.
        page_at = await _run_at(project.id, RUNS // 2)
        cursor = encode_cursor(page_at.started_at, page_at.id)
        cases: dict[str, Callable[[], Awaitable[Any]]] = {
            "one run by id (baseline)": lambda: get_run(project.id, newest.id),
            "first page, no filter": lambda: list_runs(
                project.id, RunFilter(), limit=100, cursor=None
            ),
            "status=failed (1%)": lambda: list_runs(
                project.id, RunFilter(status="failed"), limit=100, cursor=None
            ),
            "workflow + status=failed": lambda: list_runs(
                project.id, RunFilter(workflow_id=first.id, status="failed"), limit=100, cursor=None
            ),
            "page after run 500,000": lambda: list_runs(
                project.id, RunFilter(), limit=100, cursor=cursor
            ),
            "started in a window": lambda: list_runs(project.id, window, limit=100, cursor=None),
            "trigger=schedule, version=2": lambda: list_runs(
                project.id, RunFilter(trigger="schedule", version=2), limit=100, cursor=None
            ),
        }
        return {name: await _timed(call) for name, call in cases.items()}


async def _run_at(project_id: str, position: int) -> WorkflowRun:
    found = (
        await WorkflowRun.filter(project_id=project_id)
        .order_by("-started_at", "-id")
        .offset(position)
        .limit(1)
    )
    return found[0]


async def _sqlite(directory: Path) -> dict[str, tuple[float, float]]:
    async def insert(first: str, second: str, project: str) -> None:
        await get_connection("default").execute_query(
            _SQLITE_INSERT, [RUNS, first, second, project]
        )

    return await _measure(f"sqlite://{directory}/history.sqlite3", insert)


async def _postgres() -> dict[str, tuple[float, float]]:
    admin = await asyncpg.connect(POSTGRES_ADMIN)
    try:
        await admin.execute(f"DROP DATABASE IF EXISTS {DATABASE}")
        await admin.execute(f"CREATE DATABASE {DATABASE}")
    finally:
        await admin.close()

    async def insert(first: str, second: str, project: str) -> None:
        await get_connection("default").execute_query(
            _POSTGRES_INSERT, [first, second, project, RUNS]
        )
        await get_connection("default").execute_script("ANALYZE workflow_runs")

    try:
        return await _measure(f"postgres://postgres@127.0.0.1:5432/{DATABASE}", insert)
    finally:
        admin = await asyncpg.connect(POSTGRES_ADMIN)
        try:
            await admin.execute(f"DROP DATABASE IF EXISTS {DATABASE}")
        finally:
            await admin.close()


def _rows(database: str, figures: dict[str, tuple[float, float]]) -> Iterator[Result]:
    baseline_label = "one run by id (baseline)"
    baseline, _ = figures[baseline_label]
    for name, (median, worst) in figures.items():
        yield Result(
            NAME,
            f"{database}: {name} (median; max {worst:.1f} ms)",
            median,
            "ms",
            baseline=None if name == baseline_label else baseline,
            baseline_label="by id",
        )


def run() -> Report:
    """Both databases, a million runs each."""
    report = Report()
    with tempfile.TemporaryDirectory() as directory:
        print("  SQLite", flush=True)
        report.rows.extend(_rows("SQLite", asyncio.run(_sqlite(Path(directory)))))
    print("  PostgreSQL", flush=True)
    report.rows.extend(_rows("PostgreSQL", asyncio.run(_postgres())))
    report.notes.append(
        f"run history: {RUNS:,} runs of one project; each figure the median of {CALLS} pages of"
        " 100 through run_history.list_runs (what GET .../runs calls)"
    )
    return report


if __name__ == "__main__":
    from bench._common import render_table

    print(render_table([run()]))
