"""What a call of the API can fail with: the API's own error, or no API answer at all."""

from __future__ import annotations

from typing import Any


class LibflowError(Exception):
    """A call did not get the answer it needed (the server is unreachable, or said no)."""


class ApiError(LibflowError):
    """The API answered with an error body: ``{"error": CODE, "message": ...}``."""

    def __init__(self, call: str, status: int, body: dict[str, Any]) -> None:
        self.call = call
        self.status = status
        self.code = str(body.get("error"))
        self.error_message = str(body.get("message"))
        self.body = body
        super().__init__(f"{call}: {status} {self.code}: {self.error_message}")


class RateLimitedError(ApiError):
    """429 RATE_LIMITED: the call may be made again after ``retry_after`` seconds."""

    def __init__(self, call: str, body: dict[str, Any], retry_after: int) -> None:
        super().__init__(call, 429, body)
        self.retry_after = retry_after


class NotAnApiAnswer(LibflowError):
    """Something else answered at the URL (a proxy, another server): no libflow JSON."""

    def __init__(self, call: str, status: int, reason: str | None) -> None:
        super().__init__(f"{call}: {status} {reason}: not a libflow API answer")
        self.status = status
