"""The bare aiohttp runsync handler plus what any recorded run costs: one durable row.

``python -m bench._recorded_baseline --port P --database FILE --workflow-id W --project-id P``
serves runsync's route shape: it parses the JSON body, renders the greeting with an
f-string, writes the run's row (the columns and JSON libflow writes for runsync's
four-node run: inputs, outputs, four node timings) into FILE's ``workflow_runs`` and
answers once that row is committed. FILE is a copy of a libflow database, so the table,
its indexes and its foreign key are libflow's own. Rows of concurrent requests are
committed together (one transaction and one fsync a batch, on one thread, WAL,
``synchronous=FULL``), as libflow's group commit does. Nothing else: no middleware, key,
engine or model. The least a runsync whose every run is recorded before its answer can
cost in Python on aiohttp and SQLite: the ceiling of runsync's ratio to the bare handler.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiohttp import web

from libflow.ids import epoch_iso, new_ordered_id

ROUTE = "/api/publicv1/projects/{projectId}/workflows/{workflowId}/runsync"
NODES = ("start", "who", "greet", "out")
INSERT = (
    "INSERT INTO workflow_runs (id, project_id, version, event, trigger, status, status_code,"
    " inputs, outputs, error, node_timings, started_at, finished_at, workflow_id)"
    " VALUES (?, ?, 1, 'run', 'api', 'succeeded', 200, ?, ?, NULL, ?, ?, ?, ?)"
)
RECORDER = web.AppKey["Recorder"]("recorder")


class Recorder:
    """Rows handed over by handlers, committed a batch at a time on one thread."""

    def __init__(self, path: Path) -> None:
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._queue: list[tuple[tuple[Any, ...], asyncio.Future[None]]] = []
        self._flusher: asyncio.Task[None] | None = None

    async def write(self, row: tuple[Any, ...]) -> None:
        """Return once ``row`` is committed."""
        future = asyncio.get_running_loop().create_future()
        self._queue.append((row, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush())
        await future

    async def _flush(self) -> None:
        while self._queue:
            batch, self._queue = self._queue, []
            await asyncio.to_thread(self._commit, [row for row, _ in batch])
            for _, future in batch:
                future.set_result(None)

    def _commit(self, rows: list[tuple[Any, ...]]) -> None:
        self._db.execute("BEGIN IMMEDIATE")
        self._db.executemany(INSERT, rows)
        self._db.execute("COMMIT")


async def runsync(request: web.Request) -> web.Response:
    """Parse the body, run the greeting, record the run, answer."""
    started = time.time()
    body = await request.json()
    inputs = body["inputs"]
    outputs = {"greeting": f"Hello, {inputs['name']}!"}
    finished = time.time()
    timing = {"startedDate": epoch_iso(started), "finishedDate": epoch_iso(finished)}
    timings = {node: {**timing, "status": "succeeded"} for node in NODES}
    row = (
        new_ordered_id(),
        request.match_info["projectId"],
        json.dumps(inputs),
        json.dumps(outputs),
        json.dumps(timings),
        str(datetime.fromtimestamp(started, UTC)),
        str(datetime.fromtimestamp(finished, UTC)),
        request.match_info["workflowId"],
    )
    await request.app[RECORDER].write(row)
    return web.json_response({"success": True, "result": {"outputs": outputs}, "statusCode": 200})


async def healthz(request: web.Request) -> web.Response:
    """Readiness for the benchmark runner."""
    return web.json_response({"status": "ok"})


def create_app(database: Path) -> web.Application:
    """The recorded baseline, writing into ``database``."""
    app = web.Application()
    app[RECORDER] = Recorder(database)
    app.router.add_post(ROUTE, runsync)
    app.router.add_get("/healthz", healthz)
    return app


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--database", type=Path, required=True)
    args = parser.parse_args(argv)
    web.run_app(
        create_app(args.database), host="127.0.0.1", port=args.port, access_log=None, print=None
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
