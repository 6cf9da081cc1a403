"""Inbound webhooks: verified deliveries accepted per second, and runs executed end to end.

1. accepted/s, scaled shape (PostgreSQL + Redis, no worker running, so only verify + commit to
   the inbox + enqueue is measured) and embedded shape (SQLite, the delivery jobs run on the
   server's own loop while it accepts), each against a bare aiohttp POST handler that reads
   the body and answers ``{"ok": true}``. wrk POSTs GitHub-signed bodies through a Lua script
   that gives every request a body of its own (a nonce beside the payload), its signature
   and its own ``X-GitHub-Delivery`` id, from a file of DISTINCT_DELIVERIES signed in
   advance (wrk cannot compute an HMAC): GitHub's scheme signs no timestamp, so libflow takes
   a body it accepted in the last five minutes for a replay and does not run it again.
2. executed/s end to end with 1 and with 2 ``run_worker.py`` processes: N deliveries are
   accepted while no worker runs, then the workers start; the rate is the number finished over
   max(finished_at) - min(started_at) from the database, so worker start-up is left out. Every
   delivery must have succeeded with exactly one webhook run recorded.

Run alone with ``python -m bench.webhooks``; ``python -m bench.webhooks serve-baseline --port P``
serves the baseline.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import hmac
import itertools
import json
import secrets
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import redis
from aiohttp import web

from bench._common import (
    LOG_LEVEL,
    PYTHON,
    ROOT,
    BenchError,
    Report,
    Result,
    create_project,
    free_port,
    libflow_env,
    libflow_server,
    main_with_baseline,
    pinned,
    request_json,
    server,
    stop_process,
)
from bench.get_file import (
    CONNECTIONS,
    DURATION_SECONDS,
    SERVER_CPU,
    THREADS,
    WARMUP_SECONDS,
    WRK_CPU,
    WrkRun,
    wrk,
    wrk_comparison,
)
from settings import Settings

NAME = "webhooks"
GOAL_PER_SECOND = 1000
N8N_PER_SECOND = 220
PRELOAD_DELIVERIES = 3000
PRELOAD_CONCURRENCY = 32
WORKER_COUNTS = (1, 2)
SUSTAINED_WORKERS = 2
DRAIN_TIMEOUT = 40.0
POLL_SECONDS = 0.25
POSTGRES_ADMIN_URL = "postgres://postgres@127.0.0.1:5432/postgres"
REDIS_URL = "redis://127.0.0.1:6379/12"  # tests use 9 (and 3, 5 in settings tests)
PAYLOAD: dict[str, Any] = {
    "action": "opened",
    "number": 42,
    "repository": {"full_name": "libflow/bench"},
    "sender": {"login": "ada"},
}
DEFINITION: dict[str, Any] = {
    "timeoutSeconds": 30,
    "nodes": [
        {"id": "start", "type": "event", "event": "webhook"},
        {"id": "out", "type": "set_output", "name": "payload", "value": "{{ inputs.payload }}"},
    ],
    "edges": [{"from": "start", "to": "out"}],
}
ROUTE = "/webhooks/{webhookId}"
_TAGS = itertools.count()
# Deliveries a wrk script sends before it repeats one: more than libflow accepts in a run.
DISTINCT_DELIVERIES = 100_000


# The baseline server


async def baseline_receive(request: web.Request) -> web.Response:
    """Read the delivery's body and acknowledge it, as a bare handler would."""
    await request.read()
    return web.json_response({"ok": True})


async def healthz(request: web.Request) -> web.Response:
    """Readiness for the benchmark runner."""
    return web.json_response({"status": "ok"})


def baseline_app() -> web.Application:
    """The bare application: the receiver route shape and /healthz, nothing else."""
    app = web.Application()
    app.router.add_post(ROUTE, baseline_receive)
    app.router.add_get("/healthz", healthz)
    return app


def serve_baseline(port: int) -> None:
    """Serve the baseline until SIGTERM/SIGINT."""
    web.run_app(baseline_app(), host="127.0.0.1", port=port, access_log=None, print=None)


# Signing and the load generator


@dataclasses.dataclass(frozen=True)
class Hook:
    """A webhook made for one phase: its workflow, receiver path and secret."""

    workflow_id: str
    webhook_id: str
    secret: str

    @property
    def path(self) -> str:
        return ROUTE.format(webhookId=self.webhook_id)


def signature(secret: str, body: bytes) -> str:
    """GitHub's ``X-Hub-Signature-256`` value for ``body``."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def _lua_string(text: str) -> str:
    level = 0
    while f"]{'=' * level}]" in text:
        level += 1
    return f"[{'=' * level}[{text}]{'=' * level}]"


def delivery_body(body: bytes, nonce: str) -> bytes:
    """``body`` (a JSON object) with a ``nonce`` of its own: a delivery no replay check refuses."""
    return json.dumps({**json.loads(body), "nonce": nonce}).encode()


def without_nonce(payload: dict[str, Any]) -> dict[str, Any]:
    """A payload as the bench built it, before its nonce."""
    return {key: value for key, value in payload.items() if key != "nonce"}


def lua_script(directory: Path, secret: str, body: bytes) -> Path:
    """A wrk script POSTing DISTINCT_DELIVERIES signed variants of ``body`` in turn.

    Each request sends the next line of a file written here: its delivery id, its body's
    signature and its body. The tag is new for every script written, so that a warm-up and
    a measurement against the same webhook never repeat a delivery; past the end the
    lines are sent again (replays, which libflow acknowledges without storing them).
    """
    tag = f"{next(_TAGS)}{secrets.token_hex(4)}"
    deliveries = directory / f"webhook-{tag}.tsv"
    with deliveries.open("wb") as out:
        for number in range(DISTINCT_DELIVERIES):
            signed = delivery_body(body, f"{tag}-{number}")
            line = f"{tag}-{number}\t{signature(secret, signed)}\t".encode() + signed + b"\n"
            out.write(line)
    path = directory / f"webhook-{tag}.lua"
    path.write_text(
        'wrk.method = "POST"\n'
        'wrk.headers["Content-Type"] = "application/json"\n'
        'wrk.headers["X-GitHub-Event"] = "push"\n'
        "\n"
        "local deliveries = {}\n"
        f"for line in io.lines({_lua_string(str(deliveries))}) do\n"
        "  deliveries[#deliveries + 1] = line\n"
        "end\n"
        "local threads = 0\n"
        "function setup(thread)\n"
        "  threads = threads + 1\n"
        '  thread:set("thread_number", threads)\n'
        "end\n"
        "\n"
        "local sent = 0\n"
        "function request()\n"
        "  sent = sent + 1\n"
        f"  local index = ((sent - 1) * {THREADS} + (thread_number or 1) - 1) % #deliveries + 1\n"
        '  local id, sig, body = deliveries[index]:match("^([^\t]+)\t([^\t]+)\t(.*)$")\n'
        '  wrk.headers["X-GitHub-Delivery"] = id\n'
        '  wrk.headers["X-Hub-Signature-256"] = sig\n'
        "  return wrk.format(nil, nil, nil, body)\n"
        "end\n"
    )
    return path


async def _preload(url: str, secret: str, body: bytes, count: int) -> None:
    """POST ``count`` deliveries, distinct in id and body, ``PRELOAD_CONCURRENCY`` at a time."""
    headers = {"Content-Type": "application/json", "X-GitHub-Event": "push"}
    tag = secrets.token_hex(4)
    numbers = iter(range(count))
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:

        async def sender() -> None:
            for number in numbers:
                delivery_id = f"preload-{tag}-{number}"
                signed = delivery_body(body, delivery_id)
                delivery = {
                    **headers,
                    "X-GitHub-Delivery": delivery_id,
                    "X-Hub-Signature-256": signature(secret, signed),
                }
                async with session.post(url, data=signed, headers=delivery) as response:
                    answer = await response.read()
                    if response.status != 200:
                        raise BenchError(f"preload POST {url} -> {response.status}: {answer!r}")

        await asyncio.gather(*(sender() for _ in range(PRELOAD_CONCURRENCY)))


# The database and Redis of the scaled shape


async def _admin(admin_url: str, statement: str) -> None:
    connection = await asyncpg.connect(admin_url, timeout=5)
    try:
        await connection.execute(statement)
    finally:
        await connection.close()


@contextlib.contextmanager
def postgres_database(admin_url: str = POSTGRES_ADMIN_URL) -> Iterator[str]:
    """A fresh database for this run on ``admin_url``'s server, dropped afterwards: its URL.

    ``admin_url``'s user must be allowed to create databases.
    """
    name = f"libflow_bench_{secrets.token_hex(4)}"
    try:
        asyncio.run(_admin(admin_url, f'CREATE DATABASE "{name}"'))
    except (OSError, asyncpg.PostgresError) as err:
        raise BenchError(f"PostgreSQL at {admin_url} is not usable: {err!r}") from err
    try:
        yield admin_url.rsplit("/", 1)[0] + f"/{name}"
    finally:
        asyncio.run(_admin(admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@contextlib.contextmanager
def redis_database(url: str) -> Iterator[str]:
    """The Redis database at ``url``, which must be empty; flushed afterwards."""
    client = redis.Redis.from_url(url)
    try:
        try:
            size = client.dbsize()
        except redis.RedisError as err:
            raise BenchError(f"Redis at {url} is not usable: {err!r}") from err
        if size:
            raise BenchError(f"Redis database {url} holds {size} keys: is something else on it?")
        try:
            yield url
        finally:
            client.flushdb()
    finally:
        client.close()


async def _pg_fetchrow(url: str, query: str, *args: Any) -> asyncpg.Record:
    connection = await asyncpg.connect(url)
    try:
        row = await connection.fetchrow(query, *args)
    finally:
        await connection.close()
    if row is None:
        raise BenchError(f"no row for {query}")
    return row


async def _pg_execute(url: str, query: str, *args: Any) -> None:
    connection = await asyncpg.connect(url)
    try:
        await connection.execute(query, *args)
    finally:
        await connection.close()


def pg_row(url: str, query: str, *args: Any) -> asyncpg.Record:
    """One row of ``query`` on the database at ``url``."""
    return asyncio.run(_pg_fetchrow(url, query, *args))


def _delivery_count(database_url: str, webhook_id: str) -> int:
    row = pg_row(
        database_url, "SELECT count(*) FROM webhook_deliveries WHERE webhook_id = $1", webhook_id
    )
    return int(row[0])


# Phases


def create_hook(base: str, project: str, key: str, name: str) -> Hook:
    """An echo workflow and a GitHub-scheme webhook on it."""
    workflows = f"{base}/api/publicv1/projects/{project}/workflows"
    created = request_json(
        "POST", workflows, body={"name": name, "definition": DEFINITION}, api_key=key
    )
    workflow_id = created["workflowId"]
    webhook = request_json(
        "POST",
        f"{workflows}/{workflow_id}/webhooks",
        body={"scheme": "github", "event": "webhook"},
        api_key=key,
    )
    return Hook(workflow_id, webhook["webhookId"], webhook["secret"])


def _check_answer(url: str, hook: Hook, body: bytes) -> None:
    """One signed delivery by hand: the server answers ``{"ok": true}`` (wrk sees statuses)."""
    headers = {
        "Content-Type": "application/json",
        "X-Hub-Signature-256": signature(hook.secret, body),
        "X-GitHub-Delivery": f"check-{secrets.token_hex(8)}",
    }
    req = urllib.request.Request(url, data=body, method="POST", headers=headers)
    with urllib.request.urlopen(req, timeout=30) as response:
        answer = json.loads(response.read())
    if answer != {"ok": True}:
        raise BenchError(f"unexpected answer from {url}: {answer}")


@dataclasses.dataclass
class Workers:
    """Worker processes started for one phase, and their logs."""

    procs: list[subprocess.Popen[bytes]]
    logs: list[Path]

    def check_alive(self) -> None:
        """Raise with its log's tail if a worker exited."""
        for proc, log in zip(self.procs, self.logs, strict=True):
            if proc.poll() is not None:
                tail = log.read_text(errors="replace")[-800:]
                raise BenchError(f"worker {log.name} exited with {proc.returncode}: {tail}")


@contextlib.contextmanager
def workers(
    count: int, env: Mapping[str, str], log_dir: Path, *, pin: bool = True, phase: str = ""
) -> Iterator[Workers]:
    """``count`` ``run_worker.py`` processes, stopped after.

    Pinned: worker i runs on CPU i mod 2; else they share both cores. Logs are named by
    ``phase`` (default: the count).
    """
    started = Workers([], [])
    try:
        for number in range(count):
            log_path = log_dir / f"worker-{phase or count}-{number}.log"
            command = [PYTHON, "run_worker.py"]
            with log_path.open("wb") as log:
                started.procs.append(
                    subprocess.Popen(
                        pinned(number % 2, command) if pin else command,
                        cwd=ROOT,
                        env=dict(env),
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
            started.logs.append(log_path)
        yield started
    finally:
        for proc in started.procs:
            stop_process(proc)


@dataclasses.dataclass(frozen=True)
class Executed:
    workers: int
    deliveries: int
    seconds: float
    max_attempts: int

    @property
    def per_second(self) -> float:
        return self.deliveries / self.seconds


def execute(
    base: str, hook: Hook, body: bytes, worker_count: int, env: Mapping[str, str], work: Path
) -> Executed:
    """Accept PRELOAD_DELIVERIES with no worker running, then drain them with the workers."""
    database_url = env["LIBFLOW_DATABASE_URL"]
    asyncio.run(_preload(base + hook.path, hook.secret, body, PRELOAD_DELIVERIES))
    accepted = _delivery_count(database_url, hook.webhook_id)
    if accepted != PRELOAD_DELIVERIES:
        raise BenchError(f"{PRELOAD_DELIVERIES} deliveries sent, {accepted} in the inbox")
    ran = pg_row(
        database_url,
        "SELECT count(*) FROM webhook_deliveries WHERE webhook_id = $1 AND status <> 'pending'",
        hook.webhook_id,
    )
    if ran[0]:
        raise BenchError(f"{ran[0]} deliveries ran before any worker started")
    with workers(worker_count, env, work) as started:
        _wait_until_finished(database_url, hook, PRELOAD_DELIVERIES, started, DRAIN_TIMEOUT)
    return _verify_executed(database_url, hook, worker_count)


def _wait_until_finished(
    database_url: str, hook: Hook, expected: int, started: Workers, timeout: float
) -> None:
    """Poll the database until ``expected`` deliveries of ``hook`` have finished."""
    deadline = time.monotonic() + timeout
    while True:
        started.check_alive()
        row = pg_row(
            database_url,
            "SELECT count(*) FROM webhook_deliveries "
            "WHERE webhook_id = $1 AND finished_at IS NOT NULL",
            hook.webhook_id,
        )
        if row[0] >= expected:
            return
        if time.monotonic() > deadline:
            so_far = pg_row(
                database_url,
                "SELECT EXTRACT(EPOCH FROM max(finished_at) - min(started_at)) "
                "FROM webhook_deliveries WHERE webhook_id = $1 AND finished_at IS NOT NULL",
                hook.webhook_id,
            )
            rate = row[0] / float(so_far[0]) if so_far[0] else 0.0
            raise BenchError(
                f"{len(started.procs)} worker(s) ran {row[0]} of {expected} deliveries "
                f"in the {timeout:.0f}s allowed ({rate:.1f}/s)"
            )
        time.sleep(POLL_SECONDS)


@dataclasses.dataclass(frozen=True)
class Sustained:
    accepted: WrkRun
    executed: Executed
    lag: float  # seconds from wrk's end to the last delivery's finish


def sustained(base: str, hook: Hook, body: bytes, env: Mapping[str, str], work: Path) -> Sustained:
    """wrk sends deliveries for DURATION_SECONDS while SUSTAINED_WORKERS workers run them."""
    database_url = env["LIBFLOW_DATABASE_URL"]
    with workers(SUSTAINED_WORKERS, env, work) as started:
        # Warm-up: one delivery run end to end (the workers are up), then a moment for the
        # second worker's start-up.
        asyncio.run(_preload(base + hook.path, hook.secret, body, 1))
        _wait_until_finished(database_url, hook, 1, started, 60)
        for table, column, value in (
            ("webhook_deliveries", "webhook_id", hook.webhook_id),
            ("workflow_runs", "workflow_id", hook.workflow_id),
        ):  # the warm-up is not measured
            asyncio.run(
                _pg_execute(database_url, f"DELETE FROM {table} WHERE {column} = $1", value)
            )
        time.sleep(2)
        accepted = wrk(
            base + hook.path, DURATION_SECONDS, script=lua_script(work, hook.secret, body)
        )
        sent_until = time.time()
        time.sleep(1)  # requests wrk left in flight at its end still commit
        expected = _delivery_count(database_url, hook.webhook_id)
        if expected < accepted.requests:
            raise BenchError(f"wrk saw {accepted.requests} answered, {expected} in the inbox")
        _wait_until_finished(database_url, hook, expected, started, DRAIN_TIMEOUT)
    done = _verify_executed(database_url, hook, SUSTAINED_WORKERS, expected)
    last = pg_row(
        database_url,
        "SELECT EXTRACT(EPOCH FROM max(finished_at)) FROM webhook_deliveries WHERE webhook_id = $1",
        hook.webhook_id,
    )
    return Sustained(accepted, done, float(last[0]) - sent_until)


def clear_leftovers(database_url: str, redis_url: str, hook: Hook) -> None:
    """Forget what a phase left unrun (deliveries and queued jobs) so the next one starts clean."""
    asyncio.run(
        _pg_execute(
            database_url,
            "DELETE FROM webhook_deliveries WHERE webhook_id = $1 AND status = 'pending'",
            hook.webhook_id,
        )
    )
    client = redis.Redis.from_url(redis_url)
    try:
        client.flushdb()
    finally:
        client.close()


def _verify_executed(
    database_url: str, hook: Hook, worker_count: int, expected: int = PRELOAD_DELIVERIES
) -> Executed:
    """Every delivery succeeded with exactly one run; the rate from the database's timings."""
    deliveries = pg_row(
        database_url,
        "SELECT count(*), count(*) FILTER (WHERE status = 'succeeded'), "
        "EXTRACT(EPOCH FROM max(finished_at) - min(started_at)), max(attempts), "
        "count(DISTINCT run_id) "
        "FROM webhook_deliveries WHERE webhook_id = $1",
        hook.webhook_id,
    )
    total, succeeded, seconds, max_attempts, run_ids = deliveries
    if succeeded != total or total != expected:
        failed = pg_row(
            database_url,
            "SELECT status, error FROM webhook_deliveries "
            "WHERE webhook_id = $1 AND status <> 'succeeded' LIMIT 1",
            hook.webhook_id,
        )
        raise BenchError(
            f"{succeeded} of {total} deliveries succeeded ({expected} sent); "
            f"first other: {dict(failed)}"
        )
    runs = pg_row(
        database_url,
        "SELECT count(*), count(*) FILTER (WHERE status = 'succeeded'), "
        "count(*) FILTER (WHERE id IN (SELECT run_id FROM webhook_deliveries "
        "WHERE webhook_id = $2)) "
        "FROM workflow_runs WHERE workflow_id = $1 AND trigger = 'webhook'",
        hook.workflow_id,
        hook.webhook_id,
    )
    if not (runs[0] == runs[1] == runs[2] == run_ids == total):
        raise BenchError(
            f"{total} deliveries ({run_ids} distinct run ids) but {runs[0]} webhook runs, "
            f"{runs[1]} succeeded, {runs[2]} matching a delivery: not one run per delivery"
        )
    sample = pg_row(
        database_url,
        "SELECT outputs FROM workflow_runs WHERE workflow_id = $1 LIMIT 1",
        hook.workflow_id,
    )
    outputs = json.loads(sample[0]) if isinstance(sample[0], str) else sample[0]
    if set(outputs) != {"payload"} or without_nonce(outputs["payload"]) != PAYLOAD:
        raise BenchError(f"unexpected run outputs: {outputs}")
    if not seconds or seconds <= 0:
        raise BenchError(f"no time span between the first start and the last finish: {seconds}")
    return Executed(worker_count, total, float(seconds), int(max_attempts))


def measure_accept(url: str, script_for: Callable[[], Path]) -> tuple[WrkRun, WrkRun]:
    """(warm-up, measurement) of ``url``, each with a fresh script and so fresh delivery ids."""
    warm = wrk(url, WARMUP_SECONDS, script=script_for())
    return warm, wrk(url, DURATION_SECONDS, script=script_for())


def _check_inbox(answered: int, in_inbox: int) -> None:
    """Every delivery wrk saw answered is in the inbox (fewer means ids were repeated)."""
    if in_inbox < answered:
        raise BenchError(f"wrk saw {answered} deliveries answered, {in_inbox} in the inbox")


def _sqlite_counts(path: Path, webhook_id: str) -> tuple[int, int]:
    """(deliveries, finished ones) of the webhook in the embedded shape's SQLite file."""
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as connection:
        row = connection.execute(
            "SELECT count(*), count(finished_at) FROM webhook_deliveries WHERE webhook_id = ?",
            (webhook_id,),
        ).fetchone()
    return int(row[0]), int(row[1])


def run() -> Report:
    """Executed runs with 1 and 2 workers, then accepted/s on both shapes vs the bare handler."""
    work = Path(tempfile.mkdtemp(prefix="libflow-bench-webhooks-"))
    body = json.dumps(PAYLOAD).encode()
    concurrency = Settings().job_concurrency
    try:
        with postgres_database() as database_url, redis_database(REDIS_URL) as redis_url:
            scaled_dir = work / "scaled"
            scaled_env = libflow_env(
                scaled_dir,
                LIBFLOW_DATABASE_URL=database_url,
                LIBFLOW_REDIS_URL=redis_url,
                LIBFLOW_STORAGE="local",
                LIBFLOW_EMBEDDER="none",
            )
            project, key = create_project(scaled_env)
            port, baseline_port = free_port(), free_port()
            baseline_cmd = [PYTHON, "-m", "bench.webhooks", "serve-baseline"]
            baseline_cmd += ["--port", str(baseline_port)]
            with libflow_server(port, scaled_dir, scaled_env, cpu=SERVER_CPU):
                base = f"http://127.0.0.1:{port}"
                executed: dict[int, Executed | BenchError] = {}
                for count in WORKER_COUNTS:
                    hook = create_hook(base, project, key, f"bench executed x{count}")
                    try:
                        executed[count] = execute(base, hook, body, count, scaled_env, work)
                    except BenchError as err:  # a row of its own: the other figures stand
                        executed[count] = err
                    finally:
                        clear_leftovers(database_url, redis_url, hook)
                hook = create_hook(base, project, key, "bench sustained")
                try:
                    steady: Sustained | BenchError = sustained(base, hook, body, scaled_env, work)
                except BenchError as err:
                    steady = err
                finally:
                    clear_leftovers(database_url, redis_url, hook)
                hook = create_hook(base, project, key, "bench accept scaled")
                with server(
                    baseline_cmd,
                    port=baseline_port,
                    env=scaled_env,
                    log_path=work / "baseline.log",
                    cpu=SERVER_CPU,
                ):
                    baseline_url = f"http://127.0.0.1:{baseline_port}{hook.path}"
                    _check_answer(baseline_url, hook, body)
                    _check_answer(base + hook.path, hook, body)

                    def scaled_script() -> Path:
                        return lua_script(work, hook.secret, body)

                    wrk(baseline_url, WARMUP_SECONDS, script=scaled_script())
                    warm = wrk(base + hook.path, WARMUP_SECONDS, script=scaled_script())
                    bare = wrk(baseline_url, DURATION_SECONDS, script=scaled_script())
                    scaled = wrk(base + hook.path, DURATION_SECONDS, script=scaled_script())
                answered = 1 + warm.requests + scaled.requests
                _check_inbox(answered, _delivery_count(database_url, hook.webhook_id))

        embedded_dir = work / "embedded"
        embedded_env = libflow_env(embedded_dir)
        project, key = create_project(embedded_env)
        port = free_port()
        with libflow_server(port, embedded_dir, embedded_env, cpu=SERVER_CPU):
            base = f"http://127.0.0.1:{port}"
            hook = create_hook(base, project, key, "bench accept embedded")
            _check_answer(base + hook.path, hook, body)
            warm, embedded = measure_accept(
                base + hook.path, lambda: lua_script(work, hook.secret, body)
            )
            accepted_embedded, finished_embedded = _sqlite_counts(
                embedded_dir / "libflow.sqlite3", hook.webhook_id
            )
            _check_inbox(1 + warm.requests + embedded.requests, accepted_embedded)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    goal = f">= {GOAL_PER_SECOND}/s"
    rows: list[Result] = []
    for what, ours in (("accept PG+Redis", scaled), ("accept SQLite embedded", embedded)):
        throughput, *latency = wrk_comparison(NAME, what, ours, bare, 0)
        throughput = dataclasses.replace(
            throughput, goal=goal, met=ours.requests_per_second >= GOAL_PER_SECOND
        )
        rows += [throughput, *latency]
    for count, done in executed.items():
        figure = f"executed e2e, {count} worker{'s' if count > 1 else ''}"
        if isinstance(done, BenchError):
            rows.append(
                Result(NAME, figure, float("nan"), "", goal=goal, error=f"BenchError: {done}")
            )
            continue
        rows.append(
            Result(
                NAME,
                figure,
                done.per_second,
                "req/s",
                baseline=bare.requests_per_second,
                baseline_label="bare aiohttp",
                goal=goal,
                met=done.per_second >= GOAL_PER_SECOND,
            )
        )
    figure = f"sustained e2e, {SUSTAINED_WORKERS} workers: executed"
    if isinstance(steady, BenchError):
        rows.append(
            Result(NAME, figure, float("nan"), "", goal=goal, error=f"BenchError: {steady}")
        )
    else:
        rows += [
            Result(
                NAME,
                figure,
                steady.executed.per_second,
                "req/s",
                baseline=steady.accepted.requests_per_second,
                baseline_label="accepted meanwhile",
                goal=goal,
                met=steady.executed.per_second >= GOAL_PER_SECOND,
            ),
            Result(NAME, "sustained e2e: last run after the last send", steady.lag, "s"),
        ]
    notes = [
        f"webhooks: accept = wrk -t{THREADS} -c{CONNECTIONS} -d{DURATION_SECONDS}s --latency -s "
        f"(POST {len(body)}-byte GitHub-signed JSON body, a new X-GitHub-Delivery id per "
        f"request) on CPU {WRK_CPU} after a {WARMUP_SECONDS}s warm-up each; libflow and the bare "
        f"handler on CPU {SERVER_CPU}; PostgreSQL 15 and Redis are the machine's services, not "
        f"pinned (they share both cores); {bare.requests} / {scaled.requests} / "
        f"{embedded.requests} requests (bare / PG+Redis / SQLite)",
        "webhooks: accept PG+Redis runs with no worker: verify HMAC, commit the delivery, enqueue "
        "the arq job; accept SQLite embedded runs the delivery jobs on the server's own loop "
        f"while it accepts ({finished_embedded} of {accepted_embedded} accepted had run when "
        'the measurement ended); the bare handler reads the body and answers {"ok": true}',
        f"webhooks: executed = {PRELOAD_DELIVERIES} deliveries accepted with no worker running "
        f"(aiohttp client, {PRELOAD_CONCURRENCY} at a time), then K run_worker.py processes "
        f"(LIBFLOW_JOB_CONCURRENCY={concurrency}) drain them, worker i pinned to CPU i mod 2, "
        f"the API server (idle) on CPU {SERVER_CPU}, PostgreSQL and Redis unpinned; rate = "
        "finished / (max(finished_at) - min(started_at)) from the database (worker start-up "
        "excluded); a rate is shown only if every delivery succeeded with exactly one webhook "
        f"run within {DRAIN_TIMEOUT:.0f}s"
        + "".join(
            f"; {d.workers} worker(s): {d.deliveries} in {d.seconds:.2f}s, max attempts "
            f"{d.max_attempts}"
            for d in executed.values()
            if isinstance(d, Executed)
        ),
        f"webhooks: sustained = wrk (as for accept) sends deliveries for {DURATION_SECONDS}s "
        f"to the PG+Redis server while {SUSTAINED_WORKERS} run_worker.py processes run them "
        "(everything shares the 2 cores: server on CPU 0, wrk on CPU 1, worker i on CPU i mod "
        "2); executed = deliveries / (last finish - first start), checked one run each"
        + (
            f"; {steady.executed.deliveries} deliveries in {steady.executed.seconds:.2f}s"
            if isinstance(steady, Sustained)
            else ""
        ),
        f"webhooks: for scale, n8n publishes {N8N_PER_SECOND} webhook-triggered executions/s on "
        f"a 2-vCPU machine; the goal here is >= {GOAL_PER_SECOND} executed/s on this 2-core "
        "machine (accepting is a bound on executing, so the accept rows carry the same goal); "
        f"workflow event(webhook) -> set_output payload; LIBFLOW_LOG_LEVEL={LOG_LEVEL}",
    ]
    return Report(rows, notes)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, or serve the baseline with ``serve-baseline --port P``."""
    return main_with_baseline(argv, __doc__, NAME, run, serve_baseline)


if __name__ == "__main__":
    sys.exit(main())
