"""A document's extracted text as processing stored it, read back in bounded pieces.

Processing writes the whole text (within MAX_TEXT_CHARS) under ``text_key``; the
library_file_text node reads it here and never extracts anything in the API process. A file
processed before the text was stored has only its indexed passages: they are joined back,
their overlaps removed (whitespace collapsed, as in search results).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from libflow.models import Chunk
from libflow.storage import Storage, read_start
from libflow.storage.keys import text_key

# UTF-8 takes at most 4 bytes a character: reading this many bytes a character is enough.
_BYTES_PER_CHAR = 4
_PASSAGES_PER_READ = 200
# Consecutive passages share at most 50 tokens, which are at most 6 characters and a space.
_MAX_OVERLAP_CHARS = 50 * 7
_SEPARATORS = " \n"  # between the words of a passage (chunking._join)


async def read_stored_text(
    storage: Storage, project_id: str, file_id: str, *, limit: int
) -> str | None:
    """The first ``limit`` characters of the stored text; None if none was stored."""
    try:
        data = await read_start(storage, text_key(project_id, file_id), limit * _BYTES_PER_CHAR)
    except FileNotFoundError:
        return None
    return await asyncio.to_thread(_decode, data, limit)


def _decode(data: bytes, limit: int) -> str:
    # A cut may split the last character: it is past ``limit`` characters anyway.
    return data.decode("utf-8", errors="replace")[:limit]


async def text_from_passages(file_id: str, *, limit: int) -> str:
    """The file's text joined back from its indexed passages, at most ``limit`` characters."""
    passages: list[tuple[str, int | None]] = []
    length = 0
    while length < limit:
        batch: list[tuple[str, int | None]] = await (
            Chunk.filter(file_id=file_id)
            .order_by("seq")
            .offset(len(passages))
            .limit(_PASSAGES_PER_READ)
            .values_list("text", "page")
        )
        passages += batch
        length += sum(len(text) for text, _ in batch)
        if len(batch) < _PASSAGES_PER_READ:
            break
    text = await asyncio.to_thread(join_passages, passages)
    return text[:limit]


def join_passages(passages: Sequence[tuple[str, int | None]]) -> str:
    """Passages in order as one text: each one's overlap with the last dropped.

    A passage that shares no words with the previous one starts a new paragraph (another
    page, slide or part of the document).
    """
    parts: list[str] = []
    previous: str | None = None
    for text, _page in passages:
        if previous is None:
            parts.append(text)
        else:
            shared = _overlap(previous, text)
            if shared:
                rest = text[shared:]  # from the space or line break after the overlap
                if rest:
                    parts.append(rest)
            else:
                parts.append("\n\n" + text)
        previous = text
    return "".join(parts)


def _overlap(before: str, after: str) -> int:
    """The length of the longest run of whole words ending ``before`` and starting ``after``
    (passages separate words by a space, or by a line break where a line ended)."""
    head = after[:_MAX_OVERLAP_CHARS]
    # Ends of words in ``after``'s head, longest first: an overlap ends at one of them.
    ends = [index for index, char in enumerate(head) if char in _SEPARATORS]
    if len(after) <= _MAX_OVERLAP_CHARS:
        ends.append(len(after))
    for end in reversed(ends):
        candidate = after[:end]
        if (
            candidate
            and before.endswith(candidate)
            and (len(before) == end or before[-end - 1] in _SEPARATORS)
        ):
            return end
    return 0
