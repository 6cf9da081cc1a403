"""One SQLite file, several writing processes (``--workers``): no write fails as "locked".

The other process is a second sqlite3 connection to the file, as another API process's is.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
from tortoise import connections
from tortoise.transactions import in_transaction

from libflow.db.group_commit import commit_together, insert_together
from libflow.db.sqlite_engine import SQLITE_BUSY_TIMEOUT_MS, WriterLock
from libflow.ids import new_id
from libflow.models import Project
from tests.conftest import Api, Shape
from tests.library_helpers import assert_error
from tests.workflow_helpers import call, chain, create, ok_json, output, runs_of, runsync

ONE_NODE = chain(output("answer", 42))


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


def lock_file_is_free(path: Path) -> bool:
    """Whether another process could take the lock of the file at ``path`` now."""
    with path.open("a") as other:
        try:
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(other, fcntl.LOCK_UN)
        return True


def writer_lock_is_free(embedded: Shape) -> bool:
    """Whether another process could take libflow's writer lock now."""
    return lock_file_is_free(writer_lock_path(embedded))


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


@contextlib.contextmanager
def frozen_writer(embedded: Shape, wait_seconds: float) -> Iterator[None]:
    """Another process holds libflow's writer lock and does not let go (it is stopped);
    this process waits ``wait_seconds`` for the lock before it gives up."""
    lock = connections.get("default").writer_lock
    with writer_lock_path(embedded).open("a") as other:
        fcntl.flock(other, fcntl.LOCK_EX)
        before, lock.timeout_seconds = lock.timeout_seconds, wait_seconds
        try:
            yield
        finally:
            lock.timeout_seconds = before


async def test_a_write_behind_a_frozen_writer_answers_503_after_busy_timeout(api: Api) -> None:
    with frozen_writer(api.shape, 0.05):
        response = await call(api, "POST", "", json={"name": "flow", "definition": ONE_NODE})
        await assert_error(response, 503, "UNAVAILABLE")

    # Nothing of it was written, and the next write goes through.
    assert await ok_json(await call(api, "GET", "")) == []
    await create(api, ONE_NODE)


async def test_a_runsync_behind_a_frozen_writer_answers_503_and_records_no_run(api: Api) -> None:
    created = await create(api, ONE_NODE)
    with frozen_writer(api.shape, 0.05):
        status, body = await runsync(api, created["workflowId"])
        assert (status, body["error"]) == (503, "UNAVAILABLE"), body

    assert await runs_of(api, created["workflowId"]) == []
    status, _ = await runsync(api, created["workflowId"])
    assert status == 200
    assert len(await runs_of(api, created["workflowId"])) == 1


async def test_a_wait_given_up_on_lets_go_of_the_lock_once_it_is_granted(tmp_path: Path) -> None:
    path = tmp_path / "db-writer.lock"
    lock = WriterLock(path, timeout_seconds=0.05)
    try:
        with path.open("a") as other:
            fcntl.flock(other, fcntl.LOCK_EX)
            with pytest.raises(sqlite3.OperationalError, match="database is locked"):
                await lock.acquire()
            with pytest.raises(sqlite3.OperationalError, match="database is locked"):
                await asyncio.to_thread(lock.acquire_blocking)
            fcntl.flock(other, fcntl.LOCK_UN)
            # The kernel grants the abandoned waits the lock now; they let go of it at once.
            await until_another_process_can_take(path)
        await lock.acquire()
        lock.release()
    finally:
        lock.close()


async def test_a_cancelled_wait_for_the_writer_lock_lets_go_of_it_once_granted(
    tmp_path: Path,
) -> None:
    path = tmp_path / "db-writer.lock"
    lock = WriterLock(path, timeout_seconds=30)
    try:
        with path.open("a") as other:
            fcntl.flock(other, fcntl.LOCK_EX)
            waiting = asyncio.create_task(lock.acquire())
            await asyncio.sleep(0.1)
            waiting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await waiting
            fcntl.flock(other, fcntl.LOCK_UN)
            # The wait was granted after its caller left, and let go at once.
            await until_another_process_can_take(path)
    finally:
        lock.close()


async def until_another_process_can_take(path: Path) -> None:
    """Wait (up to 1 s) until another process could take the lock of the file at ``path``."""
    for _ in range(100):
        if lock_file_is_free(path):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("a wait given up on kept the writer lock")
