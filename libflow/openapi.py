"""The OpenAPI 3.1 document of the public interface, built from the request models."""

from __future__ import annotations

from functools import cache
from typing import Any

from libflow import __version__
from libflow.api.bodies import Body, CreateFileBody, CreateFolderBody, FinalizeBody

LIB = "/api/publicv1/projects/{projectId}/library"
ERROR = {"$ref": "#/components/schemas/Error"}
_STR = {"type": "string"}
_NULLABLE_STR = {"type": ["string", "null"]}

FOLDER = {
    "type": "object",
    "required": ["id", "name", "parent", "createdDate", "updatedDate"],
    "properties": {
        "id": _STR,
        "name": _STR,
        "parent": _STR,
        "createdDate": {"type": "string", "format": "date-time"},
        "updatedDate": {"type": "string", "format": "date-time"},
    },
}
FILE = {
    "type": "object",
    "required": ["id", "name", "type", "size", "dir", "createdDate", "updatedDate", "updating"],
    "properties": {
        "id": _STR,
        "name": _STR,
        "type": _STR,
        "size": {"type": "integer", "minimum": 0},
        "dir": _STR,
        "createdDate": {"type": "string", "format": "date-time"},
        "updatedDate": {"type": "string", "format": "date-time"},
        "uploaderName": _NULLABLE_STR,
        "uploaderEmail": _NULLABLE_STR,
        "updating": {"type": ["boolean", "null"], "enum": [True, None]},
    },
}
FILE_DETAIL = {
    "allOf": [
        {"$ref": "#/components/schemas/LibraryFile"},
        {
            "type": "object",
            "properties": {
                "path": _STR,
                "mimeType": _STR,
                "searchable": {"type": "boolean"},
                "thumbnail": {"type": "boolean"},
                "sha256": _NULLABLE_STR,
                "processing": {
                    "type": "object",
                    "properties": {
                        "status": {"enum": ["pending", "processing", "done", "failed"]},
                        "error": _NULLABLE_STR,
                        "steps": {"type": "object", "additionalProperties": _STR},
                        "pages": {"type": ["integer", "null"]},
                        "chunks": {"type": ["integer", "null"]},
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
        "documentId": _STR,
        "storageLink": {"type": "string", "format": "uri"},
        "mimeType": _STR,
        "path": _STR,
        "createdDate": {"type": "string", "format": "date-time"},
        "dir": _STR,
    },
}
SEARCH_HIT = {
    "type": "object",
    "required": ["fileId", "name", "chunk", "score", "page"],
    "properties": {
        "fileId": _STR,
        "name": _STR,
        "chunk": _STR,
        "score": {"type": "number"},
        "page": {"type": ["integer", "null"]},
    },
}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*statuses: int) -> dict[str, Any]:
    return {str(s): _json(ERROR, "error") for s in statuses}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _body(model: type[Body]) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": _ref(model.__name__)}}}


def _path_params(*names: str) -> list[dict[str, Any]]:
    return [{"name": n, "in": "path", "required": True, "schema": _STR} for n in names]


_AUTH_ERRORS = (401, 403)
_REDIRECT = {"description": "redirect to a signed URL", "headers": {"Location": {"schema": _STR}}}


def _operations() -> dict[str, dict[str, Any]]:
    project = _path_params("projectId")
    file = _path_params("projectId", "fileId")
    signed = [
        *_path_params("key"),
        {"name": "expires", "in": "query", "required": True, "schema": {"type": "integer"}},
        {"name": "ct", "in": "query", "required": True, "schema": _STR},
        {"name": "cd", "in": "query", "required": False, "schema": _STR},
        {"name": "sig", "in": "query", "required": True, "schema": _STR},
    ]
    return {
        f"{LIB}/dirs": {
            "get": {
                "summary": "List folders",
                "parameters": project,
                "responses": {
                    "200": _json({"type": "array", "items": _ref("Folder")}, "folders"),
                    **_errors(*_AUTH_ERRORS),
                },
            },
            "post": {
                "summary": "Create a folder",
                "parameters": project,
                "requestBody": _body(CreateFolderBody),
                "responses": {
                    "201": _json(_ref("Folder"), "the folder"),
                    **_errors(400, *_AUTH_ERRORS, 404),
                },
            },
        },
        f"{LIB}/files": {
            "get": {
                "summary": "List files, newest first",
                "parameters": [
                    *project,
                    {"name": "dir", "in": "query", "required": False, "schema": _STR},
                    {
                        "name": "limit",
                        "in": "query",
                        "required": False,
                        "schema": {"type": "integer", "minimum": 1, "maximum": 1000},
                    },
                    {"name": "cursor", "in": "query", "required": False, "schema": _STR},
                ],
                "responses": {
                    "200": {
                        **_json({"type": "array", "items": _ref("LibraryFile")}, "files"),
                        "headers": {"Link": {"schema": _STR, "description": 'rel="next"'}},
                    },
                    **_errors(400, *_AUTH_ERRORS, 404),
                },
            },
            "post": {
                "summary": "Create a file record and a signed upload URL",
                "parameters": project,
                "requestBody": _body(CreateFileBody),
                "responses": {
                    "201": _json(_ref("UploadCreated"), "the record and its storageLink"),
                    **_errors(400, *_AUTH_ERRORS, 404),
                },
            },
        },
        f"{LIB}/files:complete": {
            "post": {
                "summary": "Finalize an upload",
                "parameters": project,
                "requestBody": _body(FinalizeBody),
                "responses": {
                    "200": _json(_ref("LibraryFileDetail"), "the finalized record"),
                    **_errors(400, *_AUTH_ERRORS, 404, 409, 503),
                },
            },
        },
        f"{LIB}/files/{{fileId}}": {
            "get": {
                "summary": "Get one file",
                "parameters": file,
                "responses": {
                    "200": _json(_ref("LibraryFileDetail"), "the file"),
                    **_errors(*_AUTH_ERRORS, 404),
                },
            },
            "delete": {
                "summary": "Delete a file, its bytes and thumbnail",
                "parameters": file,
                "responses": {"204": {"description": "deleted"}, **_errors(*_AUTH_ERRORS, 404)},
            },
        },
        f"{LIB}/files/{{fileId}}/download": {
            "get": {
                "summary": "Download a file (302 to a signed URL)",
                "parameters": file,
                "responses": {"302": _REDIRECT, **_errors(*_AUTH_ERRORS, 404, 409)},
            },
        },
        f"{LIB}/files/{{fileId}}/thumbnail": {
            "get": {
                "summary": "The file's thumbnail (302 to a signed URL)",
                "parameters": file,
                "responses": {"302": _REDIRECT, **_errors(*_AUTH_ERRORS, 404)},
            },
        },
        f"{LIB}/search": {
            "get": {
                "summary": "Hybrid keyword and semantic search over the project's documents",
                "parameters": [
                    *project,
                    {"name": "q", "in": "query", "required": True, "schema": _STR},
                    {
                        "name": "limit",
                        "in": "query",
                        "required": False,
                        "schema": {"type": "integer", "minimum": 1, "maximum": 100},
                    },
                    {"name": "dir", "in": "query", "required": False, "schema": _STR},
                ],
                "responses": {
                    "200": _json({"type": "array", "items": _ref("SearchHit")}, "best first"),
                    **_errors(400, *_AUTH_ERRORS, 404),
                },
            },
        },
        "/storage/{key}": {
            "put": {
                "summary": "Upload bytes to a signed storageLink (local storage backend)",
                "security": [],
                "parameters": signed,
                "requestBody": {
                    "required": True,
                    "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}},
                },
                "responses": {
                    "200": {"description": "stored"},
                    **_errors(400, 403, 411, 413),
                },
            },
            "get": {
                "summary": "Download from a signed URL (local storage backend)",
                "security": [],
                "parameters": signed,
                "responses": {
                    "200": {"description": "the bytes"},
                    "206": {"description": "a range of the bytes"},
                    **_errors(403, 404),
                },
            },
        },
        "/healthz": {
            "get": {
                "summary": "Liveness",
                "security": [],
                "responses": {"200": _json({"type": "object"}, "up")},
            }
        },
        "/readyz": {
            "get": {
                "summary": "Readiness: database, storage, Redis",
                "security": [],
                "responses": {
                    "200": _json({"type": "object"}, "ready"),
                    **_errors(503),
                },
            }
        },
        "/metrics": {
            "get": {
                "summary": "Prometheus metrics",
                "security": [],
                "responses": {
                    "200": {"description": "metrics", "content": {"text/plain": {"schema": _STR}}}
                },
            }
        },
        "/api/publicv1/openapi.json": {
            "get": {
                "summary": "This document",
                "security": [],
                "responses": {"200": _json({"type": "object"}, "OpenAPI 3.1")},
            }
        },
    }


@cache
def openapi_document(server_url: str) -> dict[str, Any]:
    """The whole document; cached because it only changes with the code."""
    schemas: dict[str, Any] = {
        "Error": {
            "type": "object",
            "required": ["error", "message"],
            "properties": {"error": _STR, "message": _STR, "details": {}},
        },
        "Folder": FOLDER,
        "LibraryFile": FILE,
        "LibraryFileDetail": FILE_DETAIL,
        "UploadCreated": UPLOAD,
        "SearchHit": SEARCH_HIT,
    }
    for model in (CreateFolderBody, CreateFileBody, FinalizeBody):
        schemas[model.__name__] = model.model_json_schema(
            ref_template="#/components/schemas/{model}"
        )
    return {
        "openapi": "3.1.0",
        "info": {"title": "libflow", "version": __version__},
        "servers": [{"url": server_url}],
        "security": [{"apiKey": []}],
        "paths": _operations(),
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
