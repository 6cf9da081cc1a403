"""Helpers of the workflow and webhook tests: definitions, calls and run records."""

from __future__ import annotations

import itertools
from typing import Any

from aiohttp import ClientResponse

from tests.conftest import Api

API = "/api/publicv1"

# The example of DESIGN.md section 7, as written there.
SPEC_EXAMPLE: dict[str, Any] = {
    "timeoutSeconds": 30,
    "nodes": [
        {"id": "start", "type": "event", "event": "run"},
        {"id": "who", "type": "input", "name": "name", "valueType": "string", "required": True},
        {"id": "greet", "type": "template", "template": "Hello, {{ inputs.name }}!"},
        {"id": "out", "type": "set_output", "name": "greeting", "value": "{{ nodes.greet.text }}"},
    ],
    "edges": [{"from": "start", "to": "greet"}, {"from": "greet", "to": "out"}],
}


def chain(*nodes: dict[str, Any], timeout: float = 30, event: str = "run") -> dict[str, Any]:
    """A definition: an event node, then ``nodes`` one after the other."""
    all_nodes = [{"id": "start", "type": "event", "event": event}, *nodes]
    edges = [{"from": a["id"], "to": b["id"]} for a, b in itertools.pairwise(all_nodes)]
    return {"timeoutSeconds": timeout, "nodes": all_nodes, "edges": edges}


def output(name: str, value: Any, node_id: str | None = None) -> dict[str, Any]:
    """A set_output node."""
    return {"id": node_id or f"out_{name}", "type": "set_output", "name": name, "value": value}


def version_marker(version: str) -> dict[str, Any]:
    """A definition whose run outputs ``{"version": version}``."""
    return chain(output("version", version))


def workflows_url(project_id: str, path: str = "") -> str:
    """A path under a project's workflows."""
    return f"{API}/projects/{project_id}/workflows{path}"


async def call(api: Api, method: str, path: str, **kwargs: Any) -> ClientResponse:
    """Call a workflow route of the api's project with its key."""
    headers = {**api.headers, **kwargs.pop("headers", {})}
    return await api.client.request(
        method, workflows_url(api.project_id, path), headers=headers, **kwargs
    )


async def ok_json(response: ClientResponse, status: int = 200) -> Any:
    """The JSON body of a response that must have ``status``."""
    text = await response.text()
    assert response.status == status, text
    return await response.json()


async def create(api: Api, definition: dict[str, Any], name: str = "flow") -> dict[str, Any]:
    """Create a workflow; its 201 body."""
    response = await call(api, "POST", "", json={"name": name, "definition": definition})
    created: dict[str, Any] = await ok_json(response, 201)
    return created


async def publish(api: Api, workflow_id: str, definition: dict[str, Any]) -> dict[str, Any]:
    """Publish a version; its 201 body."""
    response = await call(api, "POST", f"/{workflow_id}/versions", json={"definition": definition})
    published: dict[str, Any] = await ok_json(response, 201)
    return published


async def runsync(api: Api, workflow_id: str, **body: Any) -> tuple[int, dict[str, Any]]:
    """Run a workflow synchronously; (HTTP status, body)."""
    response = await call(api, "POST", f"/{workflow_id}/runsync", json=body)
    answer: dict[str, Any] = await response.json()
    return response.status, answer


async def run_definition(
    api: Api, definition: dict[str, Any], **body: Any
) -> tuple[int, dict[str, Any]]:
    """Create a workflow of ``definition`` and run it once."""
    created = await create(api, definition)
    return await runsync(api, created["workflowId"], **body)


async def runs_of(api: Api, workflow_id: str) -> list[dict[str, Any]]:
    """The workflow's run records, newest first."""
    runs: list[dict[str, Any]] = await ok_json(await call(api, "GET", f"/{workflow_id}/runs"))
    return runs


async def get_run(api: Api, run_id: str) -> dict[str, Any]:
    """One run record."""
    response = await api.client.get(
        f"{API}/projects/{api.project_id}/runs/{run_id}", headers=api.headers
    )
    run: dict[str, Any] = await ok_json(response)
    return run


def mapper(
    workflow_id: str, items: Any, concurrency: int = 4, *, timeout: float = 30
) -> dict[str, Any]:
    """A workflow whose map node runs ``workflow_id`` per item and outputs the results."""
    node = {
        "id": "each",
        "type": "map",
        "items": items,
        "workflowId": workflow_id,
        "concurrency": concurrency,
    }
    return chain(node, output("results", "{{ nodes.each.results }}"), timeout=timeout)


async def nested_maps(api: Api, leaf: dict[str, Any], *counts: int, timeout: float = 30) -> str:
    """Maps of maps down to ``leaf``: the outermost (of ``timeout`` seconds) runs
    ``counts[0]`` items at once, each a map of ``counts[1]`` items at once, and so on. The
    outermost workflow's id."""
    target = (await create(api, leaf, name="leaf"))["workflowId"]
    for depth, count in enumerate(reversed(counts)):
        items = f"{{{{ range({count}) | list }}}}"
        outermost = depth == len(counts) - 1
        definition = mapper(target, items, count, timeout=timeout if outermost else 30)
        target = (await create(api, definition, name=f"map{depth}"))["workflowId"]
    return target
