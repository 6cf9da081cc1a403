"""Building blocks shared by the parts of the OpenAPI document (see libflow.api.openapi)."""

from __future__ import annotations

from typing import Any

from libflow.api.bodies import Body

PROJECT = "/api/publicv1/projects/{projectId}"
WF = f"{PROJECT}/workflows"
ERROR = {"$ref": "#/components/schemas/Error"}
STR = {"type": "string"}
NULLABLE_STR = {"type": ["string", "null"]}
DATE = {"type": "string", "format": "date-time"}
NULLABLE_DATE = {"type": ["string", "null"], "format": "date-time"}
OBJECT = {"type": "object"}
# What the API-key middleware answers on every keyed route: no or an unknown key, another
# project's key, a key over its rate limit, and the database that holds the keys (and
# everything a keyed route reads or writes) down or its writer lock held too long (both
# with Retry-After).
AUTH_ERRORS = (401, 403, 429, 503)
# Answers that tell the client when to try again.
RETRY_AFTER = {
    "Retry-After": {
        "schema": {"type": "integer", "minimum": 0},
        "description": "seconds to wait before retrying",
    }
}
_RETRY_STATUSES = frozenset({429, 503})
# The header of a list answer that has a next page.
LINK_NEXT = {
    "Link": {
        "schema": STR,
        "description": '`<URL of the next page>; rel="next"`, absent on the last page',
    }
}


def json_response(schema: dict[str, Any], description: str) -> dict[str, Any]:
    """A response whose body is JSON of ``schema``."""
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def errors(*statuses: int) -> dict[str, Any]:
    """Error responses, one per status, all with the one error body (429 and 503 with
    their Retry-After header)."""
    return {str(s): _error_response(s) for s in statuses}


def _error_response(status: int) -> dict[str, Any]:
    response = json_response(ERROR, "error")
    if status in _RETRY_STATUSES:
        response["headers"] = RETRY_AFTER
    return response


def ref(name: str) -> dict[str, str]:
    """A reference to a schema of the components."""
    return {"$ref": f"#/components/schemas/{name}"}


def body(model: type[Body], *, required: bool = True) -> dict[str, Any]:
    """A JSON request body validated as ``model`` (whose schema is a component).

    Not ``required``: an empty body stands for ``{}`` (every field's default).
    """
    return {
        "required": required,
        "content": {"application/json": {"schema": ref(model.__name__)}},
    }


def path_params(*names: str) -> list[dict[str, Any]]:
    """Required string path parameters."""
    return [{"name": n, "in": "path", "required": True, "schema": STR} for n in names]


def query_param(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    """An optional query parameter."""
    return {
        "name": name,
        "in": "query",
        "required": False,
        "schema": schema,
        "description": description,
    }


def limit_param(maximum: int, default: int | None = None) -> dict[str, Any]:
    """The optional ``limit`` query parameter, 1..``maximum``."""
    schema: dict[str, Any] = {"type": "integer", "minimum": 1, "maximum": maximum}
    if default is not None:
        schema["default"] = default
    return {"name": "limit", "in": "query", "required": False, "schema": schema}
