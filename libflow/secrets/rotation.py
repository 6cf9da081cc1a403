"""Key rotation: every sealed value (project secrets, webhook secrets) re-sealed under a new key.

All or nothing, in one transaction: a value that opens with neither key stops the rotation
before anything is written. Values the new key sealed already are left alone, so a
rotation that was interrupted can simply be run again.
"""

from __future__ import annotations

from dataclasses import dataclass

from tortoise.transactions import in_transaction

from libflow.models import Secret, Webhook
from libflow.secrets.crypto import SecretBox, SecretUnreadable, secret_bound_to, webhook_bound_to


@dataclass(frozen=True, slots=True)
class Rotated:
    """What a rotation did: values re-sealed, and values the new key had sealed already."""

    resealed: int
    already_new: int


class _Resealer:
    def __init__(self, old: SecretBox, new: SecretBox) -> None:
        self.old = old
        self.new = new
        self.resealed = 0
        self.already_new = 0

    def reseal(self, sealed: str, bound_to: str, what: str) -> str:
        if self.new.sealed_here(sealed):
            self.new.open(sealed, bound_to)  # proves it, rather than assuming
            self.already_new += 1
            return sealed
        try:
            value = self.old.open(sealed, bound_to)
        except SecretUnreadable as err:
            raise SecretUnreadable(f"{what}: {err}") from None
        self.resealed += 1
        return self.new.seal(value, bound_to)


async def rotate_key(old: SecretBox, new: SecretBox) -> Rotated:
    """Re-seal every secret and webhook secret sealed by ``old`` under ``new``."""
    work = _Resealer(old, new)
    async with in_transaction() as db:
        for row in await Secret.all().using_db(db).select_for_update().order_by("id"):
            bound_to = secret_bound_to(row.project_id, row.name)
            value = work.reseal(row.value, bound_to, f"secret {row.name!r}")
            if value != row.value:
                row.value = value
                await row.save(using_db=db, update_fields=["value"])
        for webhook in await Webhook.all().using_db(db).select_for_update().order_by("id"):
            bound_to = webhook_bound_to(webhook.id)
            what = f"webhook {webhook.id}"
            current = work.reseal(webhook.secret, bound_to, what)
            previous = webhook.previous_secret
            if previous is not None:
                previous = work.reseal(previous, bound_to, what)
            if (current, previous) != (webhook.secret, webhook.previous_secret):
                webhook.secret, webhook.previous_secret = current, previous
                await webhook.save(using_db=db, update_fields=["secret", "previous_secret"])
    return Rotated(work.resealed, work.already_new)
