"""Real libflow processes (server, worker) and a PostgreSQL of a test's own, to kill at will."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from aiohttp.test_utils import unused_port

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def libflow_env(data_dir: Path, **settings: str) -> dict[str, str]:
    """This environment without its LIBFLOW_* settings, plus the given ones."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("LIBFLOW_") or k == "LIBFLOW_MODEL_CACHE_DIR"
    }
    env.update(
        LIBFLOW_DATA_DIR=str(data_dir),
        LIBFLOW_LOG_LEVEL="WARNING",
        LIBFLOW_EMBEDDER="none",
        LIBFLOW_SECRET_KEY="fault-tests",
    )
    env.update(settings)
    return env


class Process:
    """One child process whose output goes to a log file; killed at the end if still alive."""

    def __init__(self, command: list[str], env: dict[str, str], log: Path) -> None:
        self.command = command
        self.env = env
        self.log = log
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the process (again), appending to its log."""
        with self.log.open("ab") as out:
            self._process = subprocess.Popen(
                self.command, cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT
            )

    @property
    def pid(self) -> int:
        """The running process's id."""
        assert self._process is not None, "not started"
        return self._process.pid

    @property
    def alive(self) -> bool:
        """The process is running."""
        return self._process is not None and self._process.poll() is None

    def kill(self) -> None:
        """``kill -9``: no clean-up of any kind."""
        if self._process is not None:
            self._process.send_signal(signal.SIGKILL)
            self._process.wait(timeout=10)
            self._process = None

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM, then SIGKILL if it does not exit in time."""
        if self._process is None:
            return
        self._process.terminate()
        try:
            self._process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._process = None

    def output(self) -> str:
        """Everything the process wrote so far."""
        return self.log.read_text(errors="replace")


class Server(Process):
    """``python run_server.py`` on a fixed port, so it can be restarted at the same URL."""

    def __init__(self, data_dir: Path, log: Path, **settings: str) -> None:
        self.data_dir = data_dir
        self.port = unused_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [sys.executable, "run_server.py", "--port", str(self.port)]
        env = libflow_env(data_dir, LIBFLOW_PUBLIC_BASE_URL=self.url, **settings)
        super().__init__(command, env, log)

    def start(self, timeout: float = 60) -> None:
        """Start and wait for ``/healthz``."""
        super().start()
        deadline = time.monotonic() + timeout
        while True:
            assert self.alive, f"server exited:\n{self.output()}"
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=1) as reply:
                    if reply.status == 200:
                        return
            except OSError:
                pass
            assert time.monotonic() < deadline, f"server did not start:\n{self.output()}"
            time.sleep(0.1)

    def create_project(self) -> tuple[str, str]:
        """``libflow projects create --json`` on the server's database: (projectId, apiKey)."""
        done = subprocess.run(
            [sys.executable, "-m", "libflow", "projects", "create", "faults", "--json"],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        created: dict[str, str] = json.loads(done.stdout)
        return created["projectId"], created["apiKey"]


class Worker(Process):
    """``python run_worker.py`` with the server's settings."""

    def __init__(self, server: Server, log: Path) -> None:
        super().__init__([sys.executable, "run_worker.py"], server.env, log)


def wait_for(condition: Callable[[], T | None], timeout: float, what: str) -> T:
    """Poll ``condition`` until it returns something truthy; after ``timeout``, fail."""
    deadline = time.monotonic() + timeout
    while not (result := condition()):
        assert time.monotonic() < deadline, what
        time.sleep(0.2)
    return result


def http_json(method: str, url: str, body: Any = None, **headers: str) -> tuple[int, Any]:
    """A blocking JSON call (for set-up and checks outside the event loop)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, json.loads(reply.read() or b"null")
    except urllib.error.HTTPError as err:
        with err:
            return err.code, json.loads(err.read() or b"null")


class PrivatePostgres:
    """A PostgreSQL cluster of the test's own (initdb in a temp dir), to stop and start.

    The server refuses to run as root, so the cluster belongs to the ``postgres`` user.
    """

    def __init__(self) -> None:
        bin_dirs = sorted(Path("/usr/lib/postgresql").glob("*/bin"))
        if not bin_dirs or shutil.which("runuser") is None:
            raise RuntimeError("PostgreSQL server binaries or runuser are missing")
        self._bin = bin_dirs[-1]
        self.port = unused_port()
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/postgres"
        # Not under pytest's tmp_path: its parents are private to root, and the server
        # runs as postgres.
        self.data_dir = Path(tempfile.mkdtemp(prefix="libflow-pg-"))
        if os.geteuid() == 0:
            shutil.chown(self.data_dir, "postgres", "postgres")
        self._as_postgres(
            str(self._bin / "initdb"), "-D", str(self.data_dir), "-A", "trust", "-U", "postgres"
        )

    def _as_postgres(self, *command: str) -> None:
        run_as = [] if os.geteuid() != 0 else ["runuser", "-u", "postgres", "--"]
        subprocess.run([*run_as, *command], check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        options = f"-p {self.port} -k {self.data_dir} -c listen_addresses=127.0.0.1"
        self._as_postgres(
            str(self._bin / "pg_ctl"),
            *("-D", str(self.data_dir), "-o", options, "-l", str(self.data_dir / "log")),
            *("-w", "start"),
        )

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``immediate`` is a crash: no shutdown checkpoint)."""
        self._as_postgres(str(self._bin / "pg_ctl"), "-D", str(self.data_dir), "-m", mode, "stop")

    def remove(self) -> None:
        """Stop the server if it runs and delete the cluster."""
        with contextlib.suppress(subprocess.CalledProcessError):
            self.stop("immediate")
        shutil.rmtree(self.data_dir, ignore_errors=True)
