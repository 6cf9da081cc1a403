"""Project secrets, and webhook signing secrets sealed (AES-GCM) where they were in clear.

Sealing needs the key: the one the starting process installed (``open_resources``, the
admin commands), else the key the ``LIBFLOW_*`` settings name (the ``tortoise`` command).
It is read only when there is a webhook row to seal. Backwards, the secrets are opened again.
"""

from typing import Any

from tortoise import fields, migrations
from tortoise.fields.base import OnDelete
from tortoise.migrations import operations as ops

from libflow.ids import new_id
from libflow.secrets.crypto import (
    SecretBox,
    box_of,
    installed_secret_box,
    is_sealed,
    webhook_bound_to,
)
from settings import settings_from_env

_SELECT = 'SELECT "id", "secret", "previous_secret" FROM "webhooks"'
_UPDATE = {
    "sqlite": 'UPDATE "webhooks" SET "secret" = ?, "previous_secret" = ? WHERE "id" = ?',
    "postgres": 'UPDATE "webhooks" SET "secret" = $1, "previous_secret" = $2 WHERE "id" = $3',
}


def _box() -> SecretBox:
    return installed_secret_box() or box_of(settings_from_env())


async def _convert(state_editor: Any, seal: bool) -> None:
    client = state_editor.client
    _count, rows = await client.execute_query(_SELECT)
    box: SecretBox | None = None
    for row in rows:
        webhook_id, secret, previous = row["id"], row["secret"], row["previous_secret"]
        if is_sealed(secret) == seal:
            continue  # already done (a migration retried after a failure)
        box = box or _box()
        bound_to = webhook_bound_to(webhook_id)
        change = box.seal if seal else box.open
        previous = None if previous is None else change(previous, bound_to)
        await client.execute_query(
            _UPDATE[state_editor.DIALECT], [change(secret, bound_to), previous, webhook_id]
        )


async def seal_webhook_secrets(apps: Any, state_editor: Any) -> None:
    """Seal every webhook secret still in clear."""
    await _convert(state_editor, seal=True)


async def open_webhook_secrets(apps: Any, state_editor: Any) -> None:
    """Back to clear text (migrating backwards)."""
    await _convert(state_editor, seal=False)


class Migration(migrations.Migration):
    dependencies = [("models", "0006_runs_as_resources")]

    initial = False

    operations = [
        ops.CreateModel(
            name="Secret",
            fields=[
                (
                    "id",
                    fields.CharField(
                        primary_key=True, default=new_id, unique=True, db_index=True, max_length=32
                    ),
                ),
                (
                    "project",
                    fields.ForeignKeyField(
                        "models.Project",
                        source_field="project_id",
                        db_constraint=True,
                        to_field="id",
                        related_name="secrets",
                        on_delete=OnDelete.CASCADE,
                    ),
                ),
                ("name", fields.CharField(max_length=64)),
                ("value", fields.TextField(unique=False)),
                ("created_at", fields.DatetimeField(auto_now=False, auto_now_add=True)),
                ("updated_at", fields.DatetimeField(auto_now=True, auto_now_add=False)),
            ],
            options={
                "table": "project_secrets",
                "app": "models",
                "unique_together": (("project_id", "name"),),
                "pk_attr": "id",
                "table_description": "A project's named secret, read by workflows as secrets.NAME.",
            },
            bases=["Model"],
        ),
        ops.RunPython(seal_webhook_secrets, open_webhook_secrets),
    ]
