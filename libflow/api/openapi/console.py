"""The console's part of the OpenAPI document: static files, served without an API key."""

from __future__ import annotations

from typing import Any

from libflow.api.openapi.common import STR, errors, path_params

_FILE_DESCRIPTION = """\
A file of the web console (`libflow/console/`); an empty name is its page, `index.html`. \
Served without an API key (the console asks for one and sends it with its own calls), \
with `Cache-Control: no-cache` and an `ETag` (a matching `If-None-Match` is a 304), \
gzipped when the client accepts it. A name that is not one of the console's files is 404."""


def console_operations() -> dict[str, dict[str, Any]]:
    """The console's routes and the redirect of the server's root to it."""
    redirect = {"302": {"description": "to `/console/`"}}
    return {
        "/": {"get": {"summary": "The web console", "security": [], "responses": redirect}},
        "/console": {
            "get": {
                "summary": "The web console",
                "security": [],
                "responses": {"301": {"description": "to `/console/`"}},
            }
        },
        "/console/{name}": {
            "get": {
                "summary": "A file of the web console",
                "description": _FILE_DESCRIPTION,
                "security": [],
                "parameters": path_params("name"),
                "responses": {
                    "200": {
                        "description": "the file",
                        "content": {
                            "text/html": {"schema": STR},
                            "text/javascript": {"schema": STR},
                            "text/css": {"schema": STR},
                            "image/svg+xml": {"schema": STR},
                        },
                    },
                    "304": {"description": "the client's copy is current"},
                    **errors(404),
                },
            }
        },
    }
