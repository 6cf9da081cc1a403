"""The library routes issue 17 added: editing a file, its passages, reprocessing, POST search.

The routes the spec names and their schemas are in ``libflow.api.openapi``; these join them.
"""

from __future__ import annotations

from typing import Any

from libflow.api.bodies import Body, SearchBody, UpdateFileBody, UpdateFolderBody
from libflow.api.openapi.common import (
    AUTH_ERRORS,
    LINK_NEXT,
    PROJECT,
    STR,
    body,
    errors,
    json_response,
    limit_param,
    path_params,
    query_param,
    ref,
)

LIB = f"{PROJECT}/library"
LIBRARY_EDIT_BODIES: tuple[type[Body], ...] = (UpdateFileBody, UpdateFolderBody, SearchBody)
_PAGE = {"type": ["integer", "string", "null"]}
_METADATA = {
    "type": "object",
    "additionalProperties": {"type": ["string", "number", "boolean"]},
}
PASSAGE = {
    "type": "object",
    "required": ["index", "page", "text", "tokens"],
    "properties": {
        "index": {"type": "integer", "minimum": 0},
        "page": _PAGE,
        "text": STR,
        "tokens": {"type": ["integer", "null"]},
    },
}
_SCORE = {"type": "number", "minimum": 0, "maximum": 1}
_COMPONENT = {"type": ["number", "null"]}
SEARCH_HIT = {
    "type": "object",
    "required": ["fileId", "name", "chunk", "score", "scores", "page"],
    "properties": {
        "fileId": STR,
        "name": STR,
        "chunk": STR,
        "score": _SCORE,
        "scores": {
            "type": "object",
            "required": ["keyword", "semantic"],
            "properties": {"keyword": _COMPONENT, "semantic": _COMPONENT},
        },
        "page": _PAGE,
    },
}
SEARCH_HIT_WITH_METADATA = {
    "allOf": [
        {"$ref": "#/components/schemas/SearchHit"},
        {"type": "object", "required": ["metadata"], "properties": {"metadata": _METADATA}},
    ]
}
FILE_DETAIL_ADDITIONS = {"metadata": _METADATA}
PROCESSING_ADDITIONS = {
    "ocrPages": {"type": ["integer", "null"]},
    "warning": {"type": ["string", "null"]},
}
LIBRARY_EDIT_SCHEMAS: dict[str, Any] = {
    "FilePassage": PASSAGE,
    "SearchHitWithMetadata": SEARCH_HIT_WITH_METADATA,
}
_SEMANTIC_WITHOUT_EMBEDDER = (
    "400 VALIDATION_ERROR (details name `mode`) for `mode: semantic` on a server without an "
    "embedder (LIBFLOW_EMBEDDER=none, or the semantic extra not installed); `hybrid` there "
    "is keyword search."
)


def patch_file_operation() -> dict[str, Any]:
    """``PATCH .../library/files/:fileId``."""
    return {
        "summary": "Rename, move or relabel a file",
        "description": "Fields left out stay as they are; `metadata` replaces the whole "
        "object. The search index follows (folder and metadata) before the answer.",
        "parameters": path_params("projectId", "fileId"),
        "requestBody": body(UpdateFileBody),
        "responses": {
            "200": json_response(ref("LibraryFileDetail"), "the changed file"),
            **errors(400, *AUTH_ERRORS, 404),
        },
    }


def search_post_operation() -> dict[str, Any]:
    """``POST .../library/search``."""
    return {
        "summary": "Search with metadata filters and a mode",
        "description": "As GET search, plus each hit's file metadata. `filter` maps a key "
        'to a value or `{"in": [values]}`; every key must match, by JSON equality (`true`, '
        '`1` and `"1"` differ). ' + _SEMANTIC_WITHOUT_EMBEDDER,
        "parameters": path_params("projectId"),
        "requestBody": body(SearchBody),
        "responses": {
            "200": json_response(
                {"type": "array", "items": ref("SearchHitWithMetadata")}, "best first"
            ),
            **errors(400, *AUTH_ERRORS, 404),
        },
    }


def library_edit_operations() -> dict[str, dict[str, Any]]:
    """The library routes with paths of their own: one folder, passages and reprocessing."""
    file = path_params("projectId", "fileId")
    folder = path_params("projectId", "dirId")
    return {
        f"{LIB}/dirs/{{dirId}}": {
            "get": {
                "summary": "Get one folder",
                "parameters": folder,
                "responses": {
                    "200": json_response(ref("Folder"), "the folder"),
                    **errors(*AUTH_ERRORS, 404),
                },
            },
            "patch": {
                "summary": "Rename a folder, or move it",
                "description": "Fields left out stay as they are. `parent` is `root` or "
                "another folder; a folder cannot go into itself or a folder under it (400). "
                "Its files and subfolders go with it, and keep their ids.",
                "parameters": folder,
                "requestBody": body(UpdateFolderBody),
                "responses": {
                    "200": json_response(ref("Folder"), "the changed folder"),
                    **errors(400, *AUTH_ERRORS, 404),
                },
            },
            "delete": {
                "summary": "Delete an empty folder",
                "description": "A folder holding files or folders is 409 FOLDER_NOT_EMPTY "
                "(`details` counts them): move or delete them first.",
                "parameters": folder,
                "responses": {
                    "204": {"description": "deleted"},
                    **errors(*AUTH_ERRORS, 404, 409),
                },
            },
        },
        f"{LIB}/files/{{fileId}}/chunks": {
            "get": {
                "summary": "The file's passages as indexed, in file order",
                "description": "Paged like the file list: a `Link` header names the next "
                "page. A file with nothing indexed (not processed yet, preventSearch, an "
                "image) has none.",
                "parameters": [
                    *file,
                    limit_param(1000, default=100),
                    query_param("cursor", STR, "Where the next page starts (from `Link`)."),
                ],
                "responses": {
                    "200": {
                        **json_response({"type": "array", "items": ref("FilePassage")}, "passages"),
                        "headers": LINK_NEXT,
                    },
                    **errors(400, *AUTH_ERRORS, 404),
                },
            },
        },
        f"{LIB}/files/{{fileId}}/reprocess": {
            "post": {
                "summary": "Run a file through processing again",
                "description": "202 with the record (`updating` true until processing ends). "
                "Its passages stay searchable meanwhile. A file already pending or processing "
                "keeps its job (202, nothing new queued); one not finalized is 409 NOT_READY.",
                "parameters": file,
                "responses": {
                    "202": json_response(ref("LibraryFileDetail"), "the file, queued"),
                    **errors(*AUTH_ERRORS, 404, 409),
                },
            },
        },
    }
