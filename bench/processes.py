"""Several API processes on one port: ``run_server.py --workers 2`` against ``--workers 1``.

Two routes, each under wrk: GET .../library/files/:id (as ``bench.get_file``) and a
3-node runsync (as ``bench.runsync``, every run recorded in SQLite before its answer, so two
processes write one SQLite file). Four groups of servers serve each at once: the bare
aiohttp handler of those benchmarks in 1 and in 2 processes (SO_REUSEPORT, as libflow's),
and libflow with 1 and 2 processes; each group is measured three times, in turn with the
others, and its median counts. Goals: libflow 2 vs 1 >= 1.7x; libflow against bare with the
same number of processes >= 0.5x (GET) and >= 0.3x (runsync).

Nothing is pinned: N servers and wrk share the machine's CPUs alike in every case. On a
2-core machine wrk takes a good part of one core, which two servers would need: the 2 vs 1
figure is bounded by what is left (the notes give the CPU count). Run alone with
``python -m bench.processes [--postgres URL]``: with ``--postgres`` (a server URL whose
user may create databases, e.g. postgres://postgres@127.0.0.1:5432/postgres) libflow's
processes use a fresh database there instead of SQLite, made and dropped by the run.
``python -m bench.processes serve-bare KIND --port P [--payload FILE]`` serves one bare
process (on a port others may share).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from aiohttp import web

from bench import _baseline_app
from bench import runsync as runsync_bench
from bench._common import (
    LOG_LEVEL,
    PYTHON,
    BenchError,
    Report,
    Result,
    create_project,
    free_port,
    libflow_env,
    request_json,
    run_alone,
    server,
)
from bench.get_file import (
    ROUNDS,
    WARMUP_SECONDS,
    Target,
    WrkRun,
    _prepare_file,
    alternating,
    rounds_note,
)
from bench.webhooks import postgres_database

NAME = "processes"
WORKERS = (1, 2)
CONNECTIONS = 64
DURATION_SECONDS = 8
SCALING_GOAL = 1.7
LISTEN_TIMEOUT_SECONDS = 60.0
RATIO_GOALS = {"GET files/:id": 0.5, "runsync 3-node": 0.3}


def serve_bare(kind: str, port: int, payload: Path | None) -> None:
    """One process of the bare handler, sharing ``port`` with its siblings (SO_REUSEPORT)."""
    if kind == "get":
        if payload is None:
            raise SystemExit("serve-bare get needs --payload")
        app = _baseline_app.create_app(json.loads(payload.read_text()))
    else:
        app = runsync_bench.baseline_app()
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None, reuse_port=True)


@contextlib.contextmanager
def bare_servers(
    kind: str, workers: int, work: Path, env: dict[str, str], payload: Path | None
) -> Iterator[int]:
    """``workers`` bare processes on one port; the port."""
    port = free_port()
    command = [PYTHON, "-m", "bench.processes", "serve-bare", kind, "--port", str(port)]
    if payload is not None:
        command += ["--payload", str(payload)]
    with contextlib.ExitStack() as stack:
        for n in range(workers):
            log = work / f"bare-{kind}-{workers}-{n}.log"
            stack.enter_context(server(command, port=port, env=env, log_path=log))
        wait_for_listeners(port, workers)
        yield port


@contextlib.contextmanager
def libflow_servers(workers: int, data_dir: Path, env: dict[str, str]) -> Iterator[str]:
    """``run_server.py --workers N`` (its supervisor and N servers); the base URL."""
    port = free_port()
    command = [PYTHON, "run_server.py", "--port", str(port), "--workers", str(workers)]
    log = data_dir.parent / f"libflow-{workers}.log"
    with server(command, port=port, env=env, log_path=log):
        wait_for_listeners(port, workers)
        yield f"http://127.0.0.1:{port}"


def wait_for_listeners(port: int, count: int) -> None:
    """Wait until ``count`` sockets listen on ``port`` (each process of a group binds its
    own): connections wrk opens before the last one listens would all go to the others."""
    deadline = time.monotonic() + LISTEN_TIMEOUT_SECONDS
    while _listeners(port) < count:
        if time.monotonic() > deadline:
            raise BenchError(f"{count} processes never listened on port {port}")
        time.sleep(0.1)


def _listeners(port: int) -> int:
    """Listening TCP sockets on ``port``, from /proc/net/tcp (state 0A is LISTEN)."""
    found = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as lines:
            for line in list(lines)[1:]:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    found += 1
    return found


def rows_of(what: str, bare: dict[int, WrkRun], ours: dict[int, WrkRun]) -> list[Result]:
    """Throughput of each process count against bare, then libflow's 2 vs 1."""
    goal = RATIO_GOALS[what]
    rows = [
        Result(
            NAME,
            f"{what}, {workers} process{'es' if workers > 1 else ''}",
            ours[workers].requests_per_second,
            "req/s",
            baseline=bare[workers].requests_per_second,
            baseline_label=f"bare aiohttp x{workers}",
            goal=f">= {goal}x",
            met=ours[workers].requests_per_second / bare[workers].requests_per_second >= goal,
        )
        for workers in WORKERS
    ]
    scaling = ours[2].requests_per_second / ours[1].requests_per_second
    rows.append(
        Result(
            NAME,
            f"{what}, 2 processes",
            ours[2].requests_per_second,
            "req/s",
            baseline=ours[1].requests_per_second,
            baseline_label="libflow, 1 process",
            goal=f">= {SCALING_GOAL}x",
            met=scaling >= SCALING_GOAL,
        )
    )
    bare_scaling = bare[2].requests_per_second / bare[1].requests_per_second
    rows.append(
        Result(
            NAME,
            f"{what}, bare aiohttp x2",
            bare[2].requests_per_second,
            "req/s",
            baseline=bare[1].requests_per_second,
            baseline_label=f"bare aiohttp x1 ({bare_scaling:.2f}x: what 2 cores with wrk allow)",
        )
    )
    return rows


def run(postgres: str | None = None) -> Report:
    """GET one file and runsync: bare x1, x2 and libflow --workers 1, 2, in one run."""
    with contextlib.ExitStack() as stack:
        database = stack.enter_context(postgres_database(postgres)) if postgres else None
        return _run(database)


def _run(database_url: str | None) -> Report:
    work = Path(tempfile.mkdtemp(prefix="libflow-bench-processes-"))
    results: dict[str, tuple[dict[int, WrkRun], dict[int, WrkRun]]] = {}
    try:
        data_dir = work / "data"
        # Neither route embeds anything: each process would load the model for nothing.
        extra = {"LIBFLOW_DATABASE_URL": database_url} if database_url else {}
        env = libflow_env(data_dir, LIBFLOW_EMBEDDER="none", **extra)
        project, key = create_project(env)
        api = f"/api/publicv1/projects/{project}"
        with libflow_servers(1, data_dir, env) as base:
            detail = _prepare_file(base, project, key)
            created = request_json(
                "POST",
                f"{base}{api}/workflows",
                body={"name": "bench greeter", "definition": runsync_bench.DEFINITION},
                api_key=key,
            )
        payload = work / "payload.json"
        payload.write_text(json.dumps(detail))
        script = runsync_bench.lua_script(
            work / "runsync.lua", json.dumps(runsync_bench.BODY).encode()
        )
        routes: dict[str, tuple[str, str, Path | None, Path | None]] = {
            "GET files/:id": ("get", f"{api}/library/files/{detail['id']}", None, payload),
            "runsync 3-node": (
                "runsync",
                f"{api}/workflows/{created['workflowId']}/runsync",
                script,
                None,
            ),
        }
        for what, (kind, path, lua, bare_payload) in routes.items():
            with contextlib.ExitStack() as stack:
                # Every group serves at once (the others idle): measured in turn, a slow
                # stretch of the machine falls on all of them alike.
                targets: list[Target] = []
                for workers in WORKERS:
                    port = stack.enter_context(bare_servers(kind, workers, work, env, bare_payload))
                    targets.append((f"http://127.0.0.1:{port}{path}", None))
                for workers in WORKERS:
                    base = stack.enter_context(libflow_servers(workers, data_dir, env))
                    targets.append((f"{base}{path}", {"Authorization": key}))
                runs = alternating(
                    targets, lua, seconds=DURATION_SECONDS, cpu=None, connections=CONNECTIONS
                )
            bare = dict(zip(WORKERS, runs[: len(WORKERS)], strict=True))
            ours = dict(zip(WORKERS, runs[len(WORKERS) :], strict=True))
            results[what] = (bare, ours)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    rows = [row for what, (bare, ours) in results.items() for row in rows_of(what, bare, ours)]
    counts = "; ".join(
        f"{what}: " + " / ".join(f"{r.requests}" for r in (*bare.values(), *ours.values()))
        for what, (bare, ours) in results.items()
    )
    notes = [
        f"processes: wrk -t1 -c{CONNECTIONS} -d{DURATION_SECONDS}s --latency after a "
        f"{WARMUP_SECONDS}s warm-up each, {ROUNDS} rounds in turn, nothing pinned, on "
        f"{os.cpu_count()} CPUs shared by wrk and the servers; requests (bare x1 / x2 / "
        "libflow x1 / x2): " + counts,
        *(
            rounds_note(
                f"processes: {what}",
                [
                    *((f"bare x{n}", run) for n, run in bare.items()),
                    *((f"libflow x{n}", run) for n, run in ours.items()),
                ],
            )
            for what, (bare, ours) in results.items()
        ),
        f"processes: libflow run_server.py --workers N (SO_REUSEPORT), LIBFLOW_LOG_LEVEL="
        f"{LOG_LEVEL}, LIBFLOW_EMBEDDER=none, "
        + (
            "PostgreSQL (a fresh database); runsync records every run before its answer"
            if database_url
            else "SQLite; runsync records every run before its answer, from both processes "
            "into one SQLite file"
        ),
    ]
    return Report(rows, notes)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, or serve one bare process with ``serve-bare KIND --port P``."""
    parser = argparse.ArgumentParser(description=__doc__)
    commands = parser.add_subparsers(dest="command")
    bare = commands.add_parser("serve-bare")
    bare.add_argument("kind", choices=["get", "runsync"])
    bare.add_argument("--port", type=int, required=True)
    bare.add_argument("--payload", type=Path)
    parser.add_argument("--postgres", metavar="URL", help="libflow on PostgreSQL, not SQLite")
    args = parser.parse_args(argv)
    if args.command == "serve-bare":
        serve_bare(args.kind, args.port, args.payload)
        return 0
    return run_alone(NAME, functools.partial(run, args.postgres))


if __name__ == "__main__":
    sys.exit(main())
