"""The keyword index of chunks: FTS5 on SQLite, an expression GIN index on PostgreSQL."""

from typing import Any

from tortoise import migrations
from tortoise.migrations import operations as ops

SQLITE_FORWARD = """
CREATE VIRTUAL TABLE library_chunks_fts USING fts5(
    text, content='library_chunks', content_rowid='id', tokenize='unicode61 remove_diacritics 2'
);
CREATE TRIGGER library_chunks_fts_insert AFTER INSERT ON library_chunks BEGIN
    INSERT INTO library_chunks_fts(rowid, text) VALUES (new.id, new.text);
END;
CREATE TRIGGER library_chunks_fts_delete AFTER DELETE ON library_chunks BEGIN
    INSERT INTO library_chunks_fts(library_chunks_fts, rowid, text)
    VALUES ('delete', old.id, old.text);
END;
CREATE TRIGGER library_chunks_fts_update AFTER UPDATE OF text ON library_chunks BEGIN
    INSERT INTO library_chunks_fts(library_chunks_fts, rowid, text)
    VALUES ('delete', old.id, old.text);
    INSERT INTO library_chunks_fts(rowid, text) VALUES (new.id, new.text);
END;
"""
SQLITE_BACKWARD = """
DROP TRIGGER IF EXISTS library_chunks_fts_update;
DROP TRIGGER IF EXISTS library_chunks_fts_delete;
DROP TRIGGER IF EXISTS library_chunks_fts_insert;
DROP TABLE IF EXISTS library_chunks_fts;
"""
POSTGRES_FORWARD = """
CREATE INDEX library_chunks_tsv ON library_chunks USING GIN (to_tsvector('simple', text));
"""
POSTGRES_BACKWARD = "DROP INDEX IF EXISTS library_chunks_tsv;"


async def _run(state_editor: Any, sqlite: str, postgres: str) -> None:
    dialect = state_editor.DIALECT
    if dialect == "sqlite":
        await state_editor.client.execute_script(sqlite)
    elif dialect == "postgres":
        await state_editor.client.execute_script(postgres)
    else:
        raise RuntimeError(f"libflow's keyword index does not support {dialect}")


async def forward(apps: Any, state_editor: Any) -> None:
    await _run(state_editor, SQLITE_FORWARD, POSTGRES_FORWARD)


async def backward(apps: Any, state_editor: Any) -> None:
    await _run(state_editor, SQLITE_BACKWARD, POSTGRES_BACKWARD)


class Migration(migrations.Migration):
    dependencies = [("models", "0002_search_index")]

    operations = [ops.RunPython(forward, backward)]
