"""Claims' moments in the text the ORM writes, so the sweeps see them (SQLite only).

The claims of queued runs and webhook deliveries wrote ``lease_until`` and ``started_at``
with ``isoformat()``'s "T" between date and time, where Tortoise writes a space. SQLite
compares the text: such a moment never looked older than a moment of its own day, so a
run or delivery whose process died stayed ``running`` until the next day. The claims now
write a space; this rewrites the moments already written. PostgreSQL stores timestamps,
not text: nothing to do there.
"""

from typing import Any

from tortoise import migrations
from tortoise.migrations import operations as ops

SQLITE_FORWARD = """
UPDATE workflow_runs SET lease_until = replace(lease_until, 'T', ' ')
    WHERE lease_until LIKE '____-__-__T%';
UPDATE webhook_deliveries SET started_at = replace(started_at, 'T', ' ')
    WHERE started_at LIKE '____-__-__T%';
"""


async def forward(apps: Any, state_editor: Any) -> None:
    if state_editor.DIALECT == "sqlite":
        await state_editor.client.execute_script(SQLITE_FORWARD)


async def backward(apps: Any, state_editor: Any) -> None:
    """Nothing to undo: the text with a space is what the ORM writes and reads."""


class Migration(migrations.Migration):
    dependencies = [("models", "0013_search_index_changes")]

    operations = [ops.RunPython(forward, backward)]
