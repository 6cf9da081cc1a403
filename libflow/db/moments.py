"""A moment as a raw query's parameter, written as the ORM writes it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from tortoise.backends.base.client import BaseDBAsyncClient


def query_moment(db: BaseDBAsyncClient, moment: datetime) -> Any:
    """``moment`` for a raw query on ``db``.

    SQLite keeps datetimes as text and compares them as text. Tortoise writes them with a
    space between the date and the time (its sqlite3 adapter); a moment written with
    ``isoformat()``'s "T" sorts after every ORM-written moment of its day, so a claim's
    lease or start written that way never looked old to the sweeps, which compare
    against moments the ORM writes.
    """
    return moment.isoformat(" ") if db.capabilities.dialect == "sqlite" else moment
