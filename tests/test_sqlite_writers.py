"""One SQLite file, several writing processes (``--workers``): no write fails as "locked".

The other process is a second sqlite3 connection to the file, as another API process's is.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from contextlib import closing
from pathlib import Path

from tortoise import connections
from tortoise.transactions import in_transaction

from libflow.db.connection import SQLITE_BUSY_TIMEOUT_MS
from libflow.db.group_commit import commit_together
from libflow.models import Project
from tests.conftest import Api, Shape


def database(embedded: Shape) -> Path:
    return embedded.settings.data_dir / "libflow.sqlite3"


async def test_a_transaction_that_read_first_still_writes_after_another_process_wrote(
    api: Api, embedded: Shape
) -> None:
    def other_process_renames() -> None:
        with closing(sqlite3.connect(database(embedded), timeout=30)) as other:
            other.execute("UPDATE projects SET name = 'theirs' WHERE id = ?", (api.project_id,))
            other.commit()

    async with in_transaction() as db:
        assert await Project.filter(id=api.project_id).using_db(db).exists()  # a read first
        theirs = asyncio.create_task(asyncio.to_thread(other_process_renames))
        await asyncio.sleep(0.2)  # the other process writes meanwhile (or waits to)
        await Project.filter(id=api.project_id).using_db(db).update(name="ours")
    await theirs

    # Ours held the write lock from its start; theirs went through after it.
    assert (await Project.get(id=api.project_id)).name == "theirs"


async def test_a_write_that_finds_the_database_locked_past_busy_timeout_is_tried_again(
    api: Api, embedded: Shape
) -> None:
    locked, release = threading.Event(), threading.Event()

    def other_process_holds_the_lock() -> None:
        with closing(sqlite3.connect(database(embedded), isolation_level=None)) as other:
            other.execute("BEGIN IMMEDIATE")
            locked.set()
            release.wait(10)
            other.execute("COMMIT")

    client = connections.get("default")
    await client.execute_script("PRAGMA busy_timeout = 20")
    holder = asyncio.create_task(asyncio.to_thread(other_process_holds_the_lock))
    try:
        await asyncio.to_thread(locked.wait, 10)
        write = asyncio.create_task(
            commit_together(
                lambda db: Project.filter(id=api.project_id).using_db(db).update(name="later")
            )
        )
        await asyncio.sleep(0.1)  # its first tries find the database locked
        release.set()
        await holder
        assert await write == 1
    finally:
        release.set()
        await client.execute_script(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")

    assert (await Project.get(id=api.project_id)).name == "later"
