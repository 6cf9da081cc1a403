"""Asynchronous runs (POST .../runs) on the scaled shape: throughput, SSE latency, cancels.

Everything runs on PostgreSQL + Redis with real ``run_server.py`` and ``run_worker.py``
processes (LIBFLOW_EMBEDDER=none, LIBFLOW_RATE_LIMIT=0), in a PostgreSQL database and a
Redis database of the benchmark's own:

1. runs a second with 1, then 2, workers (warmed up first), two ways. End to end: RUNS runs
   of runsync's small workflow POSTed as fast as an aiohttp client can (POST_CONCURRENCY at a
   time) while the workers run them, over the time from the first POST to the last run's
   ``finished_at``. Drained: RUNS runs queued while the workers are stopped (SIGSTOP), over
   the time from continuing them all at once (SIGCONT) to the last ``finished_at``.
2. SSE latency: SSE_RUNS runs of a chain of templates and short delays, each watched by
   SSE_SUBSCRIBERS / SSE_RUNS subscribers; for every node.finished event a subscriber
   received live, the time it had it minus the node's ``finishedDate`` in the run record.
3. cancel latency: CANCEL_RUNS runs wait in a 30 s delay on a worker; each is cancelled in
   turn, timed to the ``run.finished`` event on its stream and to a GET (polled every 10 ms)
   showing ``cancelled``.
4. POST runs answered (202) per second by wrk with no worker running, against a bare aiohttp
   handler that parses the body and answers a run record (both on CPU 0, wrk on CPU 1).

Run alone with ``python -m bench.async_runs``; ``python -m bench.async_runs serve-baseline
--port P`` serves the baseline.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import secrets
import shutil
import sys
import tempfile
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
from aiohttp import web

from bench._common import (
    LOG_LEVEL,
    PYTHON,
    BenchError,
    Report,
    Result,
    create_project,
    free_port,
    libflow_env,
    libflow_server,
    main_with_baseline,
    percentile,
    request_json,
    server,
)
from bench._run_throughput import (
    POST_CONCURRENCY,
    RUNS,
    WARMUP_RUNS,
    Executed,
    Throughput,
    create_workflow,
    execute,
    workers,
)
from bench._run_watchers import Api, CancelLatencies, SseLatencies, cancel_latencies, sse_latencies
from bench.get_file import (
    CONNECTIONS,
    SERVER_CPU,
    THREADS,
    WARMUP_SECONDS,
    WRK_CPU,
    WrkRun,
    wrk,
    wrk_comparison,
)
from bench.runsync import BODY, DEFINITION, lua_script
from bench.webhooks import postgres_database, redis_database
from settings import Settings

NAME = "async_runs"
REDIS_URL = "redis://127.0.0.1:6379/14"  # bench.webhooks uses 12; tests 9 (3, 5 in settings)
WORKER_COUNTS = (1, 2)
POST_SECONDS = 5
SSE_SUBSCRIBERS = 100
SSE_RUNS = 4
SSE_STEPS = 10
SSE_STEP_DELAY = 0.05
SSE_LEAD_SECONDS = 1.5  # before the first measured node ends: time for every stream to open
CANCEL_RUNS = 50
CANCEL_GOAL_MS = 1000.0
ROUTE = "/api/publicv1/projects/{projectId}/workflows/{workflowId}/runs"
T = TypeVar("T")


def _chain(*nodes: dict[str, Any], timeout: int) -> dict[str, Any]:
    """An event node, then ``nodes`` one after the other."""
    every = [{"id": "start", "type": "event", "event": "run"}, *nodes]
    edges = [{"from": a["id"], "to": b["id"]} for a, b in itertools.pairwise(every)]
    return {"timeoutSeconds": timeout, "nodes": every, "edges": edges}


SSE_DEFINITION = _chain(
    {"id": "lead", "type": "delay", "seconds": SSE_LEAD_SECONDS},
    *(
        node
        for step in range(SSE_STEPS)
        for node in (
            {"id": f"step{step}", "type": "template", "template": f"step {step}"},
            {"id": f"pause{step}", "type": "delay", "seconds": SSE_STEP_DELAY},
        )
    ),
    {"id": "out", "type": "set_output", "name": "done", "value": True},
    timeout=30,
)
CANCEL_DEFINITION = _chain(
    {"id": "before", "type": "set_output", "name": "before", "value": 1},
    {"id": "wait", "type": "delay", "seconds": 30},
    {"id": "after", "type": "set_output", "name": "after", "value": 2},
    timeout=60,
)


# The baseline server


async def baseline_start_run(request: web.Request) -> web.Response:
    """Parse the JSON body and answer a queued run record, as a bare handler would."""
    body = await request.json()
    run_id = secrets.token_hex(16)
    project = request.match_info["projectId"]
    record = {
        "runId": run_id,
        "workflowId": request.match_info["workflowId"],
        "version": "1",
        "event": "run",
        "trigger": "api_async",
        "status": "queued",
        "statusCode": None,
        "inputs": body.get("inputs"),
        "outputs": None,
        "error": None,
        "nodeTimings": None,
        "startedDate": datetime.now(UTC).isoformat(timespec="milliseconds"),
        "finishedDate": None,
    }
    response = web.json_response(record, status=202)
    response.headers["Location"] = f"/api/publicv1/projects/{project}/runs/{run_id}"
    return response


async def healthz(request: web.Request) -> web.Response:
    """Readiness for the benchmark runner."""
    return web.json_response({"status": "ok"})


def serve_baseline(port: int) -> None:
    """Serve the bare POST runs route and /healthz until SIGTERM/SIGINT."""
    app = web.Application()
    app.router.add_post(ROUTE, baseline_start_run)
    app.router.add_get("/healthz", healthz)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


def _check_answer(url: str, key: str | None) -> None:
    """One POST by hand: a 202 with a queued run record (wrk only sees statuses)."""
    answer = request_json("POST", url, body=BODY, api_key=key)
    if answer.get("status") != "queued" or answer.get("inputs") != BODY["inputs"]:
        raise BenchError(f"unexpected answer from {url}: {answer}")


def measure_posts(
    project: str, key: str, data_dir: Path, env: Mapping[str, str], work: Path
) -> tuple[WrkRun, WrkRun]:
    """(bare, libflow) wrk runs of POST runs, no worker running; servers on SERVER_CPU."""
    port, baseline_port = free_port(), free_port()
    script = lua_script(work / "runs.lua", json.dumps(BODY).encode())
    headers = {"Authorization": key}
    with (
        libflow_server(port, data_dir, env, cpu=SERVER_CPU),
        server(
            [PYTHON, "-m", "bench.async_runs", "serve-baseline", "--port", str(baseline_port)],
            port=baseline_port,
            env=env,
            log_path=work / "baseline.log",
            cpu=SERVER_CPU,
        ),
    ):
        workflow_id = create_workflow(
            Api(f"http://127.0.0.1:{port}", project, key), "accept", DEFINITION
        )
        path = ROUTE.format(projectId=project, workflowId=workflow_id)
        url, bare_url = f"http://127.0.0.1:{port}{path}", f"http://127.0.0.1:{baseline_port}{path}"
        _check_answer(bare_url, None)
        _check_answer(url, key)
        wrk(bare_url, WARMUP_SECONDS, None, script)
        wrk(url, WARMUP_SECONDS, headers, script)
        bare = wrk(bare_url, POST_SECONDS, None, script)
        ours = wrk(url, POST_SECONDS, headers, script)
    return bare, ours


# The table


def _latency_rows(figure: str, samples: list[float], goal_ms: float | None) -> list[Result]:
    rows = []
    for label in ("p50", "p99"):
        value = percentile(samples, float(label[1:]))
        goal = "-" if goal_ms is None or label == "p50" else f"< {goal_ms:.0f} ms"
        met = None if goal == "-" else value < (goal_ms or 0)
        rows.append(Result(NAME, f"{figure} {label}", value, "ms", goal=goal, met=met))
    return rows


def _throughput_rows(executed: dict[int, Throughput | BenchError]) -> list[Result]:
    rows: list[Result] = []
    for kind, label in (("e2e", "queued + executed e2e"), ("drain", "executed, queue drained")):
        single = executed.get(1)
        for count, done in executed.items():
            figure = f"{label}, {count} worker{'s' if count > 1 else ''}"
            if isinstance(done, BenchError):
                rows.append(Result(NAME, figure, float("nan"), "", error=f"BenchError: {done}"))
                continue
            ours: Executed = getattr(done, kind)
            versus = getattr(single, kind) if count > 1 and isinstance(single, Throughput) else None
            rows.append(
                Result(
                    NAME,
                    figure,
                    ours.per_second,
                    "runs/s",
                    baseline=None if versus is None else versus.per_second,
                    baseline_label="" if versus is None else "1 worker",
                )
            )
    single = executed.get(1)
    if isinstance(single, Throughput):  # steadier than the rates on a shared machine
        cpu = single.drain.worker_cpu_seconds / RUNS * 1e6
        rows.append(Result(NAME, "worker CPU a run (drained, 1 worker)", cpu, "us"))
    return rows


def _rows(
    executed: dict[int, Throughput | BenchError],
    sse: SseLatencies | BenchError,
    cancels: CancelLatencies | BenchError,
    posts: tuple[WrkRun, WrkRun] | BenchError,
) -> list[Result]:
    rows = _throughput_rows(executed)
    if isinstance(posts, BenchError):
        rows.append(Result(NAME, "POST runs", float("nan"), "", error=f"BenchError: {posts}"))
    else:
        bare, ours = posts
        throughput, *latency = wrk_comparison(NAME, "POST runs (202, no worker)", ours, bare, 0)
        rows += [dataclasses.replace(throughput, goal="-", met=None), *latency]
    figure = f"SSE node.finished latency, {SSE_SUBSCRIBERS} subscribers"
    if isinstance(sse, BenchError):
        rows.append(Result(NAME, figure, float("nan"), "", error=f"BenchError: {sse}"))
    else:
        rows += _latency_rows(figure, sse.samples, None)
    if isinstance(cancels, BenchError):
        rows.append(Result(NAME, "cancel", float("nan"), "", error=f"BenchError: {cancels}"))
    else:
        rows += _latency_rows("cancel -> run.finished (SSE)", cancels.streamed, CANCEL_GOAL_MS)
        rows += _latency_rows("cancel -> GET shows cancelled", cancels.polled, CANCEL_GOAL_MS)
    return rows


def _cpu(done: Executed) -> str:
    return (
        f"cores {done.machine_busy:.0%} busy, workers {done.worker_cpu_seconds:.2f} CPU-s "
        f"({done.worker_cpu_seconds / RUNS * 1e6:,.0f} us a run)"
    )


def _notes(
    executed: dict[int, Throughput | BenchError],
    sse: SseLatencies | BenchError,
    cancels: CancelLatencies | BenchError,
    posts: tuple[WrkRun, WrkRun] | BenchError,
) -> list[str]:
    concurrency = Settings().job_concurrency
    notes = [
        f"async_runs: e2e = {RUNS} POST runs (runsync's workflow event -> input -> template -> "
        f"set_output) sent by an aiohttp client, {POST_CONCURRENCY} at a time, while K "
        f"run_worker.py processes (LIBFLOW_JOB_CONCURRENCY={concurrency}) run them, after "
        f"{WARMUP_RUNS} warm-up runs; rate = {RUNS} / (last finished_at - first POST); the API "
        "server, the workers, the client, PostgreSQL and Redis share the 2 cores unpinned"
        + "".join(
            f"; {d.e2e.workers} worker(s): {d.e2e.seconds:.2f}s, the last 202 after "
            f"{d.e2e.posting_seconds:.2f}s ({RUNS / d.e2e.posting_seconds:,.0f}/s), "
            f"{_cpu(d.e2e)}"
            for d in executed.values()
            if isinstance(d, Throughput)
        ),
        f"async_runs: drained = the same workers, warm, are stopped (SIGSTOP) while {RUNS} runs "
        "are queued, then continued together (SIGCONT); rate = "
        f"{RUNS} / (last finished_at - the continue)"
        + "".join(
            f"; {d.drain.workers} worker(s): {d.drain.seconds:.2f}s (queueing them took "
            f"{d.drain.posting_seconds:.2f}s, {RUNS / d.drain.posting_seconds:,.0f}/s), "
            f"{_cpu(d.drain)}"
            for d in executed.values()
            if isinstance(d, Throughput)
        ),
    ]
    if not isinstance(posts, BenchError):
        notes.append(
            f"async_runs: POST runs = wrk -t{THREADS} -c{CONNECTIONS} -d{POST_SECONDS}s "
            f"--latency -s (the same body) on CPU {WRK_CPU} after a {WARMUP_SECONDS}s warm-up "
            "each, no worker running (each 202 commits a queued run, publishes run.queued to "
            "Redis and wakes a worker); libflow and the bare handler (parses the body, answers "
            f"a run record) on CPU {SERVER_CPU}; {posts[0].requests} / {posts[1].requests} "
            "requests (bare / libflow)"
        )
    if not isinstance(sse, BenchError):
        notes.append(
            f"async_runs: SSE = {SSE_RUNS} runs of event -> delay {SSE_LEAD_SECONDS}s -> "
            f"{SSE_STEPS} x (template -> delay {SSE_STEP_DELAY}s) -> set_output on 1 worker, "
            f"each watched by {SSE_SUBSCRIBERS // SSE_RUNS} aiohttp subscribers (one client "
            f"process, {sse.subscribers} streams through one API process); latency = received "
            "- nodeTimings[node].finishedDate of the record (same clock; the date's ms "
            f"precision adds 0-1 ms); {len(sse.samples)} live (subscriber, node.finished) "
            f"pairs, {sse.replayed} replayed ones (nodes ended before the stream opened) left out"
        )
    if not isinstance(cancels, BenchError):
        notes.append(
            f"async_runs: cancel = {CANCEL_RUNS} runs (set_output -> delay 30 s -> set_output) "
            "running at once on 1 worker, each watched on SSE; cancelled one after another, "
            "timed from sending the POST cancel to the run.finished event (its record: "
            "cancelled) and to the first GET (every 10 ms) showing cancelled; the POST's 202 "
            f"came after {percentile(cancels.answered, 50):.1f} ms at p50; the goal is DESIGN's "
            f"'ends cancelled within a second'; LIBFLOW_LOG_LEVEL={LOG_LEVEL}"
        )
    return notes


def _phase(measure: Callable[[], T]) -> T | BenchError:
    """What ``measure`` returns, or the error that kept it from it (a row of its own)."""
    try:
        return measure()
    except BenchError as err:
        return err
    except (aiohttp.ClientError, OSError, TimeoutError) as err:
        return BenchError(f"{type(err).__name__}: {err}")


def run() -> Report:
    """Every phase on one fresh database; a phase that fails is a row of its own."""
    work = Path(tempfile.mkdtemp(prefix="libflow-bench-async-runs-"))
    try:
        with postgres_database() as database_url, redis_database(REDIS_URL) as redis_url:
            data_dir = work / "data"
            env = libflow_env(
                data_dir,
                LIBFLOW_DATABASE_URL=database_url,
                LIBFLOW_REDIS_URL=redis_url,
                LIBFLOW_STORAGE="local",
                LIBFLOW_EMBEDDER="none",
                LIBFLOW_RATE_LIMIT="0",
            )
            project, key = create_project(env)
            port = free_port()
            executed: dict[int, Throughput | BenchError] = {}
            with libflow_server(port, data_dir, env):
                api = Api(f"http://127.0.0.1:{port}", project, key)
                for count in WORKER_COUNTS:
                    executed[count] = _phase(partial(execute, api, env, work, count))
                sse_id = create_workflow(api, "sse chain", SSE_DEFINITION)
                cancel_id = create_workflow(api, "cancel", CANCEL_DEFINITION)
                with workers(1, env, work, "watch") as started:
                    per_run = SSE_SUBSCRIBERS // SSE_RUNS
                    sse = _phase(
                        lambda: asyncio.run(sse_latencies(api, sse_id, SSE_RUNS, per_run, "lead"))
                    )
                    cancels = _phase(
                        lambda: asyncio.run(cancel_latencies(api, cancel_id, CANCEL_RUNS, "wait"))
                    )
                    started.check_alive()
            posts = _phase(partial(measure_posts, project, key, data_dir, env, work))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return Report(_rows(executed, sse, cancels, posts), _notes(executed, sse, cancels, posts))


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, or serve the baseline with ``serve-baseline --port P``."""
    return main_with_baseline(argv, __doc__, NAME, run, serve_baseline)


if __name__ == "__main__":
    sys.exit(main())
