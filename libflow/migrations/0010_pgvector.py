"""Chunk vectors in a pgvector column, on PostgreSQL servers that have the extension.

The column is untyped ``vector`` (the embedder, and so the dimension, may change); the HNSW
index of each embedder's vectors is made when that embedder opens (libflow.library.pgvector).
Elsewhere (SQLite, PostgreSQL without pgvector) nothing changes: vectors stay float32 bytes.
pgvector is not a trusted extension: without the right to create it, this is a no-op too, and
the server says so at start-up.
"""

from typing import Any

from tortoise import migrations
from tortoise.migrations import operations as ops


async def _may_create_extension(client: Any) -> bool:
    rows = await client.execute_query_dict(
        "SELECT (SELECT count(*) FROM pg_extension WHERE extname = 'vector') AS installed,"
        " (SELECT count(*) FROM pg_available_extensions WHERE name = 'vector') AS available,"
        " (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) AS superuser"
    )
    row = rows[0]
    return bool(row["installed"]) or (bool(row["available"]) and bool(row["superuser"]))


async def forward(apps: Any, state_editor: Any) -> None:
    if state_editor.DIALECT != "postgres":
        return
    client = state_editor.client
    if not await _may_create_extension(client):
        return
    await client.execute_script(
        "CREATE EXTENSION IF NOT EXISTS vector;"
        " ALTER TABLE library_chunks ADD COLUMN IF NOT EXISTS embedding_vector vector;"
    )


async def backward(apps: Any, state_editor: Any) -> None:
    if state_editor.DIALECT != "postgres":
        return
    # The HNSW indexes go with the column; the extension stays (other databases may use it).
    # Chunks whose only vector was in the column are left stale, so they are embedded again.
    await state_editor.client.execute_script(
        "DO $$ BEGIN IF EXISTS (SELECT 1 FROM information_schema.columns"
        " WHERE table_name = 'library_chunks' AND column_name = 'embedding_vector') THEN"
        " UPDATE library_chunks SET embedder = NULL WHERE embedding IS NULL;"
        " ALTER TABLE library_chunks DROP COLUMN embedding_vector;"
        " END IF; END $$;"
    )


class Migration(migrations.Migration):
    dependencies = [("models", "0009_library_metadata")]

    operations = [ops.RunPython(forward, backward)]
