"""PUT of 1 GiB through the local storage backend of a real server, against ``dd`` to that disk.

Also samples the server's VmRSS every 50 ms during the upload for its peak growth.
Run alone with ``python -m bench.upload``.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from bench._common import (
    BenchError,
    MiB,
    Report,
    Result,
    create_project,
    free_port,
    libflow_env,
    libflow_server,
    pinned,
    read_proc_status,
    request_json,
    run_alone,
)

NAME = "upload"
SIZE = 1024 * MiB
ROUNDS = 5
SERVER_CPU = 0
CLIENT_CPU = 1
THROUGHPUT_GOAL = 0.7
RSS_GOAL_MIB = 32.0
SAMPLE_SECONDS = 0.05
STEP_TIMEOUT = 120.0
CONTENT_TYPE = "text/plain"


class RssSampler(threading.Thread):
    """Reads VmRSS of ``pid`` every ``interval`` seconds until stopped; keeps the peak."""

    def __init__(self, pid: int, interval: float = SAMPLE_SECONDS) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.interval = interval
        self.peak_kib = 0
        self.samples = 0
        self._halt = threading.Event()

    def run(self) -> None:
        while True:
            try:
                rss = read_proc_status(self.pid).get("VmRSS", 0)
            except OSError:
                return
            self.peak_kib = max(self.peak_kib, rss)
            self.samples += 1
            if self._halt.wait(self.interval):
                return

    def stop(self) -> None:
        self._halt.set()
        self.join()


@dataclass(frozen=True)
class UploadRun:
    seconds: float
    cpu_seconds: float
    rss_before_kib: int
    peak_growth_kib: int
    samples: int


def _dd(target: Path) -> float:
    """Seconds ``dd`` takes to write SIZE zero bytes to ``target`` and fsync them."""
    cmd = ["dd", "if=/dev/zero", f"of={target}", "bs=1M", f"count={SIZE // MiB}", "conv=fsync"]
    os.sync()
    started = time.perf_counter()
    done = subprocess.run(
        pinned(SERVER_CPU, [*cmd, "status=none"]),
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT,
        check=False,
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise BenchError(f"dd failed: {done.stderr.strip()}")
    if target.stat().st_size != SIZE:
        raise BenchError(f"dd wrote {target.stat().st_size} bytes, not {SIZE}")
    target.unlink()
    os.sync()
    return seconds


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of every thread of ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _upload(base: str, project: str, key: str, pid: int, source: Path, objects: Path) -> UploadRun:
    """Create a file record, PUT ``source`` to its storageLink with curl, delete it again."""
    created = request_json(
        "POST",
        f"{base}/api/publicv1/projects/{project}/library/files",
        body={"originalname": "bench.txt", "fileType": "txt", "dir": "root"},
        api_key=key,
    )
    before = read_proc_status(pid)
    cpu_before = _cpu_seconds(pid)
    sampler = RssSampler(pid)
    sampler.start()
    cmd = [
        "curl",
        "-sS",
        "--max-time",
        str(int(STEP_TIMEOUT)),
        "-T",
        str(source),
        "-H",
        f"Content-Type: {created['mimeType']}",
        "-H",
        "Expect:",  # no 100-continue round trip
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        created["storageLink"],
    ]
    started = time.perf_counter()
    try:
        done = subprocess.run(
            pinned(CLIENT_CPU, cmd),
            capture_output=True,
            text=True,
            timeout=STEP_TIMEOUT + 10,
            check=False,
        )
        seconds = time.perf_counter() - started
    finally:
        sampler.stop()
    after = read_proc_status(pid)
    cpu = _cpu_seconds(pid) - cpu_before
    if done.returncode != 0 or done.stdout.strip() != "200":
        raise BenchError(f"PUT failed: curl rc={done.returncode} status={done.stdout!r}")
    stored = objects / created["path"]
    if stored.stat().st_size != SIZE:
        raise BenchError(f"the server stored {stored.stat().st_size} bytes, not {SIZE}")
    request_json(
        "DELETE",
        f"{base}/api/publicv1/projects/{project}/library/files/{created['documentId']}",
        api_key=key,
    )
    os.sync()
    peak = sampler.peak_kib
    if after["VmHWM"] > before["VmHWM"]:
        peak = max(peak, after["VmHWM"])
    return UploadRun(seconds, cpu, before["VmRSS"], peak - before["VmRSS"], sampler.samples)


def run() -> Report:
    """ROUNDS alternating dd / PUT runs on one filesystem; the median throughput of each."""
    work = Path(tempfile.mkdtemp(prefix="libflow-bench-upload-"))
    try:
        data_dir = work / "data"
        source = work / "input.bin"
        with source.open("wb") as f:
            f.truncate(SIZE)  # sparse zeros: reading it costs the client no disk I/O
        env = libflow_env(data_dir, LIBFLOW_MAX_UPLOAD_BYTES=str(2 * SIZE))
        project, key = create_project(env)
        port = free_port()
        with libflow_server(port, data_dir, env, cpu=SERVER_CPU) as proc:
            base = f"http://127.0.0.1:{port}"
            objects = data_dir / "objects"
            dd_seconds: list[float] = []
            uploads: list[UploadRun] = []
            for _ in range(ROUNDS):
                dd_seconds.append(_dd(objects / "dd.bin"))
                uploads.append(_upload(base, project, key, proc.pid, source, objects))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    put_mib_s = SIZE / MiB / statistics.median(u.seconds for u in uploads)
    dd_mib_s = SIZE / MiB / statistics.median(dd_seconds)
    growth_mib = max(u.peak_growth_kib for u in uploads) / 1024
    ratio = put_mib_s / dd_mib_s
    rows = [
        Result(
            NAME,
            "PUT 1 GiB (local storage) throughput",
            put_mib_s,
            "MiB/s",
            baseline=dd_mib_s,
            baseline_label="dd conv=fsync",
            goal=f">= {THROUGHPUT_GOAL}x",
            met=ratio >= THROUGHPUT_GOAL,
        ),
        Result(
            NAME,
            "server peak RSS growth during PUT",
            growth_mib,
            "MiB",
            goal=f"< {RSS_GOAL_MIB:.0f} MiB",
            met=growth_mib < RSS_GOAL_MIB,
        ),
    ]
    notes = [
        f"upload: median of {ROUNDS} alternating dd/PUT runs; server and dd on CPU "
        f"{SERVER_CPU}, curl -T on CPU {CLIENT_CPU}; sparse zero-filled input",
        "upload: dd s / PUT s (server CPU s) per round: "
        + ", ".join(
            f"{d:.2f}/{u.seconds:.2f} ({u.cpu_seconds:.2f})"
            for d, u in zip(dd_seconds, uploads, strict=True)
        ),
        "upload: RSS = VmRSS sampled every 50 ms (+ VmHWM); before-upload RSS "
        + ", ".join(f"{u.rss_before_kib / 1024:.1f} MiB ({u.samples} samples)" for u in uploads),
    ]
    return Report(rows, notes)


if __name__ == "__main__":
    sys.exit(run_alone(NAME, run))
