"""The ``libflow`` command: its parser and entry point (admin, public_api, runs: the commands)."""

from __future__ import annotations

import argparse
import asyncio
import sys

import aiohttp

from libflow.cli.admin import (
    OLD_KEY_VARIABLE,
    keys_create,
    keys_list,
    keys_revoke,
    keys_rotate,
    projects_create,
    projects_list,
    secrets_rotate_key,
)
from libflow.cli.connection import add_connection_options
from libflow.cli.deliveries import add_deliveries_parser
from libflow.cli.library import add_library_parsers
from libflow.cli.output import CliError, error_lines
from libflow.cli.public_api import upload, webhooks_create, workflows_push
from libflow.cli.runs import add_run_parser, add_runs_parser
from libflow.client import LibflowError as ClientError
from libflow.webhooks.signatures import SCHEMES


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(prog="libflow", description="libflow admin and client")
    sub = parser.add_subparsers(dest="command", required=True)

    projects = sub.add_parser("projects", help="manage projects").add_subparsers(
        dest="action", required=True
    )
    p = projects.add_parser("create", help="create a project and its first API key")
    p.add_argument("name")
    printed = p.add_mutually_exclusive_group()
    printed.add_argument("--json", action="store_true", help="print JSON")
    printed.add_argument(
        "--shell",
        action="store_true",
        help="print export lines of LIBFLOW_URL, LIBFLOW_PROJECT_ID and LIBFLOW_API_KEY "
        '(eval "$(libflow projects create NAME --shell)")',
    )
    p.set_defaults(run=projects_create)
    p = projects.add_parser("list", help="list the projects, oldest first")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(run=projects_list)

    keys = sub.add_parser("keys", help="manage API keys").add_subparsers(
        dest="action", required=True
    )
    k = keys.add_parser("create", help="create an API key for a project")
    k.add_argument("project", help="project id")
    k.add_argument("--name", default="default", help="uploader name recorded on files")
    k.add_argument("--email", help="uploader email recorded on files")
    k.add_argument("--json", action="store_true")
    k.set_defaults(run=keys_create)
    k = keys.add_parser("revoke", help="revoke an API key")
    k.add_argument("key_id")
    k.add_argument("--json", action="store_true")
    k.set_defaults(run=keys_revoke)
    k = keys.add_parser(
        "rotate", help="replace an API key: a new one (shown once), the old one revoked"
    )
    k.add_argument("key_id")
    k.add_argument("--json", action="store_true")
    k.set_defaults(run=keys_rotate)
    k = keys.add_parser("list", help="list a project's API keys")
    k.add_argument("project")
    k.add_argument("--json", action="store_true")
    k.set_defaults(run=keys_list)

    u = sub.add_parser("upload", help="upload files through the public API")
    u.add_argument("project", help="project id")
    u.add_argument("files", nargs="+", metavar="FILE")
    u.add_argument("--dir", default="root", help="folder id (default root)")
    add_connection_options(u)
    u.add_argument("--json", action="store_true")
    u.set_defaults(run=upload)

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
    add_connection_options(w)
    w.add_argument("--json", action="store_true", help="print {workflowId, version} as JSON")
    w.set_defaults(run=workflows_push)

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
    add_connection_options(h)
    h.add_argument(
        "--json", action="store_true", help="print the API's webhook record (with its secret)"
    )
    h.set_defaults(run=webhooks_create)

    secrets = sub.add_parser("secrets", help="manage how secrets are sealed at rest")
    r = secrets.add_subparsers(dest="action", required=True).add_parser(
        "rotate-key",
        help="re-seal every secret and webhook secret under the settings' key",
        description="Re-seal every project secret and webhook signing secret, sealed under "
        "the old key, under the key the settings name now (LIBFLOW_SECRET_KEY, or the data "
        f"dir's secret_key). The old key comes from --old-key-file or {OLD_KEY_VARIABLE}. "
        "All or nothing, in one transaction; safe to run again. Stop the servers and "
        "workers first: a process still on the old key cannot read what is re-sealed.",
    )
    r.add_argument(
        "--old-key-file", metavar="FILE", help="the old key's file (a data dir's secret_key)"
    )
    r.add_argument("--json", action="store_true", help="print {resealed, alreadyNew, keyId}")
    r.set_defaults(run=secrets_rotate_key)

    add_library_parsers(sub)
    add_run_parser(sub)
    add_runs_parser(sub)
    add_deliveries_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``libflow`` console script."""
    args = build_parser().parse_args(argv)
    try:
        asyncio.run(args.run(args))
    except (CliError, ClientError) as err:
        first, *details = error_lines(err)
        print(f"libflow: {first}", *details, sep="\n", file=sys.stderr)
        return 1
    except aiohttp.ClientError as err:
        print(f"libflow: cannot reach the server: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        # Ctrl-C is how a user stops ``runs watch``: not a crash, so no traceback; 130 is
        # the shell's code for a command ended by SIGINT.
        print("libflow: interrupted", file=sys.stderr)
        return 130
    return 0
