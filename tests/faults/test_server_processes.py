"""Several API processes on one data dir (``run_server.py --workers``), embedded shape.

The supervisor's own tests start ``run_server.py --workers 2``. The others start the two
servers of a group as the supervisor does (``LIBFLOW_GROUP_SLOT``), each on a port of its
own, so a test chooses which process it talks to: a run executing on A streams to a
watcher on B, a cancel sent to B stops it on A, and work queued through both runs once.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import psutil
import pytest

from libflow.supervisor import SETTINGS_REFUSED_EXIT, Supervisor
from tests.faults.processes import ROOT, Server, http_json, libflow_env, wait_for
from tests.run_helpers import stream_events
from tests.webhook_helpers import echo, event_body, standard_headers
from tests.workflow_helpers import chain, output

SSE = {"Accept": "text/event-stream"}
PERIODIC_HOLDER = "the periodic jobs run in this process"


class Member(Server):
    """One server of a two-process group, as the supervisor starts it, on its own port."""

    def __init__(self, data_dir: Path, log: Path, slot: int, **settings: str) -> None:
        super().__init__(
            data_dir,
            log,
            LIBFLOW_WORKERS="2",
            LIBFLOW_GROUP_SLOT=str(slot),
            LIBFLOW_GROUP_STARTED_AT=str(time.time()),
            LIBFLOW_RATE_LIMIT="0",
            LIBFLOW_LOG_LEVEL="INFO",
            **settings,
        )


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[Member, Member]]:
    """Servers A and B of one group (A first: it creates the schema)."""
    a = Member(tmp_path / "data", tmp_path / "a.log", 0)
    b = Member(tmp_path / "data", tmp_path / "b.log", 1)
    try:
        a.start()
        b.start()
        yield a, b
    finally:
        b.stop()
        a.stop()


def project(server: Server) -> tuple[str, str, str]:
    """A project: the API path of the project on ``server`` (no host), its id and key."""
    project_id, key = server.create_project()
    return f"/api/publicv1/projects/{project_id}", project_id, key


def create_workflow(server: Server, path: str, key: str, definition: dict[str, Any]) -> str:
    status, workflow = http_json(
        "POST",
        f"{server.url}{path}/workflows",
        {"name": "flow", "definition": definition},
        Authorization=key,
    )
    assert status == 201, workflow
    return str(workflow["workflowId"])


def waiting(seconds: float) -> dict[str, Any]:
    """Outputs ``before``, waits ``seconds``, outputs ``after``."""
    return chain(
        output("before", 1),
        {"id": "wait", "type": "delay", "seconds": seconds},
        output("after", 2),
        timeout=60,
    )


async def read_sse(response: aiohttp.ClientResponse) -> AsyncIterator[tuple[str, Any]]:
    """Each (name, data) of an event stream as it arrives."""
    async for event in stream_events(response):
        yield event.name, event.data


@dataclass
class StreamingRun:
    """A run started by runsync with its events streaming back, past its run.started."""

    session: aiohttp.ClientSession
    path: str  # the project's API path
    auth: dict[str, str]
    started: dict[str, Any]
    events: AsyncIterator[tuple[str, Any]]

    @property
    def id(self) -> str:
        return str(self.started["runId"])


@contextlib.asynccontextmanager
async def run_streaming_on(server: Server, seconds: float) -> AsyncIterator[StreamingRun]:
    """A run of ``waiting(seconds)`` executing on ``server``: runsync runs where it is sent."""
    path, _, key = project(server)
    workflow_id = create_workflow(server, path, key, waiting(seconds))
    auth = {"Authorization": key}
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{server.url}{path}/workflows/{workflow_id}/runsync", json={}, headers={**auth, **SSE}
        ) as response,
    ):
        events = read_sse(response)
        name, started = await anext(events)
        assert name == "run.started"
        yield StreamingRun(session, path, auth, started, events)


async def test_a_run_executing_on_one_process_streams_to_a_watcher_on_another(
    pair: tuple[Member, Member],
) -> None:
    a, b = pair
    async with run_streaming_on(a, 1) as run:
        watch = f"{b.url}{run.path}/runs/{run.id}/events"
        async with run.session.get(watch, headers=run.auth) as on_b:
            seen_on_b = [event async for event in read_sse(on_b)]
        seen_on_a = [("run.started", run.started)] + [event async for event in run.events]

    assert [name for name, _ in seen_on_b] == [name for name, _ in seen_on_a]
    outputs = [(data["name"], data["value"]) for name, data in seen_on_b if name == "output"]
    assert outputs == [("before", 1), ("after", 2)]
    name, finished = seen_on_b[-1]
    assert (name, finished["status"], finished["runId"]) == ("run.finished", "succeeded", run.id)


async def test_a_cancel_sent_to_another_process_stops_the_run_where_it_runs(
    pair: tuple[Member, Member],
) -> None:
    a, b = pair
    async with run_streaming_on(a, 30) as run:
        async for name, _ in run.events:
            if name == "node.started":  # the delay node: the run waits
                break
        cancel = f"{b.url}{run.path}/runs/{run.id}/cancel"
        async with run.session.post(cancel, headers=run.auth) as sent:
            assert sent.status == 202, await sent.text()
        rest = [event async for event in run.events]

    name, finished = rest[-1]
    assert (name, finished["status"]) == ("run.finished", "cancelled")
    assert finished["outputs"] == {"before": 1}
    status, record = http_json("GET", f"{b.url}{run.path}/runs/{run.id}", **run.auth)
    assert (status, record["status"]) == (200, "cancelled")


async def test_queued_runs_and_webhook_deliveries_run_once_across_processes(
    pair: tuple[Member, Member],
) -> None:
    a, b = pair
    path, _, key = project(a)
    auth = {"Authorization": key}
    workflow_id = create_workflow(a, path, key, chain(output("n", "{{ inputs.n }}")))
    echo_id = create_workflow(a, path, key, echo())
    status, webhook = http_json(
        "POST", f"{a.url}{path}/workflows/{echo_id}/webhooks", {}, Authorization=key
    )
    assert status == 201, webhook
    servers = (a, b)

    async def queue_run(session: aiohttp.ClientSession, n: int) -> str:
        url = f"{servers[n % 2].url}{path}/workflows/{workflow_id}/runs"
        async with session.post(url, json={"inputs": {"n": n}}, headers=auth) as response:
            assert response.status == 202, await response.text()
            return str((await response.json())["runId"])

    async def deliver(session: aiohttp.ClientSession, n: int) -> None:
        body = event_body(n=n)
        headers = standard_headers(webhook["secret"], body, msg_id=f"msg_{n}")
        url = f"{servers[n % 2].url}/webhooks/{webhook['webhookId']}"
        async with session.post(url, data=io.BytesIO(body), headers=headers) as response:
            assert response.status == 200, await response.text()

    async with aiohttp.ClientSession() as session:
        run_ids = await asyncio.gather(*(queue_run(session, n) for n in range(40)))
        await asyncio.gather(*(deliver(session, n) for n in range(40)))

    def all_ended(url: str, limit: int) -> list[dict[str, Any]] | None:
        status, found = http_json("GET", url, Authorization=key)
        assert status == 200, found
        ended = all(item["status"] in ("succeeded", "failed", "cancelled") for item in found)
        return found if ended and len(found) == limit else None

    runs = await asyncio.to_thread(
        wait_for,
        lambda: all_ended(f"{b.url}{path}/workflows/{workflow_id}/runs?limit=1000", 40),
        60,
        "queued runs did not all end",
    )
    assert {run["runId"] for run in runs} == set(run_ids)
    assert sorted(run["outputs"]["n"] for run in runs) == list(range(40))
    assert {run["status"] for run in runs} == {"succeeded"}
    deliveries_url = f"{a.url}{path}/webhooks/{webhook['webhookId']}/deliveries?limit=1000"
    deliveries = await asyncio.to_thread(
        wait_for, lambda: all_ended(deliveries_url, 40), 60, "deliveries did not all run"
    )
    assert {(d["status"], d["attempts"]) for d in deliveries} == {("succeeded", 1)}
    status, echoed = http_json(
        "GET", f"{b.url}{path}/workflows/{echo_id}/runs?limit=1000", Authorization=key
    )
    assert status == 200, echoed
    assert sorted(run["outputs"]["payload"]["n"] for run in echoed) == list(range(40))


def put(link: str, mime: str, data: bytes) -> int:
    request = urllib.request.Request(link, data=data, method="PUT", headers={"Content-Type": mime})
    with urllib.request.urlopen(request, timeout=60) as reply:
        return int(reply.status)


async def test_files_finalized_through_either_process_are_processed_once(
    pair: tuple[Member, Member], tmp_path: Path
) -> None:
    a, b = pair
    path, _, key = project(a)
    ids = []
    for n in range(8):
        via = (a, b)[n % 2]
        files = f"{via.url}{path}/library/files"
        status, record = http_json(
            "POST",
            files,
            {"originalname": f"{n}.txt", "fileType": "txt", "dir": "root"},
            Authorization=key,
        )
        assert status == 201, record
        assert put(record["storageLink"], record["mimeType"], f"file {n} words".encode()) == 200
        status, done = http_json(
            "POST", f"{files}:complete", {"path": record["path"]}, Authorization=key
        )
        assert status == 200, done
        ids.append(record["documentId"])

    def all_done() -> bool:
        for file_id in ids:
            url = f"{b.url}{path}/library/files/{file_id}"
            status, found = http_json("GET", url, Authorization=key)
            assert status == 200, found
            if found["processing"]["status"] != "done":
                return False
        return True

    await asyncio.to_thread(wait_for, all_done, 60, "files were not all processed")
    # Each claim of a file adds an attempt: one each, whichever process finalized it.
    with sqlite3.connect(tmp_path / "data" / "libflow.sqlite3") as db:
        attempts = dict(db.execute("SELECT id, attempts FROM library_files").fetchall())
    assert attempts == dict.fromkeys(ids, 1)


def holds_periodic_jobs(server: Server) -> bool:
    return PERIODIC_HOLDER in server.output()


def test_the_periodic_jobs_run_in_one_process_and_another_takes_them_over(
    pair: tuple[Member, Member],
) -> None:
    a, b = pair
    holder = wait_for(
        lambda: [s for s in (a, b) if holds_periodic_jobs(s)] or None,
        10,
        "no process runs the periodic jobs",
    )
    assert len(holder) == 1, "both processes run the periodic jobs"
    other = b if holder[0] is a else a
    holder[0].kill()
    wait_for(lambda: holds_periodic_jobs(other), 10, "nobody took the periodic jobs over")


async def test_two_processes_write_one_sqlite_file_under_load_without_a_locked_database(
    pair: tuple[Member, Member],
) -> None:
    a, b = pair
    path, _, key = project(a)
    auth = {"Authorization": key}
    workflow_id = create_workflow(a, path, key, chain(output("n", "{{ inputs.n }}")))
    echo_id = create_workflow(a, path, key, echo())
    status, webhook = http_json(
        "POST", f"{a.url}{path}/workflows/{echo_id}/webhooks", {}, Authorization=key
    )
    assert status == 201, webhook
    total, at_once = 400, 32
    gate = asyncio.Semaphore(at_once)

    async def runsync(session: aiohttp.ClientSession, n: int) -> int:
        url = f"{(a, b)[n % 2].url}{path}/workflows/{workflow_id}/runsync"
        async with gate, session.post(url, json={"inputs": {"n": n}}, headers=auth) as response:
            return response.status

    async def deliver(session: aiohttp.ClientSession, n: int) -> int:
        body = event_body(n=n)
        headers = standard_headers(webhook["secret"], body, msg_id=f"load_{n}")
        url = f"{(b, a)[n % 2].url}/webhooks/{webhook['webhookId']}"
        async with gate, session.post(url, data=io.BytesIO(body), headers=headers) as response:
            return response.status

    async with aiohttp.ClientSession() as session:
        statuses = await asyncio.gather(
            *(runsync(session, n) for n in range(total)),
            *(deliver(session, n) for n in range(total // 4)),
        )
    assert set(statuses) == {200}
    status, runs = http_json(
        "GET", f"{b.url}{path}/workflows/{workflow_id}/runs?limit=1000", Authorization=key
    )
    assert status == 200, runs
    assert sorted(run["outputs"]["n"] for run in runs) == list(range(total))
    for server in (a, b):
        assert "database is locked" not in server.output()
        assert '"level": "error"' not in server.output()


# The supervisor: run_server.py --workers 2.


@pytest.fixture
def supervised(tmp_path: Path) -> Iterator[Server]:
    server = Server(tmp_path / "data", tmp_path / "server.log", LIBFLOW_WORKERS="2")
    try:
        server.start()
        wait_for(lambda: len(children(server)) == 2 or None, 30, "two servers never started")
        yield server
    finally:
        server.stop()


def children(server: Server) -> list[psutil.Process]:
    return psutil.Process(server.pid).children()


def listening_on(process: psutil.Process, port: int) -> bool:
    return any(
        c.status == psutil.CONN_LISTEN and c.laddr.port == port
        for c in process.net_connections("tcp")
    )


def test_two_server_processes_listen_on_one_port_and_answer(supervised: Server) -> None:
    servers = children(supervised)
    wait_for(
        lambda: all(listening_on(s, supervised.port) for s in servers) or None,
        30,
        "not every server listens on the port",
    )
    for _ in range(40):  # a new connection each: the kernel spreads them over both
        status, body = http_json("GET", f"{supervised.url}/healthz")
        assert (status, body) == (200, {"status": "ok"})


def test_a_killed_server_process_is_started_again(supervised: Server) -> None:
    victim = children(supervised)[0]
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)

    def replaced() -> list[psutil.Process] | None:
        now = [s for s in children(supervised) if s.pid != victim.pid]
        return now if len(now) == 2 and all(listening_on(s, supervised.port) for s in now) else None

    wait_for(replaced, 30, f"the killed server was not replaced:\n{supervised.output()}")
    assert supervised.alive
    assert http_json("GET", f"{supervised.url}/healthz")[0] == 200


def test_sigterm_stops_the_supervisor_and_every_server(supervised: Server) -> None:
    servers = children(supervised)
    psutil.Process(supervised.pid).send_signal(signal.SIGTERM)
    wait_for(lambda: not supervised.alive, 30, "the supervisor did not stop")
    for server in servers:
        assert not server.is_running() or server.status() == psutil.STATUS_ZOMBIE


async def test_sigterm_stops_every_server_in_time_with_a_request_still_open(
    supervised: Server, tmp_path: Path
) -> None:
    async with run_streaming_on(supervised, 50) as run:
        psutil.Process(supervised.pid).send_signal(signal.SIGTERM)
        # The server cuts the stream off once its requests' grace is over.
        with contextlib.suppress(aiohttp.ClientError):
            async for _ in run.events:
                pass
    await asyncio.to_thread(wait_for, lambda: not supervised.alive, 40, "it did not stop")
    assert "did not stop in time" not in supervised.output()
    with sqlite3.connect(tmp_path / "data" / "libflow.sqlite3") as db:
        [(status,)] = db.execute("SELECT status FROM workflow_runs WHERE id = ?", (run.id,))
    assert status == "cancelled"  # the run cut off was recorded, not lost to a SIGKILL


def run_server(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = libflow_env(tmp_path / "data", LIBFLOW_LOG_LEVEL="INFO")
    return subprocess.run(
        [sys.executable, "run_server.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("workers", [["--workers", "2"], []], ids=["group", "one process"])
def test_a_port_another_program_holds_is_refused_before_any_server_starts(
    tmp_path: Path, workers: list[str]
) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        done = run_server(tmp_path, *workers, "--port", str(port))

    assert done.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "server 0 started" not in done.stderr
    assert "Traceback" not in done.stderr


def test_a_group_whose_server_refuses_its_settings_stops_instead_of_restarting_it() -> None:
    """Exit code 2 is run_server.py's for settings it refuses: every restart would be
    refused the same way, so the group stops with it (it restarted them forever)."""
    refused = [sys.executable, "-c", "import sys; sys.exit(2)"]
    began = time.monotonic()
    assert Supervisor(refused, {}, 2).run() == SETTINGS_REFUSED_EXIT
    assert time.monotonic() - began < 20  # not after restarts backed off to 30 s


def test_a_number_of_workers_below_one_is_refused(tmp_path: Path) -> None:
    done = run_server(tmp_path, "--workers", "0")

    assert done.returncode == 2
    assert "LIBFLOW_WORKERS" in done.stderr
