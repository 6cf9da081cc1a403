"""Projects and their API keys: creation, revocation and authentication."""

from __future__ import annotations

import hashlib
import secrets

from libflow.errors import NotFound
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


async def find_active_key(secret: str) -> ApiKey | None:
    """The unrevoked key whose secret this is, if any."""
    return await ApiKey.get_or_none(key_hash=hash_api_key(secret), revoked_at=None)
