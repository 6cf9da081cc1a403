"""Finding one library file by id, the API's hottest read."""

from __future__ import annotations

import sqlite3
from datetime import datetime

from tortoise import fields

from libflow.inline_reads import InlineReads, InlineReadUnavailable
from libflow.models import LibraryFile

_SELECT = 'SELECT * FROM "library_files" WHERE "id" = ? AND "project_id" = ? LIMIT 1'


_DATETIME_COLUMNS = tuple(
    name
    for name, field in LibraryFile._meta.fields_map.items()
    if isinstance(field, fields.DatetimeField)
)


def _file_from_row(row: sqlite3.Row) -> LibraryFile:
    """The conversion Tortoise applies to rows it fetches, with a faster datetime parse."""
    values = dict(row)
    for name in _DATETIME_COLUMNS:
        if isinstance(values[name], str):
            values[name] = datetime.fromisoformat(values[name])
    return LibraryFile._init_from_db(**values)


class FileLookup:
    """Reads one file row: inline on SQLite (see libflow.inline_reads), else through Tortoise."""

    def __init__(self, reads: InlineReads) -> None:
        self._reads = reads

    async def get(self, project_id: str, file_id: str) -> LibraryFile | None:
        """The file ``file_id`` of ``project_id``, or None."""
        try:
            row = self._reads.row(_SELECT, (file_id, project_id))
        except InlineReadUnavailable:
            return await LibraryFile.get_or_none(id=file_id, project_id=project_id)
        return None if row is None else _file_from_row(row)
