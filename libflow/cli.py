"""The ``libflow`` command: admin (projects, keys) on the database, uploads through the API."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
from tortoise.exceptions import DBConnectionError
from tqdm import tqdm
from yarl import URL

from libflow.db import open_database
from libflow.errors import LibflowError
from libflow.models import ApiKey, Project
from libflow.projects import create_api_key, create_project, revoke_api_key
from libflow.signatures import SCHEMES
from settings import SettingsError, settings_from_env

API = "/api/publicv1"
CHUNK = 1024 * 1024


class CliError(Exception):
    """A failure to report in one line, without a traceback."""


class ApiCallError(CliError):
    """The API answered with an error body, kept for callers that print more of it."""

    def __init__(self, message: str, body: dict[str, Any]) -> None:
        super().__init__(message)
        self.body = body


class RateLimitedError(ApiCallError):
    """429 RATE_LIMITED: the call may be made again after ``retry_after`` seconds."""

    def __init__(self, message: str, body: dict[str, Any], retry_after: int) -> None:
        super().__init__(message, body)
        self.retry_after = retry_after


def _print(data: Any, as_json: bool, text: str) -> None:
    print(json.dumps(data) if as_json else text)


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


async def _projects_create(args: argparse.Namespace) -> None:
    async def action() -> None:
        project, _key, secret = await create_project(args.name)
        _print(
            {"projectId": project.id, "apiKey": secret},
            args.json,
            f"project {project.id} ({project.name})\napi key: {secret}  (shown once; keep it)",
        )

    await _with_database(action)


async def _keys_create(args: argparse.Namespace) -> None:
    async def action() -> None:
        project = await Project.get_or_none(id=args.project)
        if project is None:
            raise CliError(f"no project {args.project}")
        key, secret = await create_api_key(project, name=args.name, email=args.email)
        _print(
            {"keyId": key.id, "projectId": project.id, "apiKey": secret},
            args.json,
            f"key {key.id} for project {project.id}\napi key: {secret}  (shown once; keep it)",
        )

    await _with_database(action)


async def _keys_revoke(args: argparse.Namespace) -> None:
    async def action() -> None:
        try:
            key = await revoke_api_key(args.key_id)
        except LibflowError as err:
            raise CliError(err.message) from err
        _print({"keyId": key.id, "revoked": True}, args.json, f"key {key.id} revoked")

    await _with_database(action)


async def _keys_list(args: argparse.Namespace) -> None:
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
        _print(rows, args.json, text or "no keys")

    await _with_database(action)


# Waits on 429 RATE_LIMITED before the CLI gives up on a call.
RATE_LIMIT_RETRIES = 10


async def _api(
    session: aiohttp.ClientSession, method: str, url: str, api_key: str, **kwargs: Any
) -> dict[str, Any]:
    for attempt in range(RATE_LIMIT_RETRIES + 1):
        try:
            return await _api_once(session, method, url, api_key, **kwargs)
        except RateLimitedError as err:
            if attempt == RATE_LIMIT_RETRIES:
                raise
            await asyncio.sleep(err.retry_after)
    raise AssertionError("unreachable")


async def _api_once(
    session: aiohttp.ClientSession, method: str, url: str, api_key: str, **kwargs: Any
) -> dict[str, Any]:
    headers = {"Authorization": api_key}
    async with session.request(method, url, headers=headers, **kwargs) as response:
        try:
            body = await response.json(content_type=None)
        except ValueError:
            body = None
        # A proxy or another server may answer at this URL: say so instead of crashing.
        if not isinstance(body, dict):
            raise CliError(
                f"{method} {url}: {response.status} {response.reason}: not a libflow API answer"
            )
        message = f"{method} {url}: {response.status} {body.get('error')}: {body.get('message')}"
        retry_after = response.headers.get("Retry-After", "")
        if response.status == 429 and retry_after.isdigit():
            raise RateLimitedError(message, body, int(retry_after))
        if response.status >= 400:
            raise ApiCallError(message, body)
        return body


async def _file_chunks(path: Path, bar: tqdm[Any]) -> AsyncIterator[bytes]:
    with path.open("rb") as f:
        while chunk := await asyncio.to_thread(f.read, CHUNK):
            bar.update(len(chunk))
            yield chunk


async def upload_file(
    session: aiohttp.ClientSession,
    base_url: str,
    api_key: str,
    project: str,
    path: Path,
    folder: str,
    *,
    progress: bool = True,
) -> dict[str, Any]:
    """Create the record, PUT the bytes, finalize: the public three-step flow."""
    files_url = f"{base_url}{API}/projects/{project}/library/files"
    file_type = path.suffix.lstrip(".").lower()
    created = await _api(
        session,
        "POST",
        files_url,
        api_key,
        json={"originalname": path.name, "fileType": file_type, "dir": folder},
    )
    size = (await asyncio.to_thread(path.stat)).st_size
    with tqdm(
        total=size, unit="B", unit_scale=True, desc=path.name, disable=not progress, leave=False
    ) as bar:
        # The signed link goes as it is (re-quoting would break its signature), and
        # without the API key: it is a credential of its own.
        async with session.put(
            URL(created["storageLink"], encoded=True),
            data=_file_chunks(path, bar),
            headers={"Content-Type": created["mimeType"], "Content-Length": str(size)},
        ) as response:
            if response.status >= 400:
                text = await response.text()
                raise CliError(f"upload of {path.name} failed: {response.status} {text}")
    return await _api(
        session, "POST", f"{files_url}:complete", api_key, json={"path": created["path"]}
    )


async def _upload(args: argparse.Namespace) -> None:
    if not args.api_key:
        raise CliError("an API key is needed: --api-key or LIBFLOW_API_KEY")
    paths = [Path(p) for p in args.files]
    for path in paths:
        if not path.is_file():
            raise CliError(f"{path}: not a file")
    base_url = args.url.rstrip("/")
    async with aiohttp.ClientSession() as session:
        for path in paths:
            record = await upload_file(
                session,
                base_url,
                args.api_key,
                args.project,
                path,
                args.dir,
                progress=sys.stderr.isatty(),
            )
            _print(record, args.json, f"{path.name}: {record['id']} ({record['size']} bytes)")


def _read_workflow_file(path: Path) -> tuple[str | None, Any]:
    """(name, definition) from a JSON file: a bare definition or ``{name, definition}``."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise CliError(f"{path}: cannot read: {err.strerror or err}") from err
    except (UnicodeDecodeError, ValueError) as err:
        raise CliError(f"{path}: not a JSON file: {err}") from err
    if isinstance(data, dict) and "definition" in data:
        name = data.get("name")
        if name is not None and not isinstance(name, str):
            raise CliError(f"{path}: 'name' must be a string")
        return name, data["definition"]
    return None, data


def _invalid_workflow_lines(err: ApiCallError) -> str:
    """The error line, then one ``node: problem`` line per detail of an INVALID_WORKFLOW."""
    lines = [str(err)]
    details = err.body.get("details")
    if err.body.get("error") == "INVALID_WORKFLOW" and isinstance(details, list):
        for detail in details:
            if isinstance(detail, dict):
                lines.append(f"  {detail.get('node') or 'definition'}: {detail.get('problem')}")
    return "\n".join(lines)


async def _workflows_push(args: argparse.Namespace) -> None:
    if not args.api_key:
        raise CliError("an API key is needed: --api-key or LIBFLOW_API_KEY")
    if args.workflow and args.name:
        raise CliError("--name names a new workflow; it cannot be used with --workflow")
    path = Path(args.file)
    file_name, definition = _read_workflow_file(path)
    workflows_url = f"{args.url.rstrip('/')}{API}/projects/{args.project}/workflows"
    async with aiohttp.ClientSession() as session:
        try:
            if args.workflow:
                published = await _api(
                    session,
                    "POST",
                    f"{workflows_url}/{args.workflow}/versions",
                    args.api_key,
                    json={"definition": definition},
                )
                result = {"workflowId": args.workflow, "version": published["version"]}
                verb = "published"
            else:
                name = args.name or file_name or path.stem
                created = await _api(
                    session,
                    "POST",
                    workflows_url,
                    args.api_key,
                    json={"name": name, "definition": definition},
                )
                result = {"workflowId": created["workflowId"], "version": created["version"]}
                verb = "created"
        except ApiCallError as err:
            raise CliError(_invalid_workflow_lines(err)) from err
    _print(
        result,
        args.json,
        f"workflow {result['workflowId']}: version {result['version']} {verb}",
    )


async def _webhooks_create(args: argparse.Namespace) -> None:
    if not args.api_key:
        raise CliError("an API key is needed: --api-key or LIBFLOW_API_KEY")
    # Only what the user gave: the server's defaults stay the server's.
    body = {k: v for k, v in (("scheme", args.scheme), ("event", args.event)) if v is not None}
    url = (
        f"{args.url.rstrip('/')}{API}/projects/{args.project}/workflows/{args.workflow_id}/webhooks"
    )
    async with aiohttp.ClientSession() as session:
        created = await _api(session, "POST", url, args.api_key, json=body)
    _print(
        created,
        args.json,
        f"webhook {created['webhookId']} ({created['scheme']}, event '{created['event']}')\n"
        f"url:    {created['url']}\n"
        f"secret: {created['secret']}  (shown once; keep it)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(prog="libflow", description="libflow admin and client")
    sub = parser.add_subparsers(dest="command", required=True)

    projects = sub.add_parser("projects", help="manage projects").add_subparsers(
        dest="action", required=True
    )
    p = projects.add_parser("create", help="create a project and its first API key")
    p.add_argument("name")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(run=_projects_create)

    keys = sub.add_parser("keys", help="manage API keys").add_subparsers(
        dest="action", required=True
    )
    k = keys.add_parser("create", help="create an API key for a project")
    k.add_argument("project", help="project id")
    k.add_argument("--name", default="default", help="uploader name recorded on files")
    k.add_argument("--email", help="uploader email recorded on files")
    k.add_argument("--json", action="store_true")
    k.set_defaults(run=_keys_create)
    k = keys.add_parser("revoke", help="revoke an API key")
    k.add_argument("key_id")
    k.add_argument("--json", action="store_true")
    k.set_defaults(run=_keys_revoke)
    k = keys.add_parser("list", help="list a project's API keys")
    k.add_argument("project")
    k.add_argument("--json", action="store_true")
    k.set_defaults(run=_keys_list)

    u = sub.add_parser("upload", help="upload files through the public API")
    u.add_argument("project", help="project id")
    u.add_argument("files", nargs="+", metavar="FILE")
    u.add_argument("--dir", default="root", help="folder id (default root)")
    u.add_argument("--url", default=os.environ.get("LIBFLOW_URL", "http://127.0.0.1:8080"))
    u.add_argument("--api-key", default=os.environ.get("LIBFLOW_API_KEY"))
    u.add_argument("--json", action="store_true")
    u.set_defaults(run=_upload)

    workflows = sub.add_parser("workflows", help="manage workflows through the public API")
    w = workflows.add_subparsers(dest="action", required=True).add_parser(
        "push",
        help="create a workflow from a JSON file, or publish it as a new version",
        description='FILE holds a definition, or {"name": ..., "definition": ...}. '
        "Without --workflow a workflow is created (named by --name, the file's name or "
        "its stem); with --workflow the file becomes that workflow's next version.",
    )
    w.add_argument("project", help="project id")
    w.add_argument("file", metavar="FILE.json")
    w.add_argument("--workflow", metavar="ID", help="publish a new version of this workflow")
    w.add_argument("--name", help="name of the new workflow (default: from the file)")
    w.add_argument("--url", default=os.environ.get("LIBFLOW_URL", "http://127.0.0.1:8080"))
    w.add_argument("--api-key", default=os.environ.get("LIBFLOW_API_KEY"))
    w.add_argument("--json", action="store_true", help="print {workflowId, version} as JSON")
    w.set_defaults(run=_workflows_push)

    webhooks = sub.add_parser("webhooks", help="manage webhooks through the public API")
    h = webhooks.add_subparsers(dest="action", required=True).add_parser(
        "create",
        help="add a webhook to a workflow; print its URL and its secret (shown once)",
        description="Add a webhook to WORKFLOW_ID; deliveries POSTed to its URL, signed with "
        "its secret in the scheme's format, run the workflow from its event node. The secret "
        "is shown once, now: the API never shows it again (rotating it through the API "
        "makes a new one).",
    )
    h.add_argument("project", help="project id")
    h.add_argument("workflow_id", metavar="WORKFLOW_ID", help="workflow id")
    h.add_argument(
        "--scheme", choices=SCHEMES, help="how deliveries are signed (server default: standard)"
    )
    h.add_argument(
        "--event", metavar="NAME", help="event node the deliveries start (server default: webhook)"
    )
    h.add_argument("--url", default=os.environ.get("LIBFLOW_URL", "http://127.0.0.1:8080"))
    h.add_argument("--api-key", default=os.environ.get("LIBFLOW_API_KEY"))
    h.add_argument(
        "--json", action="store_true", help="print the API's webhook record (with its secret)"
    )
    h.set_defaults(run=_webhooks_create)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``libflow`` console script."""
    args = build_parser().parse_args(argv)
    try:
        asyncio.run(args.run(args))
    except CliError as err:
        print(f"libflow: {err}", file=sys.stderr)
        return 1
    except aiohttp.ClientError as err:
        print(f"libflow: cannot reach the server: {err}", file=sys.stderr)
        return 1
    return 0
