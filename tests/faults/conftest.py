"""Fixtures of the fault tests: libflow server processes stopped after the test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.faults.processes import Server

ServerFactory = Callable[..., Server]


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[ServerFactory]:
    """Start ``run_server.py`` with these LIBFLOW_* settings; it is stopped after the test."""
    started: list[Server] = []

    def start(**settings: str) -> Server:
        server = Server(tmp_path / "data", tmp_path / "server.log", **settings)
        server.start()
        started.append(server)
        return server

    try:
        yield start
    finally:
        for server in started:
            server.stop()
