"""How big a value is, worked out without building it: as text, or as stored JSON.

``str([s] * 100_000)`` is 100,000 copies of ``s``: the list is small, its text is not. So
before any value is turned into text (an output, ``~``, ``|string``, ``|tojson``, a format
or a join), its size is estimated here, an upper bound in bounded work: a container
referenced many times is measured once (by identity), and the walk stops as soon as the
estimate passes the limit. ``stored_size`` measures JSON data the way a run record holds
it (compact JSON text, in characters), also stopping at its limit.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Set
from typing import Any, Literal

from jinja2.runtime import Undefined
from jinja2.utils import Namespace

from libflow.engine.definition import MAX_VALUE_DEPTH
from libflow.engine.render_budget import ExpressionError, tick

TextMode = Literal["str", "json"]
# What str() of an object this module does not know is assumed to cost (its repr is short:
# a function, a generator, a loop); what it builds beyond that is charged once built.
OTHER_OBJECT_CHARS = 256
_ASCII_CONTROLS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# What str() writes as a bracketed list of its items (dict views as "dict_values([...])").
_ITEM_TYPES: tuple[type[Iterable[Any]], ...] = (
    list,
    tuple,
    Set,
    type({}.keys()),
    type({}.values()),
    type({}.items()),
)


# Values a workflow holds that read as JSON inside text: null, true, [1, 2], {"a": 1}.
JSON_SPELLED = (type(None), bool, list, tuple, dict)


def value_text(value: Any) -> str:
    """How a value reads where text is made of it (an output, ``~``): as itself if text;
    as JSON if null, a boolean, a list or an object (a workflow's data is JSON, and what
    reads it next, a model, an API or a person, expects JSON, not Python's ``None`` and
    quotes); anything else (a number, an object JSON cannot spell) as ``str()``.

    Measure it first with ``value_text_size``.
    """
    if isinstance(value, str):
        return value
    if isinstance(value, JSON_SPELLED):
        try:
            return json.dumps(value, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError):
            pass  # holds a value JSON has no spelling for: Python's text of it
    return str(value)


def value_text_size(value: Any, *, limit: int, what: str) -> int:
    """An upper bound of ``len(value_text(value))``, worked out before it is built;
    ExpressionError past ``limit``. A value spelled as JSON takes tojson's estimate (which
    escapes more), the rest str()'s."""
    if isinstance(value, str):
        return len(value)
    mode: TextMode = "json" if isinstance(value, JSON_SPELLED) else "str"
    return text_size(value, mode=mode, limit=limit, what=what)


class TooBig(Exception):
    """A measured value is over the limit it was measured against."""


class NeedsThread(Exception):
    """The value is too large to measure on the event loop: measure it in the CPU pool."""


def text_size(value: Any, *, mode: TextMode, limit: int, what: str, indent: int = 0) -> int:
    """An upper bound of ``len(str(value))`` (or of its ``|tojson``); ExpressionError past limit.

    ``mode`` "json" estimates Jinja's ``tojson`` (ASCII escapes, HTML-safe, ``indent``).
    """
    return TextEstimate(mode=mode, limit=limit, what=what, indent=indent).add(value)


class TextEstimate:
    """A running estimate of the text several values become (a join, a format's fields).

    Containers and long strings are measured once each (by identity), so a value that
    references the same object many times costs one walk of it.
    """

    def __init__(self, *, mode: TextMode, limit: int, what: str, indent: int = 0) -> None:
        self.mode = mode
        self.limit = limit
        self.what = what
        self.indent = indent
        self.total = 0
        self._known: dict[int, int] = {}
        self._keep: list[Any] = []  # keeps measured objects alive, so no id is reused

    def add(self, value: Any, *, quoted: bool = False, extra: int = 0) -> int:
        """Add the text of ``value`` (a string as is unless ``quoted``) and ``extra`` characters.

        Returns the running total; ExpressionError once it passes the limit.
        """
        if isinstance(value, str) and not quoted and self.mode == "str":
            size = len(value)
        else:
            size = self._size(value, 0)
        self.total += size + extra
        if self.total > self.limit:
            raise ExpressionError(
                f"{self.what} of about {self.total} characters is over the limit of {self.limit}"
            )
        return self.total

    def _size(self, value: Any, depth: int) -> int:
        """The estimated text of ``value`` nested ``depth`` levels down."""
        if value is None or isinstance(value, bool):
            return 5
        if isinstance(value, int):
            return value.bit_length() * 30103 // 100_000 + 2  # digits of 2**bits, and a sign
        if isinstance(value, float):
            return 24  # the longest repr of a float: "-1.7976931348623157e+308"
        if isinstance(value, Undefined):
            return 0  # str() of it raises the reason
        if isinstance(value, str | bytes) and len(value) < 64:
            return self._quoted(value)
        known = self._known.get(id(value))
        if known is not None:
            return known
        if isinstance(value, str | bytes):
            size = self._quoted(value)
        else:
            if depth >= MAX_VALUE_DEPTH:
                raise ExpressionError(f"the value is nested deeper than {MAX_VALUE_DEPTH} levels")
            tick()
            size = self._container(value, depth)
        self._known[id(value)] = size
        self._keep.append(value)
        return size

    def _container(self, value: Any, depth: int) -> int:
        """The estimated text of a container (or OTHER_OBJECT_CHARS for anything else)."""
        line = 1 + self.indent * (depth + 1) if self.indent else 0  # newline and indentation
        if isinstance(value, Namespace):
            attrs = getattr(value, "_Namespace__attrs", {})
            return 14 + self._size(dict(attrs), depth)
        if isinstance(value, Mapping):
            total = 2 + line
            for key, item in value.items():
                total += self._size(key, depth + 1) + self._size(item, depth + 1) + 4 + line
                if self.mode == "json" and not isinstance(key, str):
                    total += 2 + 5 * (key is None or isinstance(key, bool))  # "1"; "false"
                if total > self.limit:
                    break
            return total
        if isinstance(value, _ITEM_TYPES):
            total = 14 + line  # "dict_values([" ... "])" is the longest wrapper
            for item in value:
                total += self._size(item, depth + 1) + 2 + line
                if total > self.limit:
                    break
            return total
        return OTHER_OBJECT_CHARS

    def _quoted(self, text: str | bytes) -> int:
        """The size of a string quoted inside a container (repr) or as JSON."""
        if isinstance(text, bytes):
            return 4 * len(text) + 3  # b'\xff...'
        if self.mode == "json":
            if not text.isascii():
                astral = max(text) > "\uffff"
                return len(text) * (12 if astral else 6) + 2  # \ud83d\ude00, \u00e9
            if _ASCII_CONTROLS.search(text) is not None:
                return 6 * len(text) + 2  # \u0000
            escaped = sum(text.count(mark) for mark in ('"', "\\", "\n", "\r", "\t"))
            html = sum(text.count(mark) for mark in ("<", ">", "&", "'"))  # \u003c
            return len(text) + 2 + escaped + 5 * html
        if text.isprintable():
            return len(text) + 2 + text.count("\\") + text.count("'")
        return len(text) * (4 if text.isascii() else 10) + 2  # \x00, \U0001f600


def stored_size(value: Any, limit: int, *, max_items: int | None = None) -> int:
    """The size of JSON data as compact JSON text (characters); TooBig past ``limit``.

    Iterative (no depth limit: inputs may be deeply nested) and stopping at ``limit``.
    With ``max_items``, NeedsThread once more items than that would have to be walked.
    """
    total = 0
    walked = 0
    pending = [value]
    while pending:
        item = pending.pop()
        walked += 1
        if max_items is not None and walked > max_items:
            raise NeedsThread
        if isinstance(item, str):
            total += len(item) + 2
        elif item is None or isinstance(item, bool):
            total += 5
        elif isinstance(item, int):
            total += item.bit_length() * 30103 // 100_000 + 2
        elif isinstance(item, float):
            total += 24
        elif isinstance(item, Mapping):
            total += 2
            for key, child in item.items():
                total += len(str(key)) + 4
                pending.append(child)
        elif isinstance(item, list | tuple):
            total += 2 + len(item)
            pending.extend(item)
        else:
            total += len(str(item)) + 2
        if total > limit:
            raise TooBig(total)
    return total
