"""Identifiers and timestamps as the public API shows them."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime


def new_id() -> str:
    """An opaque, URL-safe id with 128 random bits (the contract asks for at least 96).

    Hex rather than base64url: an id starting with ``-`` reads as an option on a
    command line (``libflow keys revoke -x...``).
    """
    return secrets.token_hex(16)


def utcnow() -> datetime:
    """The current time, timezone-aware in UTC."""
    return datetime.now(UTC)


def iso(moment: datetime | None) -> str | None:
    """ISO 8601 in UTC with a ``Z`` and millisecond precision, or None."""
    if moment is None:
        return None
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
