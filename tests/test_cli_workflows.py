"""``libflow workflows push``, run as a real process against a real server process."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests import test_cli
from tests.test_cli import API, Server, assert_one_line_failure, clean_env, http, libflow, ok_json

# test_cli's fixtures: a run_server.py process of this module's own, and a project made on
# its database with the CLI.
server = test_cli.server
project = test_cli.project

Project = tuple[str, str]


def definition(greeting: str = "Hello") -> dict[str, Any]:
    """A small valid definition whose run outputs ``{greeting: "<greeting>, <name>!"}``."""
    return {
        "nodes": [
            {"id": "start", "type": "event", "event": "run"},
            {"id": "who", "type": "input", "name": "name", "valueType": "string"},
            {"id": "greet", "type": "template", "template": greeting + ", {{ inputs.name }}!"},
            {
                "id": "out",
                "type": "set_output",
                "name": "greeting",
                "value": "{{ nodes.greet.text }}",
            },
        ],
        "edges": [{"from": "start", "to": "greet"}, {"from": "greet", "to": "out"}],
    }


def write_json(path: Path, data: Any) -> Path:
    """``data`` written as JSON to ``path``."""
    path.write_text(json.dumps(data))
    return path


def push(server: Server, project: Project, path: Path, *options: str) -> Any:
    """``libflow workflows push`` with --url and --api-key; the process result."""
    project_id, key = project
    return libflow(
        server.data_dir,
        *("workflows", "push", "--url", server.url, "--api-key", key, *options),
        *("--", project_id, str(path)),
    )


def get_workflow(server: Server, project: Project, workflow_id: str) -> dict[str, Any]:
    """The workflow as the API returns it."""
    project_id, key = project
    reply = http("GET", f"{server.url}{API}/projects/{project_id}/workflows/{workflow_id}", key)
    assert reply.status == 200, reply.body
    workflow: dict[str, Any] = reply.json()
    return workflow


def runsync(server: Server, project: Project, workflow_id: str, name: str) -> dict[str, Any]:
    """The outputs of a run of the latest version."""
    project_id, key = project
    url = f"{server.url}{API}/projects/{project_id}/workflows/{workflow_id}/runsync"
    reply = http("POST", url, key, {"inputs": {"name": name}})
    assert reply.status == 200, reply.body
    outputs: dict[str, Any] = reply.json()["result"]["outputs"]
    return outputs


def test_push_creates_a_workflow_named_after_the_file(
    server: Server, project: Project, tmp_path: Path
) -> None:
    path = write_json(tmp_path / "greeter.json", definition())
    pushed = ok_json(push(server, project, path, "--json"))
    assert set(pushed) == {"workflowId", "version"}
    assert pushed["version"] == "1"
    workflow = get_workflow(server, project, pushed["workflowId"])
    assert workflow["name"] == "greeter"
    assert workflow["definition"] == definition()
    assert runsync(server, project, pushed["workflowId"], "Ada") == {"greeting": "Hello, Ada!"}


def test_push_with_name_names_the_workflow(
    server: Server, project: Project, tmp_path: Path
) -> None:
    path = write_json(tmp_path / "greeter.json", definition())
    pushed = ok_json(push(server, project, path, "--name", "Front desk", "--json"))
    assert get_workflow(server, project, pushed["workflowId"])["name"] == "Front desk"


def test_push_of_a_file_with_name_and_definition(
    server: Server, project: Project, tmp_path: Path
) -> None:
    path = write_json(
        tmp_path / "wrapped.json", {"name": "Wrapped greeter", "definition": definition("Hi")}
    )
    pushed = ok_json(push(server, project, path, "--json"))
    workflow = get_workflow(server, project, pushed["workflowId"])
    assert workflow["name"] == "Wrapped greeter"
    assert workflow["definition"] == definition("Hi")


def test_push_with_workflow_publishes_the_next_version(
    server: Server, project: Project, tmp_path: Path
) -> None:
    first = write_json(tmp_path / "greeter.json", definition())
    created = ok_json(push(server, project, first, "--json"))
    second = write_json(tmp_path / "greeter-v2.json", definition("Welcome"))

    pushed = ok_json(push(server, project, second, f"--workflow={created['workflowId']}", "--json"))

    assert pushed == {"workflowId": created["workflowId"], "version": "2"}
    workflow = get_workflow(server, project, created["workflowId"])
    assert [v["version"] for v in workflow["versions"]] == ["1", "2"]
    assert runsync(server, project, created["workflowId"], "Bo") == {"greeting": "Welcome, Bo!"}


def test_push_reads_url_and_key_from_the_environment(
    server: Server, project: Project, tmp_path: Path
) -> None:
    project_id, key = project
    path = write_json(tmp_path / "from-env.json", definition())
    env = clean_env(server.data_dir, LIBFLOW_URL=server.url, LIBFLOW_API_KEY=key)
    result = libflow(server.data_dir, "workflows", "push", "--", project_id, str(path), env=env)
    assert result.returncode == 0, result.stderr
    match = re.fullmatch(r"workflow (\S+): version 1 created", result.stdout.strip())
    assert match is not None, result.stdout
    workflow_id = match.group(1)
    assert get_workflow(server, project, workflow_id)["name"] == "from-env"


def test_push_of_an_invalid_workflow_prints_each_problem_and_exits_1(
    server: Server, project: Project, tmp_path: Path
) -> None:
    bad = definition()
    bad["nodes"].append({"id": "mystery", "type": "teleport"})
    bad["edges"].append({"from": "out", "to": "ghost"})
    path = write_json(tmp_path / "bad.json", bad)

    result = push(server, project, path)

    assert result.returncode == 1
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    first, *details = result.stderr.strip().splitlines()
    assert first.startswith("libflow: ")
    assert "400 INVALID_WORKFLOW" in first
    assert [line.strip() for line in details] == [
        "mystery: unknown node type 'teleport'",
        "out: edge out -> ghost refers to unknown node 'ghost'",
    ]
    project_id, key = project
    reply = http("GET", f"{server.url}{API}/projects/{project_id}/workflows", key)
    assert "bad" not in [w["name"] for w in reply.json()]


def test_push_to_an_unknown_workflow_fails_in_one_line(
    server: Server, project: Project, tmp_path: Path
) -> None:
    path = write_json(tmp_path / "greeter.json", definition())
    result = push(server, project, path, "--workflow=nosuchworkflow")
    line = assert_one_line_failure(result)
    assert "404 NOT_FOUND" in line


def test_push_of_a_file_that_is_not_json_fails_in_one_line(
    server: Server, project: Project, tmp_path: Path
) -> None:
    path = tmp_path / "broken.json"
    path.write_text("{nodes: [")
    line = assert_one_line_failure(push(server, project, path))
    assert "broken.json" in line
    assert "not a JSON file" in line


def test_push_without_an_api_key_fails_in_one_line(server: Server, tmp_path: Path) -> None:
    path = write_json(tmp_path / "greeter.json", definition())
    result = libflow(
        server.data_dir, "workflows", "push", "--url", server.url, "--", "someproject", str(path)
    )
    assert "API key" in assert_one_line_failure(result)
