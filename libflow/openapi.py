"""The OpenAPI 3.1 document of the public interface, built from the request models."""

from __future__ import annotations

from functools import cache
from typing import Any

from libflow import __version__
from libflow.api.bodies import (
    Body,
    CreateFileBody,
    CreateFolderBody,
    CreateWorkflowBody,
    FinalizeBody,
    PublishVersionBody,
    RunSyncBody,
)

LIB = "/api/publicv1/projects/{projectId}/library"
WF = "/api/publicv1/projects/{projectId}/workflows"
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
_DATE = {"type": "string", "format": "date-time"}
_OBJECT = {"type": "object"}
WORKFLOW_SCHEMAS: dict[str, Any] = {
    "Workflow": {
        "type": "object",
        "required": ["workflowId", "name", "version", "createdDate"],
        "properties": {
            "workflowId": _STR,
            "name": _STR,
            "version": _STR,
            "createdDate": _DATE,
            "updatedDate": _DATE,
        },
    },
    "WorkflowVersion": {
        "type": "object",
        "required": ["version", "createdDate"],
        "properties": {"version": _STR, "createdDate": _DATE},
    },
    "WorkflowDetail": {
        "allOf": [
            {"$ref": "#/components/schemas/Workflow"},
            {
                "type": "object",
                "properties": {
                    "definition": _OBJECT,
                    "versions": {
                        "type": "array",
                        "items": {"$ref": "#/components/schemas/WorkflowVersion"},
                    },
                },
            },
        ]
    },
    "RunSyncResult": {
        "type": "object",
        "required": ["success", "result", "statusCode"],
        "properties": {
            "success": {"type": "boolean"},
            "statusCode": {"type": "integer"},
            "result": {
                "type": "object",
                "required": ["outputs"],
                "properties": {
                    "outputs": _OBJECT,
                    "error": {
                        "type": "object",
                        "properties": {"code": _STR, "node": _NULLABLE_STR, "message": _STR},
                    },
                },
            },
        },
    },
    "Run": {
        "type": "object",
        "required": ["runId", "workflowId", "version", "event", "trigger", "status"],
        "properties": {
            "runId": _STR,
            "workflowId": _STR,
            "version": _STR,
            "event": _STR,
            "trigger": {"enum": ["api", "webhook"]},
            "status": {"enum": ["running", "succeeded", "failed", "timed_out", "cancelled"]},
            "statusCode": {"type": ["integer", "null"]},
            "inputs": _OBJECT,
            "outputs": _OBJECT,
            "error": {"type": ["object", "null"]},
            "nodeTimings": _OBJECT,
            "startedDate": _DATE,
            "finishedDate": {"type": ["string", "null"], "format": "date-time"},
        },
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
    workflow = _path_params("projectId", "workflowId")
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
        WF: {
            "get": {
                "summary": "List workflows",
                "parameters": project,
                "responses": {
                    "200": _json({"type": "array", "items": _ref("Workflow")}, "workflows"),
                    **_errors(*_AUTH_ERRORS),
                },
            },
            "post": {
                "summary": "Create a workflow (publishes version 1)",
                "parameters": project,
                "requestBody": _body(CreateWorkflowBody),
                "responses": {
                    "201": _json(_ref("Workflow"), "the workflow"),
                    **_errors(400, *_AUTH_ERRORS),
                },
            },
        },
        f"{WF}/{{workflowId}}": {
            "get": {
                "summary": "A workflow with its latest definition and versions",
                "parameters": workflow,
                "responses": {
                    "200": _json(_ref("WorkflowDetail"), "the workflow"),
                    **_errors(*_AUTH_ERRORS, 404),
                },
            },
        },
        f"{WF}/{{workflowId}}/versions": {
            "post": {
                "summary": "Publish the next immutable version",
                "parameters": workflow,
                "requestBody": _body(PublishVersionBody),
                "responses": {
                    "201": _json(_ref("WorkflowVersion"), "the version"),
                    **_errors(400, *_AUTH_ERRORS, 404),
                },
            },
        },
        f"{WF}/{{workflowId}}/runs": {
            "get": {
                "summary": "The workflow's runs, newest first",
                "parameters": workflow,
                "responses": {
                    "200": _json({"type": "array", "items": _ref("Run")}, "runs"),
                    **_errors(*_AUTH_ERRORS, 404),
                },
            },
        },
        f"{WF}/{{workflowId}}/runsync": {
            "post": {
                "summary": "Run a workflow and answer with its outputs (status = statusCode)",
                "parameters": workflow,
                "requestBody": _body(RunSyncBody),
                "responses": {
                    "200": _json(_ref("RunSyncResult"), "the run succeeded"),
                    "500": _json(_ref("RunSyncResult"), "a node failed (NODE_FAILED)"),
                    "504": _json(_ref("RunSyncResult"), "the run timed out (RUN_TIMEOUT)"),
                    "default": _json(
                        {"oneOf": [_ref("RunSyncResult"), ERROR]},
                        "a respond or fail node's status, or an error",
                    ),
                    **_errors(400, *_AUTH_ERRORS, 404),
                },
            },
        },
        "/api/publicv1/projects/{projectId}/runs/{runId}": {
            "get": {
                "summary": "One run record",
                "parameters": _path_params("projectId", "runId"),
                "responses": {
                    "200": _json(_ref("Run"), "the run"),
                    **_errors(*_AUTH_ERRORS, 404),
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
        **WORKFLOW_SCHEMAS,
    }
    for model in (
        CreateFolderBody,
        CreateFileBody,
        FinalizeBody,
        CreateWorkflowBody,
        PublishVersionBody,
        RunSyncBody,
    ):
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
