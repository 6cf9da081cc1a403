"""Outages: telling a database or network that went away from an error of our own."""

from __future__ import annotations

import re
import sqlite3

from asyncpg.exceptions import (
    AdminShutdownError,
    CannotConnectNowError,
    CrashShutdownError,
    InterfaceError,
    InternalClientError,
    PostgresConnectionError,
    TooManyConnectionsError,
)
from tortoise.exceptions import DBConnectionError, TransactionManagementError

# The database (or another dependency) is out of reach for now: a connection refused or
# dropped mid-query, or PostgreSQL restarting. Tortoise translates only some of these.
DEPENDENCY_DOWN: tuple[type[BaseException], ...] = (
    DBConnectionError,
    ConnectionError,
    PostgresConnectionError,
    AdminShutdownError,
    CrashShutdownError,
    CannotConnectNowError,
    TooManyConnectionsError,
    # A connection the server dropped mid-operation (a restart) can be left in a state
    # asyncpg refuses to use: "cannot switch to state 12; another operation in progress".
    InternalClientError,
)


# SQLite's SQLITE_BUSY: another process held the write lock past busy_timeout. Nothing was
# written; the database is as good as away for this request, which may be tried again.
_SQLITE_BUSY = re.compile(r"database is locked|database table is locked|database is busy")


def sqlite_busy(err: BaseException) -> bool:
    """Whether ``err`` itself is SQLite's "database is locked"."""
    return isinstance(err, sqlite3.OperationalError) and bool(_SQLITE_BUSY.search(str(err)))


# What cleaning up after a dropped connection raises: rolling back the transaction of a
# connection PostgreSQL closed fails with asyncpg's "the underlying connection is closed".
_CLEANUP_ERRORS: tuple[type[BaseException], ...] = (InterfaceError, TransactionManagementError)


def dependency_down(err: BaseException) -> bool:
    """Whether ``err`` is a dependency going away, or was raised because of one.

    Followed: an explicit cause (``raise ... from``), and the context of an error raised
    while cleaning up after the outage (a failing rollback), which says nothing of the
    outage itself. Any other error raised while handling an outage is an error of its own.
    """
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        if isinstance(current, DEPENDENCY_DOWN) or sqlite_busy(current):
            return True
        seen.add(id(current))
        if current.__cause__ is not None:
            current = current.__cause__
        elif isinstance(current, _CLEANUP_ERRORS) and not current.__suppress_context__:
            current = current.__context__
        else:
            current = None
    return False
