"""Every schema of the OpenAPI document in user words, and each of its fields.

The schemas are built where their routes are documented, and the request bodies from their
pydantic models; ``describe`` gives each schema named here its words (a request model's
description would otherwise be its docstring, written for developers) and fills in the
fields' words wherever a field has none yet (never replacing words written beside it).
``tests/test_openapi_words.py`` fails when a schema or a field of the served document is
left without words.
"""

from __future__ import annotations

import copy
from typing import Any, Final

from libflow.library.search import (
    CONFIDENT_SIMILARITY,
    FUSION_KEYWORD_WEIGHT,
    FUSION_SEMANTIC_WEIGHT,
)
from libflow.library.vectors import MIN_SIMILARITY

_TIMESTAMP: Final = "ISO 8601, UTC."

# A schema's words, then its fields' (by property name).
SCHEMA_WORDS: Final[dict[str, tuple[str, dict[str, str]]]] = {
    "Error": (
        "Every error, on every route: a code, a message in words and, when there is more "
        "to say, details.",
        {
            "message": "What went wrong, in words (never a value of a secret).",
        },
    ),
    "Folder": (
        "A folder of the library.",
        {
            "id": "The folder's id.",
            "name": "Its name (names need not be unique).",
            "parent": "The id of the folder it is in (`root`: the top).",
            "createdDate": f"When it was created; {_TIMESTAMP}",
            "updatedDate": f"When it last changed; {_TIMESTAMP}",
        },
    ),
    "LibraryFile": (
        "A file of the library, as lists show it.",
        {
            "id": "The file's id.",
            "name": "Its original name.",
            "type": "Its MIME type (`application/pdf`, `text/plain`, ...), from its `fileType`.",
            "size": "Its size in bytes (0 until it is finalized).",
            "dir": "The id of its folder (`root`: the top).",
            "createdDate": f"When its record was created; {_TIMESTAMP}",
            "updatedDate": f"When it last changed; {_TIMESTAMP}",
            "uploaderName": "The name of the API key that created it.",
            "uploaderEmail": "The email of the API key that created it.",
            "updating": "`true` while it is being processed, then null.",
        },
    ),
    "LibraryFileDetail": (
        "One file, with where it is stored and how its processing went.",
        {
            "path": "Where its bytes are stored (what finalize names it by).",
            "mimeType": "The Content-Type its bytes are uploaded and downloaded with.",
            "searchable": "Whether its passages are in search (false with `preventSearch`).",
            "thumbnail": "Whether it has a thumbnail (images and pdfs, once processed).",
            "sha256": "The SHA-256 of its bytes, in hex, once processing has read them "
            "(null until then).",
            "processing": "Its processing: status, error, the time of each step, and the "
            "pages and passages found.",
            "status": "`pending` (queued), `processing`, `done` or `failed`.",
            "error": "Why processing failed (a budget passed, a corrupt file), else null.",
            "steps": f"When each step happened (queued, started, ..., finished); {_TIMESTAMP}",
            "pages": "The pages, slides or sheets found.",
            "chunks": "The passages indexed for search.",
            "metadata": "Its metadata: `key: value` pairs (text, number or boolean) that "
            "searches filter by.",
            "ocrPages": "The pages and images whose text came from OCR, or null.",
            "warning": "Why a processed file gave nothing to search (`NO_TEXT`), or null.",
        },
    ),
    "UploadCreated": (
        "A new file record: PUT its bytes to `storageLink`, then finalize it by `path`.",
        {
            "documentId": "The new file's id.",
            "storageLink": "The signed URL to PUT the bytes to, once, with `Content-Type` "
            "`mimeType` (no API key; it expires, 15 minutes by default).",
            "mimeType": "The Content-Type the PUT must send.",
            "path": "Where the bytes are stored: finalize names the file by it.",
            "createdDate": f"When the record was created; {_TIMESTAMP}",
            "dir": "The id of its folder.",
        },
    ),
    "SearchHit": (
        "A passage that matches the search, with its file.",
        {
            "fileId": "The id of the file it is in.",
            "name": "That file's name.",
            "chunk": "The passage's whole text.",
            "score": "How well it matches, 0 to 1: in hybrid mode the weighted mean of "
            f"`scores` ({FUSION_KEYWORD_WEIGHT:g} keyword, {FUSION_SEMANTIC_WEIGHT:g} semantic; "
            f"the cosine counted from {MIN_SIMILARITY:g} up to this query's best, or "
            f"{CONFIDENT_SIMILARITY:g} if the best is less, and a ranking that did not return "
            "the passage counting its lowest score, or keyword 0 when the keyword ranking "
            "returned all its matches), or the one score a keyword-only or semantic search has.",
            "scores": "The score of each ranking, null where that ranking did not find it.",
            "keyword": "BM25 (PostgreSQL: ts_rank_cd) in the exact and the stemmed index, "
            "added, over the best of this query's: 1.0 is the best keyword match.",
            "semantic": "The cosine similarity of the passage and the query.",
            "page": "Its pdf page or pptx slide (from 1), the sheet's name for xlsx, or null.",
            "metadata": "The file's metadata.",
        },
    ),
    "SearchHitWithMetadata": (
        "A passage that matches the search, with its file and the file's metadata.",
        {"metadata": "The file's metadata."},
    ),
    "FilePassage": (
        "A passage of a file as the search index holds it.",
        {
            "index": "Its place in the file, from 0.",
            "page": "Its pdf page or pptx slide (from 1), the sheet's name for xlsx, or null.",
            "text": "Its whole text.",
            "tokens": "Its length in the embedder's word pieces (an estimate without one).",
        },
    ),
    "SearchBody": (
        "A search with metadata filters and a mode.",
        {
            "query": "What to search for (the last word also matches as a prefix).",
            "limit": "How many passages at most (1 to 100).",
            "dir": "Only passages of files in this folder (`root`: the top level only).",
            "filter": 'Per metadata key, a value or `{"in": [values]}`; every key must match.',
            "mode": "`hybrid` (keyword and semantic), `keyword` or `semantic`.",
        },
    ),
    "WorkflowDetail": ("A workflow with its latest definition and every version.", {}),
    "RunSyncResult": (
        "runsync's answer; the HTTP status is `statusCode`.",
        {"result": "The run's outputs and, when it failed, its error."},
    ),
    "RunError": (
        "Why a run did not succeed.",
        {
            "node": "The id of the node that failed, or null (the run as a whole).",
            "message": "What went wrong, in words.",
        },
    ),
    "Run": (
        "The record of one run of a workflow.",
        {
            "runId": "The run's id.",
            "workflowId": "The workflow it ran.",
            "version": "The version it ran.",
            "status": "`queued`, `running`, then `succeeded`, `failed`, `timed_out` or "
            "`cancelled`.",
            "inputs": "The inputs it was given, as sent.",
            "error": "Why it did not succeed (`{code, node, message}`), or null.",
            "nodeTimings": "Per node id: when it started and finished (an llm node's with "
            "its token `usage`).",
            "finishedDate": f"When it ended, or null while it runs; {_TIMESTAMP}",
        },
    ),
    "Schedule": (
        "A cron schedule that queues a run of its workflow at each tick.",
        {
            "scheduleId": "The schedule's id.",
            "workflowId": "The workflow it runs (its latest version at each tick).",
            "cron": "Five fields: minute hour day-of-month month day-of-week.",
            "timezone": "The IANA time zone the cron is read in.",
            "event": "The event its runs start at.",
            "inputs": "The inputs of its runs.",
            "createdDate": f"When it was added; {_TIMESTAMP}",
        },
    ),
    "Secret": (
        "A named secret of the project: its value is never shown.",
        {
            "name": "The name workflows read it by: `{{ secrets.NAME }}`.",
            "createdDate": f"When it was created; {_TIMESTAMP}",
            "updatedDate": f"When its value was last replaced; {_TIMESTAMP}",
        },
    ),
    "Webhook": (
        "A webhook of a workflow: where a sender POSTs signed deliveries.",
        {
            "webhookId": "The webhook's id.",
            "scheme": "How deliveries are signed: `standard` (Standard Webhooks), `github` "
            "or `stripe`.",
            "workflowId": "The workflow its deliveries run.",
            "createdDate": f"When it was added; {_TIMESTAMP}",
        },
    ),
    "WebhookCreated": ("A new (or rotated) webhook, with its signing secret.", {}),
    "WebhookDelivery": (
        "One accepted delivery and what became of it.",
        {
            "deliveryId": "The delivery's id in libflow.",
            "webhookId": "The webhook it came to.",
            "externalId": "The sender's delivery id (`webhook-id`, `X-GitHub-Delivery`, the "
            "Stripe event's `id`), or a hash of the signed content.",
            "status": "`pending`, `running`, `succeeded` or `failed`.",
            "attempts": "How many times a worker claimed it.",
            "runId": "The run it started, once it started one.",
            "error": "Why it failed (`{code, node, message}`), or null.",
            "code": "The error's code (`INVALID_INPUTS`, `CANCELLED`, `INTERRUPTED`, ...).",
            "node": "The node that failed, or null.",
            "message": "What went wrong, in words.",
            "receivedDate": f"When it was accepted; {_TIMESTAMP}",
            "startedDate": f"When its run started, or null; {_TIMESTAMP}",
            "finishedDate": f"When it finished, or null; {_TIMESTAMP}",
        },
    ),
    "RenameWorkflowBody": (
        "A workflow's new name.",
        {"name": "The new name."},
    ),
    "CreateFolderBody": (
        "A new folder.",
        {
            "name": "The folder's name.",
            "parent": "The id of the folder to put it in (default `root`, the top).",
        },
    ),
    "UpdateFolderBody": (
        "What to change of a folder; fields left out stay as they are.",
        {
            "name": "A new name.",
            "parent": "The id of the folder to move it into (`root`: the top).",
        },
    ),
    "CreateFileBody": (
        "A new file record, before its bytes are uploaded.",
        {
            "originalname": "The file's name, as downloads will name it.",
            "fileType": "Its type: `pdf`, `docx`, `pptx`, `xlsx`, `txt`, `csv`, `md`, `html`, "
            "`png`, `jpg`, `jpeg`, `gif` or `webp`.",
            "dir": "The id of its folder (`root`: the top).",
            "metadata": "Up to 32 `key: value` pairs (text, number or boolean) to filter "
            "searches by.",
        },
    ),
    "UpdateFileBody": (
        "What to change of a file; fields left out stay as they are.",
        {
            "name": "A new name.",
            "dir": "The id of the folder to move it to.",
            "metadata": "Its new metadata, replacing the old whole.",
        },
    ),
    "FinalizeBody": (
        "Which upload to finalize.",
        {
            "path": "The `path` the create answer gave.",
            "preventSearch": "Keep the file out of search (its text is still extracted).",
        },
    ),
    "CreateWorkflowBody": (
        "A new workflow and its first definition.",
        {
            "name": "The workflow's name.",
            "definition": "Its definition: see `WorkflowDefinition`.",
        },
    ),
    "PublishVersionBody": (
        "The definition of the next version.",
        {"definition": "The definition: see `WorkflowDefinition`."},
    ),
    "RunSyncBody": (
        "How to run the workflow; every field may be left out (an empty body too).",
        {
            "inputs": "The run's inputs, checked against its input nodes (default none).",
            "runEvent": "The event to start at (default `run`).",
            "version": "The version to run (default the latest).",
        },
    ),
    "RunBody": (
        "How to run the workflow; every field may be left out (an empty body too).",
        {
            "inputs": "The run's inputs, checked against its input nodes (default none).",
            "runEvent": "The event to start at (default `run`).",
            "version": "The version to run (default the latest).",
        },
    ),
    "CreateScheduleBody": (
        "A new schedule of the workflow.",
        {
            "cron": "Five fields, e.g. `0 9 * * 1-5` (9:00 on weekdays).",
            "timezone": "The IANA time zone to read it in (default `UTC`).",
            "event": "The event its runs start at (default `schedule`).",
            "inputs": "The inputs of its runs (default `{}`).",
        },
    ),
    "CreateWebhookBody": (
        "A new webhook of the workflow.",
        {
            "event": "The event its deliveries' runs start at (default `webhook`).",
            "scheme": "How its deliveries are signed (default `standard`).",
        },
    ),
    "PutSecretBody": (
        "A secret's value.",
        {"value": "The value: 1 to 65,536 bytes of UTF-8."},
    ),
}


def describe(schemas: dict[str, Any]) -> dict[str, Any]:
    """The schemas, each (and each of its fields) with its words where it had none.

    Copies: the schemas share building blocks (``STR``, ``DATE``) that must stay bare.
    """
    described: dict[str, Any] = {}
    for name, schema in schemas.items():
        words, fields = SCHEMA_WORDS.get(name, ("", {}))
        schema = copy.deepcopy(schema)
        if words:  # a request model's docstring is the developer's words: these win
            schema["description"] = words
        _describe_fields(schema, fields)
        described[name] = schema
    return described


def _describe_fields(schema: dict[str, Any], fields: dict[str, str]) -> None:
    """Fill in the fields' words, in nested objects and ``allOf`` parts too.

    Each field's schema is replaced by a new dict, never changed in place: one copied
    schema may still hold the same dict under several fields.
    """
    for part in schema.get("allOf", []):
        if "$ref" not in part:
            _describe_fields(part, fields)
    properties = schema.get("properties", {})
    for field, field_schema in list(properties.items()):
        if not isinstance(field_schema, dict):
            continue
        field_schema = dict(field_schema)
        if field in fields and "description" not in field_schema:
            field_schema["description"] = fields[field]
        if "properties" in field_schema:
            field_schema["properties"] = dict(field_schema["properties"])
            _describe_fields(field_schema, fields)
        properties[field] = field_schema


# The reference page groups operations by these tags, the first whose path part matches.
_TAGS: Final = (
    ("/webhooks", "Webhooks"),
    ("/schedules", "Schedules"),
    ("/runsync", "Workflows"),
    ("/runs", "Runs"),
    ("/workflows", "Workflows"),
    ("/secrets", "Secrets"),
    ("/library/", "Library"),
    ("/storage/", "Storage (signed URLs)"),
    ("/api/publicv1/docs", "Reference"),
    ("/swagger-ui/", "Reference"),
    ("/api/publicv1/openapi.json", "Reference"),
    ("/api/publicv1/workflow-definition.schema.json", "Reference"),
    ("/console", "Console"),
)
_HTTP_METHODS: Final = frozenset({"get", "put", "post", "delete", "patch", "head", "options"})


def tag_of(path: str) -> str:
    """The group of the reference page a path's operations are shown in."""
    # A webhook's routes (its replays too) and the receiver go under Webhooks, a workflow's
    # runs under Runs, and runsync beside the workflow it runs.
    for part, tag in _TAGS:
        if part in path:
            return tag
    return "Operations"


def tagged(paths: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The paths with each operation tagged by its group (operations copied, not changed)."""
    return {
        path: {
            method: {**operation, "tags": [tag_of(path)]}
            if method in _HTTP_METHODS and "tags" not in operation
            else operation
            for method, operation in item.items()
        }
        for path, item in paths.items()
    }
