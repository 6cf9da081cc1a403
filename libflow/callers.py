"""Who is calling: API keys resolved to a project and an uploader identity, cached briefly."""

from __future__ import annotations

import time
from dataclasses import dataclass

from libflow.projects import find_active_key, hash_api_key


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
