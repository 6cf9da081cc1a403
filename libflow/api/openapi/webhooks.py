"""The webhook parts of the OpenAPI document: management and the receiver."""

from __future__ import annotations

from typing import Any

from libflow.api.bodies import Body, CreateWebhookBody
from libflow.api.openapi.common import (
    AUTH_ERRORS,
    DATE,
    ERROR,
    LINK_NEXT,
    NULLABLE_DATE,
    NULLABLE_STR,
    PROJECT,
    RETRY_AFTER,
    STR,
    WF,
    body,
    errors,
    json_response,
    limit_param,
    path_params,
    query_param,
    ref,
)
from libflow.api.openapi.runs import accepted_run
from libflow.models import DeliveryStatus
from libflow.webhooks.inbox import MAX_DELIVERIES_LISTED, MAX_DELIVERY_BYTES
from libflow.webhooks.manage import ROTATION_GRACE
from libflow.webhooks.signatures import SCHEMES, TOLERANCE_SECONDS

WEBHOOK = f"{PROJECT}/webhooks/{{webhookId}}"
RECEIVER = "/webhooks/{webhookId}"
_GRACE_HOURS = int(ROTATION_GRACE.total_seconds() // 3600)
_TOLERANCE_MINUTES = TOLERANCE_SECONDS // 60

WEBHOOK_BODIES: tuple[type[Body], ...] = (CreateWebhookBody,)
WEBHOOK_SCHEMAS: dict[str, Any] = {
    "Webhook": {
        "type": "object",
        "required": ["webhookId", "url", "scheme", "event", "workflowId", "createdDate"],
        "properties": {
            "webhookId": STR,
            "url": {
                "type": "string",
                "format": "uri",
                "description": "Where the sender POSTs deliveries (no API key)",
            },
            "scheme": {"type": "string", "enum": list(SCHEMES)},
            "event": {"type": "string", "description": "The runEvent of the runs it starts"},
            "workflowId": STR,
            "createdDate": DATE,
        },
    },
    "WebhookCreated": {
        "allOf": [
            ref("Webhook"),
            {
                "type": "object",
                "required": ["secret", "previousSecretExpiresDate"],
                "properties": {
                    "secret": {
                        "type": "string",
                        "description": "The signing secret; shown only on create and rotate",
                    },
                    "previousSecretExpiresDate": {
                        **NULLABLE_DATE,
                        "description": "When the previous secret stops verifying (after a "
                        "rotation), else null",
                    },
                },
            },
        ]
    },
    "WebhookDelivery": {
        "type": "object",
        "required": [
            "deliveryId",
            "webhookId",
            "externalId",
            "status",
            "attempts",
            "runId",
            "error",
            "receivedDate",
            "startedDate",
            "finishedDate",
        ],
        "properties": {
            "deliveryId": STR,
            "webhookId": STR,
            "externalId": {"type": "string", "description": "The sender's delivery id"},
            "status": {"type": "string", "enum": [s.value for s in DeliveryStatus]},
            "attempts": {"type": "integer", "minimum": 0},
            "runId": NULLABLE_STR,
            "error": {
                "type": ["object", "null"],
                "properties": {"code": STR, "node": NULLABLE_STR, "message": STR},
            },
            "receivedDate": DATE,
            "startedDate": NULLABLE_DATE,
            "finishedDate": NULLABLE_DATE,
        },
    },
}

_RECEIVER_DESCRIPTION = f"""\
Receive a delivery. No API key: the signature authenticates the sender. The raw body bytes \
are verified as sent (never re-serialized JSON), with the webhook's secret or, for \
{_GRACE_HOURS} hours after a rotation, its previous one. Once the delivery is committed to the \
inbox the answer is 200 and the workflow runs later, with `runEvent` = the webhook's `event` \
and inputs `{{payload: <parsed JSON, else text>, headers: {{lower-cased, signature headers \
removed}}}}`. A repeated delivery id is acknowledged again and runs once.

The webhook's `scheme` says which headers carry the signature (all HMAC-SHA256):

- `standard` ([Standard Webhooks](https://www.standardwebhooks.com/)): `webhook-id`, \
`webhook-timestamp` (Unix seconds, within {_TOLERANCE_MINUTES} minutes) and \
`webhook-signature` (space-separated `v1,<base64>` entries) over \
`<webhook-id>.<webhook-timestamp>.<body>`; the key is the base64 after `whsec_` in the \
secret. The delivery id is `webhook-id`.
- `github`: `X-Hub-Signature-256: sha256=<hex>` over the body; the key is the secret's \
UTF-8 bytes. The delivery id is `X-GitHub-Delivery`, else a hash of the body.
- `stripe`: `Stripe-Signature: t=<Unix seconds>,v1=<hex>` (one `t`, within \
{_TOLERANCE_MINUTES} minutes; one or more `v1`) over `<t>.<body>`; the key is the secret's \
UTF-8 bytes. The delivery id is the event's `id`.
"""


def _header(name: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "header",
        "required": False,
        "schema": STR,
        "description": description,
    }


def _error(description: str, code: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {
            "application/json": {
                "schema": ERROR,
                "example": {"error": code, "message": description},
            }
        },
    }


def _receiver() -> dict[str, Any]:
    return {
        "summary": "Receive a webhook delivery (verified by its signature)",
        "description": _RECEIVER_DESCRIPTION,
        "security": [],
        "parameters": [
            *path_params("webhookId"),
            _header("webhook-id", "standard: the delivery id"),
            _header("webhook-timestamp", "standard: Unix seconds of the signature"),
            _header("webhook-signature", "standard: space-separated `v1,<base64>` signatures"),
            _header("X-Hub-Signature-256", "github: `sha256=<hex>` of the body"),
            _header("X-GitHub-Delivery", "github: the delivery id (optional)"),
            _header("Stripe-Signature", "stripe: `t=<Unix seconds>,v1=<hex>`"),
        ],
        "requestBody": {
            "required": False,
            "description": f"The payload, any content type, at most {MAX_DELIVERY_BYTES} "
            "bytes (1 MiB)",
            "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}},
        },
        "responses": {
            "200": json_response(
                {
                    "type": "object",
                    "required": ["ok"],
                    "properties": {"ok": {"const": True}},
                },
                "committed to the inbox (or a repeat of a delivery already committed)",
            ),
            "400": _error(
                "the body is not the gzip or deflate its Content-Encoding says",
                "VALIDATION_ERROR",
            ),
            "401": _error("the signature does not verify", "INVALID_SIGNATURE"),
            "404": _error("unknown or deleted webhook", "NOT_FOUND"),
            "413": _error("the body is over 1 MiB", "PAYLOAD_TOO_LARGE"),
            "503": {
                **_error("a dependency is unavailable, retry later", "UNAVAILABLE"),
                "headers": RETRY_AFTER,
            },
        },
    }


def webhook_operations() -> dict[str, dict[str, Any]]:
    """The paths that manage webhooks, list their deliveries, and receive deliveries."""
    workflow = path_params("projectId", "workflowId")
    webhook = path_params("projectId", "webhookId")
    created = ref("WebhookCreated")
    return {
        f"{WF}/{{workflowId}}/webhooks": {
            "post": {
                "summary": "Add a webhook trigger to a workflow (the answer holds its secret)",
                "description": "Its `event` (default `webhook`) must start runs of the "
                "workflow's latest version: 400 UNKNOWN_EVENT (with `knownEvents`) otherwise.",
                "parameters": workflow,
                "requestBody": body(CreateWebhookBody, required=False),
                "responses": {
                    "201": json_response(created, "the webhook and its secret"),
                    **errors(400, *AUTH_ERRORS, 404),
                },
            },
            "get": {
                "summary": "The workflow's webhooks, oldest first (without secrets)",
                "parameters": workflow,
                "responses": {
                    "200": json_response({"type": "array", "items": ref("Webhook")}, "webhooks"),
                    **errors(*AUTH_ERRORS, 404),
                },
            },
        },
        WEBHOOK: {
            "get": {
                "summary": "One webhook (without its secret)",
                "parameters": webhook,
                "responses": {
                    "200": json_response(ref("Webhook"), "the webhook"),
                    **errors(*AUTH_ERRORS, 404),
                },
            },
            "delete": {
                "summary": "Delete a webhook (deliveries already accepted still run)",
                "parameters": webhook,
                "responses": {"204": {"description": "deleted"}, **errors(*AUTH_ERRORS, 404)},
            },
        },
        f"{WEBHOOK}/rotate": {
            "post": {
                "summary": f"A new secret; the previous one keeps verifying for {_GRACE_HOURS} h",
                "parameters": webhook,
                "responses": {
                    "200": json_response(
                        created, "the webhook, its new secret, and when the previous one expires"
                    ),
                    **errors(*AUTH_ERRORS, 404),
                },
            },
        },
        f"{WEBHOOK}/deliveries": {
            "get": {
                "summary": "The webhook's deliveries, newest first (without bodies)",
                "description": "Paged like the run list: a `Link` header names the next page, "
                "if any. A bad limit or cursor is 400 VALIDATION_ERROR.",
                "parameters": [
                    *webhook,
                    limit_param(MAX_DELIVERIES_LISTED, default=100),
                    query_param("cursor", STR, "From the `Link` header of the previous page"),
                ],
                "responses": {
                    "200": {
                        **json_response(
                            {"type": "array", "items": ref("WebhookDelivery")}, "deliveries"
                        ),
                        "headers": LINK_NEXT,
                    },
                    **errors(400, *AUTH_ERRORS, 404),
                },
            },
        },
        f"{WEBHOOK}/deliveries/{{deliveryId}}/replay": {
            "post": {
                "summary": "Run a delivery's stored payload again, as a new queued run",
                "description": "Whatever the delivery's status: a new run (trigger `replay`) "
                "of the stored payload (inputs `{payload, headers}` as a delivery's run has "
                "them), queued as `POST .../runs` queues one. 400 INVALID_INPUTS when the "
                "stored payload cannot be a run's input.",
                "parameters": path_params("projectId", "webhookId", "deliveryId"),
                "responses": {
                    "202": accepted_run("the new run, queued"),
                    **errors(400, *AUTH_ERRORS, 404),
                },
            },
        },
        RECEIVER: {"post": _receiver()},
    }
