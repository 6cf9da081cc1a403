from tortoise import fields, migrations
from tortoise.fields.base import OnDelete
from tortoise.indexes import Index
from tortoise.migrations import operations as ops


class Migration(migrations.Migration):
    dependencies = [("models", "0001_initial")]

    initial = False

    operations = [
        ops.CreateModel(
            name="Chunk",
            fields=[
                (
                    "id",
                    fields.BigIntField(
                        generated=True, primary_key=True, unique=True, db_index=True
                    ),
                ),
                (
                    "file",
                    fields.ForeignKeyField(
                        "models.LibraryFile",
                        source_field="file_id",
                        db_constraint=True,
                        to_field="id",
                        related_name="chunk_rows",
                        on_delete=OnDelete.CASCADE,
                    ),
                ),
                ("project_id", fields.CharField(max_length=32)),
                ("folder_id", fields.CharField(null=True, max_length=32)),
                ("seq", fields.IntField()),
                ("page", fields.IntField(null=True)),
                ("text", fields.TextField(unique=False)),
                ("embedding", fields.BinaryField(null=True)),
                ("embedder", fields.CharField(null=True, max_length=200)),
            ],
            options={
                "table": "library_chunks",
                "app": "models",
                "indexes": [
                    Index(fields=["project_id", "embedder"]),
                    Index(fields=["file_id", "seq"]),
                ],
                "pk_attr": "id",
                "table_description": "A passage of a file's text, the unit of search: keyword-indexed and embedded.",
            },
            bases=["Model"],
        ),
        ops.CreateModel(
            name="SearchIndexVersion",
            fields=[
                (
                    "project_id",
                    fields.CharField(primary_key=True, unique=True, db_index=True, max_length=32),
                ),
                ("version", fields.BigIntField(default=0)),
            ],
            options={
                "table": "search_index_versions",
                "app": "models",
                "pk_attr": "project_id",
                "table_description": "A counter per project, bumped with every index write: vector caches check it.",
            },
            bases=["Model"],
        ),
        ops.AddField(
            model_name="LibraryFile",
            name="chunks",
            field=fields.IntField(null=True),
        ),
        ops.AddField(
            model_name="LibraryFile",
            name="pages",
            field=fields.IntField(null=True),
        ),
    ]
