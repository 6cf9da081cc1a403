"""The secrets of one run: ``{{ secrets.NAME }}`` in its fields, and redaction of their values.

A run loads its project's secrets lazily: only a field that mentions ``secrets`` loads
anything, and only the names it reads (``secrets.NAME``, ``secrets["NAME"]``); a field that
reads them some other way (``secrets[inputs.which]``) loads them all. Values stay sealed
until a render reads one (on its CPU thread). Every value read is remembered, and
``redact`` replaces it, wherever it occurs in a value, by ``[secret:NAME]``: in its JSON
and URL-encoded spellings too, since a value may come back from outside (an echoed
header, a JSON body). Sub-runs share their parent's services, and so its record of reads.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar
from urllib.parse import quote, quote_plus

from libflow.engine.render_budget import ExpressionError
from libflow.json_text import map_text

# The sealed values of some names (None: every name) of the run's project.
LoadSealed = Callable[[frozenset[str] | None], Awaitable[Mapping[str, str]]]
# (name, sealed value) -> the value in clear.
OpenSealed = Callable[[str, str], str]

T = TypeVar("T")

_NOTHING: frozenset[str] = frozenset()
# ``secrets`` as a name of its own (not ``nodes.secrets`` nor ``my_secrets``).
_MENTION = re.compile(r"(?<![A-Za-z0-9_.])secrets(?![A-Za-z0-9_])")
_READ_BY_NAME = re.compile(
    r"(?<![A-Za-z0-9_.])secrets\s*(?:\.\s*([A-Za-z_][A-Za-z0-9_]*)"
    r"|\[\s*(['\"])([A-Za-z_][A-Za-z0-9_]*)\2\s*\])"
)


class UnknownSecret(ExpressionError):
    """A field read a secret its project does not have."""


class UnreadableSecret(ExpressionError):
    """A secret's sealed value does not open with this process's key."""


class SecretValues:
    """What templates see as ``secrets``: values read by name, never listed nor iterated."""

    __slots__ = ("__run",)
    # Not iterable: without this, Python would iterate by asking for secrets 0, 1, 2...
    __iter__ = None

    def __init__(self, run: RunSecrets) -> None:
        self.__run = run

    def __getitem__(self, name: object) -> str:
        return self.__run.value_of(name)

    def __repr__(self) -> str:
        return "<secrets>"


class RunSecrets:
    """The secrets a run (and its sub-runs) may read, and those it read."""

    def __init__(self, load: LoadSealed, open_sealed: OpenSealed) -> None:
        self._load = load
        self._open = open_sealed
        self._sealed: dict[str, str] = {}
        self._asked: set[str] = set()
        self._everything = False
        self._loading: asyncio.Lock | None = None
        # Every secret a render read, by name: what redaction hides.
        self.used: dict[str, str] = {}
        self._matcher: tuple[int, re.Pattern[str], dict[str, str]] | None = None

    @property
    def view(self) -> SecretValues:
        """What a template sees as ``secrets``.

        Made when asked for, not kept: a view kept here would make the two refer to each
        other, a cycle that only the garbage collector frees, on every run.
        """
        return SecretValues(self)

    async def fetch_for(self, field: Any) -> None:
        """Load what a field about to be rendered may read, unless it is loaded already."""
        if self._everything:
            return
        wanted = references(field)
        if wanted is not None and wanted <= self._asked:
            return
        if self._loading is None:
            self._loading = asyncio.Lock()
        async with self._loading:  # concurrent nodes: one load, the others wait for it
            if self._everything or (wanted is not None and wanted <= self._asked):
                return
            names = None if wanted is None else frozenset(wanted - self._asked)
            self._sealed.update(await self._load(names))
            if names is None:
                self._everything = True
            else:
                self._asked.update(names)

    def value_of(self, name: object) -> str:
        """A secret in clear (remembered as used); UnknownSecret if the project has none."""
        if not isinstance(name, str):
            raise UnknownSecret(f"a secret's name is text, not {type(name).__name__}")
        value = self.used.get(name)
        if value is not None:
            return value
        sealed = self._sealed.get(name)
        if sealed is None:
            shown = name if len(name) <= 80 else name[:80] + "..."
            raise UnknownSecret(f"unknown secret {shown!r}: the project has no secret of that name")
        try:
            value = self._open(name, sealed)
        except Exception as err:
            message = str(err) or type(err).__name__
            raise UnreadableSecret(f"secret {name!r} cannot be read: {message}") from None
        self.used[name] = value
        return value

    def redact(self, value: T) -> T:
        """``value`` with every secret read so far replaced by ``[secret:NAME]``."""
        if not self.used:
            return value
        result: T = map_text(value, self._replacer())
        return result

    def redact_text(self, text: str) -> str:
        """``redact`` for one string (log lines)."""
        if not self.used:
            return text
        return self._replacer()(text)

    def sendable(self, text: str) -> int:
        """How much of ``text``, a stream's next part, may be sent now (redacted as usual).

        A stream (a model's answer) sends its text in parts, each redacted alone: a value
        split across two parts would be whole in neither, and redacted in neither. So the
        part ends before a tail that may begin a secret read so far (what follows shows
        whether it does), and before a whole secret that such a cut would split.
        """
        if not self.used:
            return len(text)
        _, names = self._current_matcher()
        cut = len(text)
        for spelling in names:
            if len(spelling) < 2:
                continue
            tail_start = max(0, len(text) - len(spelling) + 1)
            start = text.find(spelling[0], tail_start)
            while start != -1 and start < cut:
                if spelling.startswith(text[start:]):
                    cut = start
                    break
                start = text.find(spelling[0], start + 1)
        moved = True
        while moved:  # each move is back: it ends
            moved = False
            for spelling in names:
                found = text.find(spelling, max(0, cut - len(spelling) + 1))
                if found != -1 and found < cut:  # a whole value the cut would split
                    cut, moved = found, True
        return cut

    def _replacer(self) -> Callable[[str], str]:
        """What replaces each secret read so far in one string (the matcher fetched once)."""
        pattern, names = self._current_matcher()
        return lambda text: pattern.sub(lambda match: f"[secret:{names[match.group(0)]}]", text)

    def _current_matcher(self) -> tuple[re.Pattern[str], dict[str, str]]:
        """One pattern of every spelling of every value read; rebuilt when one more is read."""
        used = dict(self.used)  # renders on CPU threads may add to it meanwhile
        if self._matcher is not None and self._matcher[0] == len(used):
            return self._matcher[1], self._matcher[2]
        names: dict[str, str] = {}
        for name in sorted(used):
            for spelling in _spellings(used[name]):
                names.setdefault(spelling, name)
        # Longest first: a value that holds another one is replaced whole.
        ordered = sorted(names, key=len, reverse=True)
        pattern = re.compile("|".join(re.escape(spelling) for spelling in ordered))
        self._matcher = (len(used), pattern, names)
        return pattern, names


def _spellings(value: str) -> set[str]:
    """A value as it may come back from outside: as is; JSON-escaped (ASCII or not, with
    PHP's escaped ``/``, Go's escaped ``& < >``); percent-encoded (with ``/`` escaped or
    kept, upper- or lower-case hex, a form's ``+``); and a JSON text holding it escaped
    again (an echo service answering with the JSON body it was sent as a JSON string, as
    httpbin's ``data``; a JSON text in a query string)."""
    found = {value, *_json_spellings(value), *_percent_spellings(value)}
    # Escaped twice: only the plain JSON spellings, escaped again the plain ways (each more
    # spelling costs every redaction and every part of a model's stream a look).
    for spelling in _plain_json(value):
        found |= {*_plain_json(spelling), quote(spelling, safe=""), quote(spelling)}
        found.add(quote_plus(spelling))
    found.discard("")
    return found


def _plain_json(value: str) -> set[str]:
    """``value`` inside a JSON string as Python writes it, ASCII-only or not."""
    return {json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]}


def _json_spellings(value: str) -> set[str]:
    """``value`` inside a JSON string, as common encoders write it."""
    found = _plain_json(value)
    found |= {spelling.replace("/", "\\/") for spelling in found}  # PHP's json_encode
    found.add(json.dumps(value)[1:-1].translate(_GO_HTML_SAFE))  # Go's encoding/json
    return found


def _percent_spellings(value: str) -> set[str]:
    """``value`` percent-encoded, as URL and form encoders write it."""
    found = {quote(value, safe=""), quote(value), quote_plus(value)}
    found |= {_LOWER_HEX.sub(lambda m: m.group(0).lower(), spelling) for spelling in found}
    return found


_GO_HTML_SAFE = str.maketrans({"&": "\\u0026", "<": "\\u003c", ">": "\\u003e"})
_LOWER_HEX = re.compile("%[0-9A-F]{2}")


def references(field: Any) -> frozenset[str] | None:
    """The secret names a field reads by name; None when it reads them some other way."""
    if isinstance(field, str):
        return _string_references(field) if "secrets" in field else _NOTHING
    found: set[str] = set()
    stack = [field]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "secrets" in item:
                names = _string_references(item)
                if names is None:
                    return None
                found.update(names)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return frozenset(found) if found else _NOTHING


@functools.lru_cache(maxsize=4096)
def _string_references(source: str) -> frozenset[str] | None:
    """The names one templated string reads (cached: definitions never change)."""
    mentions = len(_MENTION.findall(source))
    names = [match.group(1) or match.group(3) for match in _READ_BY_NAME.finditer(source)]
    if len(names) != mentions:
        return None
    return frozenset(names)
