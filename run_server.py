"""Run the libflow API server: ``python run_server.py [--host --port --data-dir --workers]``."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

from aiohttp import web

from libflow.app import create_app
from libflow.db.connection import open_database
from libflow.event_loop import new_event_loop
from libflow.logs import configure_logging
from libflow.secrets.crypto import box_of, use_secret_box
from libflow.supervisor import (
    REQUEST_GRACE_SECONDS,
    SETTINGS_REFUSED_EXIT,
    bindable_port,
    group_slot,
    supervise,
)
from settings import Settings, SettingsError, settings_from_env

# How often a server of a group checks that its supervisor is still there.
PARENT_CHECK_SECONDS = 1.0


def main(argv: list[str] | None = None) -> int:
    """Parse flags over LIBFLOW_* settings and serve until interrupted."""
    parser = argparse.ArgumentParser(description="libflow API server")
    parser.add_argument("--host", help="interface to bind (LIBFLOW_HOST, default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port to bind (LIBFLOW_PORT, default 8080)")
    parser.add_argument("--data-dir", type=Path, help="data directory (LIBFLOW_DATA_DIR)")
    parser.add_argument(
        "--workers", type=int, help="API processes on the port (LIBFLOW_WORKERS, default 1)"
    )
    args = parser.parse_args(argv)
    try:
        settings = settings_from_env(
            host=args.host, port=args.port, data_dir=args.data_dir, workers=args.workers
        )
    except SettingsError as err:
        print(f"libflow: {err}", file=sys.stderr)
        return SETTINGS_REFUSED_EXIT
    configure_logging(settings.log_level)
    if settings.workers > 1 and group_slot() is None:
        # Once, before the servers start together: SQLite migrations take no lock.
        asyncio.run(_prepare_database(settings))
        return supervise(settings, [sys.executable, os.path.abspath(__file__)])
    in_group = group_slot() is not None
    if not in_group:
        # Checked before start-up (the model, the database): a port another program holds
        # is a message now, not a traceback once everything else has started.
        try:
            bindable_port(settings.host, settings.port)
        except OSError as err:
            print(
                f"libflow: cannot listen on {settings.host}:{settings.port}: {err}", file=sys.stderr
            )
            return SETTINGS_REFUSED_EXIT
    serve(settings, in_group=in_group)
    return 0


async def _prepare_database(settings: Settings) -> None:
    use_secret_box(box_of(settings))  # a migration seals webhook secrets with it
    async with open_database(settings.resolved_database_url):
        pass


def serve(settings: Settings, *, in_group: bool) -> None:
    """Serve one process's application until SIGTERM or SIGINT."""
    app = create_app(settings)
    if in_group:
        app.cleanup_ctx.append(_exit_with_supervisor)
    web.run_app(
        app,
        loop=new_event_loop(settings.event_loop),
        host=settings.host,
        port=settings.port,
        # The servers of a group each bind the port; the kernel spreads connections.
        reuse_port=in_group or None,
        access_log=None,
        # A client that goes away cancels its request: runsync then records the run as
        # cancelled, and an upload's temp file is removed.
        handler_cancellation=True,
        shutdown_timeout=REQUEST_GRACE_SECONDS,
        print=lambda message: print(f"libflow: {message}", file=sys.stderr),
    )


async def _exit_with_supervisor(app: web.Application) -> AsyncIterator[None]:
    """Stop gracefully when the supervisor is gone (killed): no orphan keeps the port."""
    parent = os.getppid()

    async def watch() -> None:
        while True:  # an orphan is told by its parent id alone
            await asyncio.sleep(PARENT_CHECK_SECONDS)
            if os.getppid() != parent:
                break
        os.kill(os.getpid(), signal.SIGTERM)

    task = asyncio.create_task(watch())
    yield
    task.cancel()


if __name__ == "__main__":
    sys.exit(main())
