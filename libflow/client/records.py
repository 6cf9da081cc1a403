"""The records the API answers with, as typed dicts (what a caller may read, by name).

They are ``total=False``: a server newer than the client may add fields, and a few fields
appear only in some answers (a file's ``processing`` in get-one, not in the list).
"""

from __future__ import annotations

from typing import Any, TypedDict

JSON = Any


class Folder(TypedDict, total=False):
    id: str
    name: str
    parent: str
    createdDate: str
    updatedDate: str


class UploadTicket(TypedDict, total=False):
    """What creating a file answers: where to PUT the bytes, and the path to finalize."""

    documentId: str
    storageLink: str
    mimeType: str
    path: str
    createdDate: str
    dir: str


class Processing(TypedDict, total=False):
    status: str  # pending | processing | done | failed
    error: str | None
    ocrPages: int | None
    warning: str | None


class LibraryFile(TypedDict, total=False):
    """A file of the library (the list's fields; get-one adds the rest)."""

    id: str
    name: str
    type: str
    size: int
    dir: str
    createdDate: str
    updatedDate: str
    uploaderName: str | None
    uploaderEmail: str | None
    updating: bool | None
    path: str
    mimeType: str
    searchable: bool
    thumbnail: bool
    sha256: str | None
    metadata: dict[str, str | int | float | bool]
    processing: Processing


class SearchHit(TypedDict, total=False):
    fileId: str
    name: str
    chunk: str
    score: float
    scores: dict[str, float | None]
    page: int | str | None
    metadata: dict[str, str | int | float | bool]


class FileChunk(TypedDict, total=False):
    index: int
    page: int | str | None
    text: str
    tokens: int | None


class Workflow(TypedDict, total=False):
    workflowId: str
    name: str
    version: str
    createdDate: str
    updatedDate: str
    definition: JSON
    versions: list[dict[str, str]]


class RunSyncResult(TypedDict, total=False):
    success: bool
    statusCode: int
    result: dict[str, JSON]


class Run(TypedDict, total=False):
    runId: str
    workflowId: str
    version: str
    event: str
    trigger: str
    status: str  # queued | running | succeeded | failed | timed_out | cancelled
    statusCode: int | None
    inputs: JSON
    outputs: dict[str, JSON]
    error: dict[str, JSON] | None
    nodeTimings: dict[str, dict[str, JSON]]  # node id -> {status, startedDate, ...}
    parentRunId: str | None
    startedDate: str
    finishedDate: str | None


class Schedule(TypedDict, total=False):
    scheduleId: str
    workflowId: str
    cron: str
    timezone: str
    event: str
    inputs: dict[str, JSON]
    nextRunDate: str
    createdDate: str


class Webhook(TypedDict, total=False):
    webhookId: str
    url: str
    scheme: str
    event: str
    workflowId: str
    createdDate: str
    secret: str  # only when created or rotated


class Delivery(TypedDict, total=False):
    deliveryId: str
    webhookId: str
    externalId: str | None
    status: str
    attempts: int
    runId: str | None
    error: dict[str, JSON] | None
    receivedDate: str
    startedDate: str | None
    finishedDate: str | None


class Secret(TypedDict, total=False):
    name: str
    createdDate: str
    updatedDate: str
