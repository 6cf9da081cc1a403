"""``libflow webhooks create``, run as a real process against a real server process."""

from __future__ import annotations

import re
from typing import Any

from tests import test_cli
from tests.test_cli import API, Server, assert_one_line_failure, http, libflow, ok_json

# test_cli's fixtures: a run_server.py process of this module's own, and a project made on
# its database with the CLI.
server = test_cli.server
project = test_cli.project

Project = tuple[str, str]


def hooked() -> dict[str, Any]:
    """A definition started by the events these tests' webhooks use (and by ``run``)."""
    events = ("run", "webhook", "push")
    return {
        "nodes": [
            *({"id": f"on_{e}", "type": "event", "event": e} for e in events),
            *(
                {"id": f"out_{e}", "type": "set_output", "name": "event", "value": e}
                for e in events
            ),
        ],
        "edges": [{"from": f"on_{e}", "to": f"out_{e}"} for e in events],
    }


def new_workflow(server: Server, project: Project) -> str:
    """A workflow made through the API; its id."""
    project_id, key = project
    body = {"name": "hooked", "definition": hooked()}
    reply = http("POST", f"{server.url}{API}/projects/{project_id}/workflows", key, body)
    assert reply.status == 201, reply.body
    workflow_id: str = reply.json()["workflowId"]
    return workflow_id


def create(server: Server, project: Project, workflow_id: str, *options: str) -> Any:
    """``libflow webhooks create`` with --url and --api-key; the process result."""
    project_id, key = project
    return libflow(
        server.data_dir,
        *("webhooks", "create", "--url", server.url, "--api-key", key, *options),
        *("--", project_id, workflow_id),
    )


def get_webhook(server: Server, project: Project, webhook_id: str) -> dict[str, Any]:
    """The webhook as the API returns it."""
    project_id, key = project
    reply = http("GET", f"{server.url}{API}/projects/{project_id}/webhooks/{webhook_id}", key)
    assert reply.status == 200, reply.body
    webhook: dict[str, Any] = reply.json()
    return webhook


def test_create_with_the_server_defaults_prints_url_and_secret(
    server: Server, project: Project
) -> None:
    workflow_id = new_workflow(server, project)

    result = create(server, project, workflow_id)

    assert result.returncode == 0, result.stderr
    match = re.fullmatch(
        r"webhook (\S+) \(standard, event 'webhook'\)\n"
        r"url:    (\S+)\n"
        r"secret: (\S+)  \(shown once; keep it\)\n",
        result.stdout,
    )
    assert match is not None, result.stdout
    webhook_id, url, secret = match.groups()
    assert url == f"{server.url}/webhooks/{webhook_id}"
    webhook = get_webhook(server, project, webhook_id)
    assert webhook["workflowId"] == workflow_id
    assert (webhook["url"], webhook["scheme"], webhook["event"]) == (url, "standard", "webhook")
    assert "secret" not in webhook
    assert secret not in str(webhook)


def test_create_with_scheme_event_and_json_prints_the_api_record(
    server: Server, project: Project
) -> None:
    workflow_id = new_workflow(server, project)

    created = ok_json(
        create(server, project, workflow_id, "--scheme", "github", "--event", "push", "--json")
    )

    assert set(created) == {
        *("webhookId", "url", "secret", "scheme", "event"),
        *("workflowId", "createdDate", "previousSecretExpiresDate"),
    }
    assert (created["scheme"], created["event"]) == ("github", "push")
    assert created["workflowId"] == workflow_id
    assert created["secret"]
    assert created["previousSecretExpiresDate"] is None
    webhook = get_webhook(server, project, created["webhookId"])
    assert webhook == {k: v for k, v in created.items() if k in webhook}
    assert (webhook["scheme"], webhook["event"]) == ("github", "push")


def test_create_for_an_unknown_workflow_fails_in_one_line(server: Server, project: Project) -> None:
    result = create(server, project, "nosuchworkflow")
    assert result.returncode == 1
    assert result.stdout == ""
    assert "404 NOT_FOUND" in assert_one_line_failure(result)


def test_create_with_an_unknown_scheme_is_refused_by_argparse(
    server: Server, project: Project
) -> None:
    result = create(server, project, "anyworkflow", "--scheme", "gitlab")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "invalid choice: 'gitlab'" in result.stderr


def test_create_without_an_api_key_fails_in_one_line(server: Server) -> None:
    result = libflow(
        server.data_dir, "webhooks", "create", "--url", server.url, "--", "someproject", "someflow"
    )
    assert result.returncode == 1
    assert "API key" in assert_one_line_failure(result)
