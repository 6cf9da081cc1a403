"""The bare aiohttp baseline: one JSON handler, no middleware, no database.

``python -m bench._baseline_app --port P --payload FILE`` serves FILE's JSON object
(re-serialized per request, as libflow does) at the libflow get-file route shape.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from aiohttp import web

from bench._common import bare_event_loop

PAYLOAD = web.AppKey[dict[str, Any]]("payload")


async def get_file(request: web.Request) -> web.Response:
    """The stored dict with the requested id, serialized each time."""
    payload: dict[str, Any] = request.app[PAYLOAD]
    return web.json_response({**payload, "id": request.match_info["fileId"]})


async def healthz(request: web.Request) -> web.Response:
    """Readiness for the benchmark runner."""
    return web.json_response({"status": "ok"})


def create_app(payload: dict[str, Any]) -> web.Application:
    """The baseline application serving ``payload``."""
    app = web.Application()
    app[PAYLOAD] = payload
    app.router.add_get("/api/publicv1/projects/{projectId}/library/files/{fileId}", get_file)
    app.router.add_get("/healthz", healthz)
    return app


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--payload", type=Path, required=True)
    args = parser.parse_args(argv)
    payload = json.loads(args.payload.read_text())
    web.run_app(
        create_app(payload),
        loop=bare_event_loop(),
        host="127.0.0.1",
        port=args.port,
        access_log=None,
        print=None,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
