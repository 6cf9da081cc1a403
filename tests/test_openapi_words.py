"""The OpenAPI document in user words: every schema, and every field of one, says what it is."""

from __future__ import annotations

from typing import Any

from tests.conftest import Api


def _bare_fields(schema: dict[str, Any], path: str = "") -> list[str]:
    """The fields of a schema (nested objects and allOf parts too) that have no words."""
    bare: list[str] = []
    for part in schema.get("allOf", []):
        bare += _bare_fields(part, path)
    for name, field in schema.get("properties", {}).items():
        if "$ref" in field:
            continue
        if not field.get("description"):
            bare.append(f"{path}{name}")
        bare += _bare_fields(field, f"{path}{name}.")
    return bare


async def test_every_schema_and_every_field_is_described(api: Api) -> None:
    document = await (await api.client.get("/api/publicv1/openapi.json")).json()
    bare = []
    for name, schema in document["components"]["schemas"].items():
        if not schema.get("description") and "allOf" not in schema:
            bare.append(name)
        bare += [f"{name}.{field}" for field in _bare_fields(schema)]
    assert not bare, f"schemas and fields without words: {bare}"


async def test_the_building_blocks_stay_bare_after_describing(api: Api) -> None:
    document = await (await api.client.get("/api/publicv1/openapi.json")).json()
    folder = document["components"]["schemas"]["Folder"]["properties"]
    assert folder["id"]["description"] != folder["name"]["description"]


async def test_every_operation_is_shown_in_one_group_of_the_reference_page(api: Api) -> None:
    document = await (await api.client.get("/api/publicv1/openapi.json")).json()
    groups: dict[str, str] = {}
    for path, item in document["paths"].items():
        for method, operation in item.items():
            assert len(operation["tags"]) == 1, (method, path)
            groups[f"{method} {path}"] = operation["tags"][0]
    project = "/api/publicv1/projects/{projectId}"
    assert groups[f"post {project}/workflows/{{workflowId}}/webhooks"] == "Webhooks"
    assert groups[f"post {project}/workflows/{{workflowId}}/runsync"] == "Workflows"
    assert groups[f"get {project}/runs/{{runId}}/events"] == "Runs"
    assert groups["get /api/publicv1/docs"] == "Reference"


async def test_request_bodies_are_described_for_users_not_by_their_docstrings(api: Api) -> None:
    document = await (await api.client.get("/api/publicv1/openapi.json")).json()
    for name, schema in document["components"]["schemas"].items():
        assert "``" not in schema.get("description", ""), name
