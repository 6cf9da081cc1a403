"""The one place every error body is rendered: ``{"error": code, "message": ...}``."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from libflow.db.outages import dependency_down
from libflow.errors import STATUS_BY_CODE, LibflowError, RateLimited

logger = logging.getLogger("libflow.errors")


# aiohttp raises these itself (routing, body size); they get the same body as ours.
_CODE_BY_HTTP_STATUS: dict[int, tuple[str, str]] = {
    400: ("VALIDATION_ERROR", "bad request"),
    404: ("NOT_FOUND", "no such route"),
    405: ("METHOD_NOT_ALLOWED", "method not allowed on this route"),
    411: ("LENGTH_REQUIRED", "Content-Length is required"),
    413: ("PAYLOAD_TOO_LARGE", "request body is too large"),
}


def error_response(
    code: str, message: str, *, details: Any = None, status: int | None = None
) -> web.Response:
    """The one shape of every error body."""
    body: dict[str, Any] = {"error": code, "message": message}
    if details is not None:
        body["details"] = details
    response = web.json_response(body, status=status or STATUS_BY_CODE.get(code, 500))
    if code == "UNAVAILABLE":
        response.headers["Retry-After"] = "5"
    return response


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Render domain errors, aiohttp's HTTP errors and crashes as JSON error bodies."""
    try:
        return await handler(request)
    except RateLimited as err:
        response = error_response(err.code, err.message, status=err.status)
        response.headers["Retry-After"] = str(err.retry_after)
        return response
    except LibflowError as err:
        return error_response(err.code, err.message, details=err.details, status=err.status)
    except web.HTTPException as err:
        if err.status < 400:
            raise
        code, message = _CODE_BY_HTTP_STATUS.get(
            err.status, ("INTERNAL" if err.status >= 500 else "VALIDATION_ERROR", err.reason)
        )
        response = error_response(code, message, status=err.status)
        if err.status == 405 and "Allow" in err.headers:
            response.headers["Allow"] = err.headers["Allow"]
        return response
    except Exception as err:
        if dependency_down(err):
            # The database or another dependency went away: the caller may retry.
            logger.warning("dependency unavailable on %s %s: %r", request.method, request.path, err)
            return error_response("UNAVAILABLE", "a dependency is unavailable, retry later")
        logger.exception("unhandled error on %s %s", request.method, request.path)
        return error_response("INTERNAL", "internal server error")
