"""The client commands, ``libflow upload``, ``workflows push`` and ``webhooks create``.

They call the public HTTP API through libflow.client (which waits out a 429).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from tqdm import tqdm

from libflow.cli.connection import client_of
from libflow.cli.output import CliError, print_result
from libflow.client import LibflowClient
from libflow.client.records import LibraryFile


async def upload_file(
    client: LibflowClient, path: Path, folder: str, *, progress: bool = True
) -> LibraryFile:
    """Create the record, PUT the bytes, finalize (the public three-step flow), with a bar."""
    size = (await asyncio.to_thread(path.stat)).st_size
    with tqdm(
        total=size,
        unit="B",
        unit_scale=True,
        desc=path.name,
        disable=not progress,
        leave=False,
    ) as bar:

        def advance(sent: int, _size: int) -> None:
            bar.update(sent - bar.n)

        return await client.library.upload(path, dir=folder, progress=advance)


async def upload(args: argparse.Namespace) -> None:
    """``libflow upload``: upload each FILE, print its record."""
    paths = [Path(p) for p in args.files]
    for path in paths:
        if not path.is_file():
            raise CliError(f"{path}: not a file")
    async with client_of(args) as client:
        for path in paths:
            record = await upload_file(client, path, args.dir, progress=sys.stderr.isatty())
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


async def workflows_push(args: argparse.Namespace) -> None:
    """``libflow workflows push``: create a workflow from a file, or publish a new version."""
    if args.workflow and args.name:
        raise CliError("--name names a new workflow; it cannot be used with --workflow")
    path = Path(args.file)
    file_name, definition = _read_workflow_file(path)
    async with client_of(args) as client:
        # An INVALID_WORKFLOW's details (node: problem) are printed by the CLI's main.
        if args.workflow:
            published = await client.workflows.publish(args.workflow, definition)
            result = {"workflowId": args.workflow, "version": published["version"]}
            verb = "published"
        else:
            name = args.name or file_name or path.stem
            created = await client.workflows.create(name, definition)
            result = {"workflowId": created["workflowId"], "version": created["version"]}
            verb = "created"
    print_result(
        result,
        args.json,
        f"workflow {result['workflowId']}: version {result['version']} {verb}",
    )


async def webhooks_create(args: argparse.Namespace) -> None:
    """``libflow webhooks create``: add a webhook to a workflow, print its URL and secret."""
    async with client_of(args) as client:
        created = await client.webhooks.create(
            args.workflow_id, scheme=args.scheme, event=args.event
        )
    print_result(
        created,
        args.json,
        f"webhook {created['webhookId']} ({created['scheme']}, event '{created['event']}')\n"
        f"url:    {created['url']}\n"
        f"secret: {created['secret']}  (shown once; keep it)",
    )
