"""Admin commands (``libflow projects``, ``keys``, ``secrets``): they work on the database."""

from __future__ import annotations

import argparse
import os
import shlex
from collections.abc import Awaitable, Callable
from pathlib import Path

from tortoise.exceptions import DBConnectionError

from libflow.cli.output import CliError, print_result
from libflow.cli.server_url import default_server_url
from libflow.db.connection import open_database
from libflow.errors import LibflowError
from libflow.models import ApiKey, Project
from libflow.projects import create_api_key, create_project, revoke_api_key, rotate_api_key
from libflow.secrets.crypto import (
    SecretBox,
    SecretUnreadable,
    box_of,
    secret_box,
    use_secret_box,
)
from libflow.secrets.rotation import rotate_key
from settings import Settings, SettingsError, settings_from_env

OLD_KEY_VARIABLE = "LIBFLOW_OLD_SECRET_KEY"
# Either names the database on purpose (a new one is then made if need be).
_DATABASE_VARIABLES = ("LIBFLOW_DATA_DIR", "LIBFLOW_DATABASE_URL")


def database_shown(settings: Settings) -> str:
    """The database a command works on, for the user to read: never a password."""
    url = settings.resolved_database_url
    return url if url.startswith("sqlite://") else url.split("@")[-1]


def _refuse_a_new_database_by_accident(settings: Settings) -> None:
    """An admin command run outside the server's directory must not make a database of its own.

    With neither ``LIBFLOW_DATA_DIR`` nor ``LIBFLOW_DATABASE_URL`` set, the database is
    ``./data/libflow.sqlite3`` relative to where the command runs: when that file does not
    exist the command is almost surely in the wrong directory, and a project made in a new
    database would have keys the running server does not know.
    """
    chosen = any(os.environ.get(name, "").strip() for name in _DATABASE_VARIABLES)
    url = settings.resolved_database_url
    if chosen or not url.startswith("sqlite://"):
        return
    path = Path(url.removeprefix("sqlite://"))
    if not path.exists():
        raise CliError(
            f"no libflow database at {path} (the default, ./data, in this directory): run "
            "this where the server runs, or name its database with LIBFLOW_DATA_DIR or "
            "LIBFLOW_DATABASE_URL (LIBFLOW_DATA_DIR=data creates a new one here)"
        )


async def _with_database(action: Callable[[], Awaitable[None]]) -> None:
    try:
        settings = settings_from_env()
    except SettingsError as err:
        raise CliError(str(err)) from err
    _refuse_a_new_database_by_accident(settings)
    try:
        # Before the database: a migration may have webhook secrets to seal.
        use_secret_box(box_of(settings))
    except (OSError, SettingsError) as err:
        raise CliError(f"cannot read the secret key: {err}") from err
    try:
        async with open_database(settings.resolved_database_url):
            await action()
    except (OSError, DBConnectionError) as err:
        where = database_shown(settings)
        raise CliError(f"cannot reach the database at {where}: {err}") from err


def shell_exports(project_id: str, api_key: str) -> str:
    """``export`` lines for ``eval "$(libflow projects create NAME --shell)"``."""
    values = {
        "LIBFLOW_URL": default_server_url(),
        "LIBFLOW_PROJECT_ID": project_id,
        "LIBFLOW_API_KEY": api_key,
    }
    return "\n".join(f"export {name}={shlex.quote(value)}" for name, value in values.items())


async def projects_create(args: argparse.Namespace) -> None:
    """``libflow projects create``: a project and its first API key."""

    async def action() -> None:
        project, _key, secret = await create_project(args.name)
        if getattr(args, "shell", False):
            print(shell_exports(project.id, secret))
            return
        print_result(
            {"projectId": project.id, "apiKey": secret},
            args.json,
            f"project {project.id} ({project.name})\napi key: {secret}  (shown once; keep it)",
        )

    await _with_database(action)


async def projects_list(args: argparse.Namespace) -> None:
    """``libflow projects list``: every project, oldest first, with its count of active keys."""

    async def action() -> None:
        rows = []
        for project in await Project.all().order_by("created_at"):
            keys = await ApiKey.filter(project_id=project.id, revoked_at__isnull=True).count()
            rows.append(
                {
                    "projectId": project.id,
                    "name": project.name,
                    "activeKeys": keys,
                    "createdDate": project.created_at.isoformat(),
                }
            )
        text = "\n".join(
            f"{r['projectId']}  {r['name']}  ({r['activeKeys']} active keys)" for r in rows
        )
        print_result(rows, args.json, text or "no projects")

    await _with_database(action)


async def keys_rotate(args: argparse.Namespace) -> None:
    """``libflow keys rotate``: a new key in place of one, which is revoked at once."""

    async def action() -> None:
        try:
            key, secret = await rotate_api_key(args.key_id)
        except LibflowError as err:
            raise CliError(err.message) from err
        print_result(
            {
                "keyId": key.id,
                "projectId": key.project_id,
                "apiKey": secret,
                "revoked": args.key_id,
            },
            args.json,
            f"key {key.id} replaces {args.key_id} (revoked)\n"
            f"api key: {secret}  (shown once; keep it)",
        )

    await _with_database(action)


async def keys_create(args: argparse.Namespace) -> None:
    """``libflow keys create``: an API key for a project."""

    async def action() -> None:
        project = await Project.get_or_none(id=args.project)
        if project is None:
            raise CliError(f"no project {args.project}")
        key, secret = await create_api_key(project, name=args.name, email=args.email)
        print_result(
            {"keyId": key.id, "projectId": project.id, "apiKey": secret},
            args.json,
            f"key {key.id} for project {project.id}\napi key: {secret}  (shown once; keep it)",
        )

    await _with_database(action)


async def keys_revoke(args: argparse.Namespace) -> None:
    """``libflow keys revoke``: revoke an API key."""

    async def action() -> None:
        try:
            key = await revoke_api_key(args.key_id)
        except LibflowError as err:
            raise CliError(err.message) from err
        print_result({"keyId": key.id, "revoked": True}, args.json, f"key {key.id} revoked")

    await _with_database(action)


async def keys_list(args: argparse.Namespace) -> None:
    """``libflow keys list``: a project's API keys, oldest first."""

    async def action() -> None:
        if not await Project.exists(id=args.project):
            raise CliError(f"no project {args.project}")
        keys = await ApiKey.filter(project_id=args.project).order_by("created_at")
        rows = [
            {
                "keyId": k.id,
                "prefix": k.prefix,
                "name": k.name,
                "email": k.email,
                "revoked": k.revoked_at is not None,
            }
            for k in keys
        ]
        text = "\n".join(
            f"{r['keyId']}  {r['prefix']}...  {r['name']}{'  (revoked)' if r['revoked'] else ''}"
            for r in rows
        )
        print_result(rows, args.json, text or "no keys")

    await _with_database(action)


def _old_box(key_file: str | None) -> SecretBox:
    """The box of the key being replaced: from --old-key-file or LIBFLOW_OLD_SECRET_KEY."""
    from_env = os.environ.get(OLD_KEY_VARIABLE, "")
    if (key_file is None) == (from_env == ""):
        raise CliError(f"name the old key with --old-key-file FILE or {OLD_KEY_VARIABLE} (one)")
    if key_file is None:
        return SecretBox(from_env.encode())
    try:
        key = Path(key_file).read_bytes().strip()  # as the data dir's generated key is read
    except OSError as err:
        raise CliError(f"cannot read the old key: {err}") from err
    if not key:
        raise CliError(f"{key_file} is empty")
    return SecretBox(key)


async def secrets_rotate_key(args: argparse.Namespace) -> None:
    """``libflow secrets rotate-key``: re-seal every secret under the settings' key."""
    old = _old_box(args.old_key_file)

    async def action() -> None:
        new = secret_box()
        if new.key_id == old.key_id:
            raise CliError("the old key and the settings' key are the same: nothing to do")
        try:
            done = await rotate_key(old, new)
        except SecretUnreadable as err:
            raise CliError(f"nothing was changed: {err}") from err
        print_result(
            {"resealed": done.resealed, "alreadyNew": done.already_new, "keyId": new.key_id},
            args.json,
            f"{done.resealed} secrets re-sealed under key id {new.key_id}"
            f" ({done.already_new} were already)",
        )

    await _with_database(action)
