"""The SHA-256 of each webhook delivery's body, indexed with its webhook and time.

A github delivery is a replay when its webhook accepted the same body in the last five
minutes; that check compared the body of every delivery of the window (thousands of rows
at a few hundred deliveries a second) and now looks the digest up. Rows from before are
left NULL: the check compares their bodies, for the five minutes they stay in the window.
"""

from tortoise import migrations
from tortoise.migrations import operations as ops
from tortoise import fields
from tortoise.indexes import Index

class Migration(migrations.Migration):
    dependencies = [('models', '0011_stemmed_keyword_index')]

    initial = False

    operations = [
        ops.AddField(
            model_name='WebhookDelivery',
            name='body_sha256',
            field=fields.CharField(null=True, max_length=64),
        ),
        ops.AddIndex(
            model_name='WebhookDelivery',
            index=Index(fields=['webhook_id', 'body_sha256', 'received_at']),
        ),
    ]
