from tortoise import migrations
from tortoise.migrations import operations as ops
import functools
from json import dumps, loads
from libflow.ids import new_id
from tortoise.fields.base import OnDelete
from tortoise import fields
from tortoise.indexes import Index

class Migration(migrations.Migration):
    dependencies = [('models', '0003_keyword_index')]

    initial = False

    operations = [
        ops.CreateModel(
            name='Workflow',
            fields=[
                ('id', fields.CharField(primary_key=True, default=new_id, unique=True, db_index=True, max_length=32)),
                ('project', fields.ForeignKeyField('models.Project', source_field='project_id', db_constraint=True, to_field='id', related_name='workflows', on_delete=OnDelete.CASCADE)),
                ('name', fields.CharField(max_length=200)),
                ('latest_version', fields.IntField(default=1)),
                ('created_at', fields.DatetimeField(auto_now=False, auto_now_add=True)),
                ('updated_at', fields.DatetimeField(auto_now=True, auto_now_add=False)),
            ],
            options={'table': 'workflows', 'app': 'models', 'indexes': [Index(fields=['project_id', 'created_at'])], 'pk_attr': 'id', 'table_description': 'A named workflow of a project, whose definitions are immutable, numbered versions.'},
            bases=['Model'],
        ),
        ops.CreateModel(
            name='WorkflowRun',
            fields=[
                ('id', fields.CharField(primary_key=True, default=new_id, unique=True, db_index=True, max_length=32)),
                ('workflow', fields.ForeignKeyField('models.Workflow', source_field='workflow_id', db_constraint=True, to_field='id', related_name='runs', on_delete=OnDelete.CASCADE)),
                ('project_id', fields.CharField(max_length=32)),
                ('version', fields.IntField()),
                ('event', fields.CharField(max_length=200)),
                ('trigger', fields.CharField(max_length=16)),
                ('status', fields.CharField(max_length=16)),
                ('status_code', fields.IntField(null=True)),
                ('inputs', fields.JSONField(default=dict, encoder=functools.partial(dumps, separators=(',', ':')), decoder=loads)),
                ('outputs', fields.JSONField(default=dict, encoder=functools.partial(dumps, separators=(',', ':')), decoder=loads)),
                ('error', fields.JSONField(null=True, encoder=functools.partial(dumps, separators=(',', ':')), decoder=loads)),
                ('node_timings', fields.JSONField(default=dict, encoder=functools.partial(dumps, separators=(',', ':')), decoder=loads)),
                ('started_at', fields.DatetimeField(auto_now=False, auto_now_add=True)),
                ('finished_at', fields.DatetimeField(null=True, auto_now=False, auto_now_add=False)),
            ],
            options={'table': 'workflow_runs', 'app': 'models', 'indexes': [Index(fields=['workflow_id', 'started_at'])], 'pk_attr': 'id', 'table_description': 'The record of one run: trigger, version, event, inputs, outputs, status and timings.'},
            bases=['Model'],
        ),
        ops.CreateModel(
            name='WorkflowVersion',
            fields=[
                ('id', fields.BigIntField(generated=True, primary_key=True, unique=True, db_index=True)),
                ('workflow', fields.ForeignKeyField('models.Workflow', source_field='workflow_id', db_constraint=True, to_field='id', related_name='versions', on_delete=OnDelete.CASCADE)),
                ('number', fields.IntField()),
                ('definition', fields.JSONField(encoder=functools.partial(dumps, separators=(',', ':')), decoder=loads)),
                ('created_at', fields.DatetimeField(auto_now=False, auto_now_add=True)),
            ],
            options={'table': 'workflow_versions', 'app': 'models', 'unique_together': (('workflow_id', 'number'),), 'pk_attr': 'id', 'table_description': 'One published definition of a workflow, never changed once written.'},
            bases=['Model'],
        ),
    ]
