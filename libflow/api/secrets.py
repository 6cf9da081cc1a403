"""Handlers of a project's secrets: put (create or replace), list (names only), delete.

No route answers a secret's value: it goes in with PUT and out only to a run's templates.
"""

from __future__ import annotations

from typing import Annotated, Any

from aiohttp import web
from pydantic import Field

from libflow.api.bodies import Body, parse_body
from libflow.api.responses import json_response
from libflow.ids import iso
from libflow.models import Secret
from libflow.secrets import store

routes = web.RouteTableDef()
SECRETS = "/api/publicv1/projects/{projectId}/secrets"
SECRET = f"{SECRETS}/{{name}}"


class PutSecretBody(Body):
    """``PUT .../secrets/:name``: the value, up to 65,536 bytes of UTF-8."""

    value: Annotated[
        str,
        Field(
            min_length=1,
            max_length=store.MAX_SECRET_BYTES,
            description=f"At most {store.MAX_SECRET_BYTES} bytes as UTF-8; never shown again",
        ),
    ]


def secret_json(secret: Secret) -> dict[str, Any]:
    """A secret as listed: its name and dates, never its value."""
    return {
        "name": secret.name,
        "createdDate": iso(secret.created_at),
        "updatedDate": iso(secret.updated_at),
    }


@routes.put(SECRET)
async def put_secret(request: web.Request) -> web.Response:
    """Create the secret, or replace its value."""
    body = await parse_body(request, PutSecretBody)
    await store.put_secret(request.match_info["projectId"], request.match_info["name"], body.value)
    return web.Response(status=204)


@routes.get(SECRETS)
async def list_secrets(request: web.Request) -> web.Response:
    """The project's secrets by name, without values."""
    found = await store.list_secrets(request.match_info["projectId"])
    return json_response([secret_json(secret) for secret in found])


@routes.delete(SECRET)
async def delete_secret(request: web.Request) -> web.Response:
    """Delete a secret: runs started afterwards no longer read it."""
    await store.delete_secret(request.match_info["projectId"], request.match_info["name"])
    return web.Response(status=204)
