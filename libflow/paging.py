"""Cursor paging: a page ends at a (time, id) pair, which the next page starts after.

An offset makes the millionth page cost a million rows; a cursor costs an index seek.
"""

from __future__ import annotations

import base64
import binascii
from datetime import datetime

from libflow.errors import ValidationFailed
from libflow.ids import possible_id


def encode_cursor(moment: datetime, record_id: str) -> str:
    """The opaque cursor of the page after the record at ``moment`` with ``record_id``."""
    raw = f"{moment.isoformat()}|{record_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """A cursor's time and id; VALIDATION_ERROR for one this API did not write."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        moment_text, record_id = raw.split("|", 1)
        moment = datetime.fromisoformat(moment_text)
        if moment.tzinfo is None:
            raise ValueError("a cursor this API wrote carries a time zone")
        if not possible_id(record_id):
            raise ValueError("a cursor this API wrote ends with an id")
        return moment, record_id
    except (ValueError, binascii.Error, UnicodeDecodeError) as err:
        raise ValidationFailed(
            "cursor is not one this API returned",
            details=[{"field": "cursor", "problem": "malformed"}],
        ) from err
