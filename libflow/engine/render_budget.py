"""Render budgets: the time, loop and size limits of one render and of one run's renders.

Every operation of an expression that can build a large value or loop is routed through a
check here: by the sandbox (``libflow.engine.sandbox``), or by the rewrite of a parsed
template (``guard_template``) for loops and ``~``. A check runs BEFORE the value is built
(``check_size``, ``check_items``, the estimates of ``libflow.engine.value_size``); what was
built is then charged (``charge``) to the render's and the run's allowance.

Renders run off the event loop (``libflow.engine.cpu_pool``): a thread cannot be stopped
from outside, so every tick also checks the run's deadline and a render past the run's
timeout stops itself (RunOutOfTime).
"""

from __future__ import annotations

import math
import re
import string
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

MAX_RANGE = 10_000  # items one range() may produce
MAX_ITEMS = 100_000  # items of a list built by *, +, split() or the batch/slice filters
MAX_VALUE_CHARS = 8 * 1024 * 1024  # one string built by an expression
MAX_TEXT_CHARS = 1024 * 1024  # the rendered text of one templated string (and one output)
MAX_ALLOCATED_CHARS = 64 * 1024 * 1024  # all strings built or output by one render
MAX_RUN_ALLOCATED_CHARS = 256 * 1024 * 1024  # all strings built by all renders of one run
MAX_LOOP_ITERATIONS = 200_000  # all for-loop iterations of one render
MAX_FORMAT_NUMBER = 10_000  # a width or precision in a format string
# The size of an integer built by ** or *: 14,000 bits are 4,215 digits, under the 4,300
# that Python writes of an integer as text (sys.get_int_max_str_digits). A larger one
# could be made but never written: not as an output, an event or a run's record.
MAX_INTEGER_BITS = 14_000
MAX_RUN_JSON_VALUES = 1_000_000  # values of all HTTP responses parsed as JSON in one run
RENDER_SECONDS = 1.0  # the wall time one render may take (and never past the run's timeout)

TEXT_TYPES = (str, bytes)
_SEQUENCE = (list, tuple)
_PRINTF_SPEC = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")
_NUMBER = re.compile(r"\d+")
_PAD_METHODS = frozenset({"ljust", "rjust", "center", "zfill"})
_CASE_METHODS = frozenset({"upper", "lower", "title", "capitalize", "casefold", "swapcase"})
# Characters str.splitlines() breaks at; bytes break at \n and \r only.
_LINE_BREAKS = ("\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")


class ExpressionError(Exception):
    """An expression failed: bad syntax, an undefined name, a sandbox refusal or a limit."""


class RunOutOfTime(ExpressionError):
    """A render was still going when its run's timeout passed: the run times out."""


def json_values_bound(text: str | bytes) -> int:
    """At most how many values JSON ``text`` holds, counted before it is parsed (a few MiB
    of ``[]`` are hundreds of MB once parsed): every value but the first follows a comma
    or opens an array or object."""
    if isinstance(text, bytes):
        return text.count(b",") + text.count(b"[") + text.count(b"{") + 1
    return text.count(",") + text.count("[") + text.count("{") + 1


@dataclass(slots=True)
class RunAllowance:
    """What all the renders (and JSON parses) of one run may still spend; thread-safe."""

    deadline: float = math.inf  # time.monotonic() of the run's timeout, once it started
    chars_left: int = MAX_RUN_ALLOCATED_CHARS
    json_values_left: int = MAX_RUN_JSON_VALUES
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def spend_chars(self, chars: int) -> None:
        """Take ``chars`` built characters; ExpressionError past the run's limit."""
        with self._lock:
            if chars > self.chars_left:
                raise ExpressionError(
                    f"the run's expressions built more text than its limit of "
                    f"{MAX_RUN_ALLOCATED_CHARS} characters allows"
                )
            self.chars_left -= chars

    def spend_json_values(self, count: int) -> bool:
        """Take ``count`` values to parse; False (nothing taken) past the run's limit."""
        with self._lock:
            if count > self.json_values_left:
                return False
            self.json_values_left -= count
            return True


@dataclass(slots=True)
class RenderBudget:
    """What one render may still spend."""

    deadline: float
    run: RunAllowance | None = None
    iterations: int = 0
    allocated: int = 0


_budget: ContextVar[RenderBudget | None] = ContextVar("libflow_render_budget", default=None)


def _new_budget(run: RunAllowance | None) -> RenderBudget:
    """A fresh budget: RENDER_SECONDS from now, never past the run's deadline."""
    deadline = time.monotonic() + RENDER_SECONDS
    if run is not None:
        deadline = min(deadline, run.deadline)
    return RenderBudget(deadline=deadline, run=run)


@contextmanager
def render_budget(run: RunAllowance | None = None) -> Iterator[RenderBudget]:
    """Give the renders inside the block one fresh budget, within ``run``'s allowance."""
    token = _budget.set(_new_budget(run))
    try:
        yield _current()
    finally:
        _budget.reset(token)


def _current() -> RenderBudget:
    """The active budget; outside a render (constant folding at compile time) a fresh one."""
    budget = _budget.get()
    if budget is None:
        return _new_budget(None)
    return budget


def _out_of_time(budget: RenderBudget) -> ExpressionError:
    """The error for a render past its deadline: its own, or its run's."""
    if budget.run is not None and time.monotonic() > budget.run.deadline:
        return RunOutOfTime("the run's timeout passed while an expression was evaluated")
    return ExpressionError(f"the expression took longer than {RENDER_SECONDS:g} s")


def tick() -> None:
    """Fail when the render is past its wall-time budget (or its run past its timeout)."""
    budget = _current()
    if time.monotonic() > budget.deadline:
        raise _out_of_time(budget)


def check_size(chars: int, *, what: str = "a value") -> None:
    """Refuse, before building it, a string of ``chars`` the budgets could not pay for."""
    if chars > MAX_VALUE_CHARS:
        raise ExpressionError(f"{what} of {chars} characters is over the limit")
    budget = _current()
    if budget.allocated + chars > MAX_ALLOCATED_CHARS:
        raise ExpressionError("the expression built more text than its limit allows")
    if budget.run is not None and chars > budget.run.chars_left:
        raise ExpressionError(
            f"the run's expressions built more text than its limit of "
            f"{MAX_RUN_ALLOCATED_CHARS} characters allows"
        )


def charge(chars: int, *, what: str = "a value") -> None:
    """Account for a string of ``chars`` built by the render; fail past the limits."""
    if chars > MAX_VALUE_CHARS:
        raise ExpressionError(f"{what} of {chars} characters is over the limit")
    budget = _current()
    budget.allocated += chars
    if budget.allocated > MAX_ALLOCATED_CHARS:
        raise ExpressionError("the expression built more text than its limit allows")
    if budget.run is not None:
        budget.run.spend_chars(chars)


def check_items(count: int, what: str) -> None:
    """Refuse, before building it, a list of more than MAX_ITEMS items."""
    if count > MAX_ITEMS:
        raise ExpressionError(f"{what} of {count} items is over the limit of {MAX_ITEMS}")
    check_size(count * 8, what=what)


def check_result(value: Any, what: str) -> Any:
    """Charge a freshly built string or list to the budget and pass it on."""
    if isinstance(value, TEXT_TYPES):
        charge(len(value), what=what)
    elif isinstance(value, _SEQUENCE):
        check_items(len(value), what)
        charge(len(value) * 8, what=what)
    return value


def guarded_range(*args: int) -> range:
    """``range`` capped at MAX_RANGE items."""
    tick()
    values = range(*args)
    if len(values) > MAX_RANGE:
        raise ExpressionError(f"range() of {len(values)} items is over the limit of {MAX_RANGE}")
    charge(len(values) * 8, what="range()")
    return values


def guarded_iter(iterable: Iterable[Any]) -> Iterator[Any]:
    """Every for loop iterates through this, so nested loops stay within the budget."""
    budget = _current()
    for item in iterable:
        budget.iterations += 1
        if budget.iterations > MAX_LOOP_ITERATIONS:
            raise ExpressionError(f"loops ran more than {MAX_LOOP_ITERATIONS} iterations")
        if budget.iterations % 256 == 0 and time.monotonic() > budget.deadline:
            raise _out_of_time(budget)
        yield item


def check_printf(fmt: str) -> None:
    """Refuse ``%`` formats with a ``*`` or huge width or precision."""
    for match in _PRINTF_SPEC.finditer(fmt):
        for number in match.groups():
            if number == "*":
                raise ExpressionError("'*' widths are not allowed in % formats")
            if number is not None and int(number) > MAX_FORMAT_NUMBER:
                raise ExpressionError(f"a format width of {number} is over the limit")


def check_format_string(fmt: str) -> None:
    """Refuse ``str.format`` specs that are nested or hold a huge width or precision."""
    for _text, _field, spec, _conversion in string.Formatter().parse(fmt):
        if not spec:
            continue
        if "{" in spec:
            raise ExpressionError("nested format specifications are not allowed")
        if any(int(number) > MAX_FORMAT_NUMBER for number in _NUMBER.findall(spec)):
            raise ExpressionError(f"the format specification {spec!r} is over the limit")


def as_int(value: Any) -> int:
    """An int argument, or 0 for anything else (the call itself then fails or ignores it)."""
    return value if isinstance(value, int) else 0


def replaced_size(text: str | bytes, old: Any, new: Any, count: Any) -> int:
    """The length of ``text.replace(old, new, count)``, without building it."""
    occurrences = len(text) + 1 if not old else text.count(old)
    if isinstance(count, int) and count >= 0:
        occurrences = min(occurrences, count)
    return len(text) + occurrences * (len(new) - len(old))


def _argument(args: tuple[Any, ...], kwargs: dict[str, Any], at: int, name: str) -> Any:
    """A method's argument, given by position or by name (None when absent)."""
    return args[at] if len(args) > at else kwargs.get(name)


def check_text_method(
    text: str | bytes, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Any, ...]:
    """Refuse str/bytes method calls whose result would be huge; may materialize args."""
    if name in _PAD_METHODS:
        check_size(as_int(_argument(args, kwargs, 0, "width")), what=f"{name}()")
    elif name == "expandtabs":
        tabs = text.count("\t") if isinstance(text, str) else text.count(b"\t")
        tabsize = _argument(args, kwargs, 0, "tabsize")
        check_size(len(text) + tabs * (8 if tabsize is None else as_int(tabsize)), what=name)
    elif name == "replace" and len(args) >= 2:
        old, new = args[0], args[1]
        if isinstance(old, type(text)) and isinstance(new, type(text)):
            count = _argument(args, kwargs, 2, "count")
            check_size(replaced_size(text, old, new, count), what="replace()")
    elif name == "join" and args:
        items = list(guarded_iter(args[0]))
        lengths = sum(len(item) for item in items if isinstance(item, TEXT_TYPES))
        check_size(lengths + len(text) * max(len(items) - 1, 0), what="join()")
        return (items, *args[1:])
    elif name == "splitlines":
        if isinstance(text, str):
            breaks = sum(text.count(mark) for mark in _LINE_BREAKS)
        else:
            breaks = text.count(b"\n") + text.count(b"\r")
        check_items(breaks + 1, "splitlines()")
    elif name in _CASE_METHODS and isinstance(text, str) and not text.isascii():
        check_size(3 * len(text), what=f"{name}()")  # "ß".upper() is "SS": up to 3 each
    elif name == "encode":  # "\\U0001f600" for one character with errors="backslashreplace"
        check_size(len(text) * (1 if text.isascii() else 10), what="encode()")
    elif name == "decode":
        check_size(len(text) * 4, what="decode()")  # "\\xff" per byte at worst
    elif name == "hex":
        check_size(len(text) * 3, what="hex()")
    elif name in {"translate", "maketrans"}:
        raise ExpressionError(f"{name}() is not available in expressions")
    return args


def capped_split(
    method: Callable[..., list[Any]], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> list[Any]:
    """``split()``/``rsplit()`` building at most MAX_ITEMS + 1 parts, refused past MAX_ITEMS."""
    maxsplit = _argument(args, kwargs, 1, "maxsplit")
    if maxsplit is None:
        maxsplit = -1
    if not isinstance(maxsplit, int) or len(args) > 2 or set(kwargs) - {"sep", "maxsplit"}:
        return method(*args, **kwargs)  # let the method itself refuse its arguments
    capped = MAX_ITEMS if maxsplit < 0 else min(maxsplit, MAX_ITEMS)
    parts = method(_argument(args, kwargs, 0, "sep"), capped)
    if len(parts) > MAX_ITEMS:
        raise ExpressionError(f"{method.__name__}() into over {MAX_ITEMS} parts is over the limit")
    return parts


def check_to_bytes(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Refuse ``int.to_bytes(length)`` of a huge length before it allocates it."""
    length = _argument(args, kwargs, 0, "length")
    check_size(1 if length is None else as_int(length), what="to_bytes()")


def check_repeat(left: Any, right: Any) -> None:
    """Refuse ``text * n`` or ``list * n`` over the limits."""
    if isinstance(left, int) and not isinstance(right, int):
        left, right = right, left
    if not isinstance(right, int):
        return
    if isinstance(left, TEXT_TYPES):
        check_size(len(left) * max(right, 0), what="the result of *")
    elif isinstance(left, _SEQUENCE):
        check_items(len(left) * max(right, 0), "the result of *")


def check_multiply(left: Any, right: Any) -> None:
    """Refuse a product of integers bigger than MAX_INTEGER_BITS (repeated, it doubles)."""
    if isinstance(left, int) and isinstance(right, int):
        if left.bit_length() + right.bit_length() > MAX_INTEGER_BITS:
            raise ExpressionError("the result of * is over the limit")
    else:
        check_repeat(left, right)


def check_add(left: Any, right: Any) -> None:
    """Refuse ``+`` of strings or lists over the limits."""
    if isinstance(left, TEXT_TYPES) and isinstance(right, TEXT_TYPES):
        check_size(len(left) + len(right), what="the result of +")
    elif isinstance(left, _SEQUENCE) and isinstance(right, _SEQUENCE):
        check_items(len(left) + len(right), "the result of +")


def check_power(left: Any, right: Any) -> None:
    """Refuse integer powers whose result would be enormous."""
    if not (isinstance(left, int) and isinstance(right, int)) or right <= 0 or abs(left) <= 1:
        return
    if abs(left).bit_length() * right > MAX_INTEGER_BITS:
        raise ExpressionError("the result of ** is over the limit")
