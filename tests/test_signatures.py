"""Webhook signature schemes: Standard Webhooks, GitHub and Stripe, verified on raw bytes."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import time
from datetime import UTC, datetime

import pytest
from multidict import CIMultiDict
from standardwebhooks.webhooks import Webhook

from libflow.api.errors import STATUS_BY_CODE
from libflow.webhooks.signatures import (
    SCHEMES,
    SIGNATURE_HEADERS,
    TOLERANCE_SECONDS,
    InvalidSignature,
    VerifiedDelivery,
    new_secret,
    verify,
)

NOW = 1_700_000_000
BODY = b'{"id": "evt_1NG8Du2eZvKYlo2CUI79vXWy", "type": "invoice.paid", "note": "caf\xc3\xa9"}'
MSG_ID = "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"

BAD_HEADERS = "missing or malformed signature headers"
BAD_TIMESTAMP = "timestamp outside the tolerance"
NO_MATCH = "signature does not match"

STANDARD_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
GITHUB_SECRET = "It's a Secret to Everybody"
STRIPE_SECRET = "whsec_6GJrTkCm0jP1aHU4Fg8xYzEd2QbnLw9s"
SECRET_OF = {"standard": STANDARD_SECRET, "github": GITHUB_SECRET, "stripe": STRIPE_SECRET}
TIMED_SCHEMES = ("standard", "stripe")


def standard_headers(
    secret: str, body: bytes, *, timestamp: int = NOW, msg_id: str = MSG_ID
) -> CIMultiDict[str]:
    """Headers as a Standard Webhooks sender makes them, signed by the reference library."""
    signature = Webhook(secret).sign(msg_id, datetime.fromtimestamp(timestamp, UTC), body.decode())
    return CIMultiDict(
        {"webhook-id": msg_id, "webhook-timestamp": str(timestamp), "webhook-signature": signature}
    )


def github_headers(secret: str, body: bytes) -> CIMultiDict[str]:
    """Headers as GitHub sends them: an HMAC-SHA256 of the body, keyed by the secret's UTF-8."""
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return CIMultiDict({"X-Hub-Signature-256": f"sha256={digest}"})


def stripe_v1(secret: str, body: bytes, timestamp: int) -> str:
    """Stripe's v1 signature: HMAC-SHA256 of ``t.body`` keyed by the whole secret string."""
    return hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def stripe_headers(secret: str, body: bytes, *, timestamp: int = NOW) -> CIMultiDict[str]:
    """Headers as Stripe sends them."""
    v1 = stripe_v1(secret, body, timestamp)
    return CIMultiDict({"Stripe-Signature": f"t={timestamp},v1={v1}"})


def signed(scheme: str, secret: str, body: bytes, *, timestamp: int = NOW) -> CIMultiDict[str]:
    """Headers of a delivery of the scheme, signed with the secret."""
    if scheme == "standard":
        return standard_headers(secret, body, timestamp=timestamp)
    if scheme == "stripe":
        return stripe_headers(secret, body, timestamp=timestamp)
    return github_headers(secret, body)


def refusal(scheme: str, secrets: list[str], headers: CIMultiDict[str], body: bytes) -> str:
    """The public message of the InvalidSignature that verify raises."""
    with pytest.raises(InvalidSignature) as caught:
        verify(scheme, secrets, headers, body, now=NOW)
    return caught.value.message


# --- standard ---------------------------------------------------------------------------------


def test_standard_accepts_a_signature_made_by_the_standardwebhooks_library() -> None:
    headers = standard_headers(STANDARD_SECRET, BODY)
    assert verify("standard", [STANDARD_SECRET], headers, BODY, now=NOW) == VerifiedDelivery(
        delivery_id=MSG_ID
    )


def test_standard_secret_from_new_secret_interoperates_with_the_standardwebhooks_library() -> None:
    secret = new_secret("standard")
    # The library's verify() reads the wall clock, so this one delivery is signed for now.
    now = int(time.time())
    headers = standard_headers(secret, BODY, timestamp=now)
    assert verify("standard", [secret], headers, BODY, now=now).delivery_id == MSG_ID
    assert Webhook(secret).verify(BODY, dict(headers)) == json.loads(BODY)


def test_standard_accepts_a_secret_without_the_whsec_prefix() -> None:
    headers = standard_headers(STANDARD_SECRET, BODY)
    unprefixed = STANDARD_SECRET.removeprefix("whsec_")
    assert verify("standard", [unprefixed], headers, BODY, now=NOW).delivery_id == MSG_ID


def test_standard_accepts_when_one_of_several_signatures_matches() -> None:
    headers = standard_headers(STANDARD_SECRET, BODY)
    wrong = standard_headers(new_secret("standard"), BODY)["webhook-signature"]
    headers["webhook-signature"] = f"{wrong} {headers['webhook-signature']} {wrong}"
    assert verify("standard", [STANDARD_SECRET], headers, BODY, now=NOW).delivery_id == MSG_ID


def test_standard_ignores_entries_of_other_versions() -> None:
    headers = standard_headers(STANDARD_SECRET, BODY)
    headers["webhook-signature"] = (
        f"v1a,c2lnbmVkIGJ5IGFuIGVkMjU1MTkga2V5 {headers['webhook-signature']}"
    )
    assert verify("standard", [STANDARD_SECRET], headers, BODY, now=NOW).delivery_id == MSG_ID


def test_standard_does_not_take_a_v1a_entry_for_a_v1_signature() -> None:
    headers = standard_headers(STANDARD_SECRET, BODY)
    headers["webhook-signature"] = headers["webhook-signature"].replace("v1,", "v1a,")
    assert refusal("standard", [STANDARD_SECRET], headers, BODY).startswith(BAD_HEADERS)


def test_standard_reads_header_names_case_insensitively() -> None:
    headers = CIMultiDict(
        (name.title(), value) for name, value in standard_headers(STANDARD_SECRET, BODY).items()
    )
    assert list(headers) == ["Webhook-Id", "Webhook-Timestamp", "Webhook-Signature"]
    assert verify("standard", [STANDARD_SECRET], headers, BODY, now=NOW).delivery_id == MSG_ID


def test_standard_checks_the_timestamp_before_the_signature() -> None:
    headers = standard_headers(new_secret("standard"), BODY, timestamp=NOW - 3600)
    assert refusal("standard", [STANDARD_SECRET], headers, BODY) == BAD_TIMESTAMP


# --- github -----------------------------------------------------------------------------------


def test_github_accepts_its_published_test_vector() -> None:
    # https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries
    body = b"Hello, World!"
    headers = CIMultiDict(
        {
            "X-Hub-Signature-256": "sha256="
            "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
        }
    )
    assert verify("github", [GITHUB_SECRET], headers, body, now=NOW)


def test_github_delivery_id_is_the_x_github_delivery_header() -> None:
    headers = github_headers(GITHUB_SECRET, BODY)
    headers["X-GitHub-Delivery"] = "72d3162e-cc78-11e3-81ab-4c9367dc0958"
    delivery = verify("github", [GITHUB_SECRET], headers, BODY, now=NOW)
    assert delivery.delivery_id == "72d3162e-cc78-11e3-81ab-4c9367dc0958"


def test_github_delivery_id_without_the_header_is_the_body_hash() -> None:
    delivery = verify("github", [GITHUB_SECRET], github_headers(GITHUB_SECRET, BODY), BODY, now=NOW)
    assert delivery.delivery_id == "sha256:" + hashlib.sha256(BODY).hexdigest()


# --- stripe -----------------------------------------------------------------------------------


def test_stripe_accepts_a_header_built_as_stripe_does() -> None:
    headers = stripe_headers(STRIPE_SECRET, BODY)
    assert verify("stripe", [STRIPE_SECRET], headers, BODY, now=NOW)


def test_stripe_key_is_the_whole_secret_string_not_a_decoded_one() -> None:
    decoded = base64.b64decode(STRIPE_SECRET.removeprefix("whsec_"))
    content = f"{NOW}.".encode() + BODY
    v1 = hmac.new(decoded, content, hashlib.sha256).hexdigest()
    headers = CIMultiDict({"Stripe-Signature": f"t={NOW},v1={v1}"})
    assert refusal("stripe", [STRIPE_SECRET], headers, BODY) == NO_MATCH


def test_stripe_delivery_id_is_the_event_id() -> None:
    delivery = verify("stripe", [STRIPE_SECRET], stripe_headers(STRIPE_SECRET, BODY), BODY, now=NOW)
    assert delivery.delivery_id == "evt_1NG8Du2eZvKYlo2CUI79vXWy"


def test_stripe_delivery_id_of_a_body_without_an_event_id_is_the_signed_content_hash() -> None:
    body = b'["not", "an", "event"]'
    delivery = verify("stripe", [STRIPE_SECRET], stripe_headers(STRIPE_SECRET, body), body, now=NOW)
    assert delivery.delivery_id == "sha256:" + hashlib.sha256(f"{NOW}.".encode() + body).hexdigest()


def test_stripe_accepts_when_one_of_several_v1_matches() -> None:
    good = stripe_v1(STRIPE_SECRET, BODY, NOW)
    other = stripe_v1(new_secret("stripe"), BODY, NOW)
    headers = CIMultiDict({"Stripe-Signature": f"t={NOW},v1={other},v1={good},v0={other}"})
    assert verify("stripe", [STRIPE_SECRET], headers, BODY, now=NOW)


def test_stripe_secret_from_new_secret_is_whsec_and_alphanumerics() -> None:
    assert re.fullmatch(r"whsec_[A-Za-z0-9]{43}", new_secret("stripe"))


# --- failures ---------------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_tampered_body_does_not_match(scheme: str) -> None:
    headers = signed(scheme, SECRET_OF[scheme], BODY)
    assert refusal(scheme, [SECRET_OF[scheme]], headers, BODY + b" ") == NO_MATCH


@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_wrong_secret_does_not_match(scheme: str) -> None:
    headers = signed(scheme, new_secret(scheme), BODY)
    assert refusal(scheme, [SECRET_OF[scheme]], headers, BODY) == NO_MATCH


@pytest.mark.parametrize("scheme", TIMED_SCHEMES)
def test_a_timestamp_over_five_minutes_old_is_refused(scheme: str) -> None:
    headers = signed(scheme, SECRET_OF[scheme], BODY, timestamp=NOW - TOLERANCE_SECONDS - 1)
    assert refusal(scheme, [SECRET_OF[scheme]], headers, BODY) == BAD_TIMESTAMP


@pytest.mark.parametrize("scheme", TIMED_SCHEMES)
def test_a_timestamp_over_five_minutes_ahead_is_refused(scheme: str) -> None:
    headers = signed(scheme, SECRET_OF[scheme], BODY, timestamp=NOW + TOLERANCE_SECONDS + 1)
    assert refusal(scheme, [SECRET_OF[scheme]], headers, BODY) == BAD_TIMESTAMP


@pytest.mark.parametrize("scheme", TIMED_SCHEMES)
@pytest.mark.parametrize("offset", [-TOLERANCE_SECONDS, TOLERANCE_SECONDS])
def test_a_timestamp_exactly_five_minutes_away_is_accepted(scheme: str, offset: int) -> None:
    headers = signed(scheme, SECRET_OF[scheme], BODY, timestamp=NOW + offset)
    assert verify(scheme, [SECRET_OF[scheme]], headers, BODY, now=NOW)


@pytest.mark.parametrize(
    ("scheme", "header"),
    [
        ("standard", "webhook-id"),
        ("standard", "webhook-timestamp"),
        ("standard", "webhook-signature"),
        ("github", "x-hub-signature-256"),
        ("stripe", "stripe-signature"),
    ],
)
def test_a_missing_header_is_refused_naming_it(scheme: str, header: str) -> None:
    headers = signed(scheme, SECRET_OF[scheme], BODY)
    del headers[header]
    message = refusal(scheme, [SECRET_OF[scheme]], headers, BODY)
    assert message.startswith(f"{BAD_HEADERS}: ")
    assert header.lower() in message.lower()


@pytest.mark.parametrize(
    ("scheme", "header", "value"),
    [
        ("standard", "webhook-timestamp", "abc"),
        ("standard", "webhook-timestamp", f"{NOW}.5"),
        ("standard", "webhook-signature", "v1,not-base64!"),
        ("standard", "webhook-signature", "v1,c2hvcnQ="),
        ("standard", "webhook-signature", "v2,c2lnbmVkIGJ5IGFuIGVkMjU1MTkga2V5"),
        ("github", "X-Hub-Signature-256", "sha1=" + hashlib.sha1(BODY).hexdigest()),
        ("github", "X-Hub-Signature-256", "sha256=" + "zz" * 32),
        ("github", "X-Hub-Signature-256", hashlib.sha256(BODY).hexdigest()),
        ("stripe", "Stripe-Signature", "t=abc,v1=" + "ab" * 32),
        ("stripe", "Stripe-Signature", f"t={NOW}"),
        ("stripe", "Stripe-Signature", f"t={NOW},v0={'ab' * 32}"),
        ("stripe", "Stripe-Signature", "v1=" + "ab" * 32),
        ("stripe", "Stripe-Signature", f"t={NOW},t={NOW},v1={'ab' * 32}"),
    ],
)
def test_a_malformed_header_is_refused_saying_what_it_must_be(
    scheme: str, header: str, value: str
) -> None:
    headers = signed(scheme, SECRET_OF[scheme], BODY)
    headers[header] = value
    message = refusal(scheme, [SECRET_OF[scheme]], headers, BODY)
    assert message.lower().startswith(f"{BAD_HEADERS}: {header}".lower()), message


# --- rotation ---------------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", SCHEMES)
def test_the_previous_secret_still_verifies_during_rotation(scheme: str) -> None:
    previous = SECRET_OF[scheme]
    headers = signed(scheme, previous, BODY)
    assert verify(scheme, [new_secret(scheme), previous], headers, BODY, now=NOW)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_secret_no_longer_in_the_list_does_not_verify(scheme: str) -> None:
    retired = SECRET_OF[scheme]
    headers = signed(scheme, retired, BODY)
    current = [new_secret(scheme), new_secret(scheme)]
    assert refusal(scheme, current, headers, BODY) == NO_MATCH


# --- secrets, schemes and errors --------------------------------------------------------------


def test_a_standard_secret_is_whsec_and_the_base64_of_24_random_bytes() -> None:
    secret = new_secret("standard")
    assert secret.startswith("whsec_")
    assert len(base64.b64decode(secret.removeprefix("whsec_"), validate=True)) == 24


@pytest.mark.parametrize("scheme", SCHEMES)
def test_new_secrets_differ(scheme: str) -> None:
    assert new_secret(scheme) != new_secret(scheme)


def test_an_unknown_scheme_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="unknown webhook scheme"):
        verify("gitlab", [GITHUB_SECRET], CIMultiDict(), BODY, now=NOW)
    with pytest.raises(ValueError, match="unknown webhook scheme"):
        new_secret("gitlab")


def test_signature_headers_name_every_scheme_header_in_lower_case() -> None:
    assert {"webhook-signature", "x-hub-signature-256", "stripe-signature"} <= SIGNATURE_HEADERS
    assert all(name == name.lower() for name in SIGNATURE_HEADERS)


def test_invalid_signature_is_a_401_invalid_signature_error() -> None:
    error = InvalidSignature(NO_MATCH)
    assert (error.status, error.code, error.message) == (401, "INVALID_SIGNATURE", NO_MATCH)
    assert STATUS_BY_CODE["INVALID_SIGNATURE"] == 401
