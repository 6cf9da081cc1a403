"""The admin commands, ``libflow projects`` and ``libflow keys``: they work on the database."""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable

from tortoise.exceptions import DBConnectionError

from libflow.cli.output import CliError, print_result
from libflow.db.connection import open_database
from libflow.errors import LibflowError
from libflow.models import ApiKey, Project
from libflow.projects import create_api_key, create_project, revoke_api_key
from settings import SettingsError, settings_from_env


async def _with_database(action: Callable[[], Awaitable[None]]) -> None:
    try:
        settings = settings_from_env()
    except SettingsError as err:
        raise CliError(str(err)) from err
    try:
        async with open_database(settings.resolved_database_url):
            await action()
    except (OSError, DBConnectionError) as err:
        # The host part only: the URL may carry a password.
        where = settings.resolved_database_url.split("@")[-1]
        raise CliError(f"cannot reach the database at {where}: {err}") from err


async def projects_create(args: argparse.Namespace) -> None:
    """``libflow projects create``: a project and its first API key."""

    async def action() -> None:
        project, _key, secret = await create_project(args.name)
        print_result(
            {"projectId": project.id, "apiKey": secret},
            args.json,
            f"project {project.id} ({project.name})\napi key: {secret}  (shown once; keep it)",
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
