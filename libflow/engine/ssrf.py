"""Outbound HTTP for workflows, guarded against server-side request forgery.

The host is resolved once, every address is checked, and the connection goes to the
checked address itself (the URL is rewritten to it; Host and TLS SNI keep the name), so
a DNS answer that changes between the check and the connect cannot redirect it.
Redirects are followed by hand, each hop checked the same way.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import aiohttp
from multidict import CIMultiDict
from yarl import URL

MAX_RESPONSE_BYTES: Final = 5 * 1024 * 1024
MAX_REDIRECTS: Final = 5
SCHEMES: Final = frozenset({"http", "https"})
REDIRECT_STATUSES: Final = frozenset({301, 302, 303, 307, 308})
# Set by the guard itself (Host) or by aiohttp from the body; never taken from a workflow.
_MANAGED_HEADERS: Final = frozenset({"host", "content-length", "transfer-encoding", "connection"})
# What a redirect to another origin still carries: a key may be in any other header a
# workflow sets (X-Api-Key, ...), and it stays with the origin it was meant for.
_PORTABLE_HEADERS: Final = frozenset({"accept", "accept-language", "user-agent", "content-type"})
_NAT64: Final = ipaddress.IPv6Network("64:ff9b::/96")

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolve = Callable[[str, int], Awaitable[list[str]]]


class RequestRefused(Exception):
    """The guard refused the request before connecting anywhere."""


class RequestFailed(Exception):
    """The request was attempted and failed: connection, timeout, size, redirects."""


class ResponseAllowance:
    """The response bytes a run's requests may still read, all of them together.

    A sub-run's allowance also draws on ``shared``, what its parent run's sub-runs may
    hold at once: it gives back what it took there when it ends (``give_back``).
    """

    def __init__(
        self,
        limit: int,
        *,
        shared: ResponseAllowance | None = None,
        whose: str = "the run's HTTP responses",
    ) -> None:
        self.limit = limit
        self.left = limit
        self.shared = shared
        self._whose = whose

    def check(self, size: int) -> None:
        """RequestFailed when ``size`` more bytes would pass the limit (nothing taken)."""
        if size > self.left:
            raise RequestFailed(
                f"{self._whose} would be over their limit of {self.limit} bytes in all"
            )
        if self.shared is not None:
            self.shared.check(size)

    def take(self, size: int) -> None:
        """Take ``size`` bytes read; RequestFailed past the limit."""
        self.check(size)
        self.left -= size
        if self.shared is not None:
            self.shared.left -= size

    def give_back(self) -> None:
        """The run ended: what it took of ``shared`` is free for the others."""
        if self.shared is not None:
            self.shared.left += self.limit - self.left
            self.left = self.limit


@dataclass(frozen=True, slots=True)
class FetchedResponse:
    """A response read in full (within the size cap)."""

    status: int
    headers: dict[str, str]
    body: bytes
    charset: str | None
    url: str


def forbidden_reason(address: Address) -> str | None:
    """Why an address is not public ("loopback", "private", ...), or None when it is."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is None and address in _NAT64:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None and (reason := forbidden_reason(embedded)):
            return reason
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local (cloud metadata lives here)"
    if address.is_unspecified:
        return "unspecified"
    if address.is_multicast:
        return "multicast"
    if address.is_private:
        return "private"
    if address.is_reserved:
        return "reserved"
    if not address.is_global:
        return "non-public"
    return None


async def system_resolve(host: str, port: int) -> list[str]:
    """The host's addresses from the system resolver, in its order, without repeats."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def _literal(host: str) -> Address | None:
    """The address when the host is an IP literal."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


async def resolve_allowed(
    host: str, port: int, *, allow_private: bool, resolve: Resolve = system_resolve
) -> list[str]:
    """The host's addresses, all checked; RequestRefused when any is not public."""
    literal = _literal(host)
    if literal is not None:
        addresses = [str(literal)]
    else:
        try:
            addresses = await resolve(host, port)
        except (OSError, UnicodeError) as err:
            raise RequestFailed(f"cannot resolve {host}: {err}") from err
        if not addresses:
            raise RequestFailed(f"cannot resolve {host}: no addresses")
    if not allow_private:
        for text in addresses:
            address = ipaddress.ip_address(text.split("%", 1)[0])
            reason = forbidden_reason(address)
            if reason is not None:
                where = host if literal is not None else f"{host} resolves to {address}, which"
                raise RequestRefused(
                    f"{where} is a {reason} address; requests there are refused "
                    "(a server set LIBFLOW_HTTP_ALLOW_PRIVATE=true allows them)"
                )
    return addresses


def check_url(raw: str) -> URL:
    """An absolute http(s) URL with a host; RequestRefused otherwise."""
    try:
        url = URL(raw)
    except (ValueError, TypeError) as err:
        raise RequestRefused(f"invalid URL: {err}") from err
    if not url.scheme:
        # Not echoed: it may hold a secret, cut where redaction would not find it.
        raise RequestRefused("the URL is not absolute: it needs http:// or https:// and a host")
    if url.scheme not in SCHEMES:
        raise RequestRefused(f"only http and https URLs are allowed, not {url.scheme!r}")
    if not url.raw_host or url.port is None:
        raise RequestRefused("the URL has no host")
    return url


async def guarded_fetch(
    session: aiohttp.ClientSession,
    method: str,
    raw_url: str,
    *,
    headers: Mapping[str, str] | None = None,
    json_body: Any = None,
    timeout_seconds: float,
    allow_private: bool,
    max_bytes: int = MAX_RESPONSE_BYTES,
    max_redirects: int = MAX_REDIRECTS,
    resolve: Resolve = system_resolve,
    allowance: ResponseAllowance | None = None,
) -> FetchedResponse:
    """Send a request after checking where it goes; follow redirects checking each hop.

    Every body read (redirects' too) is taken from ``allowance`` as it arrives.
    """
    url = check_url(raw_url)
    send_headers = CIMultiDict(
        (key, value)
        for key, value in (headers or {}).items()
        if key.lower() not in _MANAGED_HEADERS
    )
    body = json_body
    try:
        async with asyncio.timeout(timeout_seconds):
            for _hop in range(max_redirects + 1):
                addresses = await resolve_allowed(
                    url.raw_host or "", url.port or 0, allow_private=allow_private, resolve=resolve
                )
                response = await _send(
                    session, method, url, addresses, send_headers, body, max_bytes, allowance
                )
                location = response.headers.get("location")
                if response.status not in REDIRECT_STATUSES or not location:
                    return response
                next_url = check_url(str(url.join(URL(location))))
                if response.status == 303 or (response.status in (301, 302) and method == "POST"):
                    method = "GET" if method != "HEAD" else method
                    body = None
                if next_url.origin() != url.origin():
                    for name in {n for n in send_headers if n.lower() not in _PORTABLE_HEADERS}:
                        send_headers.popall(name, None)
                url = next_url
    except TimeoutError as err:
        raise RequestFailed(f"no complete response within {timeout_seconds:g} s") from err
    raise RequestFailed(f"more than {max_redirects} redirects")


async def _send(
    session: aiohttp.ClientSession,
    method: str,
    url: URL,
    addresses: list[str],
    headers: CIMultiDict[str],
    body: Any,
    max_bytes: int,
    allowance: ResponseAllowance | None,
) -> FetchedResponse:
    """One request to the first checked address that accepts a connection."""
    host = url.raw_host or ""
    pinned_headers = CIMultiDict(headers)
    pinned_headers["Host"] = url.host_port_subcomponent or host
    tls_name = host if url.scheme == "https" and _literal(host) is None else None
    last_error: aiohttp.ClientConnectorError | None = None
    for address in addresses:
        try:
            async with session.request(
                method,
                url.with_host(address),
                headers=pinned_headers,
                json=body,
                allow_redirects=False,
                server_hostname=tls_name,
                timeout=aiohttp.ClientTimeout(total=None),
            ) as response:
                content = await _read_capped(response, max_bytes, allowance)
                return FetchedResponse(
                    status=response.status,
                    headers=_flat_headers(response.headers),
                    body=content,
                    charset=response.charset,
                    url=str(url),
                )
        except aiohttp.ClientSSLError as err:
            raise RequestFailed(f"TLS error talking to {host}: {err}") from err
        except aiohttp.ClientConnectorError as err:
            last_error = err
        except aiohttp.ClientError as err:
            raise RequestFailed(f"request to {host} failed: {err}") from err
    raise RequestFailed(f"cannot connect to {host}: {last_error}")


async def _read_capped(
    response: aiohttp.ClientResponse, max_bytes: int, allowance: ResponseAllowance | None
) -> bytes:
    """The body, refused as soon as it passes ``max_bytes`` or the run's ``allowance``."""
    if response.content_length is not None:
        if response.content_length > max_bytes:
            raise RequestFailed(f"the response body is over {max_bytes} bytes")
        if allowance is not None:
            allowance.check(response.content_length)
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > max_bytes:
            raise RequestFailed(f"the response body is over {max_bytes} bytes")
        if allowance is not None:
            allowance.take(len(chunk))
        chunks.append(chunk)
    return b"".join(chunks)


def _flat_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """Response headers as one lower-cased key each, repeated values joined by ", "."""
    flat: dict[str, str] = {}
    for key, value in headers.items():
        name = key.lower()
        flat[name] = f"{flat[name]}, {value}" if name in flat else value
    return flat
