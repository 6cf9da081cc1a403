"""Group commit: writes of concurrent callers share one transaction, and so one fsync.

SQLite fsyncs every commit (synchronous=FULL) and Tortoise gives it one connection,
so commits wait for one another and a few hundred a second is all a disk allows. Every
caller still needs its write durable before it answers (a delivery's 200, a run's
record). Here a caller hands its write over and waits: while one batch commits, the
next gathers behind it and commits as soon as the first is done, so the rate of
commits stays the same while the rate of writes grows with the load. PostgreSQL gains
too: one round trip and one WAL flush per batch rather than per write. New rows handed
over as model instances (``insert_together``) go in with one statement per model and
batch, the cheapest write the ORM has: run records are the hottest write there is. On
SQLite a batch of new rows alone is inserted in one call to the connection's thread
(``ImmediateSqliteClient.insert_in_one_call``: the write lock is held only while SQLite
works, not across the event loop's turns).
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from tortoise import connections
from tortoise.backends.base.client import BaseDBAsyncClient
from tortoise.models import Model
from tortoise.transactions import in_transaction

from libflow.db.new_rows import insert_statement
from libflow.db.outages import dependency_down, sqlite_busy
from libflow.db.sqlite_engine import ImmediateSqliteClient

logger = logging.getLogger("libflow.group_commit")

T = TypeVar("T")
# A write is a callable given the batch's connection, or a new row to insert: the rows
# of a batch are inserted with one statement per model rather than one per row.
Write = Callable[[BaseDBAsyncClient], Awaitable[Any]] | Model
MAX_BATCH = 256
# A batch that finds SQLite locked by another process (past its busy_timeout) is tried again.
SQLITE_BUSY_TRIES = 5
SQLITE_BUSY_BACKOFF_SECONDS = 0.05


class GroupCommit:
    """The writes queued on one database connection, committed a batch at a time."""

    def __init__(self) -> None:
        self._queue: list[tuple[Write, asyncio.Future[Any]]] = []
        self._flusher: asyncio.Task[None] | None = None

    async def write(self, write: Write) -> Any:
        """Run ``write(connection)`` (or insert the row) in the next batch; return once that
        batch committed.

        A cancelled caller does not take its write back: it commits with its batch. The
        write is queued before the first await here, so once this has begun, a cancel at
        any later point finds it handed over.
        """
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.append((write, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush())
        # Not shielded: a cancel of the caller cancels only this future, never the write
        # (its batch writes it all the same, and logs a failure nobody is left to hear).
        # A shield would cost every write one more turn of the event loop.
        return await future

    async def _flush(self) -> None:
        batch: list[tuple[Write, asyncio.Future[Any]]] = []
        try:
            while self._queue:
                batch, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
                await _commit_batch(batch)
        except BaseException as err:
            # Cancelled (shutdown): nobody may wait forever for a write that never ran.
            for _, future in batch + self._queue:
                _fail(future, err)
            self._queue = []
            raise


def _fail(future: asyncio.Future[Any], err: BaseException) -> None:
    """Tell a write's caller that it failed; if the caller left (a client gone, its future
    cancelled), say so once in the log rather than nowhere."""
    if future.cancelled():
        logger.warning("a write failed after its caller had left: %r", err)
    elif not future.done():
        future.set_exception(err)


async def _commit_batch(batch: list[tuple[Write, asyncio.Future[Any]]]) -> None:
    rows: dict[type[Model], list[Model]] = {}
    for write, _ in batch:
        if isinstance(write, Model):
            rows.setdefault(type(write), []).append(write)
    client = connections.get("default")
    try:
        statements = (
            _inserts_in_one_call(client, rows)
            if len(batch) == sum(map(len, rows.values()))
            else None
        )
    except Exception:
        # A row whose values cannot be written (text the database driver or JSON refuses)
        # fails its own caller, not the batch: each is committed alone.
        for write, future in batch:
            await _commit_alone(write, future)
        return
    if len(batch) == 1 and statements is None:
        await _commit_alone(*batch[0])
        return

    async def commit() -> list[Any]:
        if statements is not None:
            assert isinstance(client, ImmediateSqliteClient)
            await client.insert_in_one_call(statements)
            return [None] * len(batch)
        async with in_transaction() as connection:
            # Rows first: a callable of the batch may refer to them, never the reverse.
            for model, models in rows.items():
                await model.bulk_create(models, using_db=connection)
            return [await _run(write, connection) for write, _ in batch]

    try:
        results = await _retried_while_busy(commit)
    except Exception as err:
        failure = err
    else:
        for models in rows.values():
            for row in models:
                row._saved_in_db = True  # as save() marks it: a later save() updates
        for (_, future), result in zip(batch, results, strict=True):
            if not future.done():
                future.set_result(result)
        return
    if dependency_down(failure):
        # The database went away, perhaps after taking the COMMIT: whether the batch
        # committed is unknown, and writing it again could do its writes twice.
        for _, future in batch:
            _fail(future, failure)
        return
    # One write failed (a duplicate key, say) and took the batch down with it: commit each
    # alone, so that only that one fails. (Outside the except block: their own errors are
    # not chained to the batch's.)
    for write, future in batch:
        await _commit_alone(write, future)


def _inserts_in_one_call(
    client: BaseDBAsyncClient, rows: dict[type[Model], list[Model]]
) -> list[tuple[str, list[list[Any]]]] | None:
    """The batch's INSERTs when SQLite can run them in one call to its thread, else None."""
    if not isinstance(client, ImmediateSqliteClient):
        return None
    statements = []
    for model, models in rows.items():
        statement = insert_statement(client, model, models)
        if statement is None:
            return None
        statements.append(statement)
    return statements


async def _run(write: Write, connection: BaseDBAsyncClient) -> Any:
    """The result of a callable write; a row was inserted with the others of its model."""
    return None if isinstance(write, Model) else await write(connection)


async def _commit_alone(write: Write, future: asyncio.Future[Any]) -> None:
    async def commit() -> Any:
        async with in_transaction() as connection:
            if isinstance(write, Model):
                await write.save(using_db=connection, force_create=True)
            return await _run(write, connection)

    try:
        result = await _retried_while_busy(commit)
    except Exception as err:
        _fail(future, err)
        return
    if not future.done():
        future.set_result(result)


async def _retried_while_busy(commit: Callable[[], Awaitable[T]]) -> T:
    """``commit()``, again while SQLite says another process holds its write lock.

    Each transaction waits busy_timeout for the lock as it begins; should one still find
    the database locked, it committed nothing (SQLite refuses before any write), and is
    run again rather than answered with an error.
    """
    for attempt in range(1, SQLITE_BUSY_TRIES + 1):
        try:
            return await commit()
        except Exception as err:
            if attempt == SQLITE_BUSY_TRIES or not _sqlite_busy(err):
                raise
            logger.warning("the database was locked (try %d): writing again", attempt)
            await asyncio.sleep(SQLITE_BUSY_BACKOFF_SECONDS * attempt)
    raise AssertionError("unreachable")


def _sqlite_busy(err: BaseException) -> bool:
    """Whether ``err`` is, or was raised for, SQLite's SQLITE_BUSY ("database is locked")."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if sqlite_busy(current):
            return True
        current = current.__cause__ or current.__context__
    return False


_GROUPS: weakref.WeakKeyDictionary[BaseDBAsyncClient, GroupCommit] = weakref.WeakKeyDictionary()


async def commit_together(write: Callable[[BaseDBAsyncClient], Awaitable[T]]) -> T:
    """Run ``write`` in a transaction shared with concurrent writes; return its result.

    Groups are per database client: Tortoise keeps its connections per context, and
    an API process and a worker in one test process each have their own.
    """
    result: T = await _group().write(write)
    return result


async def insert_together(row: Model) -> None:
    """Insert ``row`` (a new model instance) in a transaction shared with concurrent writes.

    The new rows of one model in a batch are inserted with one statement: cheaper than a
    write that saves its instance, but nothing is read back (no generated fields).
    """
    await _group().write(row)


def _group() -> GroupCommit:
    """The group of the current database client."""
    client = connections.get("default")
    group = _GROUPS.get(client)
    if group is None:
        group = _GROUPS[client] = GroupCommit()
    return group
