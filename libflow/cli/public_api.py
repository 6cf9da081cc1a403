"""The client commands, ``libflow upload``, ``workflows push`` and ``webhooks create``.

They call the public HTTP API with an API key, through api_client (which waits out a 429).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
from tqdm import tqdm
from yarl import URL

from libflow.cli.api_client import API, ApiCallError, call_api_for_object
from libflow.cli.output import CliError, print_result

CHUNK = 1024 * 1024


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
    created = await call_api_for_object(
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
    return await call_api_for_object(
        session, "POST", f"{files_url}:complete", api_key, json={"path": created["path"]}
    )


async def upload(args: argparse.Namespace) -> None:
    """``libflow upload``: upload each FILE, print its record."""
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
            print_result(record, args.json, f"{path.name}: {record['id']} ({record['size']} bytes)")


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


async def workflows_push(args: argparse.Namespace) -> None:
    """``libflow workflows push``: create a workflow from a file, or publish a new version."""
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
                published = await call_api_for_object(
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
                created = await call_api_for_object(
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
    print_result(
        result,
        args.json,
        f"workflow {result['workflowId']}: version {result['version']} {verb}",
    )


async def webhooks_create(args: argparse.Namespace) -> None:
    """``libflow webhooks create``: add a webhook to a workflow, print its URL and secret."""
    if not args.api_key:
        raise CliError("an API key is needed: --api-key or LIBFLOW_API_KEY")
    # Only what the user gave: the server's defaults stay the server's.
    body = {k: v for k, v in (("scheme", args.scheme), ("event", args.event)) if v is not None}
    url = (
        f"{args.url.rstrip('/')}{API}/projects/{args.project}/workflows/{args.workflow_id}/webhooks"
    )
    async with aiohttp.ClientSession() as session:
        created = await call_api_for_object(session, "POST", url, args.api_key, json=body)
    print_result(
        created,
        args.json,
        f"webhook {created['webhookId']} ({created['scheme']}, event '{created['event']}')\n"
        f"url:    {created['url']}\n"
        f"secret: {created['secret']}  (shown once; keep it)",
    )
