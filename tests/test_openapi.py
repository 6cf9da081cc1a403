"""The OpenAPI document: served without a key, valid 3.1, and covering every route."""

from __future__ import annotations

import re
from typing import Any

from aiohttp import hdrs
from openapi_spec_validator import validate

from tests.conftest import Api

OPENAPI = "/api/publicv1/openapi.json"
HTTP_METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}


def _template(canonical: str) -> str:
    """aiohttp's ``{key:.+}`` is OpenAPI's ``{key}``."""
    return re.sub(r"\{(\w+):[^}]*\}", r"{\1}", canonical)


def _routes(api: Api) -> set[tuple[str, str]]:
    assert api.client.app is not None
    routes = set()
    for route in api.client.app.router.routes():
        if route.method == hdrs.METH_HEAD or route.resource is None:
            continue
        routes.add((_template(route.resource.canonical), route.method.lower()))
    return routes


def _documented(document: dict[str, Any]) -> set[tuple[str, str]]:
    return {
        (path, method)
        for path, item in document["paths"].items()
        for method in item
        if method in HTTP_METHODS
    }


async def _document(api: Api) -> dict[str, Any]:
    response = await api.client.get(OPENAPI)
    assert response.status == 200, await response.text()
    document: dict[str, Any] = await response.json()
    return document


async def test_document_is_served_without_an_api_key(api: Api) -> None:
    response = await api.client.get(OPENAPI)
    assert response.status == 200
    assert response.content_type == "application/json"
    assert (await response.json())["openapi"].startswith("3.1")


async def test_document_is_valid_openapi_3_1(api: Api) -> None:
    document = await _document(api)
    validate(document)
    assert document["servers"] == [{"url": api.shape.settings.resolved_public_base_url}]


async def test_every_registered_route_is_documented(api: Api) -> None:
    missing = _routes(api) - _documented(await _document(api))
    assert not missing, f"routes missing from the OpenAPI document: {sorted(missing)}"


async def test_every_documented_route_is_served(api: Api) -> None:
    extra = _documented(await _document(api)) - _routes(api)
    assert not extra, f"documented but not served: {sorted(extra)}"


async def test_path_parameters_match_the_path_template(api: Api) -> None:
    document = await _document(api)
    for path, item in document["paths"].items():
        in_path = set(re.findall(r"\{(\w+)\}", path))
        for method, operation in item.items():
            declared = {p["name"] for p in operation.get("parameters", []) if p["in"] == "path"}
            assert declared == in_path, (method, path)


async def test_answers_that_ask_to_retry_later_document_their_retry_after_header(
    api: Api,
) -> None:
    document = await _document(api)
    retry_answers = [
        (path, method, status, response)
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if method in HTTP_METHODS
        for status, response in operation["responses"].items()
        if status in {"429", "503"}
    ]
    assert any(status == "429" for _, _, status, _ in retry_answers)
    for path, method, status, response in retry_answers:
        header = response.get("headers", {}).get("Retry-After")
        assert header is not None, (method, path, status)
        assert header["schema"]["type"] == "integer"
