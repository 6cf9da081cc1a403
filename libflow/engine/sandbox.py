"""The Jinja2 sandbox that expressions run in, with budgets on time, loops and sizes.

Jinja's sandbox stops attribute escapes but not resource abuse: ``'a' * 10**10``,
``'a'|center(10**10)`` or a loop doubling a string exhaust memory, and nested loops the
CPU of the one event loop every run shares. Each render gets a budget; every operation
that can build a large value or loop is routed through a check against it.

The budget and its checks are in ``libflow.engine.render_budget``; this module holds the
environment and the filters it replaces.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from jinja2 import StrictUndefined, pass_environment, pass_eval_context
from jinja2 import filters as jinja_filters
from jinja2.environment import Environment
from jinja2.nodes import EvalContext
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment

from libflow.engine.render_budget import (
    MAX_VALUE_CHARS,
    TEXT_TYPES,
    ExpressionError,
    as_int,
    charge,
    check_add,
    check_format_string,
    check_items,
    check_power,
    check_printf,
    check_repeat,
    check_result,
    check_text_method,
    guarded_iter,
    guarded_range,
    replaced_size,
    tick,
)


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


def _guard_filter(original: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a filter so that what it builds is charged to the budget."""

    @functools.wraps(original)  # keeps Jinja's pass_* marker
    def guarded(*args: Any, **kwargs: Any) -> Any:
        """The filter, its result charged."""
        tick()
        return check_result(original(*args, **kwargs), "a filter's result")

    return guarded


def _center(value: Any, width: int = 80) -> str:
    """``center`` with a capped width."""
    charge(as_int(width), what="center()")
    return jinja_filters.do_center(value, width)


def _indent(s: str, width: int | str = 4, first: bool = False, blank: bool = False) -> str:
    """``indent`` refusing a result over the limit before building it."""
    text = str(s)
    pad = width if isinstance(width, str) else " " * min(as_int(width), MAX_VALUE_CHARS)
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
    breaks = len(text) // max(as_int(width), 1) + text.count("\n") + 1
    charge(len(text) + breaks * len(wrapstring or "\n"), what="wordwrap()")
    return jinja_filters.do_wordwrap(
        environment, text, width, break_long_words, wrapstring, break_on_hyphens
    )


@pass_eval_context
def _replace(eval_ctx: EvalContext, s: str, old: str, new: str, count: int | None = None) -> str:
    """``replace`` refusing a result over the limit before building it."""
    charge(replaced_size(str(s), str(old), str(new), count), what="replace()")
    return jinja_filters.do_replace(eval_ctx, s, old, new, count)


def _format(value: str, *args: Any, **kwargs: Any) -> str:
    """``format`` (printf style) without ``*`` or huge widths."""
    check_printf(str(value))
    return jinja_filters.do_format(value, *args, **kwargs)


@pass_eval_context
def _tojson(eval_ctx: EvalContext, value: Any, indent: int | None = None) -> str:
    """``tojson`` with a small indent."""
    if indent is not None and as_int(indent) > 8:
        raise ExpressionError("tojson indent is limited to 8")
    return str(jinja_filters.do_tojson(eval_ctx, value, indent))


def _batch(value: Iterable[Any], linecount: int, fill_with: Any = None) -> Iterator[list[Any]]:
    """``batch`` with a capped batch size (it pads the last one)."""
    check_items(as_int(linecount), "batch()")
    return jinja_filters.do_batch(value, linecount, fill_with)


def _slice(value: Any, slices: int, fill_with: Any = None) -> Iterator[list[Any]]:
    """``slice`` with a capped number of slices."""
    check_items(as_int(slices), "slice()")
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


class ExpressionSandbox(ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox plus the render budget's checks."""

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
            check_repeat(left, right)
        elif operator == "+":
            check_add(left, right)
        elif operator == "%" and isinstance(left, str):
            check_printf(left)
        elif operator == "**":
            check_power(left, right)
        return check_result(super().call_binop(context, operator, left, right), operator)

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        """Calls checked against the budget; str/bytes methods that could explode refused."""
        tick()
        owner = getattr(__obj, "__self__", None)
        if isinstance(__obj, types.BuiltinMethodType) and isinstance(owner, TEXT_TYPES):
            args = check_text_method(owner, __obj.__name__, args)
        result = super().call(__context, __obj, *args, **kwargs)
        return check_result(result, "a call's result") if isinstance(result, TEXT_TYPES) else result

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        """``str.format`` without nested or huge format specifications."""
        wrapper = super().wrap_str_format(value)
        if wrapper is None:
            return None
        check_format_string(value.__self__)

        def checked(*args: Any, **kwargs: Any) -> str:
            """The format call, its result charged."""
            result = wrapper(*args, **kwargs)
            charge(len(result), what="format()")
            return result

        return checked
