"""The OpenAPI 3.1 document of the public interface, built from the request models.

This module holds the library, storage and operations routes and assembles the document;
the modules beside it contribute workflows, runs, schedules, secrets and webhooks.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from libflow import __version__
from libflow.api.bodies import (
    Body,
    CreateFileBody,
    CreateFolderBody,
    FinalizeBody,
)
from libflow.api.openapi.common import (
    AUTH_ERRORS,
    DATE,
    LINK_NEXT,
    NULLABLE_STR,
    PROJECT,
    STR,
    body,
    errors,
    json_response,
    limit_param,
    path_params,
    ref,
)
from libflow.api.openapi.console import console_operations
from libflow.api.openapi.docs import docs_operations
from libflow.api.openapi.library import (
    FILE_DETAIL_ADDITIONS,
    LIBRARY_EDIT_BODIES,
    LIBRARY_EDIT_SCHEMAS,
    PROCESSING_ADDITIONS,
    SEARCH_HIT,
    library_edit_operations,
    patch_file_operation,
    search_post_operation,
)
from libflow.api.openapi.runs import RUN_BODIES, RUN_SCHEMAS, run_operations
from libflow.api.openapi.schedules import (
    SCHEDULE_BODIES,
    SCHEDULE_SCHEMAS,
    schedule_operations,
)
from libflow.api.openapi.secrets import SECRET_BODIES, SECRET_SCHEMAS, secret_operations
from libflow.api.openapi.webhooks import WEBHOOK_BODIES, WEBHOOK_SCHEMAS, webhook_operations
from libflow.api.openapi.words import describe, tagged
from libflow.api.openapi.workflows import WORKFLOW_BODIES, WORKFLOW_SCHEMAS, workflow_operations
from libflow.errors import STATUS_BY_CODE
from libflow.library.search import MAX_QUERY_CHARS, SearchMode

LIB = f"{PROJECT}/library"
LIBRARY_BODIES: tuple[type[Body], ...] = (CreateFolderBody, CreateFileBody, FinalizeBody)

FOLDER = {
    "type": "object",
    "required": ["id", "name", "parent", "createdDate", "updatedDate"],
    "properties": {
        "id": STR,
        "name": STR,
        "parent": STR,
        "createdDate": DATE,
        "updatedDate": DATE,
    },
}
FILE = {
    "type": "object",
    "required": ["id", "name", "type", "size", "dir", "createdDate", "updatedDate", "updating"],
    "properties": {
        "id": STR,
        "name": STR,
        "type": STR,
        "size": {"type": "integer", "minimum": 0},
        "dir": STR,
        "createdDate": DATE,
        "updatedDate": DATE,
        "uploaderName": NULLABLE_STR,
        "uploaderEmail": NULLABLE_STR,
        "updating": {"type": ["boolean", "null"], "enum": [True, None]},
    },
}
FILE_DETAIL = {
    "allOf": [
        {"$ref": "#/components/schemas/LibraryFile"},
        {
            "type": "object",
            "properties": {
                "path": STR,
                "mimeType": STR,
                "searchable": {"type": "boolean"},
                "thumbnail": {"type": "boolean"},
                "sha256": NULLABLE_STR,
                **FILE_DETAIL_ADDITIONS,
                "processing": {
                    "type": "object",
                    "properties": {
                        "status": {"enum": ["pending", "processing", "done", "failed"]},
                        "error": NULLABLE_STR,
                        "steps": {"type": "object", "additionalProperties": STR},
                        "pages": {"type": ["integer", "null"]},
                        "chunks": {"type": ["integer", "null"]},
                        **PROCESSING_ADDITIONS,
                    },
                },
            },
        },
    ]
}
UPLOAD = {
    "type": "object",
    "required": ["documentId", "storageLink", "mimeType", "path", "createdDate", "dir"],
    "properties": {
        "documentId": STR,
        "storageLink": {"type": "string", "format": "uri"},
        "mimeType": STR,
        "path": STR,
        "createdDate": DATE,
        "dir": STR,
    },
}

_READY = {
    "type": "object",
    "required": ["status", "checks"],
    "properties": {
        "status": {"const": "ok"},
        "checks": {"type": "object", "additionalProperties": STR},
    },
}
_READYZ_DESCRIPTION = """\
`checks` names each dependency with `ok` or what is wrong with it: `database`, `storage`, \
and with Redis configured (the scaled shape) `redis` and `workers`. A check that fails or \
does not answer within 3 s makes the answer 503 UNAVAILABLE, with the checks in `details`. \
`workers` is `ok` when an arq worker polled Redis within the last few seconds, else a \
message; it never makes /readyz fail (queued work waits for a worker)."""

_REDIRECT = {"description": "redirect to a signed URL", "headers": {"Location": {"schema": STR}}}


def _operations() -> dict[str, dict[str, Any]]:
    project = path_params("projectId")
    file = path_params("projectId", "fileId")
    signed = [
        *path_params("key"),
        {"name": "expires", "in": "query", "required": True, "schema": {"type": "integer"}},
        {"name": "ct", "in": "query", "required": True, "schema": STR},
        {"name": "cd", "in": "query", "required": False, "schema": STR},
        {"name": "sig", "in": "query", "required": True, "schema": STR},
    ]
    return {
        f"{LIB}/dirs": {
            "get": {
                "summary": "List folders, oldest first",
                "parameters": [
                    *project,
                    limit_param(1000),
                    {"name": "cursor", "in": "query", "required": False, "schema": STR},
                ],
                "responses": {
                    "200": {
                        **json_response({"type": "array", "items": ref("Folder")}, "folders"),
                        "headers": LINK_NEXT,
                    },
                    **errors(400, *AUTH_ERRORS),
                },
            },
            "post": {
                "summary": "Create a folder",
                "parameters": project,
                "requestBody": body(CreateFolderBody),
                "responses": {
                    "201": json_response(ref("Folder"), "the folder"),
                    **errors(400, *AUTH_ERRORS, 404),
                },
            },
        },
        f"{LIB}/files": {
            "get": {
                "summary": "List files, newest first",
                "parameters": [
                    *project,
                    {"name": "dir", "in": "query", "required": False, "schema": STR},
                    limit_param(1000),
                    {"name": "cursor", "in": "query", "required": False, "schema": STR},
                ],
                "responses": {
                    "200": {
                        **json_response({"type": "array", "items": ref("LibraryFile")}, "files"),
                        "headers": LINK_NEXT,
                    },
                    **errors(400, *AUTH_ERRORS, 404),
                },
            },
            "post": {
                "summary": "Create a file record and a signed upload URL",
                "parameters": project,
                "requestBody": body(CreateFileBody),
                "responses": {
                    "201": json_response(ref("UploadCreated"), "the record and its storageLink"),
                    **errors(400, *AUTH_ERRORS, 404),
                },
            },
        },
        f"{LIB}/files:complete": {
            "post": {
                "summary": "Finalize an upload",
                "parameters": project,
                "requestBody": body(FinalizeBody),
                "responses": {
                    "200": json_response(ref("LibraryFileDetail"), "the finalized record"),
                    **errors(400, *AUTH_ERRORS, 404, 409),
                },
            },
        },
        f"{LIB}/files/{{fileId}}": {
            "get": {
                "summary": "Get one file",
                "parameters": file,
                "responses": {
                    "200": json_response(ref("LibraryFileDetail"), "the file"),
                    **errors(*AUTH_ERRORS, 404),
                },
            },
            "patch": patch_file_operation(),
            "delete": {
                "summary": "Delete a file, its bytes and thumbnail",
                "parameters": file,
                "responses": {"204": {"description": "deleted"}, **errors(*AUTH_ERRORS, 404)},
            },
        },
        f"{LIB}/files/{{fileId}}/download": {
            "get": {
                "summary": "Download a file (302 to a signed URL)",
                "parameters": file,
                "responses": {"302": _REDIRECT, **errors(*AUTH_ERRORS, 404, 409)},
            },
        },
        f"{LIB}/files/{{fileId}}/thumbnail": {
            "get": {
                "summary": "The file's thumbnail (302 to a signed URL)",
                "parameters": file,
                "responses": {"302": _REDIRECT, **errors(*AUTH_ERRORS, 404)},
            },
        },
        f"{LIB}/search": {
            "get": {
                "summary": "Hybrid keyword and semantic search over the project's documents",
                "parameters": [
                    *project,
                    {
                        "name": "q",
                        "in": "query",
                        "required": True,
                        "schema": {
                            "type": "string",
                            "minLength": 1,
                            "maxLength": MAX_QUERY_CHARS,
                        },
                    },
                    limit_param(100),
                    {"name": "dir", "in": "query", "required": False, "schema": STR},
                    {
                        "name": "mode",
                        "in": "query",
                        "required": False,
                        "description": "Which rankings to run (as POST search's `mode`).",
                        "schema": {
                            "type": "string",
                            "enum": [mode.value for mode in SearchMode],
                            "default": SearchMode.HYBRID.value,
                        },
                    },
                ],
                "responses": {
                    "200": json_response(
                        {"type": "array", "items": ref("SearchHit")}, "best first"
                    ),
                    **errors(400, *AUTH_ERRORS, 404),
                },
            },
            "post": search_post_operation(),
        },
        **library_edit_operations(),
        **workflow_operations(),
        **run_operations(),
        **schedule_operations(),
        **secret_operations(),
        **webhook_operations(),
        "/storage/{key}": {
            "put": {
                "summary": "Upload bytes to a signed storageLink (local storage backend)",
                "description": (
                    "A storageLink takes one complete upload: after it, after finalize and "
                    "after delete the link answers 403. With Expect: 100-continue a refusal "
                    "comes before the 100; an expectation other than 100-continue is 417."
                ),
                "security": [],
                "parameters": signed,
                "requestBody": {
                    "required": True,
                    "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}},
                },
                "responses": {
                    "200": {"description": "stored"},
                    **errors(400, 403, 411, 413, 417, 503),
                },
            },
            "get": {
                "summary": "Download from a signed URL (local storage backend)",
                "security": [],
                "parameters": signed,
                "responses": {
                    "200": {"description": "the bytes"},
                    "206": {"description": "a range of the bytes"},
                    **errors(403, 404, 416),
                },
            },
        },
        "/healthz": {
            "get": {
                "summary": "Liveness",
                "security": [],
                "responses": {"200": json_response({"type": "object"}, "up")},
            }
        },
        "/readyz": {
            "get": {
                "summary": "Readiness: database, storage, Redis (and whether workers poll)",
                "description": _READYZ_DESCRIPTION,
                "security": [],
                "responses": {
                    "200": json_response(_READY, "ready"),
                    **errors(503),
                },
            }
        },
        "/metrics": {
            "get": {
                "summary": "Prometheus metrics",
                "security": [],
                "responses": {
                    "200": {"description": "metrics", "content": {"text/plain": {"schema": STR}}}
                },
            }
        },
        "/api/publicv1/openapi.json": {
            "get": {
                "summary": "This document",
                "security": [],
                "responses": {"200": json_response({"type": "object"}, "OpenAPI 3.1")},
            }
        },
        **console_operations(),
        **docs_operations(),
    }


@cache
def openapi_document(server_url: str) -> dict[str, Any]:
    """The whole document; cached because it only changes with the code."""
    schemas: dict[str, Any] = {
        "Error": {
            "type": "object",
            "required": ["error", "message"],
            "properties": {
                "error": {
                    "type": "string",
                    "enum": list(STATUS_BY_CODE),
                    "description": "The code, with the HTTP status it is answered with: "
                    + ", ".join(f"{code} {status}" for code, status in STATUS_BY_CODE.items())
                    + " (on /storage: EMPTY_UPLOAD 400 at the PUT, VALIDATION_ERROR also 416 "
                    "and 417)",
                },
                "message": STR,
                "details": {"description": "What was wrong, when there is more to say"},
            },
        },
        "Folder": FOLDER,
        "LibraryFile": FILE,
        "LibraryFileDetail": FILE_DETAIL,
        "UploadCreated": UPLOAD,
        "SearchHit": SEARCH_HIT,
        **LIBRARY_EDIT_SCHEMAS,
        **WORKFLOW_SCHEMAS,
        **RUN_SCHEMAS,
        **SCHEDULE_SCHEMAS,
        **SECRET_SCHEMAS,
        **WEBHOOK_SCHEMAS,
    }
    for model in (
        *LIBRARY_BODIES,
        *LIBRARY_EDIT_BODIES,
        *WORKFLOW_BODIES,
        *RUN_BODIES,
        *SCHEDULE_BODIES,
        *SECRET_BODIES,
        *WEBHOOK_BODIES,
    ):
        schemas[model.__name__] = model.model_json_schema(
            ref_template="#/components/schemas/{model}"
        )
    schemas = describe(schemas)
    return {
        "openapi": "3.1.0",
        "info": {"title": "libflow", "version": __version__},
        "servers": [{"url": server_url}],
        "security": [{"apiKey": []}],
        "paths": tagged(_operations()),
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "apiKey": {
                    "type": "apiKey",
                    "in": "header",
                    "name": "Authorization",
                    "description": "The API key, alone or after 'Bearer '",
                }
            },
        },
    }
