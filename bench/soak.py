"""Soak: minutes of mixed load on the embedded shape; memory at the start and the end, errors.

``python -m bench.soak [--minutes 10] [--workers N]``. One ``run_server.py`` (SQLite, local
storage, in-process jobs, the default embedder) takes, at once and at steady rates: uploads
(create, PUT, finalize), file lists, searches, runsync calls and signed webhook deliveries.
The server's resident memory is sampled throughout; the report compares the first sample
after the warm-up with the last. Every answer that is not the expected status is an error,
and at the end every accepted delivery must have run exactly once (one whose answer never
came, at most once) and every upload be processed. Not part of ``python -m bench``: it
takes ten minutes by design. Besides end against start, each server's RSS growth a minute
from the second minute on (a least-squares slope) says whether memory keeps growing.

``--only KIND[,KIND]`` runs only those kinds of load (of ``RATES``; /healthz always), to
tell which one moves memory.

``--workers N`` (N > 1) starts ``run_server.py --workers N``: a supervisor and N server
processes on one port. The RSS of each of them (the servers found as the supervisor's
children, labelled by their slot) is sampled and compared on its own, and a server that
the supervisor had to start again during the soak (its pid gone or a new one among the
children, or a restart in the log) is an error.

``--hostile`` adds, at low rates, what one API key could send to exhaust the server: a
template that would build gigabytes, a run that sets huge outputs, JSON with NaN, and a
docx bomb (a few hundred KB inflating to tens of MB of XML). Each must get its documented
refusal (or, for the docx, end ``failed``), and the report adds the server's peak RSS and
/healthz latency (p99, max) under that load, which is probed ten times a second throughout.
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
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from yarl import URL

from bench import runsync, webhooks
from bench._common import (
    PYTHON,
    SERVER_START_TIMEOUT,
    BenchError,
    Report,
    Result,
    create_project,
    free_port,
    libflow_env,
    libflow_server,
    read_proc_status,
    render_table,
    server,
)
from libflow.supervisor import GROUP_SLOT_ENV

NAME = "soak"
WARMUP_SECONDS = 30
SAMPLE_SECONDS = 5
# Requests a second of each kind: steady, well below saturation, so that what grows is
# the service's state and memory, not a queue.
RATES = {"upload": 2.0, "list": 20.0, "search": 5.0, "runsync": 40.0, "webhook": 40.0}
HEALTHZ_RATE = 10.0
# Searches, each through a new connection, before the load and its clock start: the kernel
# spreads new connections over a group's servers (SO_REUSEPORT), so every server answers
# one (that all 16 reach one of two servers: 2 in 65,536) and loads its embedding model
# then. Otherwise a server's first search could come minutes in, over the few connections
# the steady load keeps open, and its model's load would count as growth.
WARMUP_SEARCHES = 16
HOSTILE_RATES = {
    "template_bomb": 0.5,
    "output_bomb": 0.5,
    "nan_json": 1.0,
    "docx_bomb": 0.1,
}
# What a hostile load may add to the server's RSS above its RSS after the warm-up.
HOSTILE_RSS_BOUND_MIB = 512
# A template that would build 5 GB if sizes were charged after building (43 bytes).
TEMPLATE_BOMB = "{% set s='a'*50000 %}{{ [s]*100000 }}"
DOCX_BOMB_XML_MIB = 64


def docx_bomb() -> bytes:
    """A docx whose document.xml inflates to DOCX_BOMB_XML_MIB of empty paragraphs."""
    paragraph = b"<w:p/>"
    head = (
        b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
        b'<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">'
        b"<w:body>"
    )
    body = paragraph * (DOCX_BOMB_XML_MIB * 1024 * 1024 // len(paragraph))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        archive.writestr(
            "[Content_Types].xml",
            '<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.'
            'org/package/2006/content-types"><Default Extension="rels" ContentType="application/'
            'vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" ContentType='
            '"application/xml"/><Override PartName="/word/document.xml" ContentType="application/'
            'vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>',
        )
        archive.writestr(
            "_rels/.rels",
            '<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.'
            'openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http:'
            '//schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" '
            'Target="word/document.xml"/></Relationships>',
        )
        archive.writestr("word/document.xml", head + body + b"</w:body></w:document>")
    return out.getvalue()


@dataclass
class Tally:
    """What the load saw: answers by kind and status, and unexpected ones in detail."""

    answers: Counter[tuple[str, int]] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    deliveries: int = 0
    # Deliveries sent but never answered (a client timeout): the server may have stored one.
    deliveries_unanswered: int = 0
    uploads: int = 0
    hostile_uploads: int = 0
    healthz_seconds: list[float] = field(default_factory=list)

    def expect(self, kind: str, status: int, expected: int, body: str = "") -> None:
        self.answers[(kind, status)] += 1
        if status != expected:
            self.errors[f"{kind}: {status} {body[:120]}"] += 1


class Soak:
    """The load generator: one loop per kind of request, each at its own rate."""

    def __init__(
        self,
        base: str,
        project: str,
        key: str,
        workflow_id: str,
        hook: Any,
        hostile_workflows: dict[str, str] | None = None,
    ) -> None:
        self.base = base
        self.hostile_workflows = hostile_workflows or {}
        self._docx_bomb = docx_bomb() if hostile_workflows else b""
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
        try:
            async with session.post(
                self.hook["url"], data=io.BytesIO(body), headers=headers
            ) as response:
                self.tally.expect("webhook", response.status, 200, await response.text())
        except (aiohttp.ClientError, TimeoutError):
            self.tally.deliveries_unanswered += 1
            raise
        if response.status == 200:
            self.tally.deliveries += 1

    async def healthz(self, session: aiohttp.ClientSession, n: int) -> None:
        started = time.monotonic()
        async with session.get(f"{self.base}/healthz") as response:
            await response.read()
            self.tally.expect("healthz", response.status, 200)
        self.tally.healthz_seconds.append(time.monotonic() - started)

    async def _refused(
        self, session: aiohttp.ClientSession, kind: str, workflow: str, expected: set[int]
    ) -> None:
        """A hostile runsync: any of the ``expected`` statuses with a JSON error is fine."""
        async with session.post(
            f"{self.api}/workflows/{self.hostile_workflows[workflow]}/runsync",
            json={},
            headers=self.auth,
        ) as response:
            text = await response.text()
            status = response.status if response.status not in expected else min(expected)
            self.tally.expect(kind, status, min(expected), text)

    async def template_bomb(self, session: aiohttp.ClientSession, n: int) -> None:
        await self._refused(session, "template_bomb", "template_bomb", {500, 504})

    async def output_bomb(self, session: aiohttp.ClientSession, n: int) -> None:
        await self._refused(session, "output_bomb", "output_bomb", {500, 504})

    async def nan_json(self, session: aiohttp.ClientSession, n: int) -> None:
        async with session.post(
            f"{self.api}/workflows/{self.workflow_id}/runsync",
            data=b'{"inputs": {"name": NaN, "x": 1e999}}',
            headers={**self.auth, "Content-Type": "application/json"},
        ) as response:
            self.tally.expect("nan_json", response.status, 400, await response.text())

    async def docx_bomb(self, session: aiohttp.ClientSession, n: int) -> None:
        body = {"originalname": f"bomb{n}.docx", "fileType": "docx", "dir": "root"}
        async with session.post(
            f"{self.api}/library/files", json=body, headers=self.auth
        ) as response:
            self.tally.expect("docx_bomb create", response.status, 201, await response.text())
            if response.status != 201:
                return
            record = await response.json()
        async with session.put(
            URL(record["storageLink"], encoded=True),
            data=self._docx_bomb,
            headers={"Content-Type": record["mimeType"]},
        ) as response:
            self.tally.expect("docx_bomb PUT", response.status, 200, await response.text())
        async with session.post(
            f"{self.api}/library/files:complete", json={"path": record["path"]}, headers=self.auth
        ) as response:
            self.tally.expect("docx_bomb finalize", response.status, 200, await response.text())
        self.tally.hostile_uploads += 1

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


def _growth_per_minute(samples: list[tuple[float, int]], since: float = 120.0) -> float:
    """The least-squares slope of RSS over time, in bytes a minute, of samples after ``since``."""
    kept = [(at / 60, rss) for at, rss in samples if at >= since]
    if len({minute for minute, _ in kept}) < 2:
        return 0.0
    minutes, rss = zip(*kept, strict=True)
    return statistics.linear_regression(minutes, rss).slope


def _rss(pid: int) -> int | None:
    """The resident memory of ``pid`` in bytes; None once it is gone (or a zombie)."""
    try:
        return read_proc_status(pid)["VmRSS"] * 1024
    except (OSError, KeyError):
        return None


def _children(pid: int) -> set[int]:
    """The pids of ``pid``'s children, from /proc/PID/task/*/children or else a /proc scan."""
    files = list(Path(f"/proc/{pid}/task").glob("*/children"))
    if files:
        found: set[int] = set()
        for path in files:
            with contextlib.suppress(OSError):  # a thread that ended meanwhile
                found.update(int(child) for child in path.read_text().split())
        return found
    # Without CONFIG_PROC_CHILDREN: the parent pid is the second field after "(comm)".
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            if int(stat.read_text().rpartition(")")[2].split()[1]) == pid:
                found.add(int(stat.parent.name))
    return found


def _slot(pid: int) -> str:
    """A supervised server's slot, from its environment ("?" when unreadable)."""
    with contextlib.suppress(OSError):
        for entry in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
            name, _, value = entry.partition(b"=")
            if name == GROUP_SLOT_ENV.encode():
                return value.decode()
    return "?"


@dataclass
class Watch:
    """The processes whose RSS is sampled (label -> pid), and changes among the servers.

    With a supervisor, its servers must stay the children it had after the start: a pid
    that goes, or one that appears, is a server that died and was started again.
    """

    pids: dict[str, int]
    supervisor: int | None = None
    samples: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    gone: dict[int, float] = field(default_factory=dict)
    new: dict[int, float] = field(default_factory=dict)

    def sample(self, at: float) -> None:
        for label, pid in self.pids.items():
            rss = _rss(pid)
            if rss is not None:
                self.samples.setdefault(label, []).append((at, rss))
        if self.supervisor is None:
            return
        servers = {pid for label, pid in self.pids.items() if label != "supervisor"}
        now = _children(self.supervisor)
        for pid in servers - now:
            self.gone.setdefault(pid, at)
        for pid in now - servers:
            self.new.setdefault(pid, at)

    def changes(self) -> list[str]:
        return [f"server pid {pid} gone at {at:.0f}s" for pid, at in self.gone.items()] + [
            f"new server pid {pid} at {at:.0f}s" for pid, at in self.new.items()
        ]


def _watch(proc: subprocess.Popen[bytes], workers: int, timeout: float = 60) -> Watch:
    """What to sample: the server alone, or the supervisor and its ``workers`` servers."""
    if workers == 1:
        return Watch({"server": proc.pid})
    deadline = time.monotonic() + timeout
    while len(children := _children(proc.pid)) < workers:
        if time.monotonic() > deadline or proc.poll() is not None:
            raise BenchError(f"supervisor {proc.pid} has {len(children)} of {workers} servers")
        time.sleep(0.2)
    slots = sorted((_slot(pid), pid) for pid in children)
    return Watch(
        {"supervisor": proc.pid, **{f"server {slot}": pid for slot, pid in slots}},
        supervisor=proc.pid,
    )


async def _sample_memory(watch: Watch, until: float) -> None:
    started = time.monotonic()
    while time.monotonic() < until:
        watch.sample(time.monotonic() - started)
        await asyncio.sleep(SAMPLE_SECONDS)
    watch.sample(time.monotonic() - started)


async def _every_server_searched(soak: Soak) -> None:
    """WARMUP_SEARCHES searches, each through a connection of its own."""
    for n in range(WARMUP_SEARCHES):
        connector = aiohttp.TCPConnector(force_close=True)
        async with aiohttp.ClientSession(connector=connector) as session:
            await soak.search(session, n)


async def _load(soak: Soak, watch: Watch, seconds: float, load: dict[str, float]) -> None:
    await _every_server_searched(soak)
    until = time.monotonic() + seconds
    rates = {**load, "healthz": HEALTHZ_RATE}
    if soak.hostile_workflows:
        rates.update(HOSTILE_RATES)
    connector = aiohttp.TCPConnector(limit=64)
    # Its own connections: a probe must not queue behind the load's.
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        aiohttp.ClientSession() as probe,
    ):
        await asyncio.gather(
            _sample_memory(watch, until),
            *(
                soak.steady(probe if kind == "healthz" else session, kind, rate, until)
                for kind, rate in rates.items()
            ),
        )


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


def _server(
    port: int, data_dir: Path, env: dict[str, str], workers: int
) -> contextlib.AbstractContextManager[subprocess.Popen[bytes]]:
    """``run_server.py``, alone or (``workers`` > 1) as a supervisor of that many servers."""
    if workers == 1:
        return libflow_server(port, data_dir, env)
    return server(
        [
            *(PYTHON, "run_server.py", "--port", str(port), "--data-dir", str(data_dir)),
            *("--workers", str(workers)),
        ],
        port=port,
        env=env,
        log_path=data_dir.parent / f"libflow-{port}.log",
        # N servers load their models at once, on a machine that may be busy.
        start_timeout=SERVER_START_TIMEOUT * workers * 2,
    )


def _restarts_logged(log_path: Path) -> int:
    """The supervisor's "server N exited (...); starting it again" lines."""
    with contextlib.suppress(OSError):
        return log_path.read_text(errors="replace").count("starting it again")
    return 0


def run(
    minutes: float = 10, hostile: bool = False, workers: int = 1, kinds: tuple[str, ...] = ()
) -> Report:
    """Start the embedded server, load it for ``minutes``, report memory and errors."""
    seconds = minutes * 60
    load = {kind: RATES[kind] for kind in kinds or RATES}
    work = Path(tempfile.mkdtemp(prefix="libflow-soak-"))
    data_dir = work / "data"
    env = libflow_env(data_dir)
    project, key = create_project(env)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with _server(port, data_dir, env, workers) as proc:
        watch = _watch(proc, workers)
        workflow_id, hook, hostile_workflows = asyncio.run(_set_up(base, project, key, hostile))
        soak = Soak(base, project, key, workflow_id, hook, hostile_workflows)
        asyncio.run(_load(soak, watch, seconds, load))
        database = data_dir / "libflow.sqlite3"
        deliveries, files = asyncio.run(_settled(database))
        webhook_runs = _counts(
            database, "SELECT trigger, count(*) FROM workflow_runs GROUP BY trigger"
        )["webhook"]
        final_rss = {label: _rss(pid) for label, pid in watch.pids.items()}
        watch.sample(seconds)  # the last look at the supervisor's children
    restarts = max(len(watch.gone), len(watch.new), _restarts_logged(work / f"libflow-{port}.log"))
    requests = sum(soak.tally.answers.values())
    errors = sum(soak.tally.errors.values())
    mib = 1024 * 1024
    where = f"{workers} servers and their supervisor" if workers > 1 else "the server"
    rows: list[Result] = []
    for label, pid in watch.pids.items():
        samples = watch.samples.get(label) or [(0.0, 0)]
        after_warmup = [rss for at, rss in samples if at >= WARMUP_SECONDS] or [samples[-1][1]]
        start_rss, end_rss = after_warmup[0], final_rss[label]
        name = label if workers == 1 else f"{label} (pid {pid})"
        rows += [
            Result(NAME, f"{name} RSS after {WARMUP_SECONDS}s warm-up", start_rss / mib, "MiB"),
            Result(
                NAME,
                f"{name} RSS after {minutes:g} min (end / start)"
                + ("" if end_rss is not None else ": gone"),
                (end_rss or 0) / mib,
                "MiB",
                baseline=start_rss / mib,
                baseline_label="RSS after warm-up",
                goal="flat (< 1.25x)",
                met=end_rss is not None and end_rss < 1.25 * start_rss,
            ),
        ]
        if label == "supervisor":
            continue
        # The end/start ratio counts what start-up had not loaded yet at the warm-up's end
        # (a process waiting for another's model export loads it later): the slope of the
        # samples from the second minute on says whether memory keeps growing.
        rows.append(
            Result(
                NAME,
                f"{name} RSS growth from minute 2 (least squares)",
                _growth_per_minute(samples) / mib,
                "MiB/min",
            )
        )
        peak = max(rss for _, rss in samples)
        rows.append(
            Result(
                NAME,
                f"{name} peak RSS" + (" (hostile load)" if hostile else ""),
                peak / mib,
                "MiB",
                baseline=start_rss / mib,
                baseline_label="RSS after warm-up",
                goal=f"< +{HOSTILE_RSS_BOUND_MIB} MiB" if hostile else "-",
                met=(peak - start_rss) / mib < HOSTILE_RSS_BOUND_MIB if hostile else None,
            )
        )
    if workers > 1:
        rows.append(
            Result(NAME, "servers started again", restarts, "", goal="0", met=restarts == 0)
        )
    rows += [
        Result(
            NAME,
            "/healthz p99 latency" + (" (hostile load)" if hostile else ""),
            _percentile(soak.tally.healthz_seconds, 0.99) * 1000,
            "ms",
            goal="< 1000 ms",
            met=_percentile(soak.tally.healthz_seconds, 0.99) < 1.0,
        ),
        Result(NAME, "/healthz max latency", max(soak.tally.healthz_seconds) * 1000, "ms"),
        Result(NAME, "requests answered", requests, "req"),
        Result(
            NAME,
            "uploads processed as expected",
            files["done"] + files["failed"],
            "files",
            baseline=soak.tally.uploads + soak.tally.hostile_uploads,
            baseline_label="uploads finalized",
            goal="done; bombs failed",
            met=files["done"] == soak.tally.uploads
            and files["failed"] == soak.tally.hostile_uploads,
        ),
        Result(NAME, "unexpected answers", errors, "req", goal="0", met=errors == 0),
        Result(
            NAME,
            "deliveries run once",
            deliveries["succeeded"],
            "dlv",
            baseline=soak.tally.deliveries,
            baseline_label="deliveries accepted",
            goal="all",
            # Each stored delivery ran once; every accepted one was stored, and the only
            # others are deliveries whose answer the client never saw.
            met=deliveries["succeeded"] == sum(deliveries.values()) == webhook_runs
            and soak.tally.deliveries
            <= deliveries["succeeded"]
            <= soak.tally.deliveries + soak.tally.deliveries_unanswered,
        ),
    ]
    notes = [
        f"soak: {minutes:g} min on the embedded shape (SQLite, local storage, in-process jobs, "
        f"LIBFLOW_EMBEDDER default), {where}, rates per second {load}; answers by kind and "
        "status: " + ", ".join(f"{k} {s}: {c}" for (k, s), c in sorted(soak.tally.answers.items())),
        f"soak: at the end, files by status {dict(files)} (uploaded {soak.tally.uploads}), "
        f"deliveries by status {dict(deliveries)}, webhook-triggered runs {webhook_runs}, "
        f"deliveries sent and never answered {soak.tally.deliveries_unanswered}",
    ]
    for label, samples in watch.samples.items():
        notes.append(
            f"soak: {label} RSS samples (s, MiB): "
            + " ".join(
                f"{at:.0f}:{rss / mib:.0f}" for at, rss in samples[:: max(1, len(samples) // 24)]
            )
        )
    notes += [f"soak error: {change}" for change in watch.changes()]
    notes += [f"soak error: {count} x {what}" for what, count in soak.tally.errors.most_common(10)]
    return Report(rows, notes)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values) or [0.0]
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _hostile_definition(value: str) -> dict[str, Any]:
    """A workflow whose one set_output node renders ``value``."""
    return {
        "timeoutSeconds": 5,
        "nodes": [
            {"id": "start", "type": "event", "event": "run"},
            *(
                {"id": f"out{i}", "type": "set_output", "name": f"o{i}", "value": value}
                for i in range(20)
            ),
        ],
        "edges": [{"from": "start", "to": f"out{i}"} for i in range(20)],
    }


async def _set_up(
    base: str, project: str, key: str, hostile: bool
) -> tuple[str, dict[str, Any], dict[str, str]]:
    """The runsync benchmark's workflow, a webhook on the webhook benchmark's one, and the
    hostile workflows (when asked for)."""
    auth = {"Authorization": key}
    api = f"{base}/api/publicv1/projects/{project}"
    created: dict[str, str] = {}
    definitions: list[tuple[str, dict[str, Any]]] = [
        ("runsync", runsync.DEFINITION),
        ("hook", webhooks.DEFINITION),
    ]
    if hostile:
        definitions += [
            ("template_bomb", _hostile_definition(TEMPLATE_BOMB)),
            ("output_bomb", _hostile_definition("{{ 'a' * 8000000 }}")),
        ]
    async with aiohttp.ClientSession() as session:
        for name, definition in definitions:
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
    hostile_workflows: dict[str, str] = {
        name: created[name] for name in ("template_bomb", "output_bomb") if name in created
    }
    return created["runsync"], hook, hostile_workflows


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.soak [--minutes N] [--workers N]``: the table; exit 1 on a missed goal."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--hostile", action="store_true", help="add the hostile requests")
    parser.add_argument(
        "--workers", type=int, default=1, help="run_server.py --workers N (a supervisor)"
    )
    parser.add_argument(
        "--only", default="", help=f"comma-separated kinds of load, of {', '.join(RATES)}"
    )
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error("--workers must be at least 1")
    kinds = tuple(kind for kind in args.only.split(",") if kind)
    if unknown := [kind for kind in kinds if kind not in RATES]:
        parser.error(f"--only: unknown kind {unknown[0]!r}; the kinds are {', '.join(RATES)}")
    report = run(args.minutes, hostile=args.hostile, workers=args.workers, kinds=kinds)
    print(render_table([report]))
    return 0 if all(row.met is not False for row in report.rows) else 1


if __name__ == "__main__":
    sys.exit(main())
