"""Several API processes on one port: start them, restart one that dies, stop them together.

``run_server.py --workers N`` (``LIBFLOW_WORKERS``) runs this supervisor, which starts N
copies of the server. Each binds the port itself with SO_REUSEPORT, so the kernel spreads
new connections over them, and knows it is one of a group by ``GROUP_SLOT_ENV``. What one
process does the others must see goes through the database (claims of runs, deliveries,
files, schedule ticks) or the data dir (run events, the periodic jobs' lock). The
supervisor only starts and stops processes: it serves nothing and opens no database.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import FrameType

from settings import Settings

logger = logging.getLogger("libflow.supervisor")

# Set by the supervisor in each server's environment: its slot (0..N-1), and when the group
# started (what an earlier stop left unfinished is older than that).
GROUP_SLOT_ENV = "LIBFLOW_GROUP_SLOT"
GROUP_STARTED_ENV = "LIBFLOW_GROUP_STARTED_AT"
# On SIGTERM a server gives the requests in flight (a runsync, an event stream) this long
# before it cancels them (aiohttp's own default is 60 s: an open event stream held a
# server that long), then its in-process jobs 10 s more (resources.SHUTDOWN_GRACE_SECONDS).
REQUEST_GRACE_SECONDS = 10.0
# How long the servers have to stop after SIGTERM, both graces and some room, before they
# are killed.
STOP_TIMEOUT_SECONDS = 30.0
# A server that dies is started again after this, doubling while it keeps dying young.
RESTART_DELAY_SECONDS = 0.5
MAX_RESTART_DELAY_SECONDS = 30.0
# A server that lived this long died of something other than its start-up: no back-off.
HEALTHY_AFTER_SECONDS = 10.0
POLL_SECONDS = 0.1
# How run_server.py exits when its settings are refused: a group then stops rather than
# restart servers that would be refused the same way.
SETTINGS_REFUSED_EXIT = 2


def group_slot() -> int | None:
    """This server's slot in a supervised group, or None when it runs alone."""
    value = os.environ.get(GROUP_SLOT_ENV, "")
    return int(value) if value.isascii() and value.isdigit() else None


def group_started_at() -> datetime | None:
    """When this server's group started (None when it runs alone)."""
    value = os.environ.get(GROUP_STARTED_ENV, "")
    try:
        return datetime.fromtimestamp(float(value), UTC)
    except ValueError:
        return None


def bindable_port(host: str, port: int) -> int:
    """``port``, or a free one for 0; OSError when another program holds it.

    Checked without SO_REUSEPORT: the servers bind with it, and would otherwise share the
    port with any program of this user that also asked for it.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, port))
        bound: int = probe.getsockname()[1]
        return bound


@dataclass(slots=True)
class _Child:
    slot: int
    process: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    restart_at: float = 0.0
    delay: float = RESTART_DELAY_SECONDS
    restarts: int = field(default=0)


class Supervisor:
    """N server processes, each started again when it dies, all stopped on SIGTERM/SIGINT."""

    def __init__(self, command: list[str], env: Mapping[str, str], workers: int) -> None:
        self._command = command
        self._env = dict(env)
        self._children = [_Child(slot) for slot in range(workers)]
        self._stopping = False
        self._exit_code = 0
        self._started_at = time.time()

    def run(self) -> int:
        """Serve until a stop signal; 0 once every server has exited (2 when a server
        refused its settings)."""
        previous = {
            sig: signal.signal(sig, self._on_stop_signal) for sig in (signal.SIGTERM, signal.SIGINT)
        }
        try:
            for child in self._children:
                self._start(child)
            while not self._stopping:
                self._reap_and_restart()
                time.sleep(POLL_SECONDS)
            self._stop_all()
            return self._exit_code
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _on_stop_signal(self, signum: int, frame: FrameType | None) -> None:
        self._stopping = True

    def _start(self, child: _Child) -> None:
        env = {
            **self._env,
            GROUP_SLOT_ENV: str(child.slot),
            GROUP_STARTED_ENV: repr(self._started_at),
        }
        # Its own process group: a ^C in the terminal reaches the supervisor alone, which
        # then stops the servers in order.
        child.process = subprocess.Popen(  # noqa: S603 (our interpreter, run_server.py)
            self._command, env=env, start_new_session=True
        )
        child.started = time.monotonic()
        logger.info("server %d started", child.slot, extra={"pid": child.process.pid})

    def _reap_and_restart(self) -> None:
        now = time.monotonic()
        for child in self._children:
            if child.process is not None:
                code = child.process.poll()
                if code is None:
                    continue
                if code == SETTINGS_REFUSED_EXIT:
                    # Its settings are wrong: every restart would be refused the same way.
                    logger.error(
                        "server %d refused its settings (exit code %d): stopping every server",
                        child.slot,
                        code,
                        extra={"pid": child.process.pid},
                    )
                    child.process = None
                    self._stopping = True
                    self._exit_code = SETTINGS_REFUSED_EXIT
                    return
                lived = now - child.started
                child.delay = (
                    RESTART_DELAY_SECONDS
                    if lived >= HEALTHY_AFTER_SECONDS
                    else min(child.delay * 2, MAX_RESTART_DELAY_SECONDS)
                )
                child.restart_at = now + (0 if lived >= HEALTHY_AFTER_SECONDS else child.delay)
                logger.error(
                    "server %d exited (%s); starting it again in %.1f s",
                    child.slot,
                    _exit_reason(code),
                    child.restart_at - now,
                    extra={"pid": child.process.pid},
                )
                child.process = None
            if child.process is None and now >= child.restart_at and not self._stopping:
                child.restarts += 1
                self._start(child)

    def _stop_all(self) -> None:
        """SIGTERM to every server; SIGKILL to those still up after STOP_TIMEOUT_SECONDS."""
        running = [child.process for child in self._children if child.process is not None]
        for process in running:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
        for process in running:
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                logger.error("server pid %d did not stop in time: killed", process.pid)
                process.kill()
                process.wait()
        logger.info("every server has stopped")


def _exit_reason(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def supervise(settings: Settings, command: list[str]) -> int:
    """Run ``command`` (a server) ``settings.workers`` times on one port until stopped.

    The port is checked first (a clear error rather than N failing servers); port 0 picks
    a free one that every server then shares.
    """
    try:
        port = bindable_port(settings.host, settings.port)
    except OSError as err:
        logger.error("cannot listen on %s:%d: %s", settings.host, settings.port, err)
        return SETTINGS_REFUSED_EXIT  # a port is a setting: LIBFLOW_PORT
    env = {
        **os.environ,
        "LIBFLOW_HOST": settings.host,
        "LIBFLOW_PORT": str(port),
        "LIBFLOW_DATA_DIR": str(settings.data_dir.resolve()),
        "LIBFLOW_WORKERS": str(settings.workers),
    }
    logger.info("serving on http://%s:%d with %d processes", settings.host, port, settings.workers)
    return Supervisor(command, env, settings.workers).run()
