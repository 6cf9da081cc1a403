"""Run an arq worker for libflow's jobs: ``python run_worker.py [--burst]``."""

from __future__ import annotations

import argparse
import sys

from libflow.event_loop import new_event_loop
from libflow.logs import configure_logging
from settings import SettingsError, settings_from_env
from workers.worker import LibflowWorker, wait_for_redis, worker_settings


def main(argv: list[str] | None = None) -> int:
    """Fail fast without Redis; otherwise run jobs until stopped (or the queue drains)."""
    parser = argparse.ArgumentParser(description="libflow worker (arq on Redis)")
    parser.add_argument("--burst", action="store_true", help="exit once the queue is empty")
    args = parser.parse_args(argv)
    try:
        settings = settings_from_env()
    except SettingsError as err:
        print(f"libflow worker: {err}", file=sys.stderr)
        return 2
    if not settings.redis_url:
        print(
            "libflow worker: LIBFLOW_REDIS_URL is not set. Workers take jobs from Redis; "
            "without it the server runs jobs in-process and no worker is needed.",
            file=sys.stderr,
        )
        return 2
    configure_logging(settings.log_level)
    wait_for_redis(settings.redis_url)
    new_event_loop(settings.event_loop)  # the worker runs on the thread's current loop
    worker = LibflowWorker(**worker_settings(settings), burst=args.burst, handle_signals=True)
    worker.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
