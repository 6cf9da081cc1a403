from tortoise import migrations
from tortoise.migrations import operations as ops
import functools
from json import dumps, loads
from libflow.ids import new_id
from libflow.models import DeliveryStatus
from tortoise.fields.base import OnDelete
from tortoise import fields
from tortoise.indexes import Index

class Migration(migrations.Migration):
    dependencies = [('models', '0004_workflows')]

    initial = False

    operations = [
        ops.CreateModel(
            name='Webhook',
            fields=[
                ('id', fields.CharField(primary_key=True, default=new_id, unique=True, db_index=True, max_length=32)),
                ('project', fields.ForeignKeyField('models.Project', source_field='project_id', db_constraint=True, to_field='id', related_name='webhooks', on_delete=OnDelete.CASCADE)),
                ('workflow', fields.ForeignKeyField('models.Workflow', source_field='workflow_id', db_constraint=True, to_field='id', related_name='webhooks', on_delete=OnDelete.CASCADE)),
                ('event', fields.CharField(max_length=200)),
                ('scheme', fields.CharField(max_length=16)),
                ('secret', fields.CharField(max_length=200)),
                ('previous_secret', fields.CharField(null=True, max_length=200)),
                ('previous_expires_at', fields.DatetimeField(null=True, auto_now=False, auto_now_add=False)),
                ('created_at', fields.DatetimeField(auto_now=False, auto_now_add=True)),
                ('deleted_at', fields.DatetimeField(null=True, auto_now=False, auto_now_add=False)),
            ],
            options={'table': 'webhooks', 'app': 'models', 'indexes': [Index(fields=['workflow_id', 'created_at'])], 'pk_attr': 'id', 'table_description': 'An inbound webhook of a workflow: its receiver URL, signature scheme and secrets.'},
            bases=['Model'],
        ),
        ops.CreateModel(
            name='WebhookDelivery',
            fields=[
                ('id', fields.CharField(primary_key=True, default=new_id, unique=True, db_index=True, max_length=32)),
                ('webhook', fields.ForeignKeyField('models.Webhook', source_field='webhook_id', db_constraint=True, to_field='id', related_name='deliveries', on_delete=OnDelete.CASCADE)),
                ('project_id', fields.CharField(max_length=32)),
                ('external_id', fields.CharField(max_length=255)),
                ('status', fields.CharEnumField(default=DeliveryStatus.PENDING, description='PENDING: pending\nRUNNING: running\nSUCCEEDED: succeeded\nFAILED: failed', enum_type=DeliveryStatus, max_length=16)),
                ('body', fields.BinaryField()),
                ('headers', fields.JSONField(default=dict, encoder=functools.partial(dumps, separators=(',', ':')), decoder=loads)),
                ('attempts', fields.IntField(default=0)),
                ('run_id', fields.CharField(null=True, max_length=32)),
                ('error', fields.JSONField(null=True, encoder=functools.partial(dumps, separators=(',', ':')), decoder=loads)),
                ('received_at', fields.DatetimeField(auto_now=False, auto_now_add=True)),
                ('started_at', fields.DatetimeField(null=True, auto_now=False, auto_now_add=False)),
                ('finished_at', fields.DatetimeField(null=True, auto_now=False, auto_now_add=False)),
            ],
            options={'table': 'webhook_deliveries', 'app': 'models', 'unique_together': (('webhook_id', 'external_id'),), 'indexes': [Index(fields=['webhook_id', 'received_at']), Index(fields=['status', 'received_at'])], 'pk_attr': 'id', 'table_description': 'One accepted delivery, committed before the sender hears 200: the durable inbox.'},
            bases=['Model'],
        ),
    ]
