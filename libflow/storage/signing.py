"""Signed URLs for the local storage backend: method, key, expiry and headers are bound."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote, urlencode

STORAGE_PREFIX = "/storage/"


class SignatureInvalid(Exception):
    """The URL was not signed by this server, was altered, or has expired."""


@dataclass(frozen=True, slots=True)
class SignedGrant:
    """What a verified URL allows."""

    method: str
    key: str
    content_type: str
    disposition: str


class UrlSigner:
    """Signs and verifies storage URLs with an HMAC-SHA256 over everything they grant."""

    def __init__(self, secret: bytes, base_url: str) -> None:
        self._secret = secret
        self._base_url = base_url.rstrip("/")

    def _signature(
        self, method: str, key: str, expires: int, content_type: str, disposition: str
    ) -> str:
        message = "\n".join((method, key, str(expires), content_type, disposition)).encode()
        digest = hmac.new(self._secret, message, hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()

    def sign(
        self,
        method: str,
        key: str,
        *,
        content_type: str,
        expires_in: int,
        disposition: str = "",
        now: float | None = None,
    ) -> str:
        """A URL granting ``method`` on ``key`` until ``expires_in`` seconds from now."""
        expires = int((time.time() if now is None else now) + expires_in)
        query = {"expires": str(expires), "ct": content_type}
        if disposition:
            query["cd"] = disposition
        query["sig"] = self._signature(method, key, expires, content_type, disposition)
        return f"{self._base_url}{STORAGE_PREFIX}{quote(key)}?{urlencode(query)}"

    def verify(self, method: str, key: str, query: Mapping[str, str]) -> SignedGrant:
        """Check a request's signature and expiry; raise SignatureInvalid otherwise."""
        try:
            expires = int(query["expires"])
            content_type = query["ct"]
            signature = query["sig"]
        except (KeyError, ValueError) as err:
            raise SignatureInvalid("the storage URL is missing its signature") from err
        disposition = query.get("cd", "")
        expected = self._signature(method, key, expires, content_type, disposition)
        # Bytes: compare_digest refuses str with non-ASCII characters (a TypeError, a 500).
        if not hmac.compare_digest(expected.encode(), signature.encode("utf-8", "replace")):
            raise SignatureInvalid("the storage URL signature does not match")
        if expires < time.time():
            raise SignatureInvalid("the storage URL has expired")
        return SignedGrant(method, key, content_type, disposition)
