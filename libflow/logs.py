"""Structured logs: one JSON object a line, carrying the request id of the request at hand."""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import time
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from typing import Any

request_id_var: ContextVar[str | None] = ContextVar("request_id", default=None)
# Set while a task runs a workflow (libflow.workflows.runs): it turns the values of the
# secrets the run read into [secret:NAME] in every record logged from that task.
log_redactor: ContextVar[Callable[[str], str] | None] = ContextVar("log_redactor", default=None)
access_logger = logging.getLogger("libflow.access")

_STANDARD_ATTRS = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message"}


def _redacted(record: logging.LogRecord, redact: Callable[[str], str]) -> None:
    """Hide secret values in a record's arguments (before any ``%.300s`` cuts one), its
    message and its traceback, whatever handler (ours, a test's) sees it."""
    args = record.args
    if isinstance(args, tuple):
        record.args = tuple(redact(a) if isinstance(a, str) else a for a in args)
    elif isinstance(args, Mapping):
        record.args = {k: redact(v) if isinstance(v, str) else v for k, v in args.items()}
    # A malformed call is left as it is: logging reports it when the record is formatted.
    with contextlib.suppress(TypeError, ValueError):
        record.msg, record.args = redact(record.getMessage()), None
    if record.exc_info and record.exc_info[1] is not None:
        record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
    if record.stack_info:
        record.stack_info = redact(record.stack_info)


_make_record = logging.getLogRecordFactory()


def _record_factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
    record = _make_record(*args, **kwargs)
    redact = log_redactor.get()
    if redact is not None:
        _redacted(record, redact)
    return record


# Every record, at its making: handlers added by others (pytest's caplog) see it redacted too.
logging.setLogRecordFactory(_record_factory)


class JsonFormatter(logging.Formatter):
    """Render a record as one JSON line, with any ``extra=`` fields beside the message."""

    def format(self, record: logging.LogRecord) -> str:
        """The JSON line for ``record``."""
        entry: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = request_id_var.get()
        if request_id:
            entry["requestId"] = request_id
        redact = log_redactor.get()
        for key, value in record.__dict__.items():
            if key not in _STANDARD_ATTRS and not key.startswith("_"):
                entry[key] = redact(value) if redact and isinstance(value, str) else value
        if record.exc_info:
            # exc_text: the traceback as the record factory redacted it, if it did.
            entry["exception"] = record.exc_text or self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure_logging(level: str = "INFO") -> None:
    """Send every logger's records to stderr as JSON lines."""
    handler = logging.StreamHandler(sys.stderr)
    formatter = JsonFormatter()
    formatter.converter = time.gmtime
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
