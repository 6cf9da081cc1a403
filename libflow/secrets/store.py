"""A project's named secrets: put (create or replace), list (names only), delete, and read.

Values are sealed before they reach the database and opened only by a run that reads
them (``sealed_secrets`` hands a run the sealed values, ``open_secret`` opens one).
"""

from __future__ import annotations

import re
from collections.abc import Collection

from tortoise.exceptions import IntegrityError
from tortoise.transactions import in_transaction

from libflow.db.outages import dependency_down
from libflow.errors import LibflowError, NotFound, ValidationFailed
from libflow.ids import utcnow
from libflow.models import Secret
from libflow.secrets.crypto import secret_bound_to, secret_box

NAME_PATTERN = r"[A-Za-z_][A-Za-z0-9_]{0,63}"
_NAME = re.compile(NAME_PATTERN)
MAX_SECRET_BYTES = 65_536  # of a value, as UTF-8
MAX_SECRETS_PER_PROJECT = 1_000


class SecretsUnavailable(LibflowError):
    """A run could not read its project's secrets: the database is out of reach."""

    code = "UNAVAILABLE"


def check_name(name: str) -> None:
    """Refuse a name templates could not read as ``secrets.NAME`` (VALIDATION_ERROR)."""
    if not _NAME.fullmatch(name):
        shown = name if len(name) <= 80 else name[:80] + "..."
        raise ValidationFailed(
            f"invalid secret name {shown!r}: a letter or _, then up to 63 letters, digits or _",
            details=[{"field": "name", "problem": f"must match {NAME_PATTERN}"}],
        )


def _check_value(value: str) -> None:
    """Refuse an empty value (nothing to redact) or one over MAX_SECRET_BYTES."""
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        size = -1
    if size < 0:
        problem = "must be UTF-8 text"
    elif size == 0:
        problem = "must not be empty"
    elif size > MAX_SECRET_BYTES:
        problem = f"is {size} bytes of UTF-8, over the limit of {MAX_SECRET_BYTES}"
    else:
        return
    # The message never quotes the value: it is a secret even when it is refused.
    raise ValidationFailed(
        f"invalid secret value: it {problem}", details=[{"field": "value", "problem": problem}]
    )


async def put_secret(project_id: str, name: str, value: str) -> None:
    """Create the secret, or replace its value; it is sealed before it is written."""
    check_name(name)
    _check_value(value)
    sealed = secret_box().seal(value, secret_bound_to(project_id, name))
    for _attempt in range(2):
        try:
            async with in_transaction() as db:
                replaced = (
                    await Secret.filter(project_id=project_id, name=name)
                    .using_db(db)
                    .update(value=sealed, updated_at=utcnow())
                )
                if replaced:
                    return
                if await Secret.filter(project_id=project_id).using_db(db).count() >= (
                    MAX_SECRETS_PER_PROJECT
                ):
                    raise ValidationFailed(
                        f"a project holds at most {MAX_SECRETS_PER_PROJECT} secrets",
                        details=[{"field": "name", "problem": "too many secrets in the project"}],
                    )
                await Secret.create(project_id=project_id, name=name, value=sealed, using_db=db)
                return
        except IntegrityError:
            continue  # created meanwhile by a concurrent PUT: replace it
    raise RuntimeError(f"secret {name!r} could not be written")


async def list_secrets(project_id: str) -> list[Secret]:
    """The project's secrets by name, without their values."""
    return (
        await Secret.filter(project_id=project_id)
        .order_by("name")
        .only("id", "name", "created_at", "updated_at")
    )


async def delete_secret(project_id: str, name: str) -> None:
    """Delete the secret; NotFound when the project has none of that name."""
    check_name(name)
    if not await Secret.filter(project_id=project_id, name=name).delete():
        raise NotFound(f"secret {name!r} not found")


async def sealed_secrets(project_id: str, names: Collection[str] | None) -> dict[str, str]:
    """The sealed values of ``names`` (all of the project's when None) that exist."""
    query = Secret.filter(project_id=project_id)
    if names is not None:
        wanted = [name for name in names if _NAME.fullmatch(name)]
        if not wanted:
            return {}
        query = query.filter(name__in=wanted)
    try:
        rows: list[tuple[str, str]] = await query.values_list("name", "value")
    except Exception as err:
        if dependency_down(err):
            raise SecretsUnavailable(
                "the project's secrets cannot be read: the database is unavailable"
            ) from err
        raise
    return dict(rows)


def open_secret(project_id: str, name: str, sealed: str) -> str:
    """A sealed value of ``project_id``'s secret ``name`` in clear (SecretUnreadable if not)."""
    return secret_box().open(sealed, secret_bound_to(project_id, name))
