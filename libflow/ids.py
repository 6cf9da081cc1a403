"""Identifiers and timestamps as the public API shows them."""

from __future__ import annotations

import functools
import re
import secrets
import time
from datetime import UTC, datetime

# What an id column can hold: URL-safe characters, at most 32 of them (new_id's length).
_POSSIBLE_ID = re.compile(r"[A-Za-z0-9_-]{1,32}")


def new_id() -> str:
    """An opaque, URL-safe id with 128 random bits (the contract asks for at least 96).

    Hex rather than base64url: an id starting with ``-`` reads as an option on a
    command line (``libflow keys revoke -x...``).
    """
    return secrets.token_hex(16)


def new_ordered_id() -> str:
    """An id as opaque and as long as ``new_id()``'s that sorts by when it was made.

    For the rows written most (run records, webhook deliveries). A random id lands each
    new row on a random page of the primary key's index, so a batch of rows rewrote as
    many pages of it, each a page of SQLite's write-ahead log (and a page of PostgreSQL's
    WAL); ids made in order share the last page. The first 12 characters are the time in
    milliseconds, in hex (a digit first: never read as an option); the other 20 are 120
    random bits, base64url.
    """
    return f"{time.time_ns() // 1_000_000:012x}{secrets.token_urlsafe(15)}"


def possible_id(value: str) -> bool:
    """Whether ``value`` could name a stored row; anything else names nothing.

    Checked before a lookup: the ORM refuses a value longer than the column with a
    ValidationError (a 500), and PostgreSQL refuses a NUL byte in any text.
    """
    return _POSSIBLE_ID.fullmatch(value) is not None


# The largest number an integer column holds on every database (PostgreSQL's INTEGER).
MAX_STORED_INT = 2**31 - 1


def version_number(text: str) -> int | None:
    """The version ``text`` names ("1", "2", ...), or None when it names none.

    ASCII digits only (``str.isdigit`` also takes "²", which ``int`` refuses), no sign,
    space or leading zero (``int`` would read " 1", "01" or "1_0"), and a number an
    integer column holds: a larger one would fail as a query parameter, not find nothing.
    """
    if not (text.isascii() and text.isdigit()) or text.startswith("0") or len(text) > 10:
        return None
    number = int(text)
    return number if number <= MAX_STORED_INT else None


def utcnow() -> datetime:
    """The current time, timezone-aware in UTC."""
    return datetime.now(UTC)


def iso(moment: datetime | None) -> str | None:
    """ISO 8601 in UTC with a ``Z`` and millisecond precision, or None."""
    if moment is None:
        return None
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def epoch_iso(seconds: float) -> str:
    """``iso()`` of a ``time.time()`` reading, without making a datetime.

    A run's node timings are read and written this way: a datetime costs more to make
    and to format than the small nodes it times. The fraction is rounded to microseconds
    as ``datetime.fromtimestamp`` rounds it, then cut to milliseconds as ``iso()`` cuts.
    """
    whole = int(seconds)
    micro = round((seconds - whole) * 1_000_000)
    if micro >= 1_000_000:
        whole, micro = whole + 1, micro - 1_000_000
    return f"{_second_iso(whole)}.{micro // 1000:03d}Z"


@functools.lru_cache(maxsize=64)
def _second_iso(whole: int) -> str:
    """The date and time of a whole second in UTC (a run's timings share a few)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))
