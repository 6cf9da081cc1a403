"""Re-embedding after a change of embedder, so vectors of two models are never mixed."""

from __future__ import annotations

import logging

from tortoise.expressions import Q
from tortoise.transactions import in_transaction

from libflow.library.embeddings.interface import Embedder
from libflow.library.search_index import bump_index_version
from libflow.models import Chunk

logger = logging.getLogger("libflow.workers.reembed")

FILES_PER_RUN = 200


async def reembed_stale_chunks(embedder: Embedder | None) -> int:
    """Embed again, file by file, the chunks another (or no) embedder wrote; how many files.

    At most FILES_PER_RUN files a call: a caller that gets FILES_PER_RUN back calls again.
    """
    if embedder is None:
        return 0
    stale = Q(embedder__isnull=True) | ~Q(embedder=embedder.name)
    file_ids = (
        await Chunk.filter(stale).distinct().limit(FILES_PER_RUN).values_list("file_id", flat=True)
    )
    for file_id in file_ids:
        chunks = await Chunk.filter(file_id=file_id).order_by("seq")
        if not chunks:
            continue
        vectors = await embedder.embed([chunk.text for chunk in chunks])
        for chunk, vector in zip(chunks, vectors, strict=True):
            chunk.embedding = vector.astype("<f4").tobytes()
            chunk.embedder = embedder.name
        async with in_transaction() as connection:
            await Chunk.bulk_update(chunks, fields=["embedding", "embedder"], using_db=connection)
            await bump_index_version(chunks[0].project_id, connection)
    if file_ids:
        logger.info("re-embedded %d files with %s", len(file_ids), embedder.name)
    return len(file_ids)
