"""Authenticated GET .../library/files/:id against a bare aiohttp JSON handler, both under wrk.

A third server, the floor (``bench._floor_app``), is libflow's own application answering the
same JSON from a route that reads nothing: what a keyed libflow route costs before its work.
libflow and the floor run on uvloop, libflow's default; the bare handler runs on asyncio's
loop, aiohttp's default (the goal's baseline), and once more on uvloop.
Every server is pinned to CPU 0 and wrk to CPU 1; same duration and connections, three rounds
in turn (the median counts).
Run alone with ``python -m bench.get_file``.
"""

from __future__ import annotations

import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench._common import (
    BARE_LOOP_VARIABLE,
    FLOOR_GET_FILE_ROUTE,
    LOG_LEVEL,
    PYTHON,
    BenchError,
    Report,
    Result,
    create_project,
    floor_server,
    free_port,
    libflow_env,
    libflow_server,
    pinned,
    request_json,
    run_alone,
    server,
)

NAME = "get_file"
SERVER_CPU = 0
WRK_CPU = 1
THREADS = 1
CONNECTIONS = 32
WARMUP_SECONDS = 2
DURATION_SECONDS = 10
# Each server is measured this many times, in turn with the others: a 10 s run of one server
# moves by up to 12% from run to run on a shared 2-core machine, and a slow stretch of the
# machine then falls on every server alike instead of on one.
ROUNDS = 3
RATIO_GOAL = 0.5
PROCESSING_TIMEOUT = 20.0

_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3}


@dataclass(frozen=True)
class WrkRun:
    requests_per_second: float
    p50_ms: float
    p99_ms: float
    requests: int
    rounds: tuple[float, ...] = ()


def median_run(runs: list[WrkRun]) -> WrkRun:
    """The median of each figure over ``runs`` of one server, their requests added up and
    each run's requests a second kept (``rounds``)."""
    return WrkRun(
        statistics.median(run.requests_per_second for run in runs),
        statistics.median(run.p50_ms for run in runs),
        statistics.median(run.p99_ms for run in runs),
        sum(run.requests for run in runs),
        tuple(run.requests_per_second for run in runs),
    )


# A URL and its request headers (None: none).
Target = tuple[str, dict[str, str] | None]


def alternating(
    targets: list[Target],
    script: Path | None = None,
    *,
    seconds: int = DURATION_SECONDS,
    cpu: int | None = WRK_CPU,
    connections: int = CONNECTIONS,
) -> list[WrkRun]:
    """A warm-up of each target, then ROUNDS runs of each in turn: each target's median."""
    for url, headers in targets:
        wrk(url, WARMUP_SECONDS, headers, script, cpu=cpu, connections=connections)
    runs: list[list[WrkRun]] = [[] for _ in targets]
    for _ in range(ROUNDS):
        for kept, (url, headers) in zip(runs, targets, strict=True):
            kept.append(wrk(url, seconds, headers, script, cpu=cpu, connections=connections))
    return [median_run(kept) for kept in runs]


def rounds_note(name: str, labelled: list[tuple[str, WrkRun]]) -> str:
    """Each server's requests a second, round by round: how far the median could move."""
    spreads = "; ".join(
        f"{label} {' / '.join(f'{rps:,.0f}' for rps in run.rounds)}" for label, run in labelled
    )
    return f"{name}: req/s in each of the {ROUNDS} rounds (the median counts): {spreads}"


def _latency_ms(text: str, percentile: str) -> float:
    match = re.search(rf"^\s*{percentile}%\s+([\d.]+)(us|ms|s|m)\s*$", text, re.MULTILINE)
    if match is None:
        raise BenchError(f"no {percentile}% latency in wrk output:\n{text}")
    return float(match.group(1)) * _UNITS[match.group(2)]


def wrk(
    url: str,
    seconds: int,
    headers: dict[str, str] | None = None,
    script: Path | None = None,
    *,
    cpu: int | None = WRK_CPU,
    connections: int = CONNECTIONS,
) -> WrkRun:
    """One ``wrk --latency`` run on ``cpu`` (None: any; with a Lua ``script`` for POSTs);
    fails on any non-2xx answer or socket error."""
    if shutil.which("wrk") is None:
        raise BenchError("wrk is not installed: apt-get install -y wrk")
    cmd = ["wrk", f"-t{THREADS}", f"-c{connections}", f"-d{seconds}s", "--latency"]
    if script is not None:
        cmd += ["-s", str(script)]
    for name, value in (headers or {}).items():
        cmd += ["-H", f"{name}: {value}"]
    done = subprocess.run(
        pinned(cpu, [*cmd, url]),
        capture_output=True,
        text=True,
        timeout=seconds + 30,
        check=False,
    )
    out = done.stdout
    if done.returncode != 0:
        raise BenchError(f"wrk failed ({done.returncode}): {done.stderr.strip()}")
    if "Non-2xx or 3xx responses" in out or "Socket errors" in out:
        raise BenchError(f"wrk saw failed requests:\n{out}")
    rps = re.search(r"^Requests/sec:\s+([\d.]+)", out, re.MULTILINE)
    total = re.search(r"^\s*(\d+) requests in", out, re.MULTILINE)
    if rps is None or total is None:
        raise BenchError(f"unexpected wrk output:\n{out}")
    return WrkRun(
        float(rps.group(1)), _latency_ms(out, "50"), _latency_ms(out, "99"), int(total.group(1))
    )


def _prepare_file(base: str, project: str, key: str) -> dict[str, Any]:
    """Create, upload and finalize a small text file; wait until its processing is done."""
    api = f"{base}/api/publicv1/projects/{project}/library/files"
    created = request_json(
        "POST",
        api,
        body={"originalname": "notes.txt", "fileType": "txt", "dir": "root"},
        api_key=key,
    )
    request_json(
        "PUT",
        created["storageLink"],
        data=b"libflow benchmark file\n" * 100,
        content_type=created["mimeType"],
    )
    request_json("POST", f"{api}:complete", body={"path": created["path"]}, api_key=key)
    deadline = time.monotonic() + PROCESSING_TIMEOUT
    while time.monotonic() < deadline:
        detail: dict[str, Any] = request_json("GET", f"{api}/{created['documentId']}", api_key=key)
        status = detail["processing"]["status"]
        if status == "done":
            return detail
        if status == "failed":
            raise BenchError(f"processing of the benchmark file failed: {detail}")
        time.sleep(0.2)
    raise BenchError("the benchmark file was not processed in time")


def wrk_comparison(
    name: str, what: str, ours: WrkRun, bare: WrkRun, ratio_goal: float
) -> list[Result]:
    """Throughput (with its ratio goal) and p50/p99 latency of ``ours`` beside the bare handler."""
    return [
        Result(
            name,
            f"{what} throughput",
            ours.requests_per_second,
            "req/s",
            baseline=bare.requests_per_second,
            baseline_label="bare aiohttp",
            goal=f">= {ratio_goal}x",
            met=ours.requests_per_second / bare.requests_per_second >= ratio_goal,
        ),
        *(
            Result(
                name,
                f"{what} {label} latency",
                value,
                "ms",
                baseline=baseline,
                baseline_label="bare aiohttp",
            )
            for label, value, baseline in (
                ("p50", ours.p50_ms, bare.p50_ms),
                ("p99", ours.p99_ms, bare.p99_ms),
            )
        ),
    ]


def floor_row(name: str, what: str, floor: WrkRun, bare: WrkRun) -> Result:
    """The floor's throughput beside the bare handler's."""
    return Result(
        name,
        f"floor: libflow stack, {what}",
        floor.requests_per_second,
        "req/s",
        baseline=bare.requests_per_second,
        baseline_label="bare aiohttp",
    )


def uvloop_row(name: str, what: str, ours: WrkRun, bare_uvloop: WrkRun) -> Result:
    """libflow's throughput beside the bare handler served on uvloop, as libflow is: how much
    of the ratio to the goal's baseline (asyncio's loop) the loop alone accounts for."""
    return Result(
        name,
        f"{what}, vs the bare handler on uvloop",
        ours.requests_per_second,
        "req/s",
        baseline=bare_uvloop.requests_per_second,
        baseline_label="bare aiohttp on uvloop",
    )


def run() -> Report:
    """Warm the servers up, then measure the bare baseline, the floor and libflow back to back."""
    work = Path(tempfile.mkdtemp(prefix="libflow-bench-get-"))
    try:
        data_dir, floor_dir = work / "data", work / "floor"
        env = libflow_env(data_dir)  # LIBFLOW_API_KEY_CACHE_SECONDS left at its default
        floor_env = libflow_env(floor_dir)
        project, key = create_project(env)
        floor_project, floor_key = create_project(floor_env)
        port, baseline_port, floor_port, uvloop_port = (free_port() for _ in range(4))
        with libflow_server(port, data_dir, env, cpu=SERVER_CPU):
            base = f"http://127.0.0.1:{port}"
            detail = _prepare_file(base, project, key)
            payload_path = work / "payload.json"
            body = json.dumps(detail).encode()
            payload_path.write_bytes(body)
            path = f"/api/publicv1/projects/{project}/library/files/{detail['id']}"
            floor_path = FLOOR_GET_FILE_ROUTE.format(projectId=floor_project, fileId=detail["id"])
            baseline_cmd = [PYTHON, "-m", "bench._baseline_app", "--payload", str(payload_path)]
            with (
                server(
                    [*baseline_cmd, "--port", str(baseline_port)],
                    port=baseline_port,
                    env=env,
                    log_path=work / "baseline.log",
                    cpu=SERVER_CPU,
                ),
                floor_server(floor_port, floor_env, work / "floor.log", SERVER_CPU, payload_path),
                server(
                    [*baseline_cmd, "--port", str(uvloop_port)],
                    port=uvloop_port,
                    env={**env, BARE_LOOP_VARIABLE: "uvloop"},
                    log_path=work / "baseline-uvloop.log",
                    cpu=SERVER_CPU,
                ),
            ):
                targets = [
                    (f"http://127.0.0.1:{baseline_port}{path}", None),
                    (f"http://127.0.0.1:{floor_port}{floor_path}", {"Authorization": floor_key}),
                    (base + path, {"Authorization": key}),
                    (f"http://127.0.0.1:{uvloop_port}{path}", None),
                ]
                bare, floor, libflow, bare_uvloop = alternating(targets)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    rows = wrk_comparison(NAME, "GET files/:id", libflow, bare, RATIO_GOAL)
    rows.insert(1, floor_row(NAME, "no read", floor, bare))
    rows.insert(2, uvloop_row(NAME, "GET files/:id", libflow, bare_uvloop))
    notes = [
        f"get_file: wrk -t{THREADS} -c{CONNECTIONS} -d{DURATION_SECONDS}s --latency on CPU "
        f"{WRK_CPU} after a {WARMUP_SECONDS}s warm-up each, {ROUNDS} rounds in turn; all "
        f"servers on CPU {SERVER_CPU}; {bare.requests} / {floor.requests} / {libflow.requests} "
        f"/ {bare_uvloop.requests} requests (bare / floor / libflow / bare on uvloop)",
        rounds_note(
            NAME,
            [
                ("bare", bare),
                ("floor", floor),
                ("libflow", libflow),
                ("bare on uvloop", bare_uvloop),
            ],
        ),
        f"get_file: libflow with LIBFLOW_LOG_LEVEL={LOG_LEVEL} (the INFO access log is off), "
        "LIBFLOW_API_KEY_CACHE_SECONDS default (5), SQLite database; "
        f"JSON body {len(body)} bytes, served re-serialized by the baseline and by the floor "
        "(libflow's app and middlewares around a route that reads nothing); libflow and the "
        "floor run on uvloop (libflow's default), the bare handler on asyncio's loop (aiohttp's "
        "default) and again on uvloop",
    ]
    return Report(rows, notes)


if __name__ == "__main__":
    sys.exit(run_alone(NAME, run))
