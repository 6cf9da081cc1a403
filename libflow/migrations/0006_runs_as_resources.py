from tortoise import migrations
from tortoise.migrations import operations as ops
import functools
from json import dumps, loads
from libflow.ids import new_id
from tortoise.fields.base import OnDelete
from tortoise import fields
from tortoise.indexes import Index

class Migration(migrations.Migration):
    dependencies = [('models', '0005_webhooks')]

    initial = False

    operations = [
        ops.CreateModel(
            name='Schedule',
            fields=[
                ('id', fields.CharField(primary_key=True, default=new_id, unique=True, db_index=True, max_length=32)),
                ('project_id', fields.CharField(max_length=32)),
                ('workflow', fields.ForeignKeyField('models.Workflow', source_field='workflow_id', db_constraint=True, to_field='id', related_name='schedules', on_delete=OnDelete.CASCADE)),
                ('cron', fields.CharField(max_length=200)),
                ('timezone', fields.CharField(max_length=64)),
                ('event', fields.CharField(max_length=200)),
                ('inputs', fields.JSONField(default=dict, encoder=functools.partial(dumps, separators=(',', ':')), decoder=loads)),
                ('next_run_at', fields.DatetimeField(auto_now=False, auto_now_add=False)),
                ('created_at', fields.DatetimeField(auto_now=False, auto_now_add=True)),
            ],
            options={'table': 'workflow_schedules', 'app': 'models', 'indexes': [Index(fields=['workflow_id', 'created_at']), Index(fields=['next_run_at'])], 'pk_attr': 'id', 'table_description': 'A cron schedule of a workflow: each tick queues one run (trigger ``schedule``).'},
            bases=['Model'],
        ),
        ops.AddField(
            model_name='WorkflowRun',
            name='cancel_requested_at',
            field=fields.DatetimeField(null=True, auto_now=False, auto_now_add=False),
        ),
        ops.AddField(
            model_name='WorkflowRun',
            name='lease_until',
            field=fields.DatetimeField(null=True, auto_now=False, auto_now_add=False),
        ),
        ops.AddIndex(
            model_name='WorkflowRun',
            index=Index(fields=['project_id', 'started_at', 'id']),
        ),
        ops.AddIndex(
            model_name='WorkflowRun',
            index=Index(fields=['project_id', 'status', 'started_at', 'id']),
        ),
        ops.AddIndex(
            model_name='WorkflowRun',
            index=Index(fields=['workflow_id', 'status', 'started_at', 'id']),
        ),
        ops.AddIndex(
            model_name='WorkflowRun',
            index=Index(fields=['status', 'started_at']),
        ),
    ]
