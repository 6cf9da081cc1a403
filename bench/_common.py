"""Shared pieces of the benchmarks: result rows, the table, processes and small HTTP calls."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
MiB = 1024 * 1024
# A server on a fresh data dir exports and quantizes the embedding model before it listens:
# 24 s of the 33 it took to answer on a 2-core Intel Xeon, past the 30 s allowed before.
SERVER_START_TIMEOUT = 120.0
SERVER_STOP_TIMEOUT = 15.0
LOG_LEVEL = "WARNING"
# A bare baseline server started with this variable set to "uvloop" runs on uvloop's loop, as
# libflow's servers do; unset, on asyncio's own, as a bare aiohttp handler does by default.
BARE_LOOP_VARIABLE = "BENCH_BARE_LOOP"
# Units of things counted one by one: shown without decimals.
COUNT_UNITS = frozenset({"req", "dlv"})


def bare_event_loop() -> asyncio.AbstractEventLoop | None:
    """The loop a bare baseline serves on (``BARE_LOOP_VARIABLE``); None: run_app's default."""
    if os.environ.get(BARE_LOOP_VARIABLE) == "uvloop":
        import uvloop

        return uvloop.new_event_loop()
    return None


class BenchError(RuntimeError):
    """A benchmark could not produce its figures."""


@dataclass(frozen=True)
class Result:
    """One row of the table: a figure, its baseline and whether it meets its goal."""

    benchmark: str
    figure: str
    value: float
    unit: str
    baseline: float | None = None
    baseline_label: str = ""
    goal: str = "-"
    met: bool | None = None
    error: str | None = None

    @property
    def ratio(self) -> float | None:
        """value / baseline, when there is a baseline."""
        if self.baseline is None or self.baseline == 0:
            return None
        return self.value / self.baseline

    @classmethod
    def failed(cls, benchmark: str, err: BaseException) -> Result:
        """A row standing for a benchmark that raised."""
        return cls(benchmark, "FAILED", float("nan"), "", error=f"{type(err).__name__}: {err}")


@dataclass
class Report:
    """What one benchmark produced: rows for the table and notes printed below it."""

    rows: list[Result] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _number(value: float, unit: str) -> str:
    if value != value:  # NaN
        return "-"
    if value == int(value) and unit in COUNT_UNITS:
        return f"{int(value):,} {unit}"
    digits = 0 if abs(value) >= 1000 else 1 if abs(value) >= 10 else 2
    return f"{value:,.{digits}f} {unit}".strip()


def render_table(reports: Sequence[Report]) -> str:
    """The results as a fixed-width table, the core count, then every note."""
    headers = ("benchmark", "figure", "value", "baseline", "ratio", "goal", "met?")
    lines: list[tuple[str, ...]] = []
    for report in reports:
        for r in report.rows:
            if r.error is not None:
                lines.append((r.benchmark, r.figure, r.error, "-", "-", "-", "no"))
                continue
            baseline = "-"
            if r.baseline is not None:
                baseline = f"{r.baseline_label} {_number(r.baseline, r.unit)}".strip()
            ratio = "-" if r.ratio is None else f"{r.ratio:.2f}x"
            met = "-" if r.met is None else ("yes" if r.met else "NO")
            lines.append(
                (r.benchmark, r.figure, _number(r.value, r.unit), baseline, ratio, r.goal, met)
            )
    widths = [max(len(h), *(len(row[i]) for row in lines)) for i, h in enumerate(headers)]
    out = [
        "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)),
        "  ".join("-" * w for w in widths),
    ]
    out += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in lines]
    out.append("")
    out.append(f"machine: {os.cpu_count()} cores (os.cpu_count()), {_cpu_model()}")
    for report in reports:
        out += [f"note: {n}" for n in report.notes]
    return "\n".join(out)


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown CPU"


def run_alone(name: str, report_factory: Callable[[], Report]) -> int:
    """Run one benchmark as a script: print its table; exit 1 if it failed."""
    install_sigterm_handler()
    try:
        report: Report = report_factory()
    except Exception as err:
        report = Report([Result.failed(name, err)])
    print(render_table([report]))
    return 1 if any(r.error for r in report.rows) else 0


def main_with_baseline(
    argv: list[str] | None,
    description: str | None,
    name: str,
    report_factory: Callable[[], Report],
    serve_baseline: Callable[[int], None],
) -> int:
    """Run one benchmark alone, or serve its baseline with ``serve-baseline --port P``."""
    parser = argparse.ArgumentParser(description=description)
    sub = parser.add_subparsers(dest="command")
    serve = sub.add_parser("serve-baseline", help="serve the bare aiohttp baseline")
    serve.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    if args.command == "serve-baseline":
        serve_baseline(args.port)
        return 0
    return run_alone(name, report_factory)


def _raise_exit(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def install_sigterm_handler() -> None:
    """Turn SIGTERM into SystemExit so ``finally`` blocks stop the servers we started."""
    signal.signal(signal.SIGTERM, _raise_exit)


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def pinned(cpu: int | None, cmd: Sequence[str]) -> list[str]:
    """``cmd`` run through ``taskset -c cpu`` (taskset execs, so the PID is the command's)."""
    if cpu is None or (os.cpu_count() or 1) <= cpu:
        return list(cmd)
    return ["taskset", "-c", str(cpu), *cmd]


def libflow_env(data_dir: Path, **extra: str) -> dict[str, str]:
    """The environment of a libflow process: no inherited LIBFLOW_*, our data dir and log level."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIBFLOW_")}
    env["LIBFLOW_DATA_DIR"] = str(data_dir)
    env["LIBFLOW_LOG_LEVEL"] = LOG_LEVEL
    # One key sends all the load: the limiter still charges every request (its cost is
    # in the figures) but never refuses one.
    env["LIBFLOW_RATE_LIMIT"] = "1000000"
    env.update(extra)
    return env


def create_project(env: Mapping[str, str], name: str = "bench") -> tuple[str, str]:
    """``python -m libflow projects create NAME --json``: (projectId, apiKey)."""
    done = subprocess.run(
        [PYTHON, "-m", "libflow", "projects", "create", name, "--json"],
        cwd=ROOT,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        raise BenchError(f"projects create failed: {done.stderr.strip()[-500:]}")
    data = json.loads(done.stdout.strip().splitlines()[-1])
    return data["projectId"], data["apiKey"]


def _tail(path: Path, chars: int = 800) -> str:
    with contextlib.suppress(OSError):
        return path.read_text(errors="replace")[-chars:]
    return ""


def _wait_ready(
    proc: subprocess.Popen[bytes], url: str, log_path: Path, timeout: float = SERVER_START_TIMEOUT
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BenchError(f"server exited with {proc.returncode}: {_tail(log_path)}")
        with (
            contextlib.suppress(OSError, urllib.error.URLError),
            urllib.request.urlopen(url, timeout=2) as response,
        ):
            if response.status == 200:
                return
        time.sleep(0.1)
    raise BenchError(f"server not ready at {url} after {timeout}s: {_tail(log_path)}")


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group we started for ``proc``; SIGKILL it if it lingers."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(SERVER_STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)


@contextlib.contextmanager
def server(
    cmd: Sequence[str],
    *,
    port: int,
    env: Mapping[str, str],
    log_path: Path,
    cpu: int | None = None,
    ready_path: str = "/healthz",
    start_timeout: float = SERVER_START_TIMEOUT,
) -> Iterator[subprocess.Popen[bytes]]:
    """Start ``cmd`` in its own session, wait for ``ready_path`` to answer 200, stop it after."""
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            pinned(cpu, cmd),
            cwd=ROOT,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait_ready(proc, f"http://127.0.0.1:{port}{ready_path}", log_path, start_timeout)
        yield proc
    finally:
        stop_process(proc)


def libflow_server(
    port: int, data_dir: Path, env: Mapping[str, str], cpu: int | None = None
) -> contextlib.AbstractContextManager[subprocess.Popen[bytes]]:
    """``python run_server.py --port P --data-dir D`` as a managed server process."""
    return server(
        [PYTHON, "run_server.py", "--port", str(port), "--data-dir", str(data_dir)],
        port=port,
        env=env,
        log_path=data_dir.parent / f"libflow-{port}.log",
        cpu=cpu,
    )


# The floor's extra routes (bench._floor_app), registered behind every project route.
FLOOR_RUNSYNC_ROUTE = "/api/publicv1/projects/{projectId}/workflows/{workflowId}/floor"
FLOOR_GET_FILE_ROUTE = "/api/publicv1/projects/{projectId}/library/floor/{fileId}"


def floor_server(
    port: int, env: Mapping[str, str], log_path: Path, cpu: int, payload: Path | None = None
) -> contextlib.AbstractContextManager[subprocess.Popen[bytes]]:
    """``python -m bench._floor_app``: libflow's app with routes that do no work."""
    command = [PYTHON, "-m", "bench._floor_app", "--port", str(port)]
    if payload is not None:
        command += ["--payload", str(payload)]
    return server(command, port=port, env=env, log_path=log_path, cpu=cpu)


def request_json(
    method: str,
    url: str,
    *,
    body: Any = None,
    api_key: str | None = None,
    data: bytes | None = None,
    content_type: str | None = None,
    timeout: float = 30,
) -> Any:
    """One HTTP call; the decoded JSON answer (None when empty). Raises BenchError on >= 400."""
    headers: dict[str, str] = {}
    if api_key is not None:
        headers["Authorization"] = api_key
    if body is not None:
        data = json.dumps(body).encode()
        content_type = "application/json"
    if content_type is not None:
        headers["Content-Type"] = content_type
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as response:
            raw = response.read()
    except urllib.error.HTTPError as err:
        raise BenchError(f"{method} {url} -> {err.code}: {err.read()[:300]!r}") from err
    return json.loads(raw) if raw else None


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile (0 < q <= 100) of ``values``."""
    if not values:
        raise BenchError("no samples")
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def read_proc_status(pid: int) -> dict[str, int]:
    """The kB fields of /proc/PID/status (VmRSS, VmHWM, ...)."""
    values: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if len(parts) == 2 and parts[1] == "kB":
            values[key] = int(parts[0])
    return values
