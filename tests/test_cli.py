"""The ``libflow`` command, run as a real process against a real server process."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import unused_port

ROOT = Path(__file__).resolve().parents[1]
API = "/api/publicv1"


def clean_env(data_dir: Path, **extra: str) -> dict[str, str]:
    """The caller's environment without its LIBFLOW_* settings, with this data dir."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("LIBFLOW_") or k == "LIBFLOW_MODEL_CACHE_DIR"
    }
    env["LIBFLOW_DATA_DIR"] = str(data_dir)
    env.update(extra)
    return env


def libflow(
    data_dir: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m libflow ARGS`` as a user would.

    Ids are URL-safe base64 and one in 64 starts with ``-``, which argparse takes for an
    option: callers put options first and ids after ``--``.
    """
    return subprocess.run(
        [sys.executable, "-m", "libflow", *args],
        cwd=ROOT,
        env=env or clean_env(data_dir),
        capture_output=True,
        text=True,
        timeout=120,
    )


def ok_json(result: subprocess.CompletedProcess[str]) -> Any:
    """The JSON a successful command printed."""
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def assert_one_line_failure(result: subprocess.CompletedProcess[str]) -> str:
    """A failed command says why in one line, never with a traceback."""
    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("libflow: ")
    return lines[0]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


@dataclass
class Reply:
    """One HTTP response, read whole."""

    status: int
    headers: Message
    body: bytes

    def json(self) -> Any:
        """The body as JSON."""
        return json.loads(self.body)


def http(method: str, url: str, api_key: str | None = None, body: Any = None) -> Reply:
    """One real HTTP request; redirects are returned, not followed."""
    headers = {"Authorization": api_key} if api_key else {}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with _OPENER.open(request, timeout=30) as response:
            return Reply(response.status, response.headers, response.read())
    except urllib.error.HTTPError as err:
        with err:
            return Reply(err.code, err.headers, err.read())


@dataclass
class Server:
    """A ``run_server.py`` process and the data dir it shares with the CLI."""

    url: str
    data_dir: Path
    log: Path

    def files(self, project: str, api_key: str) -> list[dict[str, Any]]:
        """The project's file list."""
        reply = http("GET", f"{self.url}{API}/projects/{project}/library/files", api_key)
        assert reply.status == 200, reply.body
        files: list[dict[str, Any]] = reply.json()
        return files


@contextlib.contextmanager
def running_server(data_dir: Path, **env: str) -> Iterator[Server]:
    """``python run_server.py --port P --data-dir D`` with these settings, stopped on exit."""
    log = data_dir.parent / f"{data_dir.name}.log"
    port = unused_port()
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "run_server.py", "--port", str(port), "--data-dir", str(data_dir)],
            cwd=ROOT,
            env=clean_env(data_dir, **env),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, f"server exited: {log.read_text()}"
            try:
                if http("GET", f"{url}/healthz").status == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"server did not start: {log.read_text()}"
            time.sleep(0.1)
        yield Server(url, data_dir, log)
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """``python run_server.py --port P --data-dir D`` on an empty data dir, as in the README."""
    # Keys are cached for a few seconds by default; a revocation must show at once here.
    with running_server(
        tmp_path_factory.mktemp("libflow-data"), LIBFLOW_API_KEY_CACHE_SECONDS="0"
    ) as started:
        yield started


@pytest.fixture
def project(server: Server) -> tuple[str, str]:
    """A project made with the CLI on the server's database."""
    created = ok_json(libflow(server.data_dir, "projects", "create", "demo", "--json"))
    return created["projectId"], created["apiKey"]


def wait_until_processed(server: Server, project: str, api_key: str, count: int) -> list[Any]:
    """Poll the list until ``count`` files are there and none is updating."""
    deadline = time.monotonic() + 30
    while True:
        files = server.files(project, api_key)
        if len(files) == count and all(f["updating"] is None for f in files):
            return files
        assert time.monotonic() < deadline, files
        time.sleep(0.1)


def test_server_on_an_empty_data_dir_says_how_to_create_a_project(server: Server) -> None:
    assert "libflow projects create NAME --json" in server.log.read_text()


def test_server_runs_on_uvloop_by_default(server: Server) -> None:
    assert '"event loop: uvloop"' in server.log.read_text()


def test_server_runs_on_the_standard_event_loop_when_asked(tmp_path: Path) -> None:
    with running_server(tmp_path / "data", LIBFLOW_EVENT_LOOP="asyncio") as started:
        created = ok_json(libflow(started.data_dir, "projects", "create", "demo", "--json"))
        assert started.files(created["projectId"], created["apiKey"]) == []
        assert '"event loop: asyncio"' in started.log.read_text()


def test_projects_create_prints_project_id_and_api_key(tmp_path: Path) -> None:
    created = ok_json(libflow(tmp_path, "projects", "create", "My project", "--json"))
    assert set(created) == {"projectId", "apiKey"}
    assert all(isinstance(v, str) and v for v in created.values())
    assert (tmp_path / "libflow.sqlite3").is_file()


def test_admin_command_with_an_unreachable_database_fails_in_one_line(tmp_path: Path) -> None:
    database_url = f"postgres://admin:s3cret@127.0.0.1:{unused_port()}/libflow"
    env = clean_env(tmp_path, LIBFLOW_DATABASE_URL=database_url)
    result = libflow(tmp_path, "projects", "create", "demo", "--json", env=env)
    line = assert_one_line_failure(result)
    assert "database" in line
    assert "s3cret" not in line


def test_console_script_is_the_same_command(tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("libflow")
    result = subprocess.run(
        [str(script), "projects", "create", "via script", "--json"],
        env=clean_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert set(ok_json(result)) == {"projectId", "apiKey"}


def test_new_api_key_works_against_the_server(server: Server, project: tuple[str, str]) -> None:
    project_id, _ = project
    created = ok_json(
        libflow(
            server.data_dir,
            *("keys", "create", "--name", "Ann", "--email", "ann@example.com", "--json"),
            *("--", project_id),
        )
    )
    assert created["projectId"] == project_id
    assert created["keyId"] and created["apiKey"]
    assert server.files(project_id, created["apiKey"]) == []


def test_keys_create_for_an_unknown_project_fails_in_one_line(server: Server) -> None:
    result = libflow(server.data_dir, "keys", "create", "nosuchproject", "--json")
    assert "nosuchproject" in assert_one_line_failure(result)


def test_keys_list_for_an_unknown_project_fails_in_one_line(server: Server) -> None:
    result = libflow(server.data_dir, "keys", "list", "nosuchproject")
    assert "nosuchproject" in assert_one_line_failure(result)


def test_revoked_key_gets_401(server: Server, project: tuple[str, str]) -> None:
    project_id, _ = project
    key = ok_json(libflow(server.data_dir, "keys", "create", "--json", "--", project_id))
    files_url = f"{server.url}{API}/projects/{project_id}/library/files"
    assert http("GET", files_url, key["apiKey"]).status == 200

    revoked = ok_json(libflow(server.data_dir, "keys", "revoke", "--json", "--", key["keyId"]))
    assert revoked == {"keyId": key["keyId"], "revoked": True}

    reply = http("GET", files_url, key["apiKey"])
    assert reply.status == 401
    assert reply.json()["error"] == "UNAUTHORIZED"


def test_revoking_an_unknown_key_fails_in_one_line(server: Server) -> None:
    result = libflow(server.data_dir, "keys", "revoke", "nosuchkey")
    assert "nosuchkey" in assert_one_line_failure(result)


def test_keys_list_shows_every_key_and_which_are_revoked(
    server: Server, project: tuple[str, str]
) -> None:
    project_id, first_secret = project
    second = ok_json(
        libflow(server.data_dir, "keys", "create", "--name", "ci", "--json", "--", project_id)
    )
    ok_json(libflow(server.data_dir, "keys", "revoke", "--json", "--", second["keyId"]))

    rows = ok_json(libflow(server.data_dir, "keys", "list", "--json", "--", project_id))
    assert [(r["name"], r["revoked"]) for r in rows] == [("default", False), ("ci", True)]
    assert rows[1]["keyId"] == second["keyId"]
    assert first_secret.startswith(rows[0]["prefix"])
    listing = json.dumps(rows)
    assert first_secret not in listing
    assert second["apiKey"] not in listing

    text = libflow(server.data_dir, "keys", "list", "--", project_id)
    assert text.returncode == 0, text.stderr
    assert f"{second['keyId']}  {rows[1]['prefix']}...  ci  (revoked)" in text.stdout


def test_upload_readme_flow(server: Server, project: tuple[str, str], tmp_path: Path) -> None:
    project_id, api_key = project
    folder = http(
        "POST",
        f"{server.url}{API}/projects/{project_id}/library/dirs",
        api_key,
        {"name": "reports"},
    )
    assert folder.status == 201, folder.body
    folder_id = folder.json()["id"]
    notes = tmp_path / "notes.txt"
    notes.write_text("Quarterly numbers are up.\n" * 2000)
    table = tmp_path / "table.csv"
    table.write_bytes(b"a,b\n1,2\n")

    result = libflow(
        server.data_dir,
        *("upload", f"--dir={folder_id}", "--url", server.url, "--api-key", api_key),
        *("--", project_id, str(notes), str(table)),
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout.splitlines()[0].startswith("notes.txt: ")
    assert f"({notes.stat().st_size} bytes)" in result.stdout

    listed = {f["name"]: f for f in wait_until_processed(server, project_id, api_key, 2)}
    for path in (notes, table):
        record = listed[path.name]
        assert record["size"] == path.stat().st_size
        assert record["updating"] is None
        assert record["dir"] == folder_id
        download = http(
            "GET",
            f"{server.url}{API}/projects/{project_id}/library/files/{record['id']}/download",
            api_key,
        )
        assert download.status == 302
        got = http("GET", download.headers["Location"])
        assert got.status == 200
        assert got.body == path.read_bytes()


def test_upload_reads_url_and_key_from_the_environment(
    server: Server, project: tuple[str, str], tmp_path: Path
) -> None:
    project_id, api_key = project
    notes = tmp_path / "env.txt"
    notes.write_text("from the environment")
    env = clean_env(server.data_dir, LIBFLOW_URL=server.url, LIBFLOW_API_KEY=api_key)

    record = ok_json(
        libflow(server.data_dir, "upload", "--json", "--", project_id, str(notes), env=env)
    )
    assert record["name"] == "env.txt"
    assert record["size"] == len("from the environment")
    assert record["dir"] == "root"


def test_upload_of_a_missing_file_fails_in_one_line(
    server: Server, project: tuple[str, str], tmp_path: Path
) -> None:
    project_id, api_key = project
    missing = tmp_path / "missing.pdf"
    result = libflow(
        server.data_dir,
        *("upload", "--url", server.url, "--api-key", api_key, "--", project_id, str(missing)),
    )
    assert "missing.pdf" in assert_one_line_failure(result)
    assert server.files(project_id, api_key) == []


def test_upload_with_a_bad_key_fails_in_one_line(
    server: Server, project: tuple[str, str], tmp_path: Path
) -> None:
    project_id, _ = project
    notes = tmp_path / "notes.txt"
    notes.write_text("hello")
    result = libflow(
        server.data_dir,
        *("upload", "--url", server.url, "--api-key", "lf_wrong", "--", project_id, str(notes)),
    )
    line = assert_one_line_failure(result)
    assert "401" in line
    assert "UNAUTHORIZED" in line


def test_upload_without_a_key_fails_in_one_line(
    server: Server, project: tuple[str, str], tmp_path: Path
) -> None:
    project_id, _ = project
    notes = tmp_path / "notes.txt"
    notes.write_text("hello")
    result = libflow(server.data_dir, "upload", "--url", server.url, "--", project_id, str(notes))
    assert "API key" in assert_one_line_failure(result)


def test_upload_to_an_unreachable_server_fails_in_one_line(
    project: tuple[str, str], server: Server, tmp_path: Path
) -> None:
    project_id, api_key = project
    notes = tmp_path / "notes.txt"
    notes.write_text("hello")
    closed = f"http://127.0.0.1:{unused_port()}"
    result = libflow(
        server.data_dir,
        *("upload", "--url", closed, "--api-key", api_key, "--", project_id, str(notes)),
    )
    assert "cannot reach the server" in assert_one_line_failure(result)


def test_upload_of_an_unsupported_file_type_fails_in_one_line(
    server: Server, project: tuple[str, str], tmp_path: Path
) -> None:
    project_id, api_key = project
    program = tmp_path / "tool.exe"
    program.write_bytes(b"MZ\x90\x00")
    result = libflow(
        server.data_dir,
        *("upload", "--url", server.url, "--api-key", api_key, "--", project_id, str(program)),
    )
    assert "UNSUPPORTED_FILE_TYPE" in assert_one_line_failure(result)


def test_a_refused_body_is_explained_field_by_field(
    server: Server, project: tuple[str, str], tmp_path: Path
) -> None:
    project_id, api_key = project
    nameless = tmp_path / "README"  # no extension: no file type to send
    nameless.write_bytes(b"notes")
    result = libflow(
        server.data_dir,
        *("upload", "--url", server.url, "--api-key", api_key, "--", project_id, str(nameless)),
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr
    first, *details = result.stderr.strip().splitlines()
    assert first.startswith("libflow: ") and "400 VALIDATION_ERROR" in first
    assert len(details) == 1 and details[0].startswith("  fileType: "), result.stderr


class _ProxyDown(BaseHTTPRequestHandler):
    """What a reverse proxy answers while the server behind it is down."""

    def do_POST(self) -> None:
        body = b"<html><body><h1>502 Bad Gateway</h1></body></html>"
        self.send_response(502)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Keep the test output quiet."""


@pytest.fixture
def proxy_down() -> Iterator[str]:
    """A real HTTP server answering every request with an HTML 502 page."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _ProxyDown)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def test_upload_through_a_failing_proxy_fails_in_one_line(proxy_down: str, tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("hello")
    result = libflow(
        tmp_path, "upload", "someproject", str(notes), "--url", proxy_down, "--api-key", "lf_x"
    )
    assert "502" in assert_one_line_failure(result)


def test_upload_waits_out_the_rate_limit_instead_of_failing(tmp_path: Path) -> None:
    # One request a second, none saved up: the second file's calls meet 429s.
    limited = dict(LIBFLOW_RATE_LIMIT="1", LIBFLOW_RATE_LIMIT_BURST="1", LIBFLOW_EMBEDDER="none")
    with running_server(tmp_path / "data", **limited) as started:
        created = ok_json(libflow(started.data_dir, "projects", "create", "demo", "--json"))
        paths = []
        for name in ("a.txt", "b.txt"):
            paths.append(tmp_path / name)
            paths[-1].write_text(f"file {name}\n")

        result = libflow(
            started.data_dir,
            *("upload", "--url", started.url, "--api-key", created["apiKey"]),
            *("--", created["projectId"], *map(str, paths)),
        )

    assert result.returncode == 0, result.stderr
    assert [line.split(":")[0] for line in result.stdout.splitlines()] == ["a.txt", "b.txt"]
