"""Finding one library file by id, the API's hottest read."""

from __future__ import annotations

from libflow.ids import possible_id
from libflow.inline_reads import InlineReads, InlineReadUnavailable, model_from_row
from libflow.models import LibraryFile

_SELECT = 'SELECT * FROM "library_files" WHERE "id" = ? AND "project_id" = ? LIMIT 1'


class FileLookup:
    """Reads one file row: inline on SQLite (see libflow.inline_reads), else through Tortoise."""

    def __init__(self, reads: InlineReads) -> None:
        self._reads = reads

    async def get(self, project_id: str, file_id: str) -> LibraryFile | None:
        """The file ``file_id`` of ``project_id``, or None."""
        if not possible_id(file_id):
            return None
        try:
            row = self._reads.row(_SELECT, (file_id, project_id))
        except InlineReadUnavailable:
            return await LibraryFile.get_or_none(id=file_id, project_id=project_id)
        return None if row is None else model_from_row(LibraryFile, row)
