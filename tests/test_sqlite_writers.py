"""One SQLite file, several writing processes (``--workers``): no write fails as "locked".

The other process is a second sqlite3 connection to the file, as another API process's is.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import sqlite3
import threading
from contextlib import closing
from pathlib import Path

from tortoise import connections
from tortoise.transactions import in_transaction

from libflow.db.connection import SQLITE_BUSY_TIMEOUT_MS
from libflow.db.group_commit import commit_together, insert_together
from libflow.ids import new_id
from libflow.models import Project
from tests.conftest import Api, Shape


def database(embedded: Shape) -> Path:
    return embedded.settings.data_dir / "libflow.sqlite3"


def writer_lock_path(embedded: Shape) -> Path:
    return Path(f"{database(embedded)}-writer.lock")


def other_process_holds_the_lock(
    embedded: Shape, locked: threading.Event, release: threading.Event
) -> None:
    """Another process's write transaction: begun (``locked``), committed on ``release``."""
    with closing(sqlite3.connect(database(embedded), isolation_level=None)) as other:
        other.execute("BEGIN IMMEDIATE")
        locked.set()
        release.wait(10)
        other.execute("COMMIT")


def writer_lock_is_free(embedded: Shape) -> bool:
    """Whether another process could take libflow's writer lock now."""
    with writer_lock_path(embedded).open("a") as other:
        try:
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(other, fcntl.LOCK_UN)
        return True


def count_rows(embedded: Shape, ids: list[str]) -> int:
    marks = ",".join("?" * len(ids))
    with closing(sqlite3.connect(database(embedded))) as reader:
        (row,) = reader.execute(f"SELECT count(*) FROM projects WHERE id IN ({marks})", ids)
        return int(row[0])


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

    client = connections.get("default")
    await client.execute_script("PRAGMA busy_timeout = 20")
    holder = asyncio.create_task(
        asyncio.to_thread(other_process_holds_the_lock, embedded, locked, release)
    )
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


async def test_new_rows_wait_for_another_process_and_go_in_once_it_commits(
    api: Api, embedded: Shape
) -> None:
    locked, release = threading.Event(), threading.Event()

    holder = asyncio.create_task(
        asyncio.to_thread(other_process_holds_the_lock, embedded, locked, release)
    )
    await asyncio.to_thread(locked.wait, 10)
    fresh = [new_id() for _ in range(3)]
    inserts = asyncio.gather(*(insert_together(Project(id=i, name="new")) for i in fresh))
    await asyncio.sleep(0.2)
    assert await asyncio.to_thread(count_rows, embedded, fresh) == 0  # still waiting
    release.set()
    await holder

    assert await inserts == [None] * 3
    assert await Project.filter(id__in=fresh).count() == 3
    assert writer_lock_is_free(embedded)


async def test_a_cancelled_insert_still_lets_go_of_the_writer_lock(
    api: Api, embedded: Shape
) -> None:
    with writer_lock_path(embedded).open("a") as other:
        fcntl.flock(other, fcntl.LOCK_EX)  # another process is writing
        row = Project(id=new_id(), name="new")
        insert = asyncio.create_task(insert_together(row))
        await asyncio.sleep(0.2)
        insert.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await insert
        fcntl.flock(other, fcntl.LOCK_UN)

    # The cancelled caller's row still commits with its batch, and the lock is free after.
    for _ in range(100):
        if await Project.exists(id=row.id):
            break
        await asyncio.sleep(0.05)
    assert await Project.exists(id=row.id)
    assert writer_lock_is_free(embedded)
