"""Webhook signature schemes: new secrets, and verifying a delivery's headers and raw body."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from secrets import choice, token_bytes, token_urlsafe

from libflow.errors import LibflowError

SCHEMES = ("standard", "github", "stripe")
TOLERANCE_SECONDS = 300
# Lower-case names of the headers that carry signatures, kept away from the workflow's inputs.
SIGNATURE_HEADERS: frozenset[str] = frozenset(
    {"webhook-signature", "x-hub-signature", "x-hub-signature-256", "stripe-signature"}
)

_WHSEC = "whsec_"
_ALPHANUMERICS = string.ascii_letters + string.digits
# Unix seconds; the bound keeps int() cheap and the value a plausible time.
_SECONDS = re.compile(r"[0-9]{1,15}")
_SHA256_HEX = re.compile(r"[0-9a-fA-F]{64}")

# The sender learns which part failed, and what that part should look like (the schemes'
# formats are public), never which secret or signature came close.
_BAD_HEADERS = "missing or malformed signature headers"
_STANDARD_ID = "webhook-id is missing"
_STANDARD_TIMESTAMP = "webhook-timestamp must be Unix seconds"
_STANDARD_SIGNATURE = "webhook-signature has no v1,<base64 of an HMAC-SHA256> entry"
_GITHUB_SIGNATURE = "X-Hub-Signature-256 must be sha256=<64 hex digits>"
_STRIPE_SIGNATURE = "Stripe-Signature must hold one t=<Unix seconds> and a v1=<64 hex digits> entry"
_BAD_TIMESTAMP = "timestamp outside the tolerance"
_NO_MATCH = "signature does not match"


class InvalidSignature(LibflowError):
    """A webhook delivery whose signature headers do not verify."""

    code = "INVALID_SIGNATURE"


@dataclass(frozen=True, slots=True)
class VerifiedDelivery:
    """A delivery that verified, and the sender's id for it (repeats share the id)."""

    delivery_id: str


def new_secret(scheme: str) -> str:
    """A fresh secret in the format the scheme's senders expect."""
    if scheme == "standard":
        return _WHSEC + base64.b64encode(token_bytes(24)).decode("ascii")
    if scheme == "github":
        return token_urlsafe(32)
    if scheme == "stripe":
        # 43 alphanumerics carry 256 bits, as token_urlsafe(32) does, in Stripe's look.
        return _WHSEC + "".join(choice(_ALPHANUMERICS) for _ in range(43))
    raise ValueError(f"unknown webhook scheme {scheme!r}")


def verify(
    scheme: str, secrets: Sequence[str], headers: Mapping[str, str], body: bytes, *, now: float
) -> VerifiedDelivery:
    """Verify a delivery against any of the secrets (current first, then rotated ones).

    ``headers`` must be case-insensitive. Raises InvalidSignature when it does not verify.
    """
    verifier = _VERIFIERS.get(scheme)
    if verifier is None:
        raise ValueError(f"unknown webhook scheme {scheme!r}")
    return verifier(secrets, headers, body, now)


def _verify_standard(
    secrets: Sequence[str], headers: Mapping[str, str], body: bytes, now: float
) -> VerifiedDelivery:
    """Standard Webhooks: ``v1,<base64>`` entries over ``id.timestamp.body``."""
    msg_id = headers.get("webhook-id", "")
    timestamp = headers.get("webhook-timestamp", "")
    # Entries of other versions (v1a is asymmetric) are for other verifiers: skip them.
    signatures = [
        digest
        for entry in headers.get("webhook-signature", "").split()
        if entry.startswith("v1,") and (digest := _base64_digest(entry[3:])) is not None
    ]
    for wrong, problem in (
        (not msg_id, _STANDARD_ID),
        (not _SECONDS.fullmatch(timestamp), _STANDARD_TIMESTAMP),
        (not signatures, _STANDARD_SIGNATURE),
    ):
        if wrong:
            raise _malformed(problem)
    _check_timestamp(timestamp, now)
    try:
        # aiohttp decodes header bytes with surrogateescape: this gets the sent bytes back.
        prefix = f"{msg_id}.{timestamp}.".encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        raise _malformed("webhook-id holds bytes that are not text") from None
    keys = [_standard_key(secret) for secret in secrets]
    _check_signatures(keys, prefix + body, signatures)
    return VerifiedDelivery(delivery_id=msg_id)


def _verify_github(
    secrets: Sequence[str], headers: Mapping[str, str], body: bytes, now: float
) -> VerifiedDelivery:
    """GitHub: ``X-Hub-Signature-256: sha256=<hex>`` over the body, with no timestamp."""
    scheme, _, hex_digest = headers.get("x-hub-signature-256", "").partition("=")
    digest = _hex_digest(hex_digest)
    if scheme != "sha256" or digest is None:
        raise _malformed(_GITHUB_SIGNATURE)
    _check_signatures([secret.encode() for secret in secrets], body, [digest])
    # Without a delivery id, identical bodies are the same delivery.
    delivery_id = headers.get("x-github-delivery") or _sha256_id(body)
    return VerifiedDelivery(delivery_id=delivery_id)


def _verify_stripe(
    secrets: Sequence[str], headers: Mapping[str, str], body: bytes, now: float
) -> VerifiedDelivery:
    """Stripe: ``Stripe-Signature: t=<seconds>,v1=<hex>...`` over ``t.body``."""
    timestamps: list[str] = []
    signatures: list[bytes] = []
    for item in headers.get("stripe-signature", "").split(","):
        key, _, value = item.strip().partition("=")
        if key == "t":
            timestamps.append(value)
        # v0 is Stripe's test-mode scheme and other keys are future ones: skip them.
        elif key == "v1" and (digest := _hex_digest(value)) is not None:
            signatures.append(digest)
    # Two timestamps would leave it open which one was signed.
    if len(timestamps) != 1 or not _SECONDS.fullmatch(timestamps[0]) or not signatures:
        raise _malformed(_STRIPE_SIGNATURE)
    _check_timestamp(timestamps[0], now)
    content = f"{timestamps[0]}.".encode() + body
    # Stripe's key is the whole secret string, whsec_ included, not a decoded one.
    _check_signatures([secret.encode() for secret in secrets], content, signatures)
    return VerifiedDelivery(delivery_id=_stripe_event_id(body) or _sha256_id(content))


_VERIFIERS: dict[
    str, Callable[[Sequence[str], Mapping[str, str], bytes, float], VerifiedDelivery]
] = {"standard": _verify_standard, "github": _verify_github, "stripe": _verify_stripe}


def _malformed(problem: str) -> InvalidSignature:
    return InvalidSignature(f"{_BAD_HEADERS}: {problem}")


def _check_timestamp(timestamp: str, now: float) -> None:
    """Refuse a timestamp more than the tolerance away from now, in either direction."""
    # A future one is refused too: it would otherwise stay replayable for longer.
    if abs(now - int(timestamp)) > TOLERANCE_SECONDS:
        raise InvalidSignature(_BAD_TIMESTAMP)


def _check_signatures(keys: Sequence[bytes], content: bytes, signatures: Sequence[bytes]) -> None:
    """Refuse unless some key's HMAC-SHA256 of the content is one of the signatures."""
    matched = False
    # Every pair is compared, without stopping early, so timing says nothing of which matched.
    for key in keys:
        expected = hmac.new(key, content, hashlib.sha256).digest()
        for signature in signatures:
            matched |= hmac.compare_digest(expected, signature)
    if not matched:
        raise InvalidSignature(_NO_MATCH)


def _standard_key(secret: str) -> bytes:
    """The HMAC key of a Standard Webhooks secret: the base64 after ``whsec_``."""
    return base64.b64decode(secret.removeprefix(_WHSEC), validate=True)


def _base64_digest(value: str) -> bytes | None:
    """A base64 SHA-256 digest, or None when it is not one."""
    try:
        digest = base64.b64decode(value, validate=True)
    except ValueError:  # binascii.Error, or a non-ASCII character
        return None
    return digest if len(digest) == hashlib.sha256().digest_size else None


def _hex_digest(value: str) -> bytes | None:
    """A hex SHA-256 digest, or None when it is not one."""
    return bytes.fromhex(value) if _SHA256_HEX.fullmatch(value) else None


def _sha256_id(content: bytes) -> str:
    """A delivery id made from the signed content, for senders that send none."""
    return "sha256:" + hashlib.sha256(content).hexdigest()


def _stripe_event_id(body: bytes) -> str | None:
    """The ``id`` of a Stripe event body (``evt_...``), or None when there is none."""
    try:
        event: object = json.loads(body)
    except (ValueError, RecursionError):
        return None
    event_id = event.get("id") if isinstance(event, dict) else None
    return event_id if isinstance(event_id, str) and event_id else None
