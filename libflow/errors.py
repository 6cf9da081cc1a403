"""Domain errors and the one middleware that renders every error body."""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

from aiohttp import web
from asyncpg.exceptions import (
    AdminShutdownError,
    CannotConnectNowError,
    CrashShutdownError,
    InterfaceError,
    InternalClientError,
    PostgresConnectionError,
    TooManyConnectionsError,
)
from tortoise.exceptions import DBConnectionError, TransactionManagementError

logger = logging.getLogger("libflow.errors")


class LibflowError(Exception):
    """An error the API reports to its caller as ``{"error": code, "message": ...}``."""

    code: ClassVar[str] = "INTERNAL"

    def __init__(self, message: str, *, details: Any = None, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details
        self.status = status or STATUS_BY_CODE.get(self.code, 500)


class Unauthorized(LibflowError):
    """No API key, or one libflow does not know."""

    code = "UNAUTHORIZED"


class Forbidden(LibflowError):
    """The caller is known but may not do this."""

    code = "FORBIDDEN"


class NotFound(LibflowError):
    """No such resource in the caller's project."""

    code = "NOT_FOUND"


class ValidationFailed(LibflowError):
    """The request is well-formed JSON but its values are wrong."""

    code = "VALIDATION_ERROR"


class InvalidJson(LibflowError):
    """The request body is not JSON."""

    code = "INVALID_JSON"


class UnsupportedFileType(LibflowError):
    """The fileType is not one the library accepts."""

    code = "UNSUPPORTED_FILE_TYPE"


class UploadIncomplete(LibflowError):
    """Finalize was called before the bytes arrived."""

    code = "UPLOAD_INCOMPLETE"


class EmptyUpload(LibflowError):
    """The upload holds zero bytes."""

    code = "EMPTY_UPLOAD"


class NotReady(LibflowError):
    """The file is not finalized yet."""

    code = "NOT_READY"


class ContentTypeMismatch(LibflowError):
    """The bytes were stored with another Content-Type than the record's."""

    code = "CONTENT_TYPE_MISMATCH"


class PayloadTooLarge(LibflowError):
    """The body is over the size limit."""

    code = "PAYLOAD_TOO_LARGE"


class LengthRequired(LibflowError):
    """An upload came without a Content-Length."""

    code = "LENGTH_REQUIRED"


class MethodNotAllowed(LibflowError):
    """The route exists but not with this method."""

    code = "METHOD_NOT_ALLOWED"


class RateLimited(LibflowError):
    """The API key sent more requests than its rate limit allows."""

    code = "RATE_LIMITED"

    def __init__(self, retry_after: float) -> None:
        super().__init__("too many requests for this API key: retry after the Retry-After delay")
        # Whole seconds, rounded up: a client that waits that long gets a token.
        self.retry_after = max(1, math.ceil(retry_after))


class Unavailable(LibflowError):
    """A dependency (database, queue, storage) cannot be reached right now."""

    code = "UNAVAILABLE"


# The database (or another dependency) is out of reach for now: a connection refused or
# dropped mid-query, or PostgreSQL restarting. Tortoise translates only some of these.
DEPENDENCY_DOWN: tuple[type[BaseException], ...] = (
    DBConnectionError,
    ConnectionError,
    PostgresConnectionError,
    AdminShutdownError,
    CrashShutdownError,
    CannotConnectNowError,
    TooManyConnectionsError,
    # A connection the server dropped mid-operation (a restart) can be left in a state
    # asyncpg refuses to use: "cannot switch to state 12; another operation in progress".
    InternalClientError,
)


# What cleaning up after a dropped connection raises: rolling back the transaction of a
# connection PostgreSQL closed fails with asyncpg's "the underlying connection is closed".
_CLEANUP_ERRORS: tuple[type[BaseException], ...] = (InterfaceError, TransactionManagementError)


def dependency_down(err: BaseException) -> bool:
    """Whether ``err`` is a dependency going away, or was raised because of one.

    Followed: an explicit cause (``raise ... from``), and the context of an error raised
    while cleaning up after the outage (a failing rollback), which says nothing of the
    outage itself. Any other error raised while handling an outage is an error of its own.
    """
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        if isinstance(current, DEPENDENCY_DOWN):
            return True
        seen.add(id(current))
        if current.__cause__ is not None:
            current = current.__cause__
        elif isinstance(current, _CLEANUP_ERRORS) and not current.__suppress_context__:
            current = current.__context__
        else:
            current = None
    return False


STATUS_BY_CODE: dict[str, int] = {
    "UNAUTHORIZED": 401,
    "FORBIDDEN": 403,
    "NOT_FOUND": 404,
    "VALIDATION_ERROR": 400,
    "INVALID_JSON": 400,
    "UNSUPPORTED_FILE_TYPE": 400,
    "UPLOAD_INCOMPLETE": 409,
    "EMPTY_UPLOAD": 409,
    "NOT_READY": 409,
    "CONTENT_TYPE_MISMATCH": 409,
    "PAYLOAD_TOO_LARGE": 413,
    "LENGTH_REQUIRED": 411,
    "METHOD_NOT_ALLOWED": 405,
    "INVALID_SIGNATURE": 401,
    "UNKNOWN_EVENT": 400,
    "INVALID_INPUTS": 400,
    "INVALID_WORKFLOW": 400,
    "NODE_FAILED": 500,
    "RUN_TIMEOUT": 504,
    "RATE_LIMITED": 429,
    "UNAVAILABLE": 503,
    "INTERNAL": 500,
}

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
