"""Request bodies: JSON parsing and validation into typed models."""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

from aiohttp import web
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    StringConstraints,
    ValidationError,
    WithJsonSchema,
)

from libflow import json_text
from libflow.api.errors import unreadable_body
from libflow.errors import InvalidJson, ValidationFailed
from libflow.json_text import UNSTORABLE_PROBLEM, holds_unstorable, may_hold_unstorable
from libflow.library.metadata import (
    MAX_FILTER_VALUES,
    MAX_METADATA_KEYS,
    MAX_METADATA_STRING,
    MAX_SAFE_INTEGER,
    METADATA_KEY,
    filter_values,
    metadata_value,
)
from libflow.library.search import MAX_QUERY_CHARS

Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=255)]
# The workflows table holds 200 characters of a name: refuse more here, not in the ORM (a 500).
WorkflowName = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)
]
Id = Annotated[str, StringConstraints(min_length=1, max_length=64)]


class Body(BaseModel):
    """Strict: a number is not a string and "true" is not a boolean."""

    model_config = ConfigDict(strict=True, extra="ignore")


class CreateFolderBody(Body):
    """``POST .../library/dirs``."""

    name: Name
    parent: Id = "root"


class UpdateFolderBody(Body):
    """``PATCH .../library/dirs/:dirId``: what is given changes (``parent``: root or a folder)."""

    name: Name | None = None
    parent: Id | None = None


# A file's metadata and search filters on it: checked by libflow.library.metadata's rules.
MetadataKey = Annotated[str, StringConstraints(pattern=METADATA_KEY)]
_METADATA_VALUE_SCHEMA: dict[str, Any] = {
    "anyOf": [
        {"type": "string", "maxLength": MAX_METADATA_STRING},
        {"type": "integer", "minimum": -MAX_SAFE_INTEGER, "maximum": MAX_SAFE_INTEGER},
        {"type": "number"},
        {"type": "boolean"},
    ]
}
MetadataValue = Annotated[
    str | int | float | bool,
    PlainValidator(metadata_value),
    WithJsonSchema(_METADATA_VALUE_SCHEMA),
]
Metadata = Annotated[dict[MetadataKey, MetadataValue], Field(max_length=MAX_METADATA_KEYS)]


class CreateFileBody(Body):
    """``POST .../library/files`` (operation 2 of the spec)."""

    originalname: Name
    fileType: Annotated[str, StringConstraints(min_length=1, max_length=16)]
    dir: Id
    metadata: Metadata | None = None


class UpdateFileBody(Body):
    """``PATCH .../library/files/:fileId``: what is given changes; metadata is replaced whole."""

    name: Name | None = None
    dir: Id | None = None
    metadata: Metadata | None = None


# A search filter: per metadata key, one value or {"in": [values]} (any of them).
FilterValues = Annotated[
    tuple[str | int | float | bool, ...],
    PlainValidator(filter_values),
    WithJsonSchema(
        {
            "anyOf": [
                *_METADATA_VALUE_SCHEMA["anyOf"],
                {
                    "type": "object",
                    "required": ["in"],
                    "additionalProperties": False,
                    "properties": {
                        "in": {
                            "type": "array",
                            "minItems": 1,
                            "maxItems": MAX_FILTER_VALUES,
                            "items": _METADATA_VALUE_SCHEMA,
                        }
                    },
                },
            ]
        }
    ),
]

Filter = Annotated[dict[MetadataKey, FilterValues], Field(max_length=MAX_METADATA_KEYS)]


class SearchBody(Body):
    """``POST .../library/search``."""

    query: Annotated[
        str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_QUERY_CHARS)
    ]
    limit: Annotated[int, Field(ge=1, le=100)] = 10
    dir: Id | None = None
    filter: Filter = Field(default_factory=dict)
    mode: Literal["hybrid", "keyword", "semantic"] = "hybrid"


class FinalizeBody(Body):
    """``POST .../library/files:complete`` (operation 4 of the spec)."""

    path: Annotated[str, StringConstraints(min_length=1, max_length=255)]
    preventSearch: bool = Field(default=False)


class CreateWorkflowBody(Body):
    """``POST .../workflows``."""

    name: WorkflowName
    definition: dict[str, Any]


class RenameWorkflowBody(Body):
    """``PATCH .../workflows/:workflowId``."""

    name: WorkflowName


class PublishVersionBody(Body):
    """``POST .../workflows/:workflowId/versions``."""

    definition: dict[str, Any]


class CreateWebhookBody(Body):
    """``POST .../workflows/:workflowId/webhooks``."""

    event: Annotated[str, StringConstraints(min_length=1, max_length=200)] = "webhook"
    scheme: Literal["standard", "github", "stripe"] = "standard"


class CreateScheduleBody(Body):
    """``POST .../workflows/:workflowId/schedules``: five-field cron in an IANA time zone."""

    # The sizes of the schedules table's columns: refused here, not by the ORM (a 500).
    cron: Annotated[str, StringConstraints(min_length=1, max_length=200)]
    timezone: Annotated[str, StringConstraints(min_length=1, max_length=64)] = "UTC"
    event: Annotated[str, StringConstraints(min_length=1, max_length=200)] = "schedule"
    inputs: dict[str, Any] | None = None


class RunSyncBody(Body):
    """``POST .../workflows/:workflowId/runsync`` (operation 8 of the spec)."""

    inputs: dict[str, Any] | None = None
    runEvent: Annotated[str, StringConstraints(min_length=1, max_length=200)] = "run"
    version: Annotated[str, StringConstraints(min_length=1, max_length=20)] | None = None


class RunBody(RunSyncBody):
    """``POST .../workflows/:workflowId/runs``: as runsync, queued instead of awaited."""


BodyT = TypeVar("BodyT", bound=Body)


async def parse_body(
    request: web.Request, model: type[BodyT], *, allow_empty: bool = False
) -> BodyT:
    """The request's JSON object validated as ``model``; no body at all is ``{}`` if allowed."""
    try:
        # Inflated (Content-Encoding) while read: the app's client_max_size bounds the
        # inflated bytes, chunk by chunk, so a gzip bomb is a 413 before it is whole.
        raw = await request.read()
    except web.RequestPayloadError as err:
        raise InvalidJson(f"the request body cannot be read: {unreadable_body(err)}") from err
    if allow_empty and not raw.strip():
        return model.model_validate({})
    try:
        data = json_text.loads(raw)
    except RecursionError as err:
        raise InvalidJson("the request body is nested too deeply to read") from err
    except json_text.NonFiniteNumber as err:
        raise InvalidJson(f"the request body {json_text.NON_FINITE_PROBLEM}") from err
    except ValueError as err:
        raise InvalidJson("the request body is not valid JSON") from err
    if not isinstance(data, dict):
        raise ValidationFailed("the request body must be a JSON object")
    # Refused on both shapes alike: SQLite would store them, PostgreSQL refuses them in
    # text and jsonb (a 500 after the request was accepted).
    if may_hold_unstorable(raw):
        refused = [k for k in model.model_fields if k in data and holds_unstorable(data[k])]
        if refused:
            details = [{"field": field, "problem": UNSTORABLE_PROBLEM} for field in refused]
            raise ValidationFailed(
                f"invalid request body: {', '.join(d['field'] for d in details)}", details=details
            )
    try:
        return model.model_validate(data)
    except ValidationError as err:
        details = [
            {"field": ".".join(str(p) for p in e["loc"]) or "body", "problem": e["msg"]}
            for e in err.errors(include_url=False, include_input=False)
        ]
        raise ValidationFailed(_body_problems(details), details=details) from err


# How much of the details the message repeats: a body with a hundred bad items is named
# in full in ``details``, its message stays a line.
_MESSAGE_PROBLEMS = 3


def _body_problems(details: list[dict[str, str]]) -> str:
    """The message of a refused body: each field with its problem ("name: String should
    have at least 1 character"), the first few of them."""
    said = "; ".join(f"{d['field']}: {d['problem']}" for d in details[:_MESSAGE_PROBLEMS])
    more = len(details) - _MESSAGE_PROBLEMS
    return f"invalid request body: {said}" + (f" (and {more} more in details)" if more > 0 else "")


def query_limit(request: web.Request, *, default: int, maximum: int) -> int:
    """The ``limit`` query parameter: ``default`` when absent, 1..``maximum`` when given."""
    raw = request.query.get("limit")
    if raw is None:
        return default
    try:
        limit = int(raw)
    except ValueError:
        limit = 0
    if not 1 <= limit <= maximum:
        raise ValidationFailed(
            f"limit must be an integer from 1 to {maximum}",
            details=[{"field": "limit", "problem": f"not an integer in 1..{maximum}"}],
        )
    return limit
