"""The CLI commands built on libflow.client: files, search, run, deliveries, projects, keys."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

from tests import test_cli
from tests.test_cli import (
    API,
    Server,
    assert_one_line_failure,
    clean_env,
    http,
    libflow,
    ok_json,
    wait_until_processed,
)
from tests.webhook_helpers import event_body, standard_headers

# test_cli's fixtures: a run_server.py process of this module's own, and a project made on
# its database with the CLI.
server = test_cli.server
project = test_cli.project

Project = tuple[str, str]
PENGUINS = b"Emperor penguins breed on the sea ice in the Antarctic winter.\n"


def client(server: Server, project: Project, *args: str) -> Any:
    """``libflow ARGS`` with the server's URL and the project's key in the environment."""
    env = clean_env(server.data_dir, LIBFLOW_URL=server.url, LIBFLOW_API_KEY=project[1])
    return libflow(server.data_dir, *args, env=env)


def uploaded(server: Server, project: Project, tmp_path: Path) -> str:
    """A processed txt file uploaded with the CLI; its id."""
    source = tmp_path / "penguins.txt"
    source.write_bytes(PENGUINS)
    record = ok_json(client(server, project, "upload", "--json", "--", project[0], str(source)))
    wait_until_processed(server, project[0], project[1], len(server.files(*project)))
    return str(record["id"])


def test_files_list_prints_a_table_or_json(
    server: Server, project: Project, tmp_path: Path
) -> None:
    file_id = uploaded(server, project, tmp_path)
    table = client(server, project, "files", "list", "--", project[0])
    assert table.returncode == 0, table.stderr
    header, row = table.stdout.splitlines()
    assert header.split()[:3] == ["ID", "NAME", "SIZE"]
    assert row.split()[:3] == [file_id, "penguins.txt", str(len(PENGUINS))]
    listed = ok_json(client(server, project, "files", "list", "--output", "json", "--", project[0]))
    assert [f["id"] for f in listed] == [file_id]


def test_files_get_chunks_download_and_delete(
    server: Server, project: Project, tmp_path: Path
) -> None:
    file_id = uploaded(server, project, tmp_path)
    record = ok_json(client(server, project, "files", "get", "--json", "--", project[0], file_id))
    assert record["processing"]["status"] == "done"
    chunks = ok_json(
        client(server, project, "files", "chunks", "--json", "--", project[0], file_id)
    )
    assert [c["index"] for c in chunks] == [0] and "penguins" in chunks[0]["text"]

    target = tmp_path / "back.txt"
    args = ("files", "download", "--out", str(target), "--json", "--", project[0], file_id)
    assert ok_json(client(server, project, *args))["bytes"] == len(PENGUINS)
    assert target.read_bytes() == PENGUINS

    ok_json(client(server, project, "files", "delete", "--json", "--", project[0], file_id))
    gone = client(server, project, "files", "get", "--", project[0], file_id)
    assert "404 NOT_FOUND" in assert_one_line_failure(gone)


def test_files_reprocess_runs_processing_again(
    server: Server, project: Project, tmp_path: Path
) -> None:
    file_id = uploaded(server, project, tmp_path)
    args = ("files", "reprocess", "--json", "--", project[0], file_id)
    assert ok_json(client(server, project, *args))["id"] == file_id
    wait_until_processed(server, project[0], project[1], 1)


def test_search_prints_the_passage(server: Server, project: Project, tmp_path: Path) -> None:
    file_id = uploaded(server, project, tmp_path)
    hits = ok_json(client(server, project, "search", "--json", "--", project[0], "penguins"))
    assert hits[0]["fileId"] == file_id and "sea ice" in hits[0]["chunk"]
    table = client(server, project, "search", "--", project[0], "penguins")
    assert table.returncode == 0 and "penguins.txt" in table.stdout


def test_search_with_a_bad_filter_fails_in_one_line(server: Server, project: Project) -> None:
    refused = client(server, project, "search", "--filter", "novalue", "--", project[0], "x")
    assert "KEY=VALUE" in assert_one_line_failure(refused)


def test_run_prints_the_outputs_and_fails_when_the_run_does(
    server: Server, project: Project
) -> None:
    greeter = {
        "nodes": [
            {"id": "start", "type": "event", "event": "run"},
            {
                "id": "out",
                "type": "set_output",
                "name": "greeting",
                "value": "Hi {{ inputs.name }}",
            },
        ],
        "edges": [{"from": "start", "to": "out"}],
    }
    failing = {
        "nodes": [
            {"id": "start", "type": "event", "event": "run"},
            {"id": "boom", "type": "fail", "message": "no luck today", "statusCode": 422},
        ],
        "edges": [{"from": "start", "to": "boom"}],
    }
    ok_id, failing_id = (_workflow(server, project, d) for d in (greeter, failing))
    ran = client(server, project, "run", "--input", "name=Ada", "--", project[0], ok_id)
    assert (ran.returncode, ran.stdout) == (0, 'greeting = "Hi Ada"\n')
    failed = client(server, project, "run", "--", project[0], failing_id)
    assert "no luck today" in assert_one_line_failure(failed)


def test_deliveries_list_and_replay(server: Server, project: Project) -> None:
    echo = {
        "nodes": [
            {"id": "start", "type": "event", "event": "webhook"},
            {"id": "out", "type": "set_output", "name": "payload", "value": "{{ inputs.payload }}"},
        ],
        "edges": [{"from": "start", "to": "out"}],
    }
    workflow_id = _workflow(server, project, echo)
    hook = ok_json(
        client(server, project, "webhooks", "create", "--json", "--", project[0], workflow_id)
    )
    body = event_body(n=1)
    reply = http_post(
        f"{server.url}/webhooks/{hook['webhookId']}", body, standard_headers(hook["secret"], body)
    )
    assert reply == 200
    deadline = time.monotonic() + 30
    while True:
        listed = ok_json(
            client(
                server, project, "deliveries", "list", "--json", "--", project[0], hook["webhookId"]
            )
        )
        if listed and listed[0]["status"] == "succeeded":
            break
        assert time.monotonic() < deadline, listed
        time.sleep(0.1)
    args = (
        "deliveries",
        "replay",
        "--json",
        "--",
        project[0],
        hook["webhookId"],
        listed[0]["deliveryId"],
    )
    replayed = ok_json(client(server, project, *args))
    assert replayed["trigger"] == "replay" and replayed["status"] == "queued"


def test_projects_list_and_keys_rotate(server: Server, project: Project) -> None:
    listed = ok_json(libflow(server.data_dir, "projects", "list", "--json"))
    assert project[0] in {p["projectId"] for p in listed}
    keys = ok_json(libflow(server.data_dir, "keys", "list", "--json", "--", project[0]))
    rotated = ok_json(libflow(server.data_dir, "keys", "rotate", "--json", "--", keys[0]["keyId"]))
    assert rotated["projectId"] == project[0] and rotated["revoked"] == keys[0]["keyId"]
    files_url = f"{server.url}{API}/projects/{project[0]}/library/files"
    assert http("GET", files_url, project[1]).status == 401
    assert http("GET", files_url, rotated["apiKey"]).status == 200
    again = libflow(server.data_dir, "keys", "rotate", "--", keys[0]["keyId"])
    assert "revoked" in assert_one_line_failure(again)


def _workflow(server: Server, project: Project, definition: dict[str, Any]) -> str:
    reply = http(
        "POST",
        f"{server.url}{API}/projects/{project[0]}/workflows",
        project[1],
        {"name": "cli", "definition": definition},
    )
    assert reply.status == 201, reply.body
    return str(reply.json()["workflowId"])


def http_post(url: str, body: bytes, headers: dict[str, str]) -> int:
    """A webhook delivery as its sender would POST it; the status."""
    request = urllib.request.Request(url, data=body, method="POST", headers=headers)
    with urllib.request.urlopen(request, timeout=30) as response:
        return int(response.status)


def test_output_json_of_files_list_is_one_array(server: Server, project: Project) -> None:
    listed = client(server, project, "files", "list", "--json", "--", project[0])
    assert json.loads(listed.stdout) == []
