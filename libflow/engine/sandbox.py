"""The Jinja2 sandbox that expressions run in, with budgets on time, loops and sizes.

Jinja's sandbox stops attribute escapes but not resource abuse: ``'a' * 10**10``,
``'a'|center(10**10)`` or a loop doubling a string exhaust memory, and nested loops the
CPU of the one event loop every run shares. Each render gets a budget; every operation
that can build a large value or loop is routed through a check against it.
"""

from __future__ import annotations

import functools
import re
import string
import time
import types
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from jinja2 import StrictUndefined, nodes, pass_environment, pass_eval_context
from jinja2 import filters as jinja_filters
from jinja2.environment import Environment
from jinja2.nodes import EvalContext
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.visitor import NodeTransformer

MAX_RANGE = 10_000  # items one range() may produce
MAX_ITEMS = 100_000  # items of a list built by *, + or the batch/slice filters
MAX_VALUE_CHARS = 8 * 1024 * 1024  # one string built by an expression
MAX_ALLOCATED_CHARS = 64 * 1024 * 1024  # all strings built or output by one render
MAX_LOOP_ITERATIONS = 200_000  # all for-loop iterations of one render
MAX_FORMAT_NUMBER = 10_000  # a width or precision in a format string
MAX_POWER_BITS = 64_000  # the size of an integer built by **
RENDER_SECONDS = 1.0  # the wall time one render may take

_TEXT = (str, bytes)
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


def _check_items(count: int, what: str) -> None:
    """Fail when a list to build would hold more than MAX_ITEMS items."""
    if count > MAX_ITEMS:
        raise ExpressionError(f"{what} of {count} items is over the limit of {MAX_ITEMS}")
    charge(count * 8, what=what)


def _check_result(value: Any, what: str) -> Any:
    """Charge a freshly built string or list to the budget and pass it on."""
    if isinstance(value, _TEXT):
        charge(len(value), what=what)
    elif isinstance(value, _SEQUENCE):
        _check_items(len(value), what)
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


def _capped_join(parts: Iterable[str]) -> str:
    """How Jinja joins captured output (macros, set blocks, filter blocks)."""
    text = "".join(parts)
    charge(len(text), what="captured output")
    return text


def _finalize(value: Any) -> str:
    """Turn each ``{{ }}`` output into text, charging it to the budget."""
    text = value if isinstance(value, str) else str(value)
    tick()
    charge(len(text), what="an output")
    return text


def _check_printf(fmt: str) -> None:
    """Refuse ``%`` formats with a ``*`` or huge width or precision."""
    for match in _PRINTF_SPEC.finditer(fmt):
        for number in match.groups():
            if number == "*":
                raise ExpressionError("'*' widths are not allowed in % formats")
            if number is not None and int(number) > MAX_FORMAT_NUMBER:
                raise ExpressionError(f"a format width of {number} is over the limit")


def _check_format_string(fmt: str) -> None:
    """Refuse ``str.format`` specs that are nested or hold a huge width or precision."""
    for _text, _field, spec, _conversion in string.Formatter().parse(fmt):
        if not spec:
            continue
        if "{" in spec:
            raise ExpressionError("nested format specifications are not allowed")
        if any(int(number) > MAX_FORMAT_NUMBER for number in _NUMBER.findall(spec)):
            raise ExpressionError(f"the format specification {spec!r} is over the limit")


def _as_int(value: Any) -> int:
    """An int argument, or 0 for anything else (the call itself then fails or ignores it)."""
    return value if isinstance(value, int) else 0


def _replaced_size(text: str, old: str, new: str, count: int | None) -> int:
    """The length of ``text.replace(old, new, count)``, without building it."""
    occurrences = len(text) + 1 if not old else text.count(old)
    if count is not None and count >= 0:
        occurrences = min(occurrences, count)
    return len(text) + occurrences * (len(new) - len(old))


def _check_text_method(text: str | bytes, name: str, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """Refuse str/bytes method calls whose result would be huge; may materialize args."""
    if name in _PAD_METHODS and args:
        charge(_as_int(args[0]), what=f"{name}()")
    elif name == "expandtabs":
        tabs = text.count("\t") if isinstance(text, str) else text.count(b"\t")
        charge(len(text) + tabs * (_as_int(args[0]) if args else 8), what="expandtabs()")
    elif name == "replace" and isinstance(text, str) and len(args) >= 2:
        count = args[2] if len(args) > 2 else None
        charge(_replaced_size(text, str(args[0]), str(args[1]), count), what="replace()")
    elif name == "join" and args:
        items = list(guarded_iter(args[0]))
        lengths = sum(len(item) for item in items if isinstance(item, _TEXT))
        charge(lengths + len(text) * max(len(items) - 1, 0), what="join()")
        return (items, *args[1:])
    elif name in {"translate", "maketrans"}:
        raise ExpressionError(f"{name}() is not available in expressions")
    return args


def _guard_filter(original: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a filter so that what it builds is charged to the budget."""

    @functools.wraps(original)  # keeps Jinja's pass_* marker
    def guarded(*args: Any, **kwargs: Any) -> Any:
        """The filter, its result charged."""
        tick()
        return _check_result(original(*args, **kwargs), "a filter's result")

    return guarded


def _center(value: Any, width: int = 80) -> str:
    """``center`` with a capped width."""
    charge(_as_int(width), what="center()")
    return jinja_filters.do_center(value, width)


def _indent(s: str, width: int | str = 4, first: bool = False, blank: bool = False) -> str:
    """``indent`` refusing a result over the limit before building it."""
    text = str(s)
    pad = width if isinstance(width, str) else " " * min(_as_int(width), MAX_VALUE_CHARS)
    charge(len(text) + (text.count("\n") + 1) * len(pad), what="indent()")
    return jinja_filters.do_indent(text, width, first, blank)


@pass_environment
def _wordwrap(
    environment: Environment,
    s: str,
    width: int = 79,
    break_long_words: bool = True,
    wrapstring: str | None = None,
    break_on_hyphens: bool = True,
) -> str:
    """``wordwrap`` refusing a huge wrap string before building the result."""
    text = str(s)
    breaks = len(text) // max(_as_int(width), 1) + text.count("\n") + 1
    charge(len(text) + breaks * len(wrapstring or "\n"), what="wordwrap()")
    return jinja_filters.do_wordwrap(
        environment, text, width, break_long_words, wrapstring, break_on_hyphens
    )


@pass_eval_context
def _replace(eval_ctx: EvalContext, s: str, old: str, new: str, count: int | None = None) -> str:
    """``replace`` refusing a result over the limit before building it."""
    charge(_replaced_size(str(s), str(old), str(new), count), what="replace()")
    return jinja_filters.do_replace(eval_ctx, s, old, new, count)


def _format(value: str, *args: Any, **kwargs: Any) -> str:
    """``format`` (printf style) without ``*`` or huge widths."""
    _check_printf(str(value))
    return jinja_filters.do_format(value, *args, **kwargs)


@pass_eval_context
def _tojson(eval_ctx: EvalContext, value: Any, indent: int | None = None) -> str:
    """``tojson`` with a small indent."""
    if indent is not None and _as_int(indent) > 8:
        raise ExpressionError("tojson indent is limited to 8")
    return str(jinja_filters.do_tojson(eval_ctx, value, indent))


def _batch(value: Iterable[Any], linecount: int, fill_with: Any = None) -> Iterator[list[Any]]:
    """``batch`` with a capped batch size (it pads the last one)."""
    _check_items(_as_int(linecount), "batch()")
    return jinja_filters.do_batch(value, linecount, fill_with)


def _slice(value: Any, slices: int, fill_with: Any = None) -> Iterator[list[Any]]:
    """``slice`` with a capped number of slices."""
    _check_items(_as_int(slices), "slice()")
    return jinja_filters.sync_do_slice(value, slices, fill_with)


@pass_eval_context
def _join(
    eval_ctx: EvalContext, value: Iterable[Any], d: str = "", attribute: str | int | None = None
) -> str:
    """``join`` refusing a result over the limit before building it."""
    items = list(guarded_iter(value))
    lengths = sum(len(item) for item in items if isinstance(item, str))
    charge(lengths + len(str(d)) * max(len(items) - 1, 0), what="join()")
    return jinja_filters.sync_do_join(eval_ctx, items, d, attribute)


@pass_environment
def _sum(
    environment: Environment,
    iterable: Iterable[Any],
    attribute: str | int | None = None,
    start: Any = 0,
) -> Any:
    """``sum`` of numbers only (summing lists is quadratic)."""
    if isinstance(start, bool) or not isinstance(start, int | float):
        raise ExpressionError("sum() adds numbers only")
    return jinja_filters.sync_do_sum(environment, guarded_iter(iterable), attribute, start)


_GUARDED_FILTERS: dict[str, Callable[..., Any]] = {
    "center": _center,
    "indent": _indent,
    "wordwrap": _wordwrap,
    "replace": _replace,
    "format": _format,
    "tojson": _tojson,
    "batch": _batch,
    "slice": _slice,
    "join": _join,
    "sum": _sum,
}


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


class ExpressionSandbox(ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox plus the budget checks above."""

    intercepted_binops = frozenset({"*", "+", "%", "**"})

    def __init__(self) -> None:
        super().__init__(
            undefined=StrictUndefined,
            autoescape=False,
            finalize=_finalize,
            keep_trailing_newline=True,
        )
        self.concat = _capped_join  # type: ignore[method-assign]
        self.globals.pop("lipsum", None)  # lipsum(n=10**6) is a CPU sink
        self.globals["range"] = guarded_range
        for name, original in list(self.filters.items()):
            self.filters[name] = _guard_filter(_GUARDED_FILTERS.get(name, original))

    def getattr(self, obj: Any, attribute: str) -> Any:
        """Like the sandbox, but a dict's keys win over its methods (``inputs.items``)."""
        tick()
        if isinstance(obj, dict) and attribute in obj:
            return obj[attribute]
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        """Like the sandbox, checking the time budget."""
        tick()
        return super().getitem(obj, argument)

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        """``*``, ``+``, ``%`` and ``**`` checked before they build anything large."""
        tick()
        if operator == "*":
            _check_repeat(left, right)
        elif operator == "+":
            _check_add(left, right)
        elif operator == "%" and isinstance(left, str):
            _check_printf(left)
        elif operator == "**":
            _check_power(left, right)
        return _check_result(super().call_binop(context, operator, left, right), operator)

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        """Calls checked against the budget; str/bytes methods that could explode refused."""
        tick()
        owner = getattr(__obj, "__self__", None)
        if isinstance(__obj, types.BuiltinMethodType) and isinstance(owner, _TEXT):
            args = _check_text_method(owner, __obj.__name__, args)
        result = super().call(__context, __obj, *args, **kwargs)
        return _check_result(result, "a call's result") if isinstance(result, _TEXT) else result

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        """``str.format`` without nested or huge format specifications."""
        wrapper = super().wrap_str_format(value)
        if wrapper is None:
            return None
        _check_format_string(value.__self__)

        def checked(*args: Any, **kwargs: Any) -> str:
            """The format call, its result charged."""
            result = wrapper(*args, **kwargs)
            charge(len(result), what="format()")
            return result

        return checked


def _check_repeat(left: Any, right: Any) -> None:
    """Refuse ``text * n`` or ``list * n`` over the limits."""
    if isinstance(left, int) and not isinstance(right, int):
        left, right = right, left
    if not isinstance(right, int):
        return
    if isinstance(left, _TEXT):
        charge(len(left) * max(right, 0), what="the result of *")
    elif isinstance(left, _SEQUENCE):
        _check_items(len(left) * max(right, 0), "the result of *")


def _check_add(left: Any, right: Any) -> None:
    """Refuse ``+`` of strings or lists over the limits."""
    if isinstance(left, _TEXT) and isinstance(right, _TEXT):
        charge(len(left) + len(right), what="the result of +")
    elif isinstance(left, _SEQUENCE) and isinstance(right, _SEQUENCE):
        _check_items(len(left) + len(right), "the result of +")


def _check_power(left: Any, right: Any) -> None:
    """Refuse integer powers whose result would be enormous."""
    if not (isinstance(left, int) and isinstance(right, int)) or right <= 0 or abs(left) <= 1:
        return
    if abs(left).bit_length() * right > MAX_POWER_BITS:
        raise ExpressionError("the result of ** is over the limit")
