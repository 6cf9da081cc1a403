"""Every example of docs/ runs against a live server, so the docs cannot go stale.

The convention: a ```sh (or ```bash) or ```python block is runnable; one whose info string
says ``fragment`` (```` ```sh fragment ````) is not, and is kept for what cannot run here
(installing, starting servers, backups). A page's runnable blocks run in order as one bash
script (so a variable set in one block is there in the next), each Python block fed to the
virtualenv's Python with the page's exported variables; before them, as a reader who
followed the quick start would have, ``LIBFLOW_URL``, ``LIBFLOW_PROJECT_ID`` and
``LIBFLOW_API_KEY`` name a live server and a project of its own.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from libflow.errors import STATUS_BY_CODE
from libflow.library.filetypes import MIME_TYPES
from settings import Settings
from tests.test_cli import Server, clean_env, running_server

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
BLOCK = re.compile(r"^```([a-z]*)([^\n]*)\n(.*?)^```[ \t]*$", re.S | re.M)
RUNNABLE_LANGUAGES = {"sh", "bash", "python"}
LINK = re.compile(r"\]\(([^)\s]+)\)")


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: str
    line: int
    language: str
    code: str
    fragment: bool


def page_blocks(page: Path) -> list[Block]:
    """The page's shell and Python blocks, in order."""
    text = page.read_text()
    return [
        Block(
            page.name,
            text.count("\n", 0, match.start()) + 1,
            match[1],
            match[3],
            "fragment" in match[2].split(),
        )
        for match in BLOCK.finditer(text)
        if match[1] in RUNNABLE_LANGUAGES
    ]


def page_script(blocks: list[Block]) -> str:
    """One bash script running the runnable blocks in order, each announced on stderr."""
    lines = ["set -euo pipefail", 'eval "$(libflow projects create docs-example --shell)"']
    for block in blocks:
        if block.fragment:
            continue
        lines.append(f"echo '>>> {block.page} line {block.line}' >&2")
        if block.language == "python":
            lines.append(
                f"\"$LIBFLOW_DOCS_PYTHON\" - <<'LIBFLOW_DOCS_PY'\n{block.code}LIBFLOW_DOCS_PY"
            )
        else:
            lines.append(block.code)
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One embedded server for every page (keyword search only: no model to load)."""
    with running_server(
        tmp_path_factory.mktemp("docs-data"), LIBFLOW_EMBEDDER="none", LIBFLOW_RATE_LIMIT="0"
    ) as started:
        yield started


RUNNABLE_PAGES = [p for p in PAGES if any(not b.fragment for b in page_blocks(p))]


@pytest.fixture(scope="module")
def page_runs(
    server: Server, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, subprocess.Popen[str]]]:
    """Every page's script, started at once (each in a directory and project of its own):
    most of their time is spent waiting on the server, so they wait together."""
    env = clean_env(
        server.data_dir,
        LIBFLOW_URL=server.url,
        LIBFLOW_DOCS_PYTHON=sys.executable,
        PATH=f"{Path(sys.executable).parent}:{clean_env(server.data_dir)['PATH']}",
    )
    runs = {
        page.name: subprocess.Popen(
            ["bash", "-c", page_script(page_blocks(page))],
            cwd=tmp_path_factory.mktemp(page.stem),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for page in RUNNABLE_PAGES
    }
    try:
        yield runs
    finally:
        for run in runs.values():
            if run.poll() is None:
                run.kill()
            run.communicate()


@pytest.mark.parametrize("page", RUNNABLE_PAGES, ids=lambda p: p.name)
def test_every_runnable_example_of_the_page_runs(
    page: Path, page_runs: dict[str, subprocess.Popen[str]]
) -> None:
    run = page_runs[page.name]
    stdout, stderr = run.communicate(timeout=120)
    ran = re.findall(r">>> (.*)", stderr)
    assert run.returncode == 0, (
        f"{ran[-1] if ran else page.name} failed (exit {run.returncode}):\n"
        f"--- stdout\n{stdout[-3000:]}\n--- stderr\n{stderr[-3000:]}"
    )
    assert len(ran) == sum(not b.fragment for b in page_blocks(page))


def test_fragments_are_the_exception() -> None:
    blocks = [block for page in PAGES for block in page_blocks(page)]
    fragments = [f"{b.page}:{b.line}" for b in blocks if b.fragment]
    assert len(fragments) * 2 < len(blocks), fragments


def test_the_error_page_lists_every_code_with_its_status() -> None:
    rows = re.findall(r"^\| `([A-Z_]+)` \| (\d{3}) \|", (DOCS / "errors.md").read_text(), re.M)
    assert {code: int(status) for code, status in rows} == STATUS_BY_CODE
    assert len(rows) == len(STATUS_BY_CODE)


def test_the_operations_page_names_every_setting() -> None:
    text = (DOCS / "operations.md").read_text()
    missing = [
        f"LIBFLOW_{name.upper()}"
        for name in Settings.model_fields
        if f"LIBFLOW_{name.upper()}`" not in text
    ]
    assert not missing


@pytest.mark.parametrize("page", [ROOT / "README.md", *PAGES], ids=lambda p: p.name)
def test_links_stay_inside_the_repository(page: Path) -> None:
    for target in LINK.findall(page.read_text()):
        if target.startswith(("http://", "https://", "#", "mailto:")):
            continue
        path = (page.parent / target.split("#")[0]).resolve()
        assert path.is_relative_to(ROOT), f"{page.name} links outside the repository: {target}"
        assert path.exists(), f"{page.name} links to a missing file: {target}"
    assert "shared/" not in page.read_text()


def test_the_upload_page_lists_every_file_type() -> None:
    text = (DOCS / "upload.md").read_text()
    assert [t for t in MIME_TYPES if f"`{t}`" not in text] == []
    assert [m for m in set(MIME_TYPES.values()) if f"`{m}`" not in text] == []
