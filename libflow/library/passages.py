"""A file's passages as the index holds them, page by page of a listing."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from tortoise.expressions import Q

from libflow.errors import NotFound, ValidationFailed
from libflow.ids import MAX_STORED_INT, possible_id
from libflow.models import Chunk, LibraryFile

_MAX_CHUNK_ID = 2**63 - 1  # a BIGINT key


def _encode(seq: int, chunk_id: int) -> str:
    return base64.urlsafe_b64encode(f"{seq}|{chunk_id}".encode()).decode().rstrip("=")


def _decode(cursor: str) -> tuple[int, int]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        seq, chunk_id = (int(part) for part in raw.split("|", 1))
        if not (0 <= seq <= MAX_STORED_INT and 0 <= chunk_id <= _MAX_CHUNK_ID):
            raise ValueError("out of the columns' range")  # would fail as a query parameter
        return seq, chunk_id
    except (ValueError, binascii.Error, UnicodeDecodeError) as err:
        raise ValidationFailed(
            "cursor is not one this API returned",
            details=[{"field": "cursor", "problem": "malformed"}],
        ) from err


async def list_passages(
    project_id: str, file_id: str, *, limit: int, cursor: str | None
) -> tuple[list[dict[str, Any]], str | None]:
    """One page of the file's passages in file order, and the next page's cursor if any.

    A file with nothing indexed (not processed yet, preventSearch, an image) has none.
    """
    if not possible_id(file_id) or not await LibraryFile.exists(id=file_id, project_id=project_id):
        raise NotFound(f"file {file_id!r} not found")
    query = Chunk.filter(file_id=file_id)
    if cursor:
        seq, chunk_id = _decode(cursor)
        query = query.filter(Q(seq__gt=seq) | (Q(seq=seq) & Q(id__gt=chunk_id)))
    rows = (
        await query.order_by("seq", "id")
        .limit(limit + 1)
        .values("id", "seq", "page", "page_name", "text", "tokens")
    )
    passages = [
        {
            "index": row["seq"],
            "page": row["page_name"] if row["page_name"] is not None else row["page"],
            "text": row["text"],
            "tokens": row["tokens"],
        }
        for row in rows[:limit]
    ]
    if len(rows) > limit:
        last = rows[limit - 1]
        return passages, _encode(last["seq"], last["id"])
    return passages, None
