"""Tortoise's SQLite engine, with transactions that take the write lock when they begin.

Several API processes (``--workers``) write one SQLite file. Tortoise begins a transaction
with a plain ``BEGIN``: it reads first and asks for the write lock at its first write, and
if another process committed in between, SQLite refuses at once ("database is locked",
SQLITE_BUSY_SNAPSHOT: waiting could not help, so ``busy_timeout`` is not applied).
``BEGIN IMMEDIATE`` takes the lock first, waiting up to ``busy_timeout`` for it, so a
transaction that began goes through. SQLite has one writer at a time either way.

Before that, a transaction takes ``WriterLock``, an ``flock`` beside the database: SQLite's
own wait polls with sleeps growing to 100 ms, so a process whose group commit writes batch
after batch would keep the lock from another for as long as it is busy (two processes
recorded fewer runs a second than one). The kernel wakes an ``flock`` waiter as soon as the
holder lets go, so the processes take turns.

A transaction driven from the event loop holds that lock across a round trip to
aiosqlite's thread per statement, each answer waiting its turn among the loop's other
work: under load, milliseconds in which no other process may write. New rows (the run
records of runsync) go in with ``insert_in_one_call`` instead: lock, ``BEGIN IMMEDIATE``,
the inserts and ``COMMIT`` run whole on that thread, so the lock is held only while
SQLite works.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tortoise.backends.base.client import NestedTransactionContext, TransactionContext
from tortoise.backends.sqlite.client import (
    SqliteClient,
    SqliteTransactionContext,
    SqliteTransactionWrapper,
)
from tortoise.connection import get_connections
from tortoise.exceptions import TransactionManagementError


class WriterLock:
    """An exclusive ``flock`` on ``<database>-writer.lock``, taken by one transaction at a
    time of each client (Tortoise runs a client's transactions one after another)."""

    def __init__(self, path: Path) -> None:
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)

    async def acquire(self) -> None:
        """Take the lock; wait in a thread (the loop goes on) while another process has it."""
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        taking = asyncio.ensure_future(asyncio.to_thread(fcntl.flock, self._fd, fcntl.LOCK_EX))
        try:
            await asyncio.shield(taking)
        except asyncio.CancelledError:
            # The thread takes the lock anyway: let go of it then, or no process writes again.
            taking.add_done_callback(self._release_once_taken)
            raise

    def acquire_blocking(self) -> None:
        """Take the lock, blocking this thread (aiosqlite's, in ``insert_in_one_call``)."""
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def _release_once_taken(self, taking: asyncio.Future[None]) -> None:
        if not taking.cancelled() and taking.exception() is None:
            self.release()

    def release(self) -> None:
        """Let the next writer in."""
        fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        """Close the lock file (which releases the lock)."""
        with contextlib.suppress(OSError):
            os.close(self._fd)


class ImmediateTransactionWrapper(SqliteTransactionWrapper):
    """A transaction that takes the writer lock, then begins with ``BEGIN IMMEDIATE``."""

    _writer: WriterLock | None = None

    def _in_transaction(self) -> TransactionContext:
        return NestedTransactionContext(ImmediateTransactionWrapper(self))

    async def begin(self) -> None:
        """Commit what autocommit left open (as Tortoise does), then take the write lock."""
        writer = getattr(self._parent, "writer_lock", None)
        if isinstance(writer, WriterLock):
            await writer.acquire()
            self._writer = writer
        try:
            await self._connection.commit()
            await self._connection.execute("BEGIN IMMEDIATE")
        except BaseException as exc:
            self.release_writer()
            if isinstance(exc, sqlite3.OperationalError):
                raise TransactionManagementError(exc) from exc
            raise

    def release_writer(self) -> None:
        """Let the next writer in, once the transaction is over (committed or not)."""
        if self._writer is not None:
            self._writer.release()
            self._writer = None


class ImmediateTransactionContext(SqliteTransactionContext):
    """Tortoise's context, releasing the connection's lock when the BEGIN itself fails.

    (Tortoise's leaves it held: every later query of the process would wait forever.)
    """

    async def __aenter__(self) -> Any:
        await self._trxlock.acquire()
        try:
            await self.ensure_connection()
            self.token = get_connections().set(self.connection_name, self.connection)
            try:
                await self.connection.begin()
            except BaseException:
                get_connections().reset(self.token)
                raise
        except BaseException:
            self._trxlock.release()
            raise
        return self.connection

    async def __aexit__(self, exc_type: Any, exc_val: Any, exc_tb: Any) -> None:
        try:
            await super().__aexit__(exc_type, exc_val, exc_tb)
        finally:
            self.connection.release_writer()


class ImmediateSqliteClient(SqliteClient):
    """Tortoise's SQLite client whose transactions take turns with other processes' and
    begin IMMEDIATE."""

    def __init__(self, file_path: str, **kwargs: Any) -> None:
        super().__init__(file_path, **kwargs)
        self.writer_lock = (
            None if file_path == ":memory:" else WriterLock(Path(f"{file_path}-writer.lock"))
        )

    def _in_transaction(self) -> TransactionContext:
        return ImmediateTransactionContext(ImmediateTransactionWrapper(self), self._lock)

    async def insert_in_one_call(self, statements: Sequence[tuple[str, list[list[Any]]]]) -> None:
        """Run each ``(INSERT statement, rows)`` in one transaction, whole on the connection's
        thread (no other transaction of this client is open meanwhile)."""
        async with self.acquire_connection() as connection:
            # aiosqlite runs a callable on its thread only through this private method.
            await connection._execute(_insert_whole, connection._conn, self.writer_lock, statements)

    async def close(self) -> None:
        """Close the connection and the writer lock's file."""
        await super().close()
        if self.writer_lock is not None:
            self.writer_lock.close()
            self.writer_lock = None


def _insert_whole(
    connection: sqlite3.Connection,
    writer: WriterLock | None,
    statements: Sequence[tuple[str, list[list[Any]]]],
) -> None:
    """On aiosqlite's thread: take the writer lock, then insert and commit, or roll back.

    The lock is let go here whatever happens, even when the caller was cancelled.
    """
    if writer is not None:
        writer.acquire_blocking()
    try:
        if connection.in_transaction:  # what autocommit left open, as ``begin`` commits it
            connection.commit()
        connection.execute("BEGIN IMMEDIATE")
        try:
            for sql, rows in statements:
                connection.executemany(sql, rows)
            connection.execute("COMMIT")
        except BaseException:
            connection.rollback()
            raise
    finally:
        if writer is not None:
            writer.release()


client_class = ImmediateSqliteClient


def get_client_class(db_info: dict[str, Any]) -> type[SqliteClient]:
    """The client Tortoise makes for this engine's connections."""
    return ImmediateSqliteClient
