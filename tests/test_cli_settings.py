"""The CLI finds the server and the database through the server's own settings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from libflow.cli.server_url import default_server_url
from tests.test_cli import ROOT, clean_env, ok_json


def _libflow(cwd: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "libflow", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _no_settings() -> dict[str, str]:
    """The caller's environment without any LIBFLOW_* variable."""
    return {k: v for k, v in os.environ.items() if not k.startswith("LIBFLOW_")}


def test_projects_create_shell_prints_exports_a_shell_can_eval(tmp_path: Path) -> None:
    env = clean_env(tmp_path, LIBFLOW_PORT="9871")
    script = (
        f'eval "$({sys.executable} -m libflow projects create "it\'s mine" --shell)"\n'
        'printf \'%s\\n\' "$LIBFLOW_URL" "$LIBFLOW_PROJECT_ID" "$LIBFLOW_API_KEY"\n'
    )
    result = subprocess.run(
        ["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    url, project_id, api_key = result.stdout.split()
    assert url == "http://127.0.0.1:9871"
    listed = ok_json(_libflow(ROOT, "keys", "list", "--json", "--", project_id, env=env))
    assert api_key.startswith(listed[0]["prefix"])


def test_shell_exports_keep_an_explicit_libflow_url(tmp_path: Path) -> None:
    env = clean_env(tmp_path, LIBFLOW_URL="https://libflow.example.com")
    result = _libflow(ROOT, "projects", "create", "demo", "--shell", env=env)
    assert result.returncode == 0, result.stderr
    assert "export LIBFLOW_URL=https://libflow.example.com\n" in result.stdout


def test_shell_and_json_cannot_be_asked_together(tmp_path: Path) -> None:
    result = _libflow(ROOT, "projects", "create", "x", "--shell", "--json", env=clean_env(tmp_path))
    assert result.returncode == 2
    assert "not allowed with" in result.stderr


def test_admin_command_refuses_to_create_a_database_in_the_wrong_directory(
    tmp_path: Path,
) -> None:
    result = _libflow(tmp_path, "projects", "create", "demo", "--json", env=_no_settings())
    assert result.returncode == 1
    assert result.stdout == ""
    message = result.stderr.strip()
    assert str(tmp_path / "data" / "libflow.sqlite3") in message
    assert "LIBFLOW_DATA_DIR" in message and "Traceback" not in message
    assert not (tmp_path / "data").exists()


def test_admin_command_uses_the_default_database_where_the_server_made_it(
    tmp_path: Path,
) -> None:
    made = _libflow(
        tmp_path,
        "projects",
        "create",
        "first",
        "--json",
        env={**_no_settings(), "LIBFLOW_DATA_DIR": "data"},
    )
    assert made.returncode == 0, made.stderr
    again = _libflow(tmp_path, "projects", "create", "second", "--json", env=_no_settings())
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["projectId"] != json.loads(made.stdout)["projectId"]


@pytest.mark.parametrize(
    ("variables", "url"),
    [
        ({}, "http://127.0.0.1:8080"),
        ({"LIBFLOW_PORT": "9000"}, "http://127.0.0.1:9000"),
        ({"LIBFLOW_HOST": "0.0.0.0", "LIBFLOW_PORT": "9001"}, "http://127.0.0.1:9001"),
        ({"LIBFLOW_PUBLIC_BASE_URL": "https://api.example.com/"}, "https://api.example.com"),
        ({"LIBFLOW_URL": "http://10.0.0.5:8080/", "LIBFLOW_PORT": "9"}, "http://10.0.0.5:8080"),
    ],
)
def test_client_commands_reach_the_server_the_settings_name(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], url: str
) -> None:
    for name in list(os.environ):
        if name.startswith("LIBFLOW_"):
            monkeypatch.delenv(name)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert default_server_url() == url
