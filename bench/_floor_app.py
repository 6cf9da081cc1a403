"""The floor: libflow's own application around handlers that do no work of their own.

``python -m bench._floor_app --port P [--payload FILE]`` serves ``create_app(settings)``
(settings from LIBFLOW_*: every middleware, the API key check and rate limit) with two
more routes behind the project routes: a POST that validates a runsync body and answers
the runsync shape without running anything, and a GET that answers FILE's JSON object
(re-serialized per request, as the bare baseline does). What a keyed libflow route costs
before it does its work: the ceiling of any ratio against a bare aiohttp handler.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from aiohttp import web

from bench._common import FLOOR_GET_FILE_ROUTE, FLOOR_RUNSYNC_ROUTE
from libflow.api.bodies import RunSyncBody, parse_body
from libflow.api.routing import route_tree
from libflow.app import create_app
from libflow.event_loop import new_event_loop
from libflow.logs import configure_logging
from settings import settings_from_env

PAYLOAD = web.AppKey[dict[str, Any]]("floor_payload")


async def runsync(request: web.Request) -> web.Response:
    """Parse and validate the body as runsync does, then answer without running anything."""
    body = await parse_body(request, RunSyncBody)
    name = (body.inputs or {}).get("name")
    return web.json_response(
        {"success": True, "result": {"outputs": {"greeting": f"Hello, {name}!"}}, "statusCode": 200}
    )


async def get_file(request: web.Request) -> web.Response:
    """The stored dict with the requested id, serialized each time."""
    payload: dict[str, Any] = request.app[PAYLOAD]
    return web.json_response({**payload, "id": request.match_info["fileId"]})


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--payload", type=Path)
    args = parser.parse_args(argv)
    settings = settings_from_env(port=args.port)
    configure_logging(settings.log_level)
    app = create_app(settings)
    app[PAYLOAD] = json.loads(args.payload.read_text()) if args.payload else {}
    # Behind every route of the app, where libflow's own routes are found.
    routes = route_tree(app)
    routes.add_route("POST", FLOOR_RUNSYNC_ROUTE, runsync)
    routes.add_route("GET", FLOOR_GET_FILE_ROUTE, get_file)
    # As run_server.py serves the app.
    web.run_app(
        app,
        loop=new_event_loop(settings.event_loop),
        host="127.0.0.1",
        port=args.port,
        access_log=None,
        handler_cancellation=True,
        print=None,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
