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
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FuturesTimeoutError
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

# How long a writer waits for another process (SQLite's busy_timeout, and the writer
# lock's): far longer than any transaction of libflow holds the lock (milliseconds).
SQLITE_BUSY_TIMEOUT_MS = 30_000


class WriterLock:
    """An exclusive ``flock`` on ``<database>-writer.lock``, taken by one transaction at a
    time of each client (Tortoise runs a client's transactions one after another).

    A wait lasts at most ``timeout_seconds`` (SQLite's ``busy_timeout``), then fails as
    SQLite's own would, "database is locked": a process frozen while it holds the lock
    (stopped, or stuck on a dead disk) must not freeze every other process with it.
    ``flock`` itself cannot time out, so the wait runs on a thread of the lock's own and
    is given up on: when the kernel grants it later, that thread lets go at once. One
    such thread per lock, so waits given up on never pile up threads; it waits on a
    second descriptor of the file, so that the kernel keeps the lock it holds meanwhile
    from this process's other descriptor too (locks of one descriptor do not conflict).
    """

    def __init__(self, path: Path, timeout_seconds: float) -> None:
        self.timeout_seconds = timeout_seconds
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        self._waiting_fd = os.open(path, os.O_RDWR)
        self._holding: int | None = None
        self._waiter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-writer")

    async def acquire(self) -> None:
        """Take the lock; wait on the lock's thread (the loop goes on) while another
        process has it."""
        if self._take_now():
            return
        wait = _Wait()
        try:
            await asyncio.wait_for(
                asyncio.wrap_future(self._waiter.submit(self._wait_for, wait)),
                self.timeout_seconds,
            )
        except TimeoutError:
            if not wait.give_up():
                raise _locked(self.timeout_seconds) from None
        except asyncio.CancelledError:
            if wait.give_up():  # granted as the caller went away: let the next writer in
                self._holding = self._waiting_fd
                self.release()
            raise
        self._holding = self._waiting_fd

    def acquire_blocking(self) -> None:
        """Take the lock, blocking this thread (aiosqlite's, in ``insert_in_one_call``)."""
        if self._take_now():
            return
        wait = _Wait()
        try:
            self._waiter.submit(self._wait_for, wait).result(self.timeout_seconds)
        except FuturesTimeoutError:
            if not wait.give_up():
                raise _locked(self.timeout_seconds) from None
        self._holding = self._waiting_fd

    def _take_now(self) -> bool:
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        self._holding = self._fd
        return True

    def _wait_for(self, wait: _Wait) -> None:
        """On the lock's thread: block until the kernel grants the lock, and let go of it
        at once if the caller gave up meanwhile."""
        if wait.given_up:
            return
        fcntl.flock(self._waiting_fd, fcntl.LOCK_EX)
        if not wait.grant():
            fcntl.flock(self._waiting_fd, fcntl.LOCK_UN)

    def release(self) -> None:
        """Let the next writer in."""
        fd, self._holding = self._holding, None
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def close(self) -> None:
        """Close the lock file (which releases the lock)."""
        self._waiter.shutdown(wait=False, cancel_futures=True)
        for fd in (self._fd, self._waiting_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


class _Wait:
    """One wait for the writer lock: granted by the lock's thread, or given up on by the
    caller, whichever comes first."""

    def __init__(self) -> None:
        self._decided = threading.Lock()
        self.granted = False
        self.given_up = False

    def grant(self) -> bool:
        """The kernel granted the lock: whether the caller still wants it."""
        with self._decided:
            self.granted = not self.given_up
            return self.granted

    def give_up(self) -> bool:
        """The caller stops waiting: whether the lock was granted before it did."""
        with self._decided:
            self.given_up = not self.granted
            return self.granted


def _locked(timeout_seconds: float) -> sqlite3.OperationalError:
    return sqlite3.OperationalError(
        f"database is locked (another process held libflow's writer lock for {timeout_seconds:g} s)"
    )


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
        # The writer lock is waited for as long as SQLite waits for its own (busy_timeout).
        timeout_seconds = int(kwargs.get("busy_timeout", SQLITE_BUSY_TIMEOUT_MS)) / 1000
        self.writer_lock = (
            None
            if file_path == ":memory:"
            else WriterLock(Path(f"{file_path}-writer.lock"), timeout_seconds)
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
