"""The console's static files: served without a key, typed, revalidated, and nothing else."""

from __future__ import annotations

import gzip
import json
import urllib.error
import urllib.request
from email.message import Message

from tests.console.conftest import Console


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirects)


def fetch(console: Console, path: str, **headers: str) -> tuple[int, Message, bytes]:
    """GET ``path`` of the server without a key and without following redirects."""
    request = urllib.request.Request(console.server.url + path, headers=headers)
    try:
        with _OPENER.open(request, timeout=30) as reply:
            return reply.status, reply.headers, reply.read()
    except urllib.error.HTTPError as err:
        with err:
            return err.code, err.headers, err.read()


def test_the_console_page_is_served_without_an_api_key(console: Console) -> None:
    status, headers, body = fetch(console, "/console/")
    assert status == 200
    assert headers["Content-Type"] == "text/html; charset=utf-8"
    assert b'<script type="module" src="app.js">' in body


def test_the_page_allows_scripts_and_styles_of_the_console_only(console: Console) -> None:
    _, headers, _ = fetch(console, "/console/")
    policy = headers["Content-Security-Policy"]
    assert "script-src 'self';" in policy
    assert "style-src 'self';" in policy
    assert f"connect-src 'self' {console.server.url};" in policy
    assert headers["X-Content-Type-Options"] == "nosniff"


def test_files_carry_their_content_type(console: Console) -> None:
    for name, content_type in [
        ("app.js", "text/javascript; charset=utf-8"),
        ("views/files.js", "text/javascript; charset=utf-8"),
        ("style.css", "text/css; charset=utf-8"),
        ("favicon.svg", "image/svg+xml"),
    ]:
        status, headers, _ = fetch(console, f"/console/{name}")
        assert status == 200, name
        assert headers["Content-Type"] == content_type


def test_an_unchanged_file_is_revalidated_with_a_304(console: Console) -> None:
    _, first, _ = fetch(console, "/console/app.js")
    assert first["Cache-Control"] == "no-cache"
    status, _, body = fetch(console, "/console/app.js", **{"If-None-Match": first["ETag"]})
    assert (status, body) == (304, b"")
    status, _, _ = fetch(console, "/console/app.js", **{"If-None-Match": '"stale"'})
    assert status == 200


def test_text_is_gzipped_for_clients_that_accept_it(console: Console) -> None:
    _, plain_headers, plain = fetch(console, "/console/app.js")
    assert "Content-Encoding" not in plain_headers
    _, headers, body = fetch(console, "/console/app.js", **{"Accept-Encoding": "gzip"})
    assert headers["Content-Encoding"] == "gzip"
    assert headers["Vary"] == "Accept-Encoding"
    assert gzip.decompress(body) == plain


def test_a_name_that_is_not_a_console_file_is_404(console: Console) -> None:
    for path in ["/console/nope.js", "/console/../app.py", "/console/%2e%2e/app.py"]:
        status, headers, body = fetch(console, path)
        assert status == 404, path
        assert headers["Content-Type"].startswith("application/json")
        assert json.loads(body)["error"] == "NOT_FOUND"


def test_the_root_and_the_bare_folder_lead_to_the_console(console: Console) -> None:
    status, headers, _ = fetch(console, "/")
    assert (status, headers["Location"]) == (302, "/console/")
    status, headers, _ = fetch(console, "/console")
    assert (status, headers["Location"]) == (301, "/console/")
