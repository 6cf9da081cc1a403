"""Tortoise models: projects, API keys, folders, library files, search chunks, workflows.

Model docstrings become table comments, and Tortoise's SQLite migrations split statements
on ";": keep semicolons out of them.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any

from tortoise import fields
from tortoise.fields.db_defaults import SqlDefault
from tortoise.models import Model

from libflow.ids import new_id, new_ordered_id
from libflow.json_text import dumps


def _json_column_text(value: Any) -> str:
    return dumps(value).decode()


# How JSON columns are written and read. Tortoise would read them with orjson once it is
# installed, and orjson reads an integer beyond 64 bits as a float: a run's outputs would
# come back changed. Read by the standard library; written by orjson where it can.
JSON_COLUMN: dict[str, Any] = {"encoder": _json_column_text, "decoder": json.loads}


class ProcessingStatus(StrEnum):
    """Where a library file is in its processing."""

    PENDING = "pending"
    PROCESSING = "processing"
    DONE = "done"
    FAILED = "failed"


class Project(Model):
    """A tenant: every other record belongs to exactly one project."""

    id = fields.CharField(primary_key=True, max_length=32, default=new_id)
    name = fields.CharField(max_length=200)
    created_at = fields.DatetimeField(auto_now_add=True)

    class Meta:
        table = "projects"


class ApiKey(Model):
    """A project-scoped API key, of which only the SHA-256 of the secret is stored."""

    id = fields.CharField(primary_key=True, max_length=32, default=new_id)
    project: fields.ForeignKeyRelation[Project] = fields.ForeignKeyField(
        "models.Project", related_name="api_keys", on_delete=fields.CASCADE
    )
    key_hash = fields.CharField(max_length=64, unique=True)
    prefix = fields.CharField(max_length=16)
    name = fields.CharField(max_length=200)
    email = fields.CharField(max_length=320, null=True)
    created_at = fields.DatetimeField(auto_now_add=True)
    revoked_at = fields.DatetimeField(null=True)

    project_id: str

    class Meta:
        table = "api_keys"


class Folder(Model):
    """A folder of the library, at the root when it has no parent."""

    id = fields.CharField(primary_key=True, max_length=32, default=new_id)
    project: fields.ForeignKeyRelation[Project] = fields.ForeignKeyField(
        "models.Project", related_name="folders", on_delete=fields.CASCADE
    )
    parent: fields.ForeignKeyNullableRelation[Folder] = fields.ForeignKeyField(
        "models.Folder", related_name="children", null=True, on_delete=fields.RESTRICT
    )
    name = fields.CharField(max_length=255)
    created_at = fields.DatetimeField(auto_now_add=True)
    updated_at = fields.DatetimeField(auto_now=True)

    project_id: str
    parent_id: str | None

    class Meta:
        table = "folders"
        indexes = (("project_id", "parent_id"), ("project_id", "created_at", "id"))


class LibraryFile(Model):
    """A file of the library, from its creation through upload and processing."""

    id = fields.CharField(primary_key=True, max_length=32, default=new_id)
    project: fields.ForeignKeyRelation[Project] = fields.ForeignKeyField(
        "models.Project", related_name="files", on_delete=fields.CASCADE
    )
    folder: fields.ForeignKeyNullableRelation[Folder] = fields.ForeignKeyField(
        "models.Folder", related_name="files", null=True, on_delete=fields.RESTRICT
    )
    name = fields.CharField(max_length=255)
    file_type = fields.CharField(max_length=8)
    mime_type = fields.CharField(max_length=100)
    storage_key = fields.CharField(max_length=255, unique=True)
    size = fields.BigIntField(default=0)
    sha256 = fields.CharField(max_length=64, null=True)
    uploader_name = fields.CharField(max_length=200, null=True)
    uploader_email = fields.CharField(max_length=320, null=True)
    updating = fields.BooleanField(default=True)
    prevent_search = fields.BooleanField(default=False)
    finalized_at = fields.DatetimeField(null=True)
    status = fields.CharEnumField(ProcessingStatus, default=ProcessingStatus.PENDING)
    error: fields.Field[str | None] = fields.TextField(null=True)  # type: ignore[assignment]
    # Every claim of a job adds one, and only grows: it fences each job's writes.
    attempts = fields.IntField(default=0)
    # ``attempts`` when this round of processing began (a finalize or a reprocess): the
    # limits on a file's attempts count this round's, not those of every earlier round.
    attempts_before = fields.IntField(default=0)
    # Per-step ISO timestamps (queued, started, finished, ...): the steps grow with
    # the pipeline, and a JSON map keeps that from needing a migration each time.
    steps: fields.Field[dict[str, str]] = fields.JSONField(default=dict, **JSON_COLUMN)
    indexed = fields.BooleanField(default=False)
    pages = fields.IntField(null=True)
    chunks = fields.IntField(null=True)
    # The user's own labels ({key: string | number | boolean}); search filters on the
    # index's copy of them (Chunk.metadata), which changes with this in one transaction.
    metadata: fields.Field[dict[str, str | int | float | bool]] = fields.JSONField(
        default=dict, db_default=SqlDefault("'{}'"), **JSON_COLUMN
    )
    # Pages and images whose text came from OCR; a warning such as NO_TEXT when the file
    # is done but gave nothing to search.
    ocr_pages = fields.IntField(null=True)
    warning = fields.CharField(max_length=32, null=True)
    thumbnail_key = fields.CharField(max_length=255, null=True)
    created_at = fields.DatetimeField(auto_now_add=True)
    updated_at = fields.DatetimeField(auto_now=True)

    project_id: str
    folder_id: str | None

    class Meta:
        table = "library_files"
        indexes = (("project_id", "created_at"), ("project_id", "folder_id", "created_at"))


class Chunk(Model):
    """A passage of a file's text, the unit of search: keyword-indexed and embedded."""

    # An integer key: SQLite's FTS5 index refers to chunks by rowid.
    id = fields.BigIntField(primary_key=True)
    file: fields.ForeignKeyRelation[LibraryFile] = fields.ForeignKeyField(
        "models.LibraryFile", related_name="chunk_rows", on_delete=fields.CASCADE
    )
    # Copied from the file so a search filters without a join.
    project_id = fields.CharField(max_length=32)
    folder_id = fields.CharField(max_length=32, null=True)
    seq = fields.IntField()
    page = fields.IntField(null=True)
    # A page that has a name rather than a number: an xlsx sheet.
    page_name = fields.CharField(max_length=255, null=True)
    text = fields.TextField()
    # Word pieces of the embedder's own tokenizer (an estimate without one).
    tokens = fields.IntField(null=True)
    # The file's metadata, copied so that a filtered search needs no join.
    metadata: fields.Field[dict[str, str | int | float | bool] | None] = fields.JSONField(
        null=True, **JSON_COLUMN
    )
    # float32 little-endian, L2-normalized; tagged with the embedder that made it so
    # a change of model re-embeds instead of mixing vector spaces.
    embedding = fields.BinaryField(null=True)
    embedder = fields.CharField(max_length=200, null=True)

    file_id: str

    class Meta:
        table = "library_chunks"
        indexes = (("project_id", "embedder"), ("file_id", "seq"))


class SearchIndexVersion(Model):
    """A counter per project, bumped with every index write: vector caches check it."""

    project_id = fields.CharField(primary_key=True, max_length=32)
    version = fields.BigIntField(default=0)

    class Meta:
        table = "search_index_versions"


class SearchIndexChange(Model):
    """Which file a version of a project's search index changed.

    A vector cache a few versions behind reads only those files' rows again, where it
    would otherwise read the project's whole matrix after every upload.
    """

    id = fields.BigIntField(primary_key=True)
    project_id = fields.CharField(max_length=32)
    version = fields.BigIntField()
    file_id = fields.CharField(max_length=32)

    class Meta:
        table = "search_index_changes"
        unique_together = (("project_id", "version"),)


class Workflow(Model):
    """A named workflow of a project, whose definitions are immutable, numbered versions."""

    id = fields.CharField(primary_key=True, max_length=32, default=new_id)
    project: fields.ForeignKeyRelation[Project] = fields.ForeignKeyField(
        "models.Project", related_name="workflows", on_delete=fields.CASCADE
    )
    name = fields.CharField(max_length=200)
    latest_version = fields.IntField(default=1)
    created_at = fields.DatetimeField(auto_now_add=True)
    updated_at = fields.DatetimeField(auto_now=True)

    project_id: str

    class Meta:
        table = "workflows"
        indexes = (("project_id", "created_at"),)


class WorkflowVersion(Model):
    """One published definition of a workflow, never changed once written."""

    id = fields.BigIntField(primary_key=True)
    workflow: fields.ForeignKeyRelation[Workflow] = fields.ForeignKeyField(
        "models.Workflow", related_name="versions", on_delete=fields.CASCADE
    )
    number = fields.IntField()
    definition: fields.Field[dict[str, Any]] = fields.JSONField(**JSON_COLUMN)
    created_at = fields.DatetimeField(auto_now_add=True)

    workflow_id: str

    class Meta:
        table = "workflow_versions"
        unique_together = (("workflow_id", "number"),)


class WorkflowRun(Model):
    """The record of one run: trigger, version, event, inputs, outputs, status and timings.

    Runs started asynchronously wait here as ``queued`` (the table is their queue). A running
    run's process renews ``lease_until``; a lease long past means the process died.
    ``cancel_requested_at`` is how a cancel reaches a process that missed the signal.
    """

    id = fields.CharField(primary_key=True, max_length=32, default=new_ordered_id)
    workflow: fields.ForeignKeyRelation[Workflow] = fields.ForeignKeyField(
        "models.Workflow", related_name="runs", on_delete=fields.CASCADE
    )
    project_id = fields.CharField(max_length=32)
    version = fields.IntField()
    event = fields.CharField(max_length=200)
    trigger = fields.CharField(max_length=16)
    status = fields.CharField(max_length=16)
    status_code = fields.IntField(null=True)
    inputs: fields.Field[dict[str, Any]] = fields.JSONField(default=dict, **JSON_COLUMN)
    outputs: fields.Field[dict[str, Any]] = fields.JSONField(default=dict, **JSON_COLUMN)
    error: fields.Field[dict[str, Any] | None] = fields.JSONField(null=True, **JSON_COLUMN)
    node_timings: fields.Field[dict[str, Any]] = fields.JSONField(default=dict, **JSON_COLUMN)
    started_at = fields.DatetimeField(auto_now_add=True)
    finished_at = fields.DatetimeField(null=True)
    lease_until = fields.DatetimeField(null=True)
    cancel_requested_at = fields.DatetimeField(null=True)
    # The run whose call_workflow or map node started this one (trigger "call").
    parent_run_id = fields.CharField(max_length=32, null=True)

    workflow_id: str

    class Meta:
        table = "workflow_runs"
        # Run history pages (newest first, by project or workflow, with or without a status),
        # and the queue's claims and sweeps (by status, oldest first).
        indexes = (
            ("workflow_id", "started_at"),
            ("project_id", "started_at", "id"),
            ("project_id", "status", "started_at", "id"),
            ("workflow_id", "status", "started_at", "id"),
            ("status", "started_at"),
        )


class Schedule(Model):
    """A cron schedule of a workflow: each tick queues one run (trigger ``schedule``).

    ``next_run_at`` is the next tick, in UTC; moving it on is the claim of a tick, so each
    tick runs once however many processes look.
    """

    id = fields.CharField(primary_key=True, max_length=32, default=new_id)
    project_id = fields.CharField(max_length=32)
    workflow: fields.ForeignKeyRelation[Workflow] = fields.ForeignKeyField(
        "models.Workflow", related_name="schedules", on_delete=fields.CASCADE
    )
    cron = fields.CharField(max_length=200)
    timezone = fields.CharField(max_length=64)
    event = fields.CharField(max_length=200)
    inputs: fields.Field[dict[str, Any]] = fields.JSONField(default=dict, **JSON_COLUMN)
    next_run_at = fields.DatetimeField()
    created_at = fields.DatetimeField(auto_now_add=True)

    workflow_id: str

    class Meta:
        table = "workflow_schedules"
        indexes = (("workflow_id", "created_at"), ("next_run_at",))


class Webhook(Model):
    """An inbound webhook of a workflow: its receiver URL, signature scheme and secrets.

    A rotated secret stays in ``previous_secret`` until ``previous_expires_at``. A deleted
    webhook keeps its row (``deleted_at``) so deliveries it accepted still run.
    """

    id = fields.CharField(primary_key=True, max_length=32, default=new_id)
    project: fields.ForeignKeyRelation[Project] = fields.ForeignKeyField(
        "models.Project", related_name="webhooks", on_delete=fields.CASCADE
    )
    workflow: fields.ForeignKeyRelation[Workflow] = fields.ForeignKeyField(
        "models.Workflow", related_name="webhooks", on_delete=fields.CASCADE
    )
    event = fields.CharField(max_length=200)
    scheme = fields.CharField(max_length=16)
    secret = fields.CharField(max_length=200)
    previous_secret = fields.CharField(max_length=200, null=True)
    previous_expires_at = fields.DatetimeField(null=True)
    created_at = fields.DatetimeField(auto_now_add=True)
    deleted_at = fields.DatetimeField(null=True)

    project_id: str
    workflow_id: str

    class Meta:
        table = "webhooks"
        indexes = (("workflow_id", "created_at"),)


class DeliveryStatus(StrEnum):
    """Where an accepted webhook delivery is: queued, running its workflow, or finished."""

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class WebhookDelivery(Model):
    """One accepted delivery, committed before the sender hears 200: the durable inbox.

    ``external_id`` is the sender's delivery id, unique per webhook, so a repeated
    delivery is acknowledged again and runs once.
    """

    id = fields.CharField(primary_key=True, max_length=32, default=new_ordered_id)
    webhook: fields.ForeignKeyRelation[Webhook] = fields.ForeignKeyField(
        "models.Webhook", related_name="deliveries", on_delete=fields.CASCADE
    )
    project_id = fields.CharField(max_length=32)
    external_id = fields.CharField(max_length=255)
    status = fields.CharEnumField(DeliveryStatus, max_length=16, default=DeliveryStatus.PENDING)
    body = fields.BinaryField()
    # SHA-256 of the body, hex: a github delivery's replay check finds the same body by it
    # through an index, not by comparing every body of the window. NULL on older rows.
    body_sha256 = fields.CharField(max_length=64, null=True)
    headers: fields.Field[dict[str, str]] = fields.JSONField(default=dict, **JSON_COLUMN)
    attempts = fields.IntField(default=0)
    run_id = fields.CharField(max_length=32, null=True)
    error: fields.Field[dict[str, Any] | None] = fields.JSONField(null=True, **JSON_COLUMN)
    received_at = fields.DatetimeField(auto_now_add=True)
    started_at = fields.DatetimeField(null=True)
    finished_at = fields.DatetimeField(null=True)

    webhook_id: str

    class Meta:
        table = "webhook_deliveries"
        unique_together = (("webhook_id", "external_id"),)
        indexes = (
            ("webhook_id", "received_at"),
            ("status", "received_at"),
            ("webhook_id", "body_sha256", "received_at"),
        )


class Secret(Model):
    """A project's named secret, read by workflows as secrets.NAME.

    ``value`` holds it sealed (AES-GCM, bound to the project and the name, see
    libflow/secrets/crypto.py), never in clear.
    """

    id = fields.CharField(primary_key=True, max_length=32, default=new_id)
    project: fields.ForeignKeyRelation[Project] = fields.ForeignKeyField(
        "models.Project", related_name="secrets", on_delete=fields.CASCADE
    )
    name = fields.CharField(max_length=64)
    value = fields.TextField()
    created_at = fields.DatetimeField(auto_now_add=True)
    updated_at = fields.DatetimeField(auto_now=True)

    project_id: str

    class Meta:
        table = "project_secrets"
        unique_together = (("project_id", "name"),)


class DeploymentChoice(Model):
    """A choice made once for the whole deployment, by the first process that needed it.

    Processes on machines of different kinds could each choose otherwise (the local
    embedder's int8 runtime, by CPU) where they must agree (one vector space): the first
    choice recorded is every process's.
    """

    name = fields.CharField(primary_key=True, max_length=100)
    value = fields.CharField(max_length=200)
    chosen_at = fields.DatetimeField(auto_now_add=True)

    class Meta:
        table = "deployment_choices"
