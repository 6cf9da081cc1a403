"""The API reference page: served without a key, every file it loads from this server."""

from __future__ import annotations

import re

from libflow.api.docs_page import SWAGGER_UI_VERSION
from tests.conftest import Api

DOCS = "/api/publicv1/docs"
REFERENCES = re.compile(r"""(?:src|href)="([^"]*)\"""")


async def _page(api: Api) -> str:
    response = await api.client.get(DOCS)
    assert response.status == 200, await response.text()
    assert response.content_type == "text/html"
    return await response.text()


async def test_the_page_is_html_served_without_an_api_key(api: Api) -> None:
    page = await _page(api)
    assert page.startswith("<!DOCTYPE html>")
    assert '<div id="swagger-ui">' in page


async def test_the_page_loads_nothing_from_another_site(api: Api) -> None:
    page = await _page(api)
    references = REFERENCES.findall(page)
    assert references, "the page loads its scripts and styles"
    assert all(ref.startswith("/") and not ref.startswith("//") for ref in references)
    assert "http://" not in page and "https://" not in page
    response = await api.client.get(DOCS)
    policy = response.headers["Content-Security-Policy"]
    assert "default-src 'self'" in policy and "script-src" not in policy


async def test_every_file_the_page_references_is_served_with_cache_headers(api: Api) -> None:
    for reference in REFERENCES.findall(await _page(api)):
        response = await api.client.get(reference)
        assert response.status == 200, reference
        assert await response.read(), reference
        if f"/{SWAGGER_UI_VERSION}/" in reference:
            assert "immutable" in response.headers["Cache-Control"], reference
        else:
            assert response.headers["Cache-Control"] == "no-cache", reference


async def test_the_start_script_points_swagger_ui_at_this_servers_document(api: Api) -> None:
    response = await api.client.get("/swagger-ui/libflow-docs.js")
    script = await response.text()
    assert response.content_type == "text/javascript"
    assert 'url: "/api/publicv1/openapi.json"' in script
    # Swagger UI sends the document to validator.swagger.io unless told not to.
    assert "validatorUrl: null" in script
    assert "http" not in script


async def test_the_bundle_is_swagger_ui_5_which_reads_openapi_3_1(api: Api) -> None:
    assert int(SWAGGER_UI_VERSION.split(".")[0]) >= 5
    response = await api.client.get(f"/swagger-ui/{SWAGGER_UI_VERSION}/swagger-ui-bundle.js")
    assert response.status == 200
    assert "javascript" in response.content_type


async def test_a_file_the_page_does_not_use_is_a_json_404(api: Api) -> None:
    for path in (
        f"/swagger-ui/{SWAGGER_UI_VERSION}/index.html",
        f"/swagger-ui/{SWAGGER_UI_VERSION}/..%2F__init__.py",
        "/swagger-ui/0.0.1/swagger-ui-bundle.js",
    ):
        response = await api.client.get(path)
        assert response.status == 404, path
        assert (await response.json())["error"] == "NOT_FOUND"


async def test_the_openapi_document_describes_the_page(api: Api) -> None:
    document = await (await api.client.get("/api/publicv1/openapi.json")).json()
    operation = document["paths"][DOCS]["get"]
    assert operation["security"] == []
    assert "text/html" in operation["responses"]["200"]["content"]
