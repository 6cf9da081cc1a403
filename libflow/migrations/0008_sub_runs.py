from tortoise import migrations
from tortoise.migrations import operations as ops
from tortoise import fields

class Migration(migrations.Migration):
    dependencies = [('models', '0007_secrets')]

    initial = False

    operations = [
        ops.AddField(
            model_name='WorkflowRun',
            name='parent_run_id',
            field=fields.CharField(null=True, max_length=32),
        ),
    ]
