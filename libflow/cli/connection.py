"""What every client command shares: the server's URL, the API key, and a client of both."""

from __future__ import annotations

import argparse
import os

from libflow.cli.output import CliError
from libflow.cli.server_url import default_server_url
from libflow.client import LibflowClient


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    """``--url`` (LIBFLOW_URL, else the server's settings) and ``--api-key`` (LIBFLOW_API_KEY)."""
    parser.add_argument("--url", default=default_server_url(), help="the server (LIBFLOW_URL)")
    parser.add_argument(
        "--api-key", default=os.environ.get("LIBFLOW_API_KEY"), help="(LIBFLOW_API_KEY)"
    )


def add_project_argument(parser: argparse.ArgumentParser) -> None:
    """The project id every client command starts with."""
    parser.add_argument("project", help='project id (e.g. "$LIBFLOW_PROJECT_ID")')


def client_of(args: argparse.Namespace) -> LibflowClient:
    """A client of ``args.project`` on ``args.url``; enter it with ``async with``."""
    if not args.api_key:
        raise CliError("an API key is needed: --api-key or LIBFLOW_API_KEY")
    return LibflowClient(args.url, args.api_key, args.project)
