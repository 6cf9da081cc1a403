"""Soak: minutes of mixed load on the embedded shape; memory at the start and the end, errors.

``python -m bench.soak [--minutes 10]``. One ``run_server.py`` (SQLite, local storage,
in-process jobs, the default embedder) takes, at once and at steady rates: uploads (create,
PUT, finalize), file lists, searches, runsync calls and signed webhook deliveries. The
server's resident memory is sampled throughout; the report compares the first sample after
the warm-up with the last. Every answer that is not the expected status is an error, and
at the end every accepted delivery must have run exactly once and every upload be processed.
Not part of ``python -m bench``: it takes ten minutes by design.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import hashlib
import hmac
import io
import json
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from yarl import URL

from bench import runsync, webhooks
from bench._common import (
    BenchError,
    Report,
    Result,
    create_project,
    free_port,
    libflow_env,
    libflow_server,
    read_proc_status,
    render_table,
)

NAME = "soak"
WARMUP_SECONDS = 30
SAMPLE_SECONDS = 5
# Requests a second of each kind: steady, well below saturation, so that what grows is
# the service's state and memory, not a queue.
RATES = {"upload": 2.0, "list": 20.0, "search": 5.0, "runsync": 40.0, "webhook": 40.0}


@dataclass
class Tally:
    """What the load saw: answers by kind and status, and unexpected ones in detail."""

    answers: Counter[tuple[str, int]] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    deliveries: int = 0
    uploads: int = 0

    def expect(self, kind: str, status: int, expected: int, body: str = "") -> None:
        self.answers[(kind, status)] += 1
        if status != expected:
            self.errors[f"{kind}: {status} {body[:120]}"] += 1


class Soak:
    """The load generator: one loop per kind of request, each at its own rate."""

    def __init__(self, base: str, project: str, key: str, workflow_id: str, hook: Any) -> None:
        self.base = base
        self.api = f"{base}/api/publicv1/projects/{project}"
        self.auth = {"Authorization": key}
        self.workflow_id = workflow_id
        self.hook = hook
        self.tally = Tally()

    async def upload(self, session: aiohttp.ClientSession, n: int) -> None:
        text = " ".join(f"soak{n} line {i} of the quarterly ledger" for i in range(200))
        body = {"originalname": f"soak{n}.txt", "fileType": "txt", "dir": "root"}
        async with session.post(
            f"{self.api}/library/files", json=body, headers=self.auth
        ) as response:
            self.tally.expect("upload create", response.status, 201, await response.text())
            if response.status != 201:
                return
            record = await response.json()
        async with session.put(
            URL(record["storageLink"], encoded=True),
            data=text.encode(),
            headers={"Content-Type": record["mimeType"]},
        ) as response:
            self.tally.expect("upload PUT", response.status, 200, await response.text())
        async with session.post(
            f"{self.api}/library/files:complete", json={"path": record["path"]}, headers=self.auth
        ) as response:
            self.tally.expect("upload finalize", response.status, 200, await response.text())
        self.tally.uploads += 1

    async def list(self, session: aiohttp.ClientSession, n: int) -> None:
        async with session.get(
            f"{self.api}/library/files?limit=100", headers=self.auth
        ) as response:
            self.tally.expect("list", response.status, 200, await response.text())

    async def search(self, session: aiohttp.ClientSession, n: int) -> None:
        async with session.get(
            f"{self.api}/library/search?q=quarterly+ledger", headers=self.auth
        ) as response:
            self.tally.expect("search", response.status, 200, await response.text())

    async def runsync(self, session: aiohttp.ClientSession, n: int) -> None:
        async with session.post(
            f"{self.api}/workflows/{self.workflow_id}/runsync",
            json={"inputs": {"name": f"soak{n}"}},
            headers=self.auth,
        ) as response:
            self.tally.expect("runsync", response.status, 200, await response.text())

    async def webhook(self, session: aiohttp.ClientSession, n: int) -> None:
        body = json.dumps({"type": "soak", "n": n}).encode()
        msg_id = f"msg_soak_{n}"
        stamp = str(int(time.time()))
        key = base64.b64decode(self.hook["secret"].removeprefix("whsec_"))
        signed = hmac.new(key, f"{msg_id}.{stamp}.".encode() + body, hashlib.sha256).digest()
        headers = {
            "webhook-id": msg_id,
            "webhook-timestamp": stamp,
            "webhook-signature": "v1," + base64.b64encode(signed).decode(),
            "Content-Type": "application/json",
        }
        async with session.post(
            self.hook["url"], data=io.BytesIO(body), headers=headers
        ) as response:
            self.tally.expect("webhook", response.status, 200, await response.text())
        if response.status == 200:
            self.tally.deliveries += 1

    async def steady(
        self,
        session: aiohttp.ClientSession,
        kind: str,
        rate: float,
        until: float,
    ) -> None:
        """Start one ``kind`` request every 1/rate seconds until ``until`` (not waiting)."""
        action: Callable[[aiohttp.ClientSession, int], Awaitable[None]] = getattr(self, kind)
        running: set[asyncio.Task[None]] = set()
        started = time.monotonic()
        n = 0
        while (now := time.monotonic()) < until:
            due = started + n / rate
            if due > now:
                await asyncio.sleep(due - now)
            task = asyncio.create_task(self._guarded(kind, action, session, n))
            running.add(task)
            task.add_done_callback(running.discard)
            n += 1
        await asyncio.gather(*running)

    async def _guarded(
        self,
        kind: str,
        action: Callable[[aiohttp.ClientSession, int], Awaitable[None]],
        session: aiohttp.ClientSession,
        n: int,
    ) -> None:
        try:
            await action(session, n)
        except (aiohttp.ClientError, TimeoutError) as err:
            self.tally.errors[f"{kind}: {type(err).__name__}: {err}"[:160]] += 1


async def _sample_memory(pid: int, samples: list[tuple[float, int]], until: float) -> None:
    started = time.monotonic()
    while time.monotonic() < until:
        samples.append((time.monotonic() - started, read_proc_status(pid)["VmRSS"] * 1024))
        await asyncio.sleep(SAMPLE_SECONDS)
    samples.append((time.monotonic() - started, read_proc_status(pid)["VmRSS"] * 1024))


async def _load(soak: Soak, pid: int, seconds: float) -> list[tuple[float, int]]:
    samples: list[tuple[float, int]] = []
    until = time.monotonic() + seconds
    connector = aiohttp.TCPConnector(limit=64)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(
            _sample_memory(pid, samples, until),
            *(soak.steady(session, kind, rate, until) for kind, rate in RATES.items()),
        )
    return samples


def _counts(database: Path, sql: str) -> Counter[str]:
    """``SELECT key, count(*) ...`` on the server's SQLite file (read-only)."""
    with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
        return Counter({str(key): int(count) for key, count in db.execute(sql)})


async def _settled(database: Path, timeout: float = 300) -> tuple[Counter[str], Counter[str]]:
    """Wait for processing and deliveries to finish; deliveries and files by status.

    Read from the database: the API lists at most 1000 of each.
    """
    deadline = time.monotonic() + timeout
    while True:
        deliveries = _counts(
            database, "SELECT status, count(*) FROM webhook_deliveries GROUP BY status"
        )
        files = _counts(database, "SELECT status, count(*) FROM library_files GROUP BY status")
        busy = sum(deliveries[s] + files[s] for s in ("pending", "running", "processing"))
        if not busy or time.monotonic() > deadline:
            return deliveries, files
        await asyncio.sleep(2)


def run(minutes: float = 10) -> Report:
    """Start the embedded server, load it for ``minutes``, report memory and errors."""
    seconds = minutes * 60
    work = Path(tempfile.mkdtemp(prefix="libflow-soak-"))
    data_dir = work / "data"
    env = libflow_env(data_dir)
    project, key = create_project(env)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with libflow_server(port, data_dir, env) as proc:
        soak_setup = asyncio.run(_set_up(base, project, key))
        soak = Soak(base, project, key, *soak_setup)
        samples = asyncio.run(_load(soak, proc.pid, seconds))
        database = data_dir / "libflow.sqlite3"
        deliveries, files = asyncio.run(_settled(database))
        webhook_runs = _counts(
            database, "SELECT trigger, count(*) FROM workflow_runs GROUP BY trigger"
        )["webhook"]
        final_rss = read_proc_status(proc.pid)["VmRSS"] * 1024
    after_warmup = [rss for at, rss in samples if at >= WARMUP_SECONDS] or [samples[-1][1]]
    start_rss, end_rss = after_warmup[0], final_rss
    peak = max(rss for _, rss in samples)
    requests = sum(soak.tally.answers.values())
    errors = sum(soak.tally.errors.values())
    mib = 1024 * 1024
    rows = [
        Result(NAME, f"server RSS after {WARMUP_SECONDS}s warm-up", start_rss / mib, "MiB"),
        Result(
            NAME,
            f"server RSS after {minutes:g} min (end / start)",
            end_rss / mib,
            "MiB",
            baseline=start_rss / mib,
            baseline_label="RSS after warm-up",
            goal="flat (< 1.25x)",
            met=end_rss < 1.25 * start_rss,
        ),
        Result(NAME, "server peak RSS", peak / mib, "MiB"),
        Result(NAME, "requests answered", requests, "req"),
        Result(NAME, "unexpected answers", errors, "req", goal="0", met=errors == 0),
        Result(
            NAME,
            "deliveries run once",
            deliveries["succeeded"],
            "dlv",
            baseline=soak.tally.deliveries,
            baseline_label="deliveries accepted",
            goal="all",
            met=deliveries["succeeded"]
            == soak.tally.deliveries
            == sum(deliveries.values())
            == webhook_runs,
        ),
    ]
    notes = [
        f"soak: {minutes:g} min on the embedded shape (SQLite, local storage, in-process jobs, "
        f"LIBFLOW_EMBEDDER default), rates per second {RATES}; answers by kind and status: "
        + ", ".join(f"{k} {s}: {c}" for (k, s), c in sorted(soak.tally.answers.items())),
        f"soak: at the end, files by status {dict(files)} (uploaded {soak.tally.uploads}), "
        f"deliveries by status {dict(deliveries)}, webhook-triggered runs {webhook_runs}",
        "soak: RSS samples (s, MiB): "
        + " ".join(
            f"{at:.0f}:{rss / mib:.0f}" for at, rss in samples[:: max(1, len(samples) // 24)]
        ),
    ]
    notes += [f"soak error: {count} x {what}" for what, count in soak.tally.errors.most_common(10)]
    return Report(rows, notes)


async def _set_up(base: str, project: str, key: str) -> tuple[str, dict[str, Any]]:
    """The runsync benchmark's workflow, and a webhook on the webhook benchmark's one."""
    auth = {"Authorization": key}
    api = f"{base}/api/publicv1/projects/{project}"
    created = {}
    async with aiohttp.ClientSession() as session:
        for name, definition in (("runsync", runsync.DEFINITION), ("hook", webhooks.DEFINITION)):
            async with session.post(
                f"{api}/workflows", json={"name": name, "definition": definition}, headers=auth
            ) as response:
                if response.status != 201:
                    raise BenchError(f"workflow not created: {await response.text()}")
                created[name] = (await response.json())["workflowId"]
        async with session.post(
            f"{api}/workflows/{created['hook']}/webhooks", json={}, headers=auth
        ) as response:
            if response.status != 201:
                raise BenchError(f"webhook not created: {await response.text()}")
            hook: dict[str, Any] = await response.json()
    return created["runsync"], hook


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.soak [--minutes N]``: print the table; exit 1 if a goal is missed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    args = parser.parse_args(argv)
    report = run(args.minutes)
    print(render_table([report]))
    return 0 if all(row.met is not False for row in report.rows) else 1


if __name__ == "__main__":
    sys.exit(main())
