"""The database: Tortoise configuration, schema migrations and the connection lifetime."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from tortoise import Tortoise
from tortoise.backends.base.executor import EXECUTOR_CACHE
from tortoise.context import TortoiseContext
from tortoise.migrations.executor import MigrationExecutor

from libflow.db.sqlite_engine import SQLITE_BUSY_TIMEOUT_MS

APP_LABEL = "models"
# Any constant works: it only has to be the same in every libflow process.
_MIGRATION_LOCK_ID = 0x6C6962666C6F77


def tortoise_config(database_url: str) -> dict[str, Any]:
    """The Tortoise config for one database URL, with libflow's models and migrations."""
    if database_url.startswith("sqlite://"):
        path = database_url[len("sqlite://") :]
        connection: str | dict[str, Any] = {
            # Transactions take the write lock as they begin: several API processes
            # (--workers) write the file (libflow.db.sqlite_engine says why).
            "engine": "libflow.db.sqlite_engine",
            # WAL lets readers go on while the job runner writes. synchronous stays at
            # SQLite's FULL: every commit is fsynced, so what the API acknowledged
            # survives a power cut (NORMAL would be faster and only crash-safe).
            # busy_timeout: how long a writer waits for another process's transaction.
            "credentials": {
                "file_path": path,
                "journal_mode": "WAL",
                "journal_size_limit": 16384,
                "busy_timeout": SQLITE_BUSY_TIMEOUT_MS,
            },
        }
    else:
        connection = database_url
    return {
        "connections": {"default": connection},
        "apps": {
            APP_LABEL: {
                "models": ["libflow.models"],
                "default_connection": "default",
                "migrations": "libflow.migrations",
            }
        },
        "use_tz": True,
        "timezone": "UTC",
    }


# The tortoise CLI reads this (``tortoise -c libflow.db.connection.TORTOISE_ORM makemigrations``).
TORTOISE_ORM = tortoise_config("sqlite://data/libflow.sqlite3")


async def migrate(ctx: TortoiseContext, config: dict[str, Any]) -> None:
    """Bring the schema up to date; safe when several processes start at once."""
    connection = ctx.db()
    executor = MigrationExecutor(connection, config["apps"])
    if connection.capabilities.dialect == "postgres":
        # A session lock serializes concurrent start-ups (API and workers) on PostgreSQL.
        async with connection.acquire_connection() as raw:
            await raw.execute("SELECT pg_advisory_lock($1)", _MIGRATION_LOCK_ID)
            try:
                await executor.migrate()
            finally:
                await raw.execute("SELECT pg_advisory_unlock($1)", _MIGRATION_LOCK_ID)
    else:
        await executor.migrate()


@asynccontextmanager
async def open_database(database_url: str) -> AsyncIterator[TortoiseContext]:
    """Connect, migrate, and close through the context Tortoise returns."""
    # Here, not in tortoise_config: building TORTOISE_ORM at import made ./data wherever
    # a libflow module was imported (the CLI in any directory).
    sqlite_path = database_url.removeprefix("sqlite://")
    if database_url.startswith("sqlite://") and sqlite_path != ":memory:":
        Path(sqlite_path).parent.mkdir(parents=True, exist_ok=True)
    config = tortoise_config(database_url)
    # Tortoise caches each model's SQL by connection name, not by database, for the life of
    # the process: one that opens SQLite and then PostgreSQL (a benchmark run, a test
    # session) would send SQLite's "?" placeholders to PostgreSQL ("syntax error at or
    # near ','"). A process opening a database starts without another's SQL.
    EXECUTOR_CACHE.clear()
    ctx = await Tortoise.init(config=config, _create_db=False)
    try:
        await migrate(ctx, config)
        yield ctx
    finally:
        await ctx.close_connections()
