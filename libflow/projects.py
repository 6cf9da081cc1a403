"""Projects and their API keys: creation, revocation, and who a key says is calling."""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass

from tortoise.transactions import in_transaction

from libflow.errors import NotFound, ValidationFailed
from libflow.ids import utcnow
from libflow.models import ApiKey, Project

KEY_PREFIX = "lf_"


def hash_api_key(secret: str) -> str:
    """Keys carry 256 random bits, so one SHA-256 is enough; a slow hash would buy nothing."""
    return hashlib.sha256(secret.encode()).hexdigest()


async def create_api_key(
    project: Project, *, name: str = "default", email: str | None = None
) -> tuple[ApiKey, str]:
    """A new key for ``project``; the secret is returned once and never stored."""
    secret = KEY_PREFIX + secrets.token_urlsafe(32)
    key = await ApiKey.create(
        project=project,
        key_hash=hash_api_key(secret),
        prefix=secret[:10],
        name=name,
        email=email,
    )
    return key, secret


async def create_project(name: str) -> tuple[Project, ApiKey, str]:
    """A project with its first API key."""
    project = await Project.create(name=name)
    key, secret = await create_api_key(project)
    return project, key, secret


async def revoke_api_key(key_id: str) -> ApiKey:
    """Revoke a key by id; revoking twice keeps the first time."""
    key = await ApiKey.get_or_none(id=key_id)
    if key is None:
        raise NotFound(f"no API key {key_id}")
    if key.revoked_at is None:
        key.revoked_at = utcnow()
        await key.save(update_fields=["revoked_at"])
    return key


async def rotate_api_key(key_id: str) -> tuple[ApiKey, str]:
    """A new key in place of ``key_id`` (same project, name and email); the old one revoked.

    One transaction: there is never a moment with neither key, nor a new key beside an old
    one that stays valid because the revocation failed.
    """
    async with in_transaction():
        old = await ApiKey.get_or_none(id=key_id).select_related("project")
        if old is None:
            raise NotFound(f"no API key {key_id}")
        if old.revoked_at is not None:
            raise ValidationFailed(f"API key {key_id} is revoked: create a new one instead")
        new, secret = await create_api_key(old.project, name=old.name, email=old.email)
        await revoke_api_key(old.id)
    return new, secret


async def find_active_key(secret: str) -> ApiKey | None:
    """The unrevoked key whose secret this is, if any."""
    return await ApiKey.get_or_none(key_hash=hash_api_key(secret), revoked_at=None)


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is calling: the key's id, its project and the uploader identity it carries."""

    key_id: str
    project_id: str
    name: str
    email: str | None


class ApiKeyCache:
    """Remembers verified keys briefly so a request costs no key lookup.

    A revoked key stops working within ``ttl`` seconds; revocation happens in
    another process (the CLI), so a shorter-lived cache is the only way to see it.
    """

    def __init__(self, ttl: float) -> None:
        self._ttl = ttl
        self._entries: dict[str, tuple[float, Caller]] = {}

    async def lookup(self, secret: str) -> Caller | None:
        """The caller this secret identifies, or None."""
        digest = hash_api_key(secret)
        now = time.monotonic()
        cached = self._entries.get(digest)
        if cached is not None and cached[0] > now:
            return cached[1]
        key = await find_active_key(secret)
        if key is None:
            self._entries.pop(digest, None)
            return None
        caller = Caller(key.id, key.project_id, key.name, key.email)
        if self._ttl > 0:
            if len(self._entries) > 10_000:
                self._entries.clear()
            self._entries[digest] = (now + self._ttl, caller)
        return caller
