"""A stemmed keyword index beside the exact one: "configure" finds "configuration".

SQLite: a second FTS5 table over the same chunks with the Porter stemmer, filled from
library_chunks when made and kept in step by triggers like 0003's. PostgreSQL: a GIN index
on to_tsvector('english', text), the expression keyword search matches. The exact index
('simple', unicode61) stays: it matches words in any language, and prefixes.
"""

from typing import Any

from tortoise import migrations
from tortoise.migrations import operations as ops

SQLITE_FORWARD = """
CREATE VIRTUAL TABLE library_chunks_fts_stemmed USING fts5(
    text, content='library_chunks', content_rowid='id',
    tokenize='porter unicode61 remove_diacritics 2'
);
INSERT INTO library_chunks_fts_stemmed(library_chunks_fts_stemmed) VALUES ('rebuild');
CREATE TRIGGER library_chunks_fts_stemmed_insert AFTER INSERT ON library_chunks BEGIN
    INSERT INTO library_chunks_fts_stemmed(rowid, text) VALUES (new.id, new.text);
END;
CREATE TRIGGER library_chunks_fts_stemmed_delete AFTER DELETE ON library_chunks BEGIN
    INSERT INTO library_chunks_fts_stemmed(library_chunks_fts_stemmed, rowid, text)
    VALUES ('delete', old.id, old.text);
END;
CREATE TRIGGER library_chunks_fts_stemmed_update AFTER UPDATE OF text ON library_chunks BEGIN
    INSERT INTO library_chunks_fts_stemmed(library_chunks_fts_stemmed, rowid, text)
    VALUES ('delete', old.id, old.text);
    INSERT INTO library_chunks_fts_stemmed(rowid, text) VALUES (new.id, new.text);
END;
"""
SQLITE_BACKWARD = """
DROP TRIGGER IF EXISTS library_chunks_fts_stemmed_update;
DROP TRIGGER IF EXISTS library_chunks_fts_stemmed_delete;
DROP TRIGGER IF EXISTS library_chunks_fts_stemmed_insert;
DROP TABLE IF EXISTS library_chunks_fts_stemmed;
"""
POSTGRES_FORWARD = """
CREATE INDEX library_chunks_tsv_english ON library_chunks
    USING GIN (to_tsvector('english', text));
"""
POSTGRES_BACKWARD = "DROP INDEX IF EXISTS library_chunks_tsv_english;"


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
    dependencies = [("models", "0010_pgvector")]

    operations = [ops.RunPython(forward, backward)]
