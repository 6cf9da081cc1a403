"""POST .../workflows/:id/runsync of a small workflow against a bare aiohttp JSON handler, wrk.

The workflow is input -> template -> set_output (after its event node): it checks one input,
renders a greeting and sets it as the output; every run is recorded in the database. The
baseline is one aiohttp handler that parses the same JSON body and answers the same JSON
shape, without middleware or database. A third server, the floor (``bench._floor_app``), is
libflow's own application with one more route whose handler validates the body and answers
the same JSON without running anything: what any keyed libflow route costs before it does its
work. libflow and the floor run on uvloop (libflow's default); the bare handler runs on
asyncio's loop (aiohttp's default, the goal's baseline) and once more on uvloop. Every server
is pinned to CPU 0 and wrk to CPU 1, with the settings of
``bench.get_file``; wrk POSTs the body through a Lua script in a temp file. Run alone with
``python -m bench.runsync``; ``python -m bench.runsync serve-baseline --port P`` serves the
baseline.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Any

from aiohttp import web

from bench._common import (
    BARE_LOOP_VARIABLE,
    FLOOR_RUNSYNC_ROUTE,
    LOG_LEVEL,
    PYTHON,
    BenchError,
    Report,
    Result,
    bare_event_loop,
    create_project,
    floor_server,
    free_port,
    libflow_env,
    libflow_server,
    main_with_baseline,
    request_json,
    server,
)
from bench.get_file import (
    CONNECTIONS,
    DURATION_SECONDS,
    ROUNDS,
    SERVER_CPU,
    THREADS,
    WARMUP_SECONDS,
    WRK_CPU,
    WrkRun,
    alternating,
    floor_row,
    rounds_note,
    uvloop_row,
    wrk_comparison,
)

NAME = "runsync"
RATIO_GOAL = 0.35
BODY: dict[str, Any] = {"inputs": {"name": "Ada"}}
DEFINITION: dict[str, Any] = {
    "timeoutSeconds": 30,
    "nodes": [
        {"id": "start", "type": "event", "event": "run"},
        {"id": "who", "type": "input", "name": "name", "valueType": "string", "required": True},
        {"id": "greet", "type": "template", "template": "Hello, {{ inputs.name }}!"},
        {"id": "out", "type": "set_output", "name": "greeting", "value": "{{ nodes.greet.text }}"},
    ],
    "edges": [
        {"from": "start", "to": "who"},
        {"from": "who", "to": "greet"},
        {"from": "greet", "to": "out"},
    ],
}
EXPECTED = {"success": True, "result": {"outputs": {"greeting": "Hello, Ada!"}}, "statusCode": 200}
ROUTE = "/api/publicv1/projects/{projectId}/workflows/{workflowId}/runsync"


# The baseline server


async def baseline_runsync(request: web.Request) -> web.Response:
    """Parse the JSON body and answer the runsync shape, as a bare handler would."""
    body = await request.json()
    name = body["inputs"]["name"]
    return web.json_response(
        {"success": True, "result": {"outputs": {"greeting": f"Hello, {name}!"}}, "statusCode": 200}
    )


async def healthz(request: web.Request) -> web.Response:
    """Readiness for the benchmark runner."""
    return web.json_response({"status": "ok"})


def baseline_app() -> web.Application:
    """The bare application: the runsync route shape and /healthz, nothing else."""
    app = web.Application()
    app.router.add_post(ROUTE, baseline_runsync)
    app.router.add_get("/healthz", healthz)
    return app


def serve_baseline(port: int) -> None:
    """Serve the baseline until SIGTERM/SIGINT."""
    web.run_app(
        baseline_app(),
        loop=bare_event_loop(),
        host="127.0.0.1",
        port=port,
        access_log=None,
        print=None,
    )


# The load generator


def lua_script(path: Path, body: bytes) -> Path:
    """A wrk script that POSTs ``body`` as JSON (a Lua long string holds it verbatim)."""
    text = body.decode()
    level = 0
    while f"]{'=' * level}]" in text:
        level += 1
    quoted = f"[{'=' * level}[{text}]{'=' * level}]"
    path.write_text(
        'wrk.method = "POST"\n'
        f"wrk.body = {quoted}\n"
        'wrk.headers["Content-Type"] = "application/json"\n'
    )
    return path


def _check_answer(url: str, key: str | None) -> None:
    """One request by hand: the server answers the expected body (wrk only sees statuses)."""
    answer = request_json("POST", url, body=BODY, api_key=key)
    if answer != EXPECTED:
        raise BenchError(f"unexpected runsync answer from {url}: {answer}")


def _runs_recorded(base: str, project: str, key: str, workflow_id: str) -> int:
    """How many runs the workflow's run list shows (it lists the latest 100 at most)."""
    runs = request_json(
        "GET", f"{base}/api/publicv1/projects/{project}/workflows/{workflow_id}/runs", api_key=key
    )
    return len(runs)


def _copy_database(source: Path, target: Path) -> None:
    """A consistent copy of a live SQLite database (its WAL included)."""
    with (
        contextlib.closing(sqlite3.connect(source)) as src,
        contextlib.closing(sqlite3.connect(target)) as dst,
    ):
        src.backup(dst)


def _rows(database: Path) -> int:
    """How many run rows ``database`` holds."""
    with contextlib.closing(sqlite3.connect(database)) as db:
        count: int = db.execute("SELECT count(*) FROM workflow_runs").fetchone()[0]
    return count


def recorded_row(name: str, recorded: WrkRun, bare: WrkRun) -> Result:
    """The bare handler that records each run durably, beside the bare handler."""
    return Result(
        name,
        "ceiling: bare aiohttp + the run's row",
        recorded.requests_per_second,
        "req/s",
        baseline=bare.requests_per_second,
        baseline_label="bare aiohttp",
    )


def against_ceiling_row(name: str, libflow: WrkRun, recorded: WrkRun) -> Result:
    """libflow's runsync beside the ceiling: what the run costs on top of a durable row, the
    part of a runsync that its own code decides (no goal of its own yet)."""
    return Result(
        name,
        "runsync 3-node, vs the ceiling",
        libflow.requests_per_second,
        "req/s",
        baseline=recorded.requests_per_second,
        baseline_label="bare aiohttp + the run's row",
    )


def run() -> Report:
    """Warm the servers up, then measure the bare baseline, the floor and libflow back to back."""
    work = Path(tempfile.mkdtemp(prefix="libflow-bench-runsync-"))
    try:
        data_dir, floor_dir = work / "data", work / "floor"
        env = libflow_env(data_dir)  # LIBFLOW_API_KEY_CACHE_SECONDS left at its default
        floor_env = libflow_env(floor_dir)
        project, key = create_project(env)
        floor_project, floor_key = create_project(floor_env)
        port, baseline_port, floor_port, recorded_port, uvloop_port = (
            free_port() for _ in range(5)
        )
        body = json.dumps(BODY).encode()
        script = lua_script(work / "runsync.lua", body)
        with libflow_server(port, data_dir, env, cpu=SERVER_CPU):
            base = f"http://127.0.0.1:{port}"
            created = request_json(
                "POST",
                f"{base}/api/publicv1/projects/{project}/workflows",
                body={"name": "bench greeter", "definition": DEFINITION},
                api_key=key,
            )
            workflow_id = created["workflowId"]
            url = base + ROUTE.format(projectId=project, workflowId=workflow_id)
            baseline_url = f"http://127.0.0.1:{baseline_port}" + ROUTE.format(
                projectId=project, workflowId=workflow_id
            )
            floor_url = f"http://127.0.0.1:{floor_port}" + FLOOR_RUNSYNC_ROUTE.format(
                projectId=floor_project, workflowId=workflow_id
            )
            # libflow's database as it stands (its tables, this project and workflow): the
            # recorded baseline writes its run rows into a copy of it.
            recorded_db = work / "recorded.sqlite3"
            _copy_database(data_dir / "libflow.sqlite3", recorded_db)
            recorded_url = f"http://127.0.0.1:{recorded_port}" + ROUTE.format(
                projectId=project, workflowId=workflow_id
            )
            uvloop_url = f"http://127.0.0.1:{uvloop_port}" + ROUTE.format(
                projectId=project, workflowId=workflow_id
            )
            baseline_cmd = [PYTHON, "-m", "bench.runsync", "serve-baseline", "--port"]
            with (
                server(
                    [*baseline_cmd, str(baseline_port)],
                    port=baseline_port,
                    env=env,
                    log_path=work / "baseline.log",
                    cpu=SERVER_CPU,
                ),
                server(
                    [*baseline_cmd, str(uvloop_port)],
                    port=uvloop_port,
                    env={**env, BARE_LOOP_VARIABLE: "uvloop"},
                    log_path=work / "baseline-uvloop.log",
                    cpu=SERVER_CPU,
                ),
                floor_server(floor_port, floor_env, work / "floor.log", SERVER_CPU),
                server(
                    [
                        *(PYTHON, "-m", "bench._recorded_baseline"),
                        *("--port", str(recorded_port), "--database", str(recorded_db)),
                    ],
                    port=recorded_port,
                    env=env,
                    log_path=work / "recorded.log",
                    cpu=SERVER_CPU,
                ),
            ):
                keyed = [
                    (baseline_url, None),
                    (recorded_url, None),
                    (floor_url, floor_key),
                    (url, key),
                    (uvloop_url, None),
                ]
                for target, api_key in keyed:
                    _check_answer(target, api_key)
                bare, recorded_bare, floor, libflow, bare_uvloop = alternating(
                    [(t, {"Authorization": k} if k else None) for t, k in keyed], script
                )
            recorded = _runs_recorded(base, project, key, workflow_id)
            if recorded == 0:
                raise BenchError("no run was recorded")
            if _rows(recorded_db) < recorded_bare.requests:
                raise BenchError("the recorded baseline answered runs it did not record")
    finally:
        shutil.rmtree(work, ignore_errors=True)

    rows = wrk_comparison(NAME, "runsync 3-node", libflow, bare, RATIO_GOAL)
    rows.insert(1, floor_row(NAME, "no run", floor, bare))
    rows.insert(2, recorded_row(NAME, recorded_bare, bare))
    rows.insert(3, against_ceiling_row(NAME, libflow, recorded_bare))
    rows.insert(4, uvloop_row(NAME, "runsync 3-node", libflow, bare_uvloop))
    notes = [
        f"runsync: wrk -t{THREADS} -c{CONNECTIONS} -d{DURATION_SECONDS}s --latency -s (POST "
        f"{len(body)}-byte JSON body) on CPU {WRK_CPU} after a {WARMUP_SECONDS}s warm-up each, "
        f"{ROUNDS} rounds in turn; all servers on CPU {SERVER_CPU}; {bare.requests} / "
        f"{floor.requests} / {libflow.requests} requests (bare / floor / libflow); "
        f"{recorded_bare.requests} (the recorded bare handler), {bare_uvloop.requests} (the "
        "bare handler on uvloop)",
        rounds_note(
            NAME,
            [
                ("bare", bare),
                ("recorded bare", recorded_bare),
                ("floor", floor),
                ("libflow", libflow),
                ("bare on uvloop", bare_uvloop),
            ],
        ),
        "runsync: workflow event -> input -> template -> set_output, each run recorded "
        f"in SQLite before the answer; LIBFLOW_LOG_LEVEL={LOG_LEVEL}, "
        "LIBFLOW_API_KEY_CACHE_SECONDS default (5); the baseline parses the body and answers "
        "the same JSON without middleware or database; the floor is libflow's app (middlewares, "
        "key check, rate limit, body model) around a handler that only answers that JSON; "
        "the recorded bare handler (bench._recorded_baseline) is the bare handler plus the "
        "run's row committed durably (group commit, WAL, synchronous=FULL) into a copy of "
        "libflow's database before the answer: the ceiling of any runsync recording every run; "
        "libflow and the floor run on uvloop (libflow's default), the bare handlers on "
        "asyncio's loop (aiohttp's default), and the bare handler again on uvloop",
    ]
    return Report(rows, notes)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, or serve the baseline with ``serve-baseline --port P``."""
    return main_with_baseline(argv, __doc__, NAME, run, serve_baseline)


if __name__ == "__main__":
    sys.exit(main())
