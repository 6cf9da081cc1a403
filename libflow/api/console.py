"""The web console: the static files of ``libflow/console/``, served at ``/console/``.

The console is a client of the public API like any other (it signs its calls with the
API key the user types), so its files need no key. They are read once, at the first
request, and served from memory: only files that were in the folder then can be named,
so no request path ever reaches the file system.
"""

from __future__ import annotations

import gzip
import hashlib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from urllib.parse import urlsplit

from aiohttp import web

from libflow import appkeys
from libflow.errors import NotFound
from settings import Settings

routes = web.RouteTableDef()
CONSOLE_DIR = Path(__file__).resolve().parent.parent / "console"
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".ico": "image/x-icon",
    ".png": "image/png",
    ".webp": "image/webp",
    ".json": "application/json",
}
# Worth compressing: text, and more than a packet's worth of it.
MIN_GZIP_BYTES = 1024


@dataclass(frozen=True, slots=True)
class ConsoleFile:
    """One static file as it is served: its bytes, gzipped bytes, type and validator."""

    body: bytes
    gzipped: bytes | None
    content_type: str
    etag: str


def _load(path: Path) -> ConsoleFile:
    body = path.read_bytes()
    content_type = CONTENT_TYPES[path.suffix]
    compressible = content_type.startswith(("text/", "image/svg", "application/json"))
    gzipped = None
    if compressible and len(body) >= MIN_GZIP_BYTES:
        gzipped = gzip.compress(body, mtime=0)
    etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
    return ConsoleFile(body, gzipped, content_type, etag)


@cache
def console_files() -> dict[str, ConsoleFile]:
    """Every servable file of the console by its path under ``/console/``."""
    return {
        path.relative_to(CONSOLE_DIR).as_posix(): _load(path)
        for path in sorted(CONSOLE_DIR.rglob("*"))
        if path.is_file() and path.suffix in CONTENT_TYPES
    }


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def content_security_policy(settings: Settings) -> str:
    """Scripts and styles from the console only; calls to this server and its storage.

    Signed storage URLs (uploads, downloads, thumbnails) point at the public base URL, or
    at the S3 endpoint, which is another origin.
    """
    connect = ["'self'", _origin(settings.resolved_public_base_url)]
    if settings.storage == "s3":
        endpoint = settings.s3_endpoint_url
        connect.append(_origin(endpoint) if endpoint else "https://*.amazonaws.com")
    return (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob: data:; "
        f"connect-src {' '.join(connect)}; base-uri 'none'; form-action 'self'; "
        "frame-ancestors 'none'"
    )


def _still_fresh(if_none_match: str, etag: str) -> bool:
    """Whether the client's copy is this one (RFC 9110 weak comparison)."""
    tags = {tag.strip().removeprefix("W/") for tag in if_none_match.split(",")}
    return etag in tags or "*" in tags


@routes.get("/")
async def home(request: web.Request) -> web.Response:
    """The server's root leads to the console."""
    raise web.HTTPFound("/console/")


@routes.get("/console")
async def console_without_slash(request: web.Request) -> web.Response:
    """``/console`` is the console's folder: relative links need the slash."""
    raise web.HTTPMovedPermanently("/console/")


@routes.get("/console/{name:.*}")
async def console_file(request: web.Request) -> web.Response:
    """A file of the console; ``/console/`` is its page.

    Files are not versioned by name, so browsers keep them but ask again each time
    (``no-cache``): an unchanged file costs a 304 and an upgrade is seen at once.
    """
    name = request.match_info["name"] or "index.html"
    found = console_files().get(name)
    if found is None:
        raise NotFound(f"the console has no file {name!r}")
    headers = {
        "Content-Type": found.content_type,
        "Cache-Control": "no-cache",
        "ETag": found.etag,
        "Vary": "Accept-Encoding",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
    }
    if found.content_type.startswith("text/html"):
        headers["Content-Security-Policy"] = content_security_policy(request.app[appkeys.SETTINGS])
        headers["X-Frame-Options"] = "DENY"
    if _still_fresh(request.headers.get("If-None-Match", ""), found.etag):
        return web.Response(status=304, headers=headers)
    body = found.body
    if found.gzipped is not None and "gzip" in request.headers.get("Accept-Encoding", ""):
        body = found.gzipped
        headers["Content-Encoding"] = "gzip"
    return web.Response(body=body, headers=headers)
