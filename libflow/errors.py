"""Domain errors: what a service raises, each with the code the API reports it under."""

from __future__ import annotations

import math
from typing import Any, ClassVar

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
    "RUN_FINISHED": 409,
    "FOLDER_NOT_EMPTY": 409,
    "RATE_LIMITED": 429,
    "UNAVAILABLE": 503,
    "INTERNAL": 500,
}


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


class FolderNotEmpty(LibflowError):
    """The folder holds files or folders: it cannot be removed."""

    code = "FOLDER_NOT_EMPTY"


class RunFinished(LibflowError):
    """The run has already ended: it cannot be cancelled."""

    code = "RUN_FINISHED"


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
