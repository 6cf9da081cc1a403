"""What JSON and text from a client may carry into a record, checked where they arrive.

``"\\u0000"`` and a lone ``"\\ud800"`` are valid JSON, and SQLite stores them, but PostgreSQL
refuses both in text and jsonb. ``NaN``, ``Infinity`` and a number beyond a double's range
(``1e999``) are not JSON at all (RFC 8259), yet Python's reader takes them: PostgreSQL then
refuses them in jsonb, and SQLite stores them and answers a bare ``NaN``. All are refused
alike on every shape, where they arrive; header bytes that are not UTF-8 are replaced.

What libflow writes, answers and stored columns, is encoded by ``dumps``.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable
from typing import Any

import orjson

# In the raw bytes: a NUL byte, or an escape that may decode to NUL or to a surrogate.
_HINT = re.compile(rb"\x00|\\u(?:0000|[dD][89a-fA-F])")
# In decoded text: NUL, or a surrogate (json.loads joins a valid pair into one character).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")

UNSTORABLE_PROBLEM = (
    "holds a NUL character (\\u0000) or an unpaired surrogate, which cannot be stored"
)


def may_hold_unstorable(raw: bytes) -> bool:
    """A cheap look at the raw body: False means its decoded text is storable."""
    return _HINT.search(raw) is not None


def holds_unstorable(value: Any) -> bool:
    """Whether a string anywhere in ``value`` (keys too) cannot be stored; iterative, for depth."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if _UNSTORABLE.search(item):
                return True
        elif isinstance(item, dict):
            pending.extend(item)
            pending.extend(item.values())
        elif isinstance(item, list | tuple):
            pending.extend(item)
    return False


NON_FINITE_PROBLEM = "holds NaN, Infinity or a number beyond the range of a double (1.8e308)"


class NonFiniteNumber(ValueError):
    """JSON text holding NaN, Infinity or a number beyond the range of a double."""


# The largest integer a double holds: past it most readers (JavaScript's) see Infinity,
# and Python's own float() of it raises.
_LARGEST_INT = int(sys.float_info.max)
_LARGEST_INT_DIGITS = len(str(_LARGEST_INT))


def _refuse_constant(name: str) -> Any:
    raise NonFiniteNumber(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999 and its like overflow to inf
        raise NonFiniteNumber(f"{text[:32]} is beyond the range of a double")
    return value


def _int_in_range(text: str) -> int:
    value = int(text)  # json.loads bounds the digits (sys.get_int_max_str_digits())
    if len(text) >= _LARGEST_INT_DIGITS and abs(value) > _LARGEST_INT:
        raise NonFiniteNumber(f"{text[:32]}... is beyond the range of a double")
    return value


# One decoder for every call: given these hooks, json.loads builds a decoder and its
# scanner each time, which costs more than reading a small document (a file's steps).
_DECODER = json.JSONDecoder(
    parse_constant=_refuse_constant, parse_float=_finite_float, parse_int=_int_in_range
)


def loads(text: str | bytes) -> Any:
    """Parse JSON as RFC 8259 has it: NonFiniteNumber for NaN, Infinity or 1e999."""
    if isinstance(text, bytes):  # as json.loads reads bytes: UTF-8, -16 or -32
        text = text.decode(json.detect_encoding(text), "surrogatepass")
    elif text.startswith("\ufeff"):  # as json.loads refuses it
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    return _DECODER.decode(text)


def header_text(value: str) -> str:
    """A header value as text: bytes that are not UTF-8 become U+FFFD.

    aiohttp decodes header bytes with ``surrogateescape``, so a byte that is not UTF-8
    arrives as a lone surrogate, which PostgreSQL cannot store.
    """
    if _UNSTORABLE.search(value) is None:
        return value
    try:
        raw = value.encode("utf-8", "surrogateescape")  # the bytes as sent
    except UnicodeEncodeError:  # a surrogate no byte decodes to: made elsewhere
        raw = value.encode("utf-8", "surrogatepass")
    return raw.decode("utf-8", "replace").replace("\x00", "\ufffd")


class RawJson:
    """JSON text already written (a column stored as JSON), which ``dumps`` embeds as it is:
    an answer need not decode a stored document only to encode it again."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _raw_fragment(value: Any) -> orjson.Fragment:
    if isinstance(value, RawJson):
        return orjson.Fragment(value.text)
    raise TypeError(f"Type is not JSON serializable: {type(value).__name__}")


def _raw_decoded(value: Any) -> Any:
    if isinstance(value, RawJson):
        return json.loads(value.text)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def dumps(value: Any) -> bytes:
    """``value`` as compact UTF-8 JSON: orjson's, or the standard library's for what it refuses.

    orjson takes a fraction of ``json.dumps``'s time, but refuses integers beyond 64 bits
    (a run's outputs may hold one), keys that are not strings and text with an unpaired
    surrogate; those values, rare, are written by ``json.dumps`` as they always were.
    A ``RawJson`` inside is written as its text.
    """
    try:
        return orjson.dumps(value, default=_raw_fragment)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return json.dumps(value, separators=(",", ":"), default=_raw_decoded).encode()


def storable(value: Any) -> Any:
    """``value`` with each NUL or unpaired surrogate of its text replaced by U+FFFD.

    For text a run built (a template's literal, an HTTP header that was not UTF-8), which
    no client sent and so nothing refused where it arrived: PostgreSQL would refuse the
    run's record, and UTF-8 cannot carry it to a watcher. A copy only where something is
    replaced.
    """
    if not holds_unstorable(value):
        return value
    return map_text(value, lambda text: _UNSTORABLE.sub("\ufffd", text))


def map_text(value: Any, change: Callable[[str], str]) -> Any:
    """A copy of JSON data with ``change`` applied to every string in it, keys included.

    Iterative, not recursive: values from HTTP or model answers may nest far deeper than
    Python's recursion allows. Tuples become lists, as JSON writes them.
    """

    def scalar(item: Any) -> Any:
        return change(item) if isinstance(item, str) else item

    if not isinstance(value, dict | list | tuple):
        return scalar(value)
    root: dict[Any, Any] | list[Any] = {} if isinstance(value, dict) else []
    pending: list[tuple[Any, dict[Any, Any] | list[Any]]] = [(value, root)]
    while pending:
        source, copy = pending.pop()
        items = source.items() if isinstance(source, dict) else enumerate(source)
        for key, item in items:
            child: Any
            if isinstance(item, dict | list | tuple):
                child = {} if isinstance(item, dict) else []
                pending.append((item, child))
            else:
                child = scalar(item)
            if isinstance(copy, dict):
                copy[scalar(key)] = child
            else:
                copy.append(child)
    return root


def utf8_json(value: Any) -> str:
    """``value`` as compact JSON text that UTF-8 can carry (an event's data, an SSE frame).

    Non-ASCII text is kept as it is, unless it holds an unpaired surrogate: then every
    such character is written as a JSON escape, which any reader takes.
    """
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    if not text.isascii():
        try:
            text.encode()
        except UnicodeEncodeError:
            text = json.dumps(value, separators=(",", ":"))
    return text
