"""The secrets parts of the OpenAPI document: a project's named secrets, never their values."""

from __future__ import annotations

from typing import Any

from libflow.api.bodies import Body
from libflow.api.openapi.common import (
    AUTH_ERRORS,
    DATE,
    PROJECT,
    STR,
    body,
    errors,
    json_response,
    path_params,
    ref,
)
from libflow.api.secrets import PutSecretBody
from libflow.secrets.store import MAX_SECRET_BYTES, MAX_SECRETS_PER_PROJECT, NAME_PATTERN

SECRETS = f"{PROJECT}/secrets"
SECRET = f"{SECRETS}/{{name}}"
SECRET_BODIES: tuple[type[Body], ...] = (PutSecretBody,)
SECRET_SCHEMAS: dict[str, Any] = {
    "Secret": {
        "type": "object",
        "required": ["name", "createdDate", "updatedDate"],
        "properties": {"name": STR, "createdDate": DATE, "updatedDate": DATE},
    },
}

_PUT_DESCRIPTION = f"""\
Creates the secret, or replaces its value. Workflows read it as `{{{{ secrets.NAME }}}}`; \
every occurrence of a value a run read is written `[secret:NAME]` in its record, its \
answer, its events and the logs. The value is sealed (AES-256-GCM, a key derived from \
LIBFLOW_SECRET_KEY) before it is stored, and no route answers it. A name that does not \
match `{NAME_PATTERN}`, an empty value, one over {MAX_SECRET_BYTES} bytes of UTF-8 and a \
{MAX_SECRETS_PER_PROJECT + 1}th secret of a project are 400 VALIDATION_ERROR."""


def _name_param() -> dict[str, Any]:
    return {
        "name": "name",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "pattern": f"^{NAME_PATTERN}$"},
    }


def secret_operations() -> dict[str, dict[str, Any]]:
    """The paths that put, list and delete secrets."""
    secret = [*path_params("projectId"), _name_param()]
    return {
        SECRETS: {
            "get": {
                "summary": "The project's secrets by name, without their values",
                "parameters": path_params("projectId"),
                "responses": {
                    "200": json_response(
                        {"type": "array", "items": ref("Secret")}, "secrets, by name"
                    ),
                    **errors(*AUTH_ERRORS),
                },
            },
        },
        SECRET: {
            "put": {
                "summary": "Create or replace a secret",
                "description": _PUT_DESCRIPTION,
                "parameters": secret,
                "requestBody": body(PutSecretBody),
                "responses": {"204": {"description": "stored"}, **errors(400, *AUTH_ERRORS)},
            },
            "delete": {
                "summary": "Delete a secret (runs that start afterwards cannot read it)",
                "parameters": secret,
                "responses": {
                    "204": {"description": "deleted"},
                    **errors(400, *AUTH_ERRORS, 404),
                },
            },
        },
    }
