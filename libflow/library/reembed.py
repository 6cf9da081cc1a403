"""Re-embedding after a change of embedder, so vectors of two models are never mixed."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np
from tortoise.connection import get_connection
from tortoise.expressions import Q
from tortoise.transactions import in_transaction

from libflow.library.embeddings.interface import Embedder
from libflow.library.pgvector import has_vector_column, stale_file_ids, update_vectors
from libflow.library.search_index import bump_index_version
from libflow.library.vectors import Vector
from libflow.models import Chunk

logger = logging.getLogger("libflow.workers.reembed")

FILES_PER_RUN = 200
# How long one call goes on taking files: a batch of 200 large files on a slow CPU took
# longer than a job may run (arq stops it at its timeout, and the next batch was queued
# only by a finished one: re-embedding stalled until the next tick, half an hour later).
SECONDS_PER_RUN = 120.0
# What a worker lets one call run: its time budget, plus the file it is in when the
# budget runs out (a file of thousands of passages takes minutes on a CPU).
JOB_TIMEOUT_SECONDS = SECONDS_PER_RUN + 900


@dataclass(frozen=True, slots=True)
class ReembedPass:
    """What one call did: how many files, and whether stale files may be left."""

    files: int
    more: bool


async def reembed_stale_chunks(
    embedder: Embedder | None, *, seconds: float | None = None
) -> ReembedPass:
    """Embed again, file by file, the chunks another (or no) embedder wrote.

    With pgvector, chunks whose vector is still float32 bytes (written before the extension
    was enabled) are stale too: their bytes move to the vector column, without the model.
    At most FILES_PER_RUN files, and no file after the first once ``seconds`` (default
    SECONDS_PER_RUN) have passed: a caller told ``more`` calls again.
    """
    if embedder is None:
        return ReembedPass(0, more=False)
    stop_at = time.monotonic() + (SECONDS_PER_RUN if seconds is None else seconds)
    in_column = await has_vector_column(get_connection("default"))
    file_ids: list[str]
    if in_column:
        file_ids = await stale_file_ids(get_connection("default"), embedder.name, FILES_PER_RUN)
    else:
        stale = Q(embedder__isnull=True) | ~Q(embedder=embedder.name)
        file_ids = [
            str(file_id)
            for file_id in await Chunk.filter(stale)
            .distinct()
            .limit(FILES_PER_RUN)
            .values_list("file_id", flat=True)
        ]
    done = 0
    for file_id in file_ids:
        if done and time.monotonic() >= stop_at:
            break  # one file at least a call: a slow file cannot stall it
        done += 1
        chunks = await Chunk.filter(file_id=file_id).order_by("seq")
        if not chunks:
            continue
        vectors = _stored_vectors(chunks, embedder)
        if vectors is None:
            # Passages cut for another embedder may be longer than this one reads: until the
            # file is processed again (reprocess), the model reads their start, as it did.
            texts = [chunk.text for chunk in chunks]
            vectors = await embedder.embed(texts, truncate=True)
        async with in_transaction() as connection:
            if in_column:
                await update_vectors(
                    connection, [chunk.id for chunk in chunks], vectors, embedder.name
                )
            else:
                for chunk, vector in zip(chunks, vectors, strict=True):
                    chunk.embedding = vector.astype("<f4").tobytes()
                    chunk.embedder = embedder.name
                await Chunk.bulk_update(
                    chunks, fields=["embedding", "embedder"], using_db=connection
                )
            await bump_index_version(chunks[0].project_id, file_id, connection)
    if done:
        logger.info("re-embedded %d files with %s", done, embedder.name)
    return ReembedPass(done, more=done < len(file_ids) or len(file_ids) >= FILES_PER_RUN)


def _stored_vectors(chunks: list[Chunk], embedder: Embedder) -> Vector | None:
    """The chunks' own float32 bytes, when ``embedder`` wrote every one of them."""
    if any(c.embedder != embedder.name or c.embedding is None for c in chunks):
        return None
    stored = [np.frombuffer(c.embedding or b"", dtype="<f4") for c in chunks]
    if any(vector.shape[0] != embedder.dimensions for vector in stored):
        return None
    return np.stack(stored).astype(np.float32)
