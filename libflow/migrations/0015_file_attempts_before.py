"""Each file's attempts at the start of its round of processing.

A file's ``attempts`` only grows (it fences each job's writes), and the limits on
attempts (a file whose jobs keep dying, crashing or getting lost is failed) read it: a
file reprocessed a few times was failed at its next interruption. The limits now count
the attempts since the round began. Rows from before start at 0, as before.

The column is added with a database default (Tortoise's own AddField gives none), so
that a process still running the previous version can go on inserting files while the
others are upgraded; and it is dropped in place on the way back (SQLite's rebuild of the
table that RemoveField does finds it locked).
"""

from typing import Any

from tortoise import fields, migrations
from tortoise.migrations import operations as ops

TABLE = "library_files"
COLUMN = "attempts_before"


class AddColumnWithDefault(ops.AddField):
    """AddField, written as one ALTER TABLE with a DEFAULT, on SQLite and PostgreSQL."""

    async def database_forward(
        self, app_label: str, old_state: Any, new_state: Any, state_editor: Any = None
    ) -> None:
        if state_editor is not None:
            await state_editor.client.execute_script(
                f"ALTER TABLE {TABLE} ADD COLUMN {COLUMN} INTEGER NOT NULL DEFAULT 0"
            )

    async def database_backward(
        self, app_label: str, old_state: Any, new_state: Any, state_editor: Any = None
    ) -> None:
        if state_editor is not None:
            await state_editor.client.execute_script(f"ALTER TABLE {TABLE} DROP COLUMN {COLUMN}")


class Migration(migrations.Migration):
    dependencies = [("models", "0014_claim_moments_as_stored")]

    initial = False

    operations = [
        AddColumnWithDefault(
            model_name="LibraryFile",
            name=COLUMN,
            field=fields.IntField(default=0),
        ),
    ]
