"""The http_request guard (libflow.engine.ssrf): refused before connecting, pinned when allowed.

No test sends traffic to a non-loopback address: refused addresses go through a session
whose connector fails the test if it is ever asked to connect.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import ssl
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from libflow.engine import ssrf
from libflow.engine.ssrf import (
    RequestFailed,
    RequestRefused,
    ResponseAllowance,
    forbidden_reason,
    guarded_fetch,
    system_resolve,
)


class NeverConnect(aiohttp.TCPConnector):
    """A connector that fails the test if the guard let a request through."""

    async def connect(self, req: Any, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"the guard let a request to {req.url} through")


@pytest.fixture
async def no_network() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(connector=NeverConnect()) as session:
        yield session


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


def resolver(answers: dict[str, list[str]], calls: list[str] | None = None) -> ssrf.Resolve:
    """A resolver answering from a table (hostnames that exist nowhere else)."""

    async def resolve(host: str, port: int) -> list[str]:
        if calls is not None:
            calls.append(host)
        return answers[host]

    return resolve


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def serve(routes: dict[str, Handler]) -> TestServer:
    """A started test server on 127.0.0.1 with GET and POST handlers."""
    app = web.Application()
    for path, handler in routes.items():
        app.router.add_route("*", path, handler)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    return server


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("127.1.2.3", "loopback"),
        ("::1", "loopback"),
        ("10.0.0.1", "private"),
        ("172.16.5.4", "private"),
        ("192.168.1.1", "private"),
        ("fc00::1", "private"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("240.0.0.1", ""),  # private or reserved, by Python version
        ("100.64.0.1", "non-public"),
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:169.254.169.254", "link-local"),
        ("2002:7f00:1::", "loopback"),
        ("64:ff9b::a00:1", "private"),
        ("8.8.8.8", None),
        ("2606:4700:4700::1111", None),
    ],
)
def test_forbidden_addresses(address: str, reason: str | None) -> None:
    found = forbidden_reason(ipaddress.ip_address(address))
    if reason is None:
        assert found is None
    else:
        assert found is not None and found.startswith(reason)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/",
        "http://127.0.0.1:8080/admin",
        "http://localhost/",
        "http://LOCALHOST/",
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.1/",
        "http://[::1]/",
        "http://[::ffff:127.0.0.1]/",
        "http://0.0.0.0/",
        "http://2130706433/",  # 127.0.0.1 as one number
        "https://127.0.0.1/",
    ],
)
async def test_private_targets_are_refused_before_connecting(
    no_network: aiohttp.ClientSession, url: str
) -> None:
    began = time.monotonic()
    # The message says how an operator allows it, so a user can ask for it.
    refused = "address; requests there are refused .*LIBFLOW_HTTP_ALLOW_PRIVATE=true"
    with pytest.raises(RequestRefused, match=refused):
        await guarded_fetch(no_network, "GET", url, timeout_seconds=5, allow_private=False)
    assert time.monotonic() - began < 1


async def test_a_hostname_resolving_to_loopback_is_refused(
    no_network: aiohttp.ClientSession,
) -> None:
    resolve = resolver({"innocent.example": ["127.0.0.1"]})
    with pytest.raises(RequestRefused, match=re.escape("innocent.example resolves to 127.0.0.1")):
        await guarded_fetch(
            no_network,
            "GET",
            "http://innocent.example/",
            timeout_seconds=5,
            allow_private=False,
            resolve=resolve,
        )


async def test_one_private_address_among_public_ones_is_enough_to_refuse(
    no_network: aiohttp.ClientSession,
) -> None:
    resolve = resolver({"mixed.example": ["93.184.215.14", "10.1.2.3"]})
    with pytest.raises(RequestRefused, match=re.escape("10.1.2.3")):
        await guarded_fetch(
            no_network,
            "GET",
            "http://mixed.example/",
            timeout_seconds=5,
            allow_private=False,
            resolve=resolve,
        )


@pytest.mark.parametrize(
    "url",
    ["file:///etc/passwd", "ftp://example.com/", "gopher://x/", "//no-scheme", "http:///path"],
)
async def test_only_http_and_https_urls(no_network: aiohttp.ClientSession, url: str) -> None:
    with pytest.raises(RequestRefused):
        await guarded_fetch(no_network, "GET", url, timeout_seconds=5, allow_private=True)


@pytest.mark.parametrize("url", ["not a url", "example.com/path", "/relative"])
async def test_a_url_without_a_scheme_is_refused_saying_what_it_needs(
    no_network: aiohttp.ClientSession, url: str
) -> None:
    with pytest.raises(
        RequestRefused, match="the URL is not absolute: it needs http:// or https://"
    ):
        await guarded_fetch(no_network, "GET", url, timeout_seconds=5, allow_private=True)


async def test_system_resolver_finds_localhost() -> None:
    assert "127.0.0.1" in await system_resolve("localhost", 80)


async def test_allowed_private_request_connects_to_the_checked_address(
    http: aiohttp.ClientSession,
) -> None:
    seen: list[dict[str, Any]] = []

    async def echo(request: web.Request) -> web.Response:
        seen.append({"host": request.host, "body": await request.json()})
        return web.json_response({"ok": True}, headers={"Set-Cookie": "a=1"})

    server = await serve({"/echo": echo})
    port = server.port
    try:
        calls: list[str] = []
        # A name no DNS knows: the request can only work if the connection goes to the
        # address the guard resolved and checked, not through a second lookup.
        resolve = resolver({"service.test": ["127.0.0.1"]}, calls)
        response = await guarded_fetch(
            http,
            "POST",
            f"http://service.test:{port}/echo",
            headers={"Host": "evil.example", "Content-Length": "999"},
            json_body={"n": 1},
            timeout_seconds=5,
            allow_private=True,
            resolve=resolve,
        )
    finally:
        await server.close()
    assert response.status == 200
    assert response.body == b'{"ok": true}'
    assert response.headers["content-type"].startswith("application/json")
    assert seen == [{"host": f"service.test:{port}", "body": {"n": 1}}]
    assert calls == ["service.test"]  # resolved once, then pinned
    # Cookies set by an address, not a name, stay out of the (shared) session's jar.
    assert len(http.cookie_jar) == 0


async def test_localhost_works_when_private_addresses_are_allowed(
    http: aiohttp.ClientSession,
) -> None:
    async def hello(request: web.Request) -> web.Response:
        return web.Response(text="hi")

    server = await serve({"/": hello})
    try:
        response = await guarded_fetch(
            http, "GET", f"http://localhost:{server.port}/", timeout_seconds=5, allow_private=True
        )
    finally:
        await server.close()
    assert (response.status, response.body) == (200, b"hi")


async def test_each_redirect_hop_is_checked(
    http: aiohttp.ClientSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    hits: list[str] = []

    async def redirect(request: web.Request) -> web.Response:
        hits.append(request.path)
        raise web.HTTPFound("http://169.254.169.254/latest/meta-data/")

    server = await serve({"/start": redirect})
    # Treat the test server's own address as public so that only the second hop is private.
    real = ssrf.forbidden_reason
    monkeypatch.setattr(
        ssrf, "forbidden_reason", lambda a: None if str(a) == "127.0.0.1" else real(a)
    )
    try:
        with pytest.raises(RequestRefused, match=re.escape("169.254.169.254 is a link-local")):
            await guarded_fetch(
                http, "GET", str(server.make_url("/start")), timeout_seconds=5, allow_private=False
            )
    finally:
        await server.close()
    assert hits == ["/start"]


async def test_redirects_are_followed_and_credentials_stay_with_their_origin(
    http: aiohttp.ClientSession,
) -> None:
    seen: list[dict[str, Any]] = []

    async def landing(request: web.Request) -> web.Response:
        seen.append(
            {
                "method": request.method,
                "auth": request.headers.get("Authorization"),
                "key": request.headers.get("X-Api-Key"),
                "accept": request.headers.get("Accept"),
            }
        )
        return web.Response(text="landed")

    other = await serve({"/landing": landing})

    async def start(request: web.Request) -> web.Response:
        raise web.HTTPSeeOther(str(other.make_url("/landing")).replace("127.0.0.1", "localhost"))

    first = await serve({"/start": start})
    try:
        response = await guarded_fetch(
            http,
            "POST",
            str(first.make_url("/start")),
            headers={
                "Authorization": "Bearer secret",
                "X-Api-Key": "another secret",
                "Accept": "text/plain",
            },
            json_body={"x": 1},
            timeout_seconds=5,
            allow_private=True,
        )
    finally:
        await first.close()
        await other.close()
    assert (response.status, response.body) == (200, b"landed")
    # Another origin gets none of the headers that may hold a key, whatever their name.
    assert seen == [{"method": "GET", "auth": None, "key": None, "accept": "text/plain"}]


async def test_too_many_redirects(http: aiohttp.ClientSession) -> None:
    async def loop(request: web.Request) -> web.Response:
        raise web.HTTPFound("/loop")

    server = await serve({"/loop": loop})
    try:
        with pytest.raises(RequestFailed, match="more than 5 redirects"):
            await guarded_fetch(
                http, "GET", str(server.make_url("/loop")), timeout_seconds=5, allow_private=True
            )
    finally:
        await server.close()


async def test_response_size_is_capped_while_streaming(http: aiohttp.ClientSession) -> None:
    async def declared(request: web.Request) -> web.Response:
        return web.Response(body=b"x" * 2048)

    async def streamed(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        for _ in range(64):
            await response.write(b"y" * 1024)
        await response.write_eof()
        return response

    server = await serve({"/declared": declared, "/streamed": streamed})
    try:
        for path in ("/declared", "/streamed"):
            with pytest.raises(RequestFailed, match="over 1000 bytes"):
                await guarded_fetch(
                    http,
                    "GET",
                    str(server.make_url(path)),
                    timeout_seconds=5,
                    allow_private=True,
                    max_bytes=1000,
                )
    finally:
        await server.close()


async def test_responses_share_their_runs_allowance_while_streaming(
    http: aiohttp.ClientSession,
) -> None:
    async def declared(request: web.Request) -> web.Response:
        return web.Response(body=b"x" * 2048)

    async def streamed(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        for _ in range(3):
            await response.write(b"y" * 1024)
        await response.write_eof()
        return response

    server = await serve({"/declared": declared, "/streamed": streamed})
    allowance = ResponseAllowance(3000)
    try:
        fetched = await guarded_fetch(
            http,
            "GET",
            str(server.make_url("/declared")),
            timeout_seconds=5,
            allow_private=True,
            allowance=allowance,
        )
        assert len(fetched.body) == 2048 and allowance.left == 3000 - 2048
        for path in ("/declared", "/streamed"):  # refused by its length, then while read
            with pytest.raises(RequestFailed, match="over their limit of 3000 bytes in all"):
                await guarded_fetch(
                    http,
                    "GET",
                    str(server.make_url(path)),
                    timeout_seconds=5,
                    allow_private=True,
                    allowance=allowance,
                )
    finally:
        await server.close()


async def test_slow_responses_time_out(http: aiohttp.ClientSession) -> None:
    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(5)
        return web.Response(text="late")

    server = await serve({"/slow": slow})
    began = time.monotonic()
    try:
        with pytest.raises(RequestFailed, match=re.escape("within 0.3 s")):
            await guarded_fetch(
                http, "GET", str(server.make_url("/slow")), timeout_seconds=0.3, allow_private=True
            )
    finally:
        await server.close()
    assert time.monotonic() - began < 2


async def test_connection_refused_is_a_failure_not_a_crash(http: aiohttp.ClientSession) -> None:
    server = await serve({})
    port = server.port
    await server.close()
    with pytest.raises(RequestFailed, match="cannot connect"):
        await guarded_fetch(
            http, "GET", f"http://127.0.0.1:{port}/", timeout_seconds=5, allow_private=True
        )


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A throwaway CA and a certificate for service.test, made by the openssl CLI."""
    folder = tmp_path_factory.mktemp("tls")
    (folder / "leaf.ext").write_text("subjectAltName=DNS:service.test\nbasicConstraints=CA:FALSE\n")
    commands = [
        "req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 1 "
        "-subj /CN=libflow-test-ca -addext basicConstraints=critical,CA:TRUE "
        "-addext keyUsage=critical,keyCertSign",
        "req -newkey rsa:2048 -nodes -keyout leaf.key -out leaf.csr -subj /CN=service.test",
        "x509 -req -in leaf.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out leaf.pem "
        "-days 1 -extfile leaf.ext",
    ]
    for command in commands:
        subprocess.run(["openssl", *command.split()], cwd=folder, check=True, capture_output=True)
    return {name: folder / f"{name}.pem" for name in ("ca", "leaf")} | {"key": folder / "leaf.key"}


async def test_https_to_the_pinned_address_verifies_the_hostname(
    tls_files: dict[str, Path],
) -> None:
    async def hello(request: web.Request) -> web.Response:
        return web.Response(text=f"hello {request.host}")

    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(tls_files["leaf"], tls_files["key"])
    app = web.Application()
    app.router.add_get("/", hello)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server(ssl=server_tls)
    port = server.port
    client_tls = ssl.create_default_context(cafile=str(tls_files["ca"]))
    resolve = resolver({"service.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]})
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_tls)) as http:
            response = await guarded_fetch(
                http,
                "GET",
                f"https://service.test:{port}/",
                timeout_seconds=5,
                allow_private=True,
                resolve=resolve,
            )
            assert (response.status, response.body) == (200, f"hello service.test:{port}".encode())
            # Same address, a name the certificate does not cover: verification still fails.
            with pytest.raises(RequestFailed, match="TLS error"):
                await guarded_fetch(
                    http,
                    "GET",
                    f"https://other.test:{port}/",
                    timeout_seconds=5,
                    allow_private=True,
                    resolve=resolve,
                )
    finally:
        await server.close()
