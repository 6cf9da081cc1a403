"""The one place every error body is rendered: ``{"error": code, "message": ...}``."""

from __future__ import annotations

import logging
import re
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import (
    BadHttpMethod,
    BadStatusLine,
    ContentEncodingError,
    ContentLengthError,
    LineTooLong,
    TransferEncodingError,
)
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

from libflow.api.responses import json_response
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


def _code_for_status(status: int) -> tuple[str, str]:
    """The code and message of an error aiohttp answers with a bare HTTP status."""
    return _CODE_BY_HTTP_STATUS.get(
        status, ("INTERNAL" if status >= 500 else "VALIDATION_ERROR", "")
    )


def error_response(
    code: str, message: str, *, details: Any = None, status: int | None = None
) -> web.Response:
    """The one shape of every error body."""
    body: dict[str, Any] = {"error": code, "message": message}
    if details is not None:
        body["details"] = details
    response = json_response(body, status=status or STATUS_BY_CODE.get(code, 500))
    if code == "UNAVAILABLE":
        response.headers["Retry-After"] = "5"
    return response


def render_error(request: web.Request, err: Exception) -> web.StreamResponse:
    """The JSON error answer of a domain error, an aiohttp HTTP error (400 and up: the
    middleware lets a redirect through) or a crash."""
    if isinstance(err, RateLimited):
        response = error_response(err.code, err.message, status=err.status)
        response.headers["Retry-After"] = str(err.retry_after)
        return response
    if isinstance(err, LibflowError):
        response = error_response(err.code, err.message, details=err.details, status=err.status)
        if isinstance(err.__cause__, web.RequestPayloadError):  # parse_body's INVALID_JSON
            response.force_close()  # see below
        return response
    if isinstance(err, web.HTTPRequestEntityTooLarge):
        # aiohttp's text names the route's limit ("Maximum request body size N exceeded.").
        limit = re.search(r"size (\d+)", err.text or "")
        said = f": at most {int(limit.group(1)):,} bytes" if limit else ""
        return error_response("PAYLOAD_TOO_LARGE", f"request body is too large{said}")
    if isinstance(err, web.HTTPException):
        code, message = _code_for_status(err.status)
        response = error_response(code, message or err.reason, status=err.status)
        if err.status == 405 and "Allow" in err.headers:
            response.headers["Allow"] = err.headers["Allow"]
        return response
    if isinstance(err, web.RequestPayloadError):
        # Routes that take JSON say INVALID_JSON themselves (parse_body); this is the rest.
        message = f"the request body cannot be read: {unreadable_body(err)}"
        response = error_response("VALIDATION_ERROR", message)
        # The rest of the body cannot be read either: the connection closes after this
        # answer, and says so, so that a client does not send its next request on it.
        response.force_close()
        return response
    if dependency_down(err):
        # The database or another dependency went away: the caller may retry.
        logger.warning("dependency unavailable on %s %s: %r", request.method, request.path, err)
        return error_response("UNAVAILABLE", "a dependency is unavailable, retry later")
    logger.error("unhandled error on %s %s", request.method, request.path, exc_info=err)
    return error_response("INTERNAL", "internal server error")


def unreadable_body(err: web.RequestPayloadError) -> str:
    """Why aiohttp could not read a request body, in the client's terms."""
    cause = err.__cause__
    if isinstance(cause, ContentEncodingError):
        return "its bytes are not what its Content-Encoding says"
    if isinstance(cause, ContentLengthError):
        return "it ended before its Content-Length"
    if isinstance(cause, TransferEncodingError):
        return "its chunked transfer encoding is malformed"
    return "it is malformed"


def _malformed_request(exc: BaseException | None) -> str:
    """What was wrong with a request aiohttp's HTTP parser refused, without its bytes."""
    if isinstance(exc, LineTooLong):
        return "malformed HTTP request: the request line or a header is too long"
    if isinstance(exc, BadHttpMethod | BadStatusLine):
        return "malformed HTTP request: not a valid request line"
    # aiohttp's first line says what it refused (its next lines quote the bytes).
    first_line = str(getattr(exc, "message", "")).strip().split("\n", 1)[0].rstrip(":")
    return f"malformed HTTP request: {first_line[:200]}" if first_line else "malformed HTTP request"


class JsonErrorRequestHandler(RequestHandler):
    """aiohttp's HTTP connection, answering its own errors with the JSON error body.

    aiohttp answers a request its parser refuses (an over-long request line, a bad
    Content-Length, a folded header) and a crash outside the middlewares itself, in
    text/plain and before any middleware runs; ``handle_error`` is the one place it does.
    """

    __slots__ = ()

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        """The JSON error body for an error aiohttp met outside the application."""
        if status >= 500:
            logger.error("unhandled error on %s %s", request.method, request.path, exc_info=exc)
            code, text = _code_for_status(status)
            text = text or "internal server error"
        else:
            # The client's mistake, not ours: no traceback in the log.
            text = _malformed_request(exc)
            logger.info("refused from %s: %s", request.remote, text)
            code = _code_for_status(status)[0]
        if request.writer.output_size > 0:  # as aiohttp: the answer has begun, cut it off
            raise ConnectionError("response already begun, cannot send the error")
        response = error_response(code, text, status=status)
        response.force_close()  # as aiohttp: the stream may be out of step
        return response

    def log_exception(self, *args: Any, **kw: Any) -> None:
        """Log aiohttp's own errors, except a body the client garbled (answered 400)."""
        # After the answer aiohttp reads what is left of the body, meets the same error
        # again and would log it as unhandled, with a traceback.
        if isinstance(kw.get("exc_info"), web.RequestPayloadError):
            logger.debug("the rest of an unreadable request body was dropped")
            return
        super().log_exception(*args, **kw)


class JsonErrorServer(web.Server):
    """aiohttp's server, with connections that answer aiohttp's own errors in JSON."""

    def __call__(self) -> RequestHandler:
        """A connection (what asyncio calls a protocol) of this server."""
        return JsonErrorRequestHandler(self, loop=self._loop, **self._kwargs)


def serve_json_errors(app: web.Application) -> None:
    """Make every server that runs ``app`` answer aiohttp's own errors with the JSON body.

    aiohttp has no hook for it (aio-libs/aiohttp#3287): run_app, AppRunner and the test
    server all ask the application for its server (``_make_handler``), so the application
    is where the server's class is chosen, whichever runner serves it.
    """
    make_server = app._make_handler

    def make_json_error_server(**kwargs: Any) -> web.Server:
        server = make_server(**kwargs)
        server.__class__ = JsonErrorServer  # adds no state: only how connections are made
        return server

    # object.__setattr__: Application warns of new attributes in debug mode.
    object.__setattr__(app, "_make_handler", make_json_error_server)
