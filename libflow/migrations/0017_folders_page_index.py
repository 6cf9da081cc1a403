"""An index of a project's folders in their listed order, so a page of them is a seek.

GET .../library/dirs is paged since this version, oldest first, by (created_at, id).
"""

from tortoise import migrations
from tortoise.migrations import operations as ops
from tortoise.indexes import Index

class Migration(migrations.Migration):
    dependencies = [('models', '0016_deployment_choices')]

    initial = False

    operations = [
        ops.AddIndex(
            model_name='Folder',
            index=Index(fields=['project_id', 'created_at', 'id']),
        ),
    ]
