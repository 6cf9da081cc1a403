"""The hottest reads (a file, a live webhook, a workflow's version), each beside its ORM twin.

Through the ORM a one-row read costs about 0.5 ms of Python and a hop to aiosqlite's
thread; the same read of a WAL database on the loop takes microseconds and cannot wait
on writers. On SQLite these reads run inline on the loop; a busy database (a
checkpoint) makes a read fall back to the ORM rather than block the loop, and on
PostgreSQL every read goes through the ORM.
"""

from __future__ import annotations

import functools
import logging
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any, Literal, NamedTuple, TypeVar

from tortoise import fields
from tortoise.expressions import Q
from tortoise.fields.data import CharEnumFieldInstance
from tortoise.models import Model

from libflow.db.new_rows import filled_instance
from libflow.ids import possible_id
from libflow.json_text import dumps
from libflow.models import LibraryFile, Webhook, Workflow, WorkflowVersion

logger = logging.getLogger("libflow.inline_reads")

M = TypeVar("M", bound=Model)
R = TypeVar("R")


class AnyFolder(Enum):
    """``file_records_page`` of every folder, the root's files included."""

    ANY = "any"


# A page's folder filter: one folder, the root (None), or every folder.
FolderFilter = str | Literal[AnyFolder.ANY] | None


class InlineReadUnavailable(Exception):
    """The inline read cannot answer now (or here): ask the ORM."""


class InlineReads:
    """A query-only sqlite3 connection, or nothing when the database is not SQLite."""

    def __init__(self, database_url: str) -> None:
        self._connection: sqlite3.Connection | None = None
        path = database_url[len("sqlite://") :] if database_url.startswith("sqlite://") else None
        if path is not None and path != ":memory:":
            connection = sqlite3.connect(
                path, timeout=0, isolation_level=None, check_same_thread=False
            )
            connection.execute("PRAGMA query_only = 1")
            self._connection = connection

    def row(self, sql: str, parameters: tuple[Any, ...]) -> dict[str, Any] | None:
        """The first row of ``sql`` by column name, or None; InlineReadUnavailable to fall
        back. (A plain tuple named from the cursor's description: ``sqlite3.Row`` made
        into a dict costs twice as much.)"""
        cursor, values = self._first(sql, parameters)
        if values is None:
            return None
        return dict(zip([column[0] for column in cursor.description], values, strict=True))

    def values(self, sql: str, parameters: tuple[Any, ...]) -> tuple[Any, ...] | None:
        """The first row of ``sql`` as a tuple, or None; InlineReadUnavailable to fall back."""
        return self._first(sql, parameters)[1]

    def all_values(self, sql: str, parameters: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        """Every row of ``sql`` as tuples; InlineReadUnavailable to fall back."""
        rows: list[tuple[Any, ...]] = self._read(sql, parameters, sqlite3.Cursor.fetchall)[1]
        return rows

    def _first(
        self, sql: str, parameters: tuple[Any, ...]
    ) -> tuple[sqlite3.Cursor, tuple[Any, ...] | None]:
        return self._read(sql, parameters, sqlite3.Cursor.fetchone)

    def _read(
        self, sql: str, parameters: tuple[Any, ...], fetch: Callable[[sqlite3.Cursor], R]
    ) -> tuple[sqlite3.Cursor, R]:
        if self._connection is None:
            raise InlineReadUnavailable("not a SQLite database")
        try:
            cursor = self._connection.execute(sql, parameters)
            return cursor, fetch(cursor)
        except sqlite3.OperationalError as err:
            logger.debug("inline read fell back to the ORM: %s", err)
            raise InlineReadUnavailable(str(err)) from err

    def close(self) -> None:
        """Close the connection."""
        if self._connection is not None:
            self._connection.close()
            self._connection = None


def _datetime(value: Any) -> Any:
    # Tortoise stores SQLite datetimes as ISO text with their offset ("+00:00").
    return datetime.fromisoformat(value) if isinstance(value, str) else value


@dataclass(frozen=True, slots=True)
class _RowPlan:
    """How a model's rows become instances: the columns to convert, and whether each column
    is named as its field (else Tortoise's own ``_init_from_db`` maps them)."""

    conversions: tuple[tuple[str, Callable[[Any], Any]], ...]
    columns_are_fields: bool


@functools.cache
def _row_plan(model: type[Model]) -> _RowPlan:
    """The columns Tortoise converts (``Model._init_from_db``), with the same conversions
    called directly: a datetime parsed once, a JSON column by its own decoder, an enum by
    its type, a boolean by ``bool``; any other field by its own ``to_python_value``."""
    meta = model._meta
    plan: list[tuple[str, Callable[[Any], Any]]] = [
        (column, field.field_type) for column, _, field in meta.db_default_fields
    ]
    for column, _, field in meta.db_complex_fields:
        if isinstance(field, fields.DatetimeField):
            plan.append((column, _datetime))
        elif isinstance(field, fields.JSONField):
            plan.append((column, field.decoder))
        elif isinstance(field, CharEnumFieldInstance):
            plan.append((column, field.enum_type))
        else:
            plan.append((column, field.to_python_value))
    same_names = all(c == f for c, f in meta.fields_db_projection_reverse.items())
    return _RowPlan(tuple(plan), same_names)


def model_from_row(model: type[M], values: dict[str, Any]) -> M:
    """The instance Tortoise would make of a fetched row (all columns, converted in place),
    made faster.

    ``_init_from_db`` sets each column through a call or two; here only the columns that
    need a conversion get one, and all go into the instance at once (a GET of one file
    spent more time here than in the rest of its handler).
    """
    plan = _row_plan(model)
    for column, convert in plan.conversions:
        value = values[column]
        if value is not None:
            values[column] = convert(value)
    if not plan.columns_are_fields:
        return model._init_from_db(**values)
    return filled_instance(model, values, in_db=True)


class FileRecord(NamedTuple):
    """A library file as its record shows it (GET one's answer), without a model.

    A model costs more to build than the rest of that GET; JSON columns stay the text
    stored, for the answer to embed as it is.
    """

    id: str
    name: str
    mime_type: str
    size: int
    folder_id: str | None
    created_at: datetime
    updated_at: datetime
    uploader_name: str | None
    uploader_email: str | None
    updating: bool
    storage_key: str
    indexed: bool
    prevent_search: bool
    thumbnail_key: str | None
    sha256: str | None
    metadata_json: str
    status: str
    error: str | None
    steps_json: str
    pages: int | None
    chunks: int | None
    ocr_pages: int | None
    warning: str | None

    @classmethod
    def of(cls, file: LibraryFile) -> FileRecord:
        """The record of a model (one just written, or read through the ORM)."""
        values = {name: getattr(file, name) for name in cls._fields if name not in _JSON_TEXT}
        values["status"] = str(file.status)
        values["metadata_json"] = dumps(file.metadata or {}).decode()
        values["steps_json"] = dumps(file.steps).decode()
        return cls(**values)


# The record's JSON fields, and the column each is stored in.
_JSON_TEXT = {"metadata_json": "metadata", "steps_json": "steps"}
# The record's own field names, in its order: no input reaches this text.
_FILE_RECORDS_SQL = (
    "SELECT "  # noqa: S608
    + ", ".join(f'"{_JSON_TEXT.get(name, name)}"' for name in FileRecord._fields)
    + ' FROM "library_files"'
)
_FILE_RECORD_SQL = _FILE_RECORDS_SQL + ' WHERE "id" = ? AND "project_id" = ?'
# A page of a project's files (``file_records_page`` adds its filters), newest first.
_FILE_PAGE_SQL = _FILE_RECORDS_SQL + ' WHERE "project_id" = ?'
_FILE_PAGE_ORDER = ' ORDER BY "created_at" DESC, "id" DESC LIMIT ?'
# What SQLite hands back as another type than the record's: ISO text, 0/1, a NULL default.
_SQLITE_CONVERSIONS: tuple[tuple[int, Callable[[Any], Any]], ...] = tuple(
    (FileRecord._fields.index(name), convert)
    for name, convert in (
        ("created_at", _datetime),
        ("updated_at", _datetime),
        ("updating", bool),
        ("indexed", bool),
        ("prevent_search", bool),
        ("metadata_json", lambda text: text or "{}"),
    )
)


def _file_record(row: tuple[Any, ...]) -> FileRecord:
    """The record of a row of ``_FILE_RECORD_SQL``."""
    values = list(row)
    for index, convert in _SQLITE_CONVERSIONS:
        values[index] = convert(values[index])
    return FileRecord._make(values)


_FILE_SQL = 'SELECT * FROM "library_files" WHERE "id" = ? AND "project_id" = ? LIMIT 1'
_FILE_AT_KEY_SQL = (
    'SELECT * FROM "library_files" WHERE "storage_key" = ? AND "project_id" = ? LIMIT 1'
)
_WEBHOOK_SQL = 'SELECT * FROM "webhooks" WHERE "id" = ? AND "deleted_at" IS NULL'
# One read for the workflow and its version ("latest" when the number is NULL).
_VERSION_SQL = (
    'SELECT w."latest_version" AS latest, v."number" AS number, v."definition" AS definition'
    ' FROM "workflows" w LEFT JOIN "workflow_versions" v ON v."workflow_id" = w."id"'
    ' AND v."number" = COALESCE(?, w."latest_version")'
    ' WHERE w."id" = ? AND w."project_id" = ?'
)


@dataclass(frozen=True, slots=True)
class VersionRow:
    """A workflow's version as found: ``number`` None when the workflow has no such version."""

    number: int | None
    # The stored JSON when the read carried it; the ORM read leaves it to the caller.
    definition: str | None


class FastReads:
    """The hottest reads of the API: inline on SQLite, else through Tortoise."""

    def __init__(self, database_url: str) -> None:
        self.inline = InlineReads(database_url)

    def close(self) -> None:
        """Close the inline connection."""
        self.inline.close()

    async def file(self, project_id: str, file_id: str) -> LibraryFile | None:
        """The file ``file_id`` of ``project_id``, or None."""
        if not possible_id(file_id):
            return None
        try:
            row = self.inline.row(_FILE_SQL, (file_id, project_id))
        except InlineReadUnavailable:
            return await LibraryFile.get_or_none(id=file_id, project_id=project_id)
        return None if row is None else model_from_row(LibraryFile, row)

    async def file_at_key(self, project_id: str, storage_key: str) -> LibraryFile | None:
        """The file of ``project_id`` whose bytes are stored at ``storage_key``, or None."""
        try:
            row = self.inline.row(_FILE_AT_KEY_SQL, (storage_key, project_id))
        except InlineReadUnavailable:
            return await LibraryFile.get_or_none(storage_key=storage_key, project_id=project_id)
        return None if row is None else model_from_row(LibraryFile, row)

    async def file_record(self, project_id: str, file_id: str) -> FileRecord | None:
        """The record of the file ``file_id`` of ``project_id``, or None."""
        if not possible_id(file_id):
            return None
        try:
            row = self.inline.values(_FILE_RECORD_SQL, (file_id, project_id))
        except InlineReadUnavailable:
            file = await LibraryFile.get_or_none(id=file_id, project_id=project_id)
            return None if file is None else FileRecord.of(file)
        return None if row is None else _file_record(row)

    async def file_records_page(
        self,
        project_id: str,
        *,
        folder: FolderFilter,
        after: tuple[datetime, str] | None,
        limit: int,
    ) -> list[FileRecord]:
        """Up to ``limit`` records of the project's files, newest first (ties: the higher id).

        ``folder``: only the files of that folder (None: at the root); ``after``: only those
        after the file created at that moment with that id, in this order.
        """
        where = ""
        parameters: list[Any] = [project_id]
        if folder is None:
            where += ' AND "folder_id" IS NULL'
        elif folder is not AnyFolder.ANY:
            where += ' AND "folder_id" = ?'
            parameters.append(folder)
        if after is not None:
            # The first bound lets the index seek to the page; the second breaks ties.
            where += ' AND "created_at" <= ? AND ("created_at" < ? OR "id" < ?)'
            parameters += [after[0], after[0], after[1]]
        try:
            rows = self.inline.all_values(
                _FILE_PAGE_SQL + where + _FILE_PAGE_ORDER, (*parameters, limit)
            )
        except InlineReadUnavailable:
            files = await _file_page_in_orm(project_id, folder, after, limit)
            return [FileRecord.of(file) for file in files]
        return [_file_record(row) for row in rows]

    async def live_webhook(self, webhook_id: str) -> Webhook | None:
        """The webhook ``webhook_id`` unless it is unknown or deleted."""
        if not possible_id(webhook_id):
            return None
        try:
            row = self.inline.row(_WEBHOOK_SQL, (webhook_id,))
        except InlineReadUnavailable:
            return await Webhook.get_or_none(id=webhook_id, deleted_at=None)
        return None if row is None else model_from_row(Webhook, row)

    async def workflow_version(
        self, project_id: str, workflow_id: str, number: int | None
    ) -> VersionRow | None:
        """Version ``number`` (the latest when None) of a workflow; None: no such workflow."""
        try:
            row = self.inline.row(_VERSION_SQL, (number, workflow_id, project_id))
        except InlineReadUnavailable:
            return await _workflow_version_in_orm(project_id, workflow_id, number)
        if row is None:
            return None
        return VersionRow(row["number"], row["definition"])


async def _workflow_version_in_orm(
    project_id: str, workflow_id: str, number: int | None
) -> VersionRow | None:
    versions = WorkflowVersion.filter(workflow_id=workflow_id, workflow__project_id=project_id)
    # The latest version is the highest number (publish only ever raises latest_version).
    versions = versions.order_by("-number") if number is None else versions.filter(number=number)
    found: list[int] = await versions.limit(1).values_list("number", flat=True)  # type: ignore[assignment]
    if found:
        return VersionRow(found[0], None)
    if await Workflow.exists(id=workflow_id, project_id=project_id):
        return VersionRow(None, None)
    return None


async def _file_page_in_orm(
    project_id: str,
    folder: FolderFilter,
    after: tuple[datetime, str] | None,
    limit: int,
) -> list[LibraryFile]:
    query = LibraryFile.filter(project_id=project_id)
    if folder is not AnyFolder.ANY:
        query = query.filter(folder_id=folder)
    if after is not None:
        created, last_id = after
        query = query.filter(
            Q(created_at__lte=created), Q(created_at__lt=created) | Q(id__lt=last_id)
        )
    return await query.order_by("-created_at", "-id").limit(limit)
