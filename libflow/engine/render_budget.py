"""Render budgets: the time, loop and size limits of one render, and the checks against them.

Every operation of an expression that can build a large value or loop is routed through a
check here: by the sandbox (``libflow.engine.sandbox``), or by the rewrite of a parsed
template (``guard_template``) for loops and ``~``.
"""

from __future__ import annotations

import re
import string
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from jinja2 import nodes
from jinja2.visitor import NodeTransformer

MAX_RANGE = 10_000  # items one range() may produce
MAX_ITEMS = 100_000  # items of a list built by *, + or the batch/slice filters
MAX_VALUE_CHARS = 8 * 1024 * 1024  # one string built by an expression
MAX_ALLOCATED_CHARS = 64 * 1024 * 1024  # all strings built or output by one render
MAX_LOOP_ITERATIONS = 200_000  # all for-loop iterations of one render
MAX_FORMAT_NUMBER = 10_000  # a width or precision in a format string
MAX_POWER_BITS = 64_000  # the size of an integer built by **
RENDER_SECONDS = 1.0  # the wall time one render may take

TEXT_TYPES = (str, bytes)
_SEQUENCE = (list, tuple)
_PRINTF_SPEC = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")
_NUMBER = re.compile(r"\d+")
_PAD_METHODS = frozenset({"ljust", "rjust", "center", "zfill"})


class ExpressionError(Exception):
    """An expression failed: bad syntax, an undefined name, a sandbox refusal or a limit."""


@dataclass(slots=True)
class RenderBudget:
    """What one render may still spend."""

    deadline: float
    iterations: int = 0
    allocated: int = 0


_budget: ContextVar[RenderBudget | None] = ContextVar("libflow_render_budget", default=None)


@contextmanager
def render_budget() -> Iterator[RenderBudget]:
    """Give the renders inside the block one fresh budget."""
    token = _budget.set(RenderBudget(deadline=time.monotonic() + RENDER_SECONDS))
    try:
        yield _current()
    finally:
        _budget.reset(token)


def _current() -> RenderBudget:
    """The active budget; outside a render (constant folding at compile time) a fresh one."""
    budget = _budget.get()
    if budget is None:
        return RenderBudget(deadline=time.monotonic() + RENDER_SECONDS)
    return budget


def tick() -> None:
    """Fail when the render is past its wall-time budget."""
    if time.monotonic() > _current().deadline:
        raise ExpressionError(f"the expression took longer than {RENDER_SECONDS:g} s")


def charge(chars: int, *, what: str = "a value") -> None:
    """Account for a string of ``chars`` built by the render; fail past the limits."""
    if chars > MAX_VALUE_CHARS:
        raise ExpressionError(f"{what} of {chars} characters is over the limit")
    budget = _current()
    budget.allocated += chars
    if budget.allocated > MAX_ALLOCATED_CHARS:
        raise ExpressionError("the expression built more text than its limit allows")


def check_items(count: int, what: str) -> None:
    """Fail when a list to build would hold more than MAX_ITEMS items."""
    if count > MAX_ITEMS:
        raise ExpressionError(f"{what} of {count} items is over the limit of {MAX_ITEMS}")
    charge(count * 8, what=what)


def check_result(value: Any, what: str) -> Any:
    """Charge a freshly built string or list to the budget and pass it on."""
    if isinstance(value, TEXT_TYPES):
        charge(len(value), what=what)
    elif isinstance(value, _SEQUENCE):
        check_items(len(value), what)
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
            raise ExpressionError(f"the expression took longer than {RENDER_SECONDS:g} s")
        yield item


def guarded_concat(*parts: Any) -> str:
    """The ``~`` operator, charged to the budget."""
    texts = [part if isinstance(part, str) else str(part) for part in parts]
    charge(sum(map(len, texts)), what="the result of ~")
    return "".join(texts)


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


def replaced_size(text: str, old: str, new: str, count: int | None) -> int:
    """The length of ``text.replace(old, new, count)``, without building it."""
    occurrences = len(text) + 1 if not old else text.count(old)
    if count is not None and count >= 0:
        occurrences = min(occurrences, count)
    return len(text) + occurrences * (len(new) - len(old))


def check_text_method(text: str | bytes, name: str, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """Refuse str/bytes method calls whose result would be huge; may materialize args."""
    if name in _PAD_METHODS and args:
        charge(as_int(args[0]), what=f"{name}()")
    elif name == "expandtabs":
        tabs = text.count("\t") if isinstance(text, str) else text.count(b"\t")
        charge(len(text) + tabs * (as_int(args[0]) if args else 8), what="expandtabs()")
    elif name == "replace" and isinstance(text, str) and len(args) >= 2:
        count = args[2] if len(args) > 2 else None
        charge(replaced_size(text, str(args[0]), str(args[1]), count), what="replace()")
    elif name == "join" and args:
        items = list(guarded_iter(args[0]))
        lengths = sum(len(item) for item in items if isinstance(item, TEXT_TYPES))
        charge(lengths + len(text) * max(len(items) - 1, 0), what="join()")
        return (items, *args[1:])
    elif name in {"translate", "maketrans"}:
        raise ExpressionError(f"{name}() is not available in expressions")
    return args


class _GuardLoopsAndConcat(NodeTransformer):
    """Rewrite a parsed template so loops and ``~`` go through the budget."""

    def visit_For(self, node: nodes.For) -> nodes.Node:
        """Iterate through guarded_iter."""
        self.generic_visit(node)
        iterable = node.iter
        assert isinstance(iterable, nodes.Expr)
        node.iter = _call(f"{__name__}.guarded_iter", [iterable], iterable.lineno)
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        """Concatenate through guarded_concat."""
        self.generic_visit(node)
        return _call(f"{__name__}.guarded_concat", node.nodes, node.lineno)


def _call(import_name: str, args: list[nodes.Expr], lineno: int) -> nodes.Call:
    """A call node of a function of this module that templates cannot name or shadow."""
    return nodes.Call(nodes.ImportedName(import_name), args, [], None, None, lineno=lineno)


def guard_template(tree: nodes.Template) -> nodes.Template:
    """The same template with its loops and concatenations budgeted."""
    result = _GuardLoopsAndConcat().visit(tree)
    assert isinstance(result, nodes.Template)
    return result


def check_repeat(left: Any, right: Any) -> None:
    """Refuse ``text * n`` or ``list * n`` over the limits."""
    if isinstance(left, int) and not isinstance(right, int):
        left, right = right, left
    if not isinstance(right, int):
        return
    if isinstance(left, TEXT_TYPES):
        charge(len(left) * max(right, 0), what="the result of *")
    elif isinstance(left, _SEQUENCE):
        check_items(len(left) * max(right, 0), "the result of *")


def check_add(left: Any, right: Any) -> None:
    """Refuse ``+`` of strings or lists over the limits."""
    if isinstance(left, TEXT_TYPES) and isinstance(right, TEXT_TYPES):
        charge(len(left) + len(right), what="the result of +")
    elif isinstance(left, _SEQUENCE) and isinstance(right, _SEQUENCE):
        check_items(len(left) + len(right), "the result of +")


def check_power(left: Any, right: Any) -> None:
    """Refuse integer powers whose result would be enormous."""
    if not (isinstance(left, int) and isinstance(right, int)) or right <= 0 or abs(left) <= 1:
        return
    if abs(left).bit_length() * right > MAX_POWER_BITS:
        raise ExpressionError("the result of ** is over the limit")
