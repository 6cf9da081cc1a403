"""A log of which file each version of a project's search index changed.

The in-memory vector cache read a project's whole matrix again after every write; with
the log it reads only the files changed since its version. Projects written before have
no log rows: a cache that finds versions missing from the log reads the matrix whole.
"""

from tortoise import migrations
from tortoise.migrations import operations as ops
from tortoise import fields

class Migration(migrations.Migration):
    dependencies = [('models', '0012_delivery_body_digest')]

    initial = False

    operations = [
        ops.CreateModel(
            name='SearchIndexChange',
            fields=[
                ('id', fields.BigIntField(generated=True, primary_key=True, unique=True, db_index=True)),
                ('project_id', fields.CharField(max_length=32)),
                ('version', fields.BigIntField()),
                ('file_id', fields.CharField(max_length=32)),
            ],
            options={'table': 'search_index_changes', 'app': 'models', 'unique_together': (('project_id', 'version'),), 'pk_attr': 'id', 'table_description': "Which file a version of a project's search index changed."},
            bases=['Model'],
        ),
    ]
