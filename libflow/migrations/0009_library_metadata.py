from tortoise import migrations
from tortoise.migrations import operations as ops
import functools
from json import dumps, loads
from tortoise.fields.db_defaults import SqlDefault
from tortoise import fields

class Migration(migrations.Migration):
    dependencies = [('models', '0008_sub_runs')]

    initial = False

    operations = [
        ops.AddField(
            model_name='Chunk',
            name='metadata',
            field=fields.JSONField(null=True, encoder=functools.partial(dumps, separators=(',', ':')), decoder=loads),
        ),
        ops.AddField(
            model_name='Chunk',
            name='page_name',
            field=fields.CharField(null=True, max_length=255),
        ),
        ops.AddField(
            model_name='Chunk',
            name='tokens',
            field=fields.IntField(null=True),
        ),
        ops.AddField(
            model_name='LibraryFile',
            name='metadata',
            field=fields.JSONField(default=dict, db_default=SqlDefault("'{}'"), encoder=functools.partial(dumps, separators=(',', ':')), decoder=loads),
        ),
        ops.AddField(
            model_name='LibraryFile',
            name='ocr_pages',
            field=fields.IntField(null=True),
        ),
        ops.AddField(
            model_name='LibraryFile',
            name='warning',
            field=fields.CharField(null=True, max_length=32),
        ),
    ]
