"""Cursor paging: a page ends at a (time, id) pair, which the next page starts after.

An offset makes the millionth page cost a million rows; a cursor costs an index seek.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from tortoise.expressions import Q
from tortoise.models import Model
from tortoise.queryset import QuerySet

from libflow.errors import ValidationFailed
from libflow.ids import possible_id

M = TypeVar("M", bound=Model)
# The most rows a page of a list holds (and its default, for most lists).
MAX_PAGE = 1000


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


def after_cursor(
    query: QuerySet[M], cursor: str, moment_field: str, *, oldest_first: bool = False
) -> QuerySet[M]:
    """``query`` (newest first by ``moment_field``, then by id; or oldest first) from just
    after the row the cursor names; VALIDATION_ERROR for a cursor this API did not write."""
    moment, last_id = decode_cursor(cursor)
    ahead, past = ("gte", "gt") if oldest_first else ("lte", "lt")
    up_to: dict[str, Any] = {f"{moment_field}__{ahead}": moment}
    beyond: dict[str, Any] = {f"{moment_field}__{past}": moment}
    # The first bound lets the index seek to the cursor; the second breaks ties.
    return query.filter(Q(**up_to), Q(**beyond) | Q(**{f"id__{past}": last_id}))


def page_and_cursor(
    found: list[M], limit: int, moment_of: Callable[[M], datetime]
) -> tuple[list[M], str | None]:
    """The first ``limit`` of ``found`` (read with one more), and the next page's cursor
    when there is more."""
    if len(found) > limit:
        last = found[limit - 1]
        return found[:limit], encode_cursor(moment_of(last), str(last.pk))
    return found, None
