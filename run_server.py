"""Run the libflow API server: ``python run_server.py [--host --port --data-dir]``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from aiohttp import web

from libflow.app import create_app
from libflow.logs import configure_logging
from settings import SettingsError, settings_from_env


def main(argv: list[str] | None = None) -> int:
    """Parse flags over LIBFLOW_* settings and serve until interrupted."""
    parser = argparse.ArgumentParser(description="libflow API server")
    parser.add_argument("--host", help="interface to bind (LIBFLOW_HOST, default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port to bind (LIBFLOW_PORT, default 8080)")
    parser.add_argument("--data-dir", type=Path, help="data directory (LIBFLOW_DATA_DIR)")
    args = parser.parse_args(argv)
    try:
        settings = settings_from_env(host=args.host, port=args.port, data_dir=args.data_dir)
    except SettingsError as err:
        print(f"libflow: {err}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level)
    web.run_app(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        access_log=None,
        # A client that goes away cancels its request: runsync then records the run as
        # cancelled, and an upload's temp file is removed.
        handler_cancellation=True,
        print=lambda message: print(f"libflow: {message}", file=sys.stderr),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
