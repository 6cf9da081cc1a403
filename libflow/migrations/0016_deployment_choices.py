"""Choices made once for the whole deployment (the local embedder's int8 runtime).

A new table: a process still running the previous version never reads it.
"""

from tortoise import fields, migrations
from tortoise.migrations import operations as ops


class Migration(migrations.Migration):
    dependencies = [("models", "0015_file_attempts_before")]

    initial = False

    operations = [
        ops.CreateModel(
            name="DeploymentChoice",
            fields=[
                ("name", fields.CharField(primary_key=True, max_length=100)),
                ("value", fields.CharField(max_length=200)),
                ("chosen_at", fields.DatetimeField(auto_now_add=True)),
            ],
            options={
                "table": "deployment_choices",
                "app": "models",
                "pk_attr": "name",
                "table_description": (
                    "A choice made once for the whole deployment, by the first process "
                    "that needed it."
                ),
            },
            bases=["Model"],
        ),
    ]
