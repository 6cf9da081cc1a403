"""The reference routes of the OpenAPI document: the HTML page, its files, the definition schema."""

from __future__ import annotations

from typing import Any

from libflow.api.openapi.common import STR, errors, json_response, path_params

_NO_KEY: list[dict[str, list[str]]] = []


def docs_operations() -> dict[str, dict[str, Any]]:
    """The paths of the API reference page and the workflow definition's JSON Schema."""
    return {
        "/api/publicv1/docs": {
            "get": {
                "summary": "This reference, as a web page (no API key)",
                "description": "Swagger UI over `/api/publicv1/openapi.json`; its scripts and "
                "styles are served by this server, never from another site.",
                "security": _NO_KEY,
                "responses": {
                    "200": {
                        "description": "the page",
                        "content": {"text/html": {"schema": STR}},
                    }
                },
            }
        },
        "/swagger-ui/libflow-docs.js": {
            "get": {
                "summary": "The reference page's start-up script",
                "security": _NO_KEY,
                "responses": {
                    "200": {
                        "description": "the script",
                        "content": {"text/javascript": {"schema": STR}},
                    }
                },
            }
        },
        "/swagger-ui/{version}/{asset}": {
            "get": {
                "summary": "A file of Swagger UI (scripts, styles, icons) for the reference page",
                "description": "`version` is the Swagger UI version the page names; browsers may "
                "keep these files for a year (`Cache-Control: immutable`).",
                "security": _NO_KEY,
                "parameters": path_params("version", "asset"),
                "responses": {
                    "200": {"description": "the file"},
                    **errors(404),
                },
            }
        },
        "/api/publicv1/workflow-definition.schema.json": {
            "get": {
                "summary": "A workflow definition's JSON Schema (no API key)",
                "description": "The `WorkflowDefinition` schema of this document as one JSON "
                "Schema (draft 2020-12) document, one schema per node type: point an editor "
                "at it (`$schema`) to check definitions as they are written.",
                "security": _NO_KEY,
                "responses": {
                    "200": json_response({"type": "object"}, "the JSON Schema"),
                },
            }
        },
    }
