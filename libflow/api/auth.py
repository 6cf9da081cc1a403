"""The API key of ``/api/publicv1`` requests: who calls, in which project, within its limit."""

from __future__ import annotations

from aiohttp import web

from libflow import appkeys
from libflow.errors import Forbidden, RateLimited, Unauthorized
from libflow.projects import Caller

API_PREFIX = "/api/publicv1"
PUBLIC_PATHS = frozenset(
    {
        f"{API_PREFIX}/openapi.json",
        f"{API_PREFIX}/docs",
        f"{API_PREFIX}/workflow-definition.schema.json",
    }
)


CALLER = web.RequestKey[Caller]("caller")


def api_key_from_header(value: str) -> str | None:
    """The key of ``Authorization: <key>`` or ``Authorization: Bearer <key>``."""
    value = value.strip()
    if value[:7].lower() == "bearer ":
        value = value[7:].strip()
    return value or None


def could_be_api_key(secret: str) -> bool:
    """Whether ``secret`` could be a key libflow issued: keys are printable ASCII.

    Anything else names no key; it is refused before it is hashed (a byte that is not
    UTF-8 arrives as a lone surrogate, which cannot be encoded to hash).
    """
    return secret.isascii() and secret.isprintable()


def needs_api_key(path: str) -> bool:
    """Whether a request to ``path`` must carry an API key: every ``/api/publicv1`` path
    but the public documents."""
    return (path == API_PREFIX or path.startswith(API_PREFIX + "/")) and path not in PUBLIC_PATHS


async def authorize(request: web.Request) -> None:
    """Authenticate the request's key, keep it inside its project and within its rate
    limit (Unauthorized, Forbidden, RateLimited); the caller is ``request[CALLER]``."""
    secret = api_key_from_header(request.headers.get("Authorization", ""))
    if secret is None:
        raise Unauthorized("missing API key: send it in the Authorization header")
    if not could_be_api_key(secret):
        raise Unauthorized("unknown or revoked API key")
    caller = await request.app[appkeys.API_KEYS].lookup(secret)
    if caller is None:
        raise Unauthorized("unknown or revoked API key")
    project_id = request.match_info.get("projectId")
    if project_id is not None and project_id != caller.project_id:
        raise Forbidden("this API key belongs to another project")
    wait = await request.app[appkeys.RATE_LIMITER].charge(caller.key_id)
    if wait > 0:
        raise RateLimited(wait)
    request[CALLER] = caller
