"""The API reference in the browser: Swagger UI over the OpenAPI document, with no CDN.

Swagger UI's files come from the ``swagger-ui-bundle-v2`` package and are served by the app
itself under a path naming their version, so a browser may keep them for a year; the page
and its start-up script are small and always asked again. Nothing on the page is loaded
from another origin (its Content-Security-Policy says so too), so the reference works on a
machine without Internet access.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

import swagger_ui_bundle
from aiohttp import web

from libflow import appkeys
from libflow.api.openapi.definition import standalone_definition_schema
from libflow.api.responses import json_response
from libflow.errors import NotFound

routes = web.RouteTableDef()

DOCS_PATH: Final = "/api/publicv1/docs"
DEFINITION_SCHEMA_PATH: Final = "/api/publicv1/workflow-definition.schema.json"
ASSETS_PREFIX: Final = "/swagger-ui"
START_SCRIPT_PATH: Final = f"{ASSETS_PREFIX}/libflow-docs.js"

_BUNDLE_DIR: Final = Path(str(swagger_ui_bundle.swagger_ui_path))
# "swagger-ui-5.31.0" -> "5.31.0": in the assets' URLs, so a new package is a new URL.
SWAGGER_UI_VERSION: Final = _BUNDLE_DIR.name.removeprefix("swagger-ui-")
# Only what the page uses (and the source maps a browser's tools ask for).
_ASSETS: Final = frozenset(
    {
        "swagger-ui-bundle.js",
        "swagger-ui-bundle.js.map",
        "swagger-ui.css",
        "swagger-ui.css.map",
        "favicon-32x32.png",
        "favicon-16x16.png",
    }
)
_IMMUTABLE: Final = "public, max-age=31536000, immutable"
_ALWAYS_ASK: Final = "no-cache"

_START_SCRIPT: Final = """\
window.ui = SwaggerUIBundle({
  url: "/api/publicv1/openapi.json",
  dom_id: "#swagger-ui",
  deepLinking: true,
  validatorUrl: null,
  defaultModelsExpandDepth: 0,
  presets: [SwaggerUIBundle.presets.apis],
  layout: "BaseLayout"
});
"""


def _page() -> str:
    assets = f"{ASSETS_PREFIX}/{SWAGGER_UI_VERSION}"
    return f"""\
<!DOCTYPE html>
<html lang="en">
  <head>
    <meta charset="utf-8">
    <title>libflow API reference</title>
    <link rel="stylesheet" href="{assets}/swagger-ui.css">
    <link rel="icon" type="image/png" href="{assets}/favicon-32x32.png" sizes="32x32">
  </head>
  <body>
    <div id="swagger-ui"></div>
    <script src="{assets}/swagger-ui-bundle.js"></script>
    <script src="{START_SCRIPT_PATH}"></script>
  </body>
</html>
"""


_PAGE: Final = _page()


def _content_security_policy(public_base_url: str) -> str:
    """Everything from this server; "Try it out" may also call the documented server URL."""
    parts = urlsplit(public_base_url)
    server = f"{parts.scheme}://{parts.netloc}"
    return (
        "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
        f"connect-src 'self' {server}; frame-ancestors 'none'"
    )


@routes.get(DOCS_PATH)
async def docs_page(request: web.Request) -> web.Response:
    """The HTML reference of the OpenAPI document (no API key)."""
    settings = request.app[appkeys.SETTINGS]
    return web.Response(
        text=_PAGE,
        content_type="text/html",
        headers={
            "Cache-Control": _ALWAYS_ASK,
            "Content-Security-Policy": _content_security_policy(settings.resolved_public_base_url),
        },
    )


@routes.get(START_SCRIPT_PATH)
async def docs_start_script(request: web.Request) -> web.Response:
    """The script that points Swagger UI at the OpenAPI document."""
    return web.Response(
        text=_START_SCRIPT,
        content_type="text/javascript",
        headers={"Cache-Control": _ALWAYS_ASK},
    )


@routes.get(f"{ASSETS_PREFIX}/{{version}}/{{asset}}")
async def swagger_ui_asset(request: web.Request) -> web.FileResponse:
    """One of Swagger UI's files, from the installed package, kept by browsers for a year."""
    version, asset = request.match_info["version"], request.match_info["asset"]
    if version != SWAGGER_UI_VERSION or asset not in _ASSETS:
        raise NotFound(f"no such file: {ASSETS_PREFIX}/{version}/{asset}")
    return web.FileResponse(_BUNDLE_DIR / asset, headers={"Cache-Control": _IMMUTABLE})


@routes.get(DEFINITION_SCHEMA_PATH)
async def definition_json_schema(request: web.Request) -> web.Response:
    """A workflow definition's JSON Schema, one document an editor can validate with."""
    base = request.app[appkeys.SETTINGS].resolved_public_base_url
    return json_response(standalone_definition_schema(f"{base}{DEFINITION_SCHEMA_PATH}"))
