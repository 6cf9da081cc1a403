import functools
from json import dumps, loads

from tortoise import fields, migrations
from tortoise.fields.base import OnDelete
from tortoise.indexes import Index
from tortoise.migrations import operations as ops

from libflow.ids import new_id
from libflow.models import ProcessingStatus


class Migration(migrations.Migration):
    initial = True

    operations = [
        ops.CreateModel(
            name="Project",
            fields=[
                (
                    "id",
                    fields.CharField(
                        primary_key=True, default=new_id, unique=True, db_index=True, max_length=32
                    ),
                ),
                ("name", fields.CharField(max_length=200)),
                ("created_at", fields.DatetimeField(auto_now=False, auto_now_add=True)),
            ],
            options={
                "table": "projects",
                "app": "models",
                "pk_attr": "id",
                "table_description": "A tenant: every other record belongs to exactly one project.",
            },
            bases=["Model"],
        ),
        ops.CreateModel(
            name="ApiKey",
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
                        related_name="api_keys",
                        on_delete=OnDelete.CASCADE,
                    ),
                ),
                ("key_hash", fields.CharField(unique=True, max_length=64)),
                ("prefix", fields.CharField(max_length=16)),
                ("name", fields.CharField(max_length=200)),
                ("email", fields.CharField(null=True, max_length=320)),
                ("created_at", fields.DatetimeField(auto_now=False, auto_now_add=True)),
                ("revoked_at", fields.DatetimeField(null=True, auto_now=False, auto_now_add=False)),
            ],
            options={
                "table": "api_keys",
                "app": "models",
                "pk_attr": "id",
                "table_description": "A project-scoped API key, of which only the SHA-256 of the secret is stored.",
            },
            bases=["Model"],
        ),
        ops.CreateModel(
            name="Folder",
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
                        related_name="folders",
                        on_delete=OnDelete.CASCADE,
                    ),
                ),
                (
                    "parent",
                    fields.ForeignKeyField(
                        "models.Folder",
                        source_field="parent_id",
                        null=True,
                        db_constraint=True,
                        to_field="id",
                        related_name="children",
                        on_delete=OnDelete.RESTRICT,
                    ),
                ),
                ("name", fields.CharField(max_length=255)),
                ("created_at", fields.DatetimeField(auto_now=False, auto_now_add=True)),
                ("updated_at", fields.DatetimeField(auto_now=True, auto_now_add=False)),
            ],
            options={
                "table": "folders",
                "app": "models",
                "indexes": [Index(fields=["project_id", "parent_id"])],
                "pk_attr": "id",
                "table_description": "A folder of the library, at the root when it has no parent.",
            },
            bases=["Model"],
        ),
        ops.CreateModel(
            name="LibraryFile",
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
                        related_name="files",
                        on_delete=OnDelete.CASCADE,
                    ),
                ),
                (
                    "folder",
                    fields.ForeignKeyField(
                        "models.Folder",
                        source_field="folder_id",
                        null=True,
                        db_constraint=True,
                        to_field="id",
                        related_name="files",
                        on_delete=OnDelete.RESTRICT,
                    ),
                ),
                ("name", fields.CharField(max_length=255)),
                ("file_type", fields.CharField(max_length=8)),
                ("mime_type", fields.CharField(max_length=100)),
                ("storage_key", fields.CharField(unique=True, max_length=255)),
                ("size", fields.BigIntField(default=0)),
                ("sha256", fields.CharField(null=True, max_length=64)),
                ("uploader_name", fields.CharField(null=True, max_length=200)),
                ("uploader_email", fields.CharField(null=True, max_length=320)),
                ("updating", fields.BooleanField(default=True)),
                ("prevent_search", fields.BooleanField(default=False)),
                (
                    "finalized_at",
                    fields.DatetimeField(null=True, auto_now=False, auto_now_add=False),
                ),
                (
                    "status",
                    fields.CharEnumField(
                        default=ProcessingStatus.PENDING,
                        description="PENDING: pending\nPROCESSING: processing\nDONE: done\nFAILED: failed",
                        enum_type=ProcessingStatus,
                        max_length=10,
                    ),
                ),
                ("error", fields.TextField(null=True, unique=False)),
                ("attempts", fields.IntField(default=0)),
                (
                    "steps",
                    fields.JSONField(
                        default=dict,
                        encoder=functools.partial(dumps, separators=(",", ":")),
                        decoder=loads,
                    ),
                ),
                ("indexed", fields.BooleanField(default=False)),
                ("thumbnail_key", fields.CharField(null=True, max_length=255)),
                ("created_at", fields.DatetimeField(auto_now=False, auto_now_add=True)),
                ("updated_at", fields.DatetimeField(auto_now=True, auto_now_add=False)),
            ],
            options={
                "table": "library_files",
                "app": "models",
                "indexes": [
                    Index(fields=["project_id", "created_at"]),
                    Index(fields=["project_id", "folder_id", "created_at"]),
                ],
                "pk_attr": "id",
                "table_description": "A file of the library, from its creation through upload and processing.",
            },
            bases=["Model"],
        ),
    ]
