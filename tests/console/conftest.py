"""Fixtures of the console tests: a real server, one headless Chromium, a page per test."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import unavailable
from tests.faults.processes import Server

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's Chromium driven by Playwright (never a downloaded browser).

    One for the module that holds every browser test; closed after it, so that Playwright's
    own event loop is gone before the suite's async tests go on.
    """
    try:
        from playwright.sync_api import sync_playwright
    except ModuleNotFoundError as err:
        unavailable("Playwright", "pip install -e '.[dev]'", err)
    if shutil.which(CHROMIUM) is None:
        unavailable("Chromium", "apt-get install chromium", FileNotFoundError(CHROMIUM))
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            yield launched
        finally:
            launched.close()


@dataclass(frozen=True)
class Console:
    """The server the console is served by, and a project of it."""

    server: Server
    project_id: str
    api_key: str

    @property
    def url(self) -> str:
        """Where the console is."""
        return f"{self.server.url}/console/"

    def api(self, path: str) -> str:
        """The URL of a route of the project."""
        return f"{self.server.url}/api/publicv1/projects/{self.project_id}{path}"

    @property
    def headers(self) -> dict[str, str]:
        """The project's key, as the API takes it."""
        return {"Authorization": f"Bearer {self.api_key}"}


@pytest.fixture(scope="session")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    """``run_server.py`` on the embedded shape (jobs in the process), with a project."""
    folder = tmp_path_factory.mktemp("console-server")
    server = Server(folder / "data", folder / "server.log")
    server.start()
    try:
        project_id, api_key = server.create_project()
        yield Console(server, project_id, api_key)
    finally:
        server.stop()


@pytest.fixture(scope="session")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the screenshots of each view go: $LIBFLOW_CONSOLE_SCREENSHOTS, or a temp dir."""
    chosen = os.environ.get("LIBFLOW_CONSOLE_SCREENSHOTS")
    folder = Path(chosen) if chosen else tmp_path_factory.mktemp("console-screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh tab (its own sessionStorage) at desktop size; page errors fail the test."""
    context = browser.new_context(viewport=DESKTOP)
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    try:
        yield opened
    finally:
        context.close()
    assert not errors, f"the console threw: {errors}"
