"""A redis-server of a test's own, on a port of its own, which the test may stop and restart."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

from aiohttp.test_utils import unused_port


class PrivateRedis:
    """One redis-server process; ``stop()`` and ``start()`` keep the same port and URL."""

    def __init__(self, data_dir: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        self.port = unused_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._command = [
            binary,
            *("--port", str(self.port), "--bind", "127.0.0.1"),
            *("--save", "", "--appendonly", "no", "--dir", str(data_dir)),
        ]
        self._process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 10) -> None:
        """Start the server and wait until it accepts connections."""
        process = subprocess.Popen(
            self._command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self._process = process
        deadline = time.monotonic() + timeout
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                assert process.poll() is None, "redis-server exited at start"
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.05)

    def stop(self) -> None:
        """Stop the server (and lose its data: it keeps nothing on disk)."""
        if self._process is not None:
            self._process.terminate()
            self._process.wait(timeout=10)
            self._process = None
