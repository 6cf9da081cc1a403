"""The Jinja2 sandbox that expressions run in, with budgets on time, loops and sizes.

Jinja's sandbox stops attribute escapes but not resource abuse: ``'a' * 10**10``,
``'a'|center(10**10)``, ``(1).to_bytes(10**9, 'big')``, a loop doubling a string, or
``[s] * 100000`` turned into text exhaust memory, and nested loops the CPU. Each render
gets a budget; every operation that can build a large value or loop is checked against it
BEFORE it builds anything (sizes are worked out, or estimated by
``libflow.engine.value_size``), and what it built is charged after.

The budget and its checks are in ``libflow.engine.render_budget``; this module holds the
environment, the filters it replaces and the rewrite of parsed templates. It is a little
over 400 lines because each replaced filter sits beside the size check it needs: split,
a filter and its bound would live apart.
"""

from __future__ import annotations

import functools
import re
import string
import types
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from jinja2 import StrictUndefined, nodes, pass_environment, pass_eval_context
from jinja2 import filters as jinja_filters
from jinja2.environment import Environment
from jinja2.nodes import EvalContext
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import _PassArg
from jinja2.visitor import NodeTransformer

from libflow.engine.render_budget import (
    MAX_TEXT_CHARS,
    MAX_VALUE_CHARS,
    TEXT_TYPES,
    ExpressionError,
    as_int,
    capped_split,
    charge,
    check_add,
    check_format_string,
    check_items,
    check_multiply,
    check_power,
    check_printf,
    check_result,
    check_size,
    check_text_method,
    check_to_bytes,
    guarded_iter,
    guarded_range,
    replaced_size,
    tick,
)
from libflow.engine.value_size import TextEstimate, text_size, value_text, value_text_size

# Filters that turn their value into text, and how many characters one character of that
# text may become (escape: "'" is "&#39;"; urlencode: "😀" is "%F0%9F%98%80").
_TEXT_FILTER_GROWTH: dict[str, int] = {
    "string": 1,
    "safe": 1,
    "trim": 1,
    "striptags": 1,
    "truncate": 1,
    "wordcount": 1,
    "capitalize": 3,
    "title": 3,
    "upper": 3,
    "lower": 3,
    "escape": 5,
    "e": 5,
    "forceescape": 5,
    "xmlattr": 5,
    "urlencode": 12,
}
# pprint's output can be far larger than its input (it indents each line by the width of
# the keys above it and wraps long strings word by word): it is not offered at all.
_REFUSED_FILTERS = frozenset({"pprint"})
_NUMBER = re.compile(r"\d+")
_PRINTF_FIELD = re.compile(r"%(?:\(([^)]*)\))?[-#0 +]*(?:\d+)?(?:\.\d+)?[hlL]?([a-zA-Z%])")


def _text_of(value: Any, what: str, limit: int = MAX_VALUE_CHARS) -> int:
    """The length str(value) will have (estimated before building it); refused past limit."""
    if isinstance(value, str):
        return len(value)
    return text_size(value, mode="str", limit=limit, what=what)


def _capped_join(parts: Iterable[str]) -> str:
    """How Jinja joins captured output (macros, set blocks, filter blocks)."""
    text = "".join(parts)
    charge(len(text), what="captured output")
    return text


def _finalize(value: Any) -> str:
    """Turn each ``{{ }}`` output into text, its size estimated before and charged after."""
    tick()
    value_text_size(value, limit=MAX_TEXT_CHARS, what="an output")
    text = value_text(value)
    charge(len(text), what="an output")
    return text


def guarded_concat(*parts: Any) -> str:
    """The ``~`` operator: the parts' text estimated before it is built, charged after."""
    size = 0
    for part in parts:
        size += value_text_size(part, limit=MAX_VALUE_CHARS, what="the result of ~")
        check_size(size, what="the result of ~")
    texts = [value_text(part) for part in parts]
    charge(sum(map(len, texts)), what="the result of ~")
    return "".join(texts)


def _check_text_filter(name: str, value: Any, extra_args: Iterable[Any]) -> None:
    """Refuse a text filter whose result could be over the limit, before it runs."""
    if name == "urlize":  # every word may become a link, carrying the target and rel given
        size = _text_of(value, "|urlize's value")
        per_link = 64 + sum(len(arg) for arg in extra_args if isinstance(arg, str))
        check_size(3 * size + (size // 2 + 1) * per_link, what="|urlize")
        return
    growth = _TEXT_FILTER_GROWTH[name]
    if isinstance(value, str):
        if name in {"escape", "e", "forceescape"}:
            specials = sum(value.count(mark) for mark in "&'\"<>")
            check_size(len(value) + 4 * specials, what=f"|{name}")
        elif name == "urlencode":
            check_size(len(value) * (3 if value.isascii() else growth), what="|urlencode")
        elif growth > 1 and not value.isascii():
            check_size(len(value) * growth, what=f"|{name}")
        return
    size = _text_of(value, f"the text of |{name}'s value")
    check_size(size * growth, what=f"|{name}")


def _guard_filter(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a filter: refused if it could build too much, its result charged to the budget."""
    skip = 0 if _PassArg.from_obj(original) is None else 1  # the environment or context
    text_filter = name in _TEXT_FILTER_GROWTH or name == "urlize"
    refused = name in _REFUSED_FILTERS

    @functools.wraps(original)  # keeps Jinja's pass_* marker
    def guarded(*args: Any, **kwargs: Any) -> Any:
        """The filter, checked before and its result charged after."""
        tick()
        if refused:
            raise ExpressionError(f"the {name} filter is not available in expressions")
        if len(args) > skip:
            value = args[skip]
            if text_filter:
                _check_text_filter(name, value, (*args[skip + 1 :], *kwargs.values()))
            elif name == "list" and isinstance(value, str):
                check_items(len(value), "|list")
        return check_result(original(*args, **kwargs), "a filter's result")

    return guarded


def _center(value: Any, width: int = 80) -> str:
    """``center`` with a capped width."""
    check_size(max(_text_of(value, "|center's value"), as_int(width)), what="center()")
    return jinja_filters.do_center(value, width)


def _indent(s: str, width: int | str = 4, first: bool = False, blank: bool = False) -> str:
    """``indent`` refusing a result over the limit before building it."""
    size = _text_of(s, "|indent's value")
    pad = len(width) if isinstance(width, str) else as_int(width)
    lines = (s.count("\n") if isinstance(s, str) else size) + 1
    check_size(size + lines * pad, what="indent()")
    return jinja_filters.do_indent(str(s), width, first, blank)


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
    size = _text_of(s, "|wordwrap's value")
    newlines = s.count("\n") if isinstance(s, str) else size
    breaks = size // max(as_int(width), 1) + newlines + 1
    check_size(size + breaks * len(wrapstring or "\n"), what="wordwrap()")
    return jinja_filters.do_wordwrap(
        environment, str(s), width, break_long_words, wrapstring, break_on_hyphens
    )


@pass_eval_context
def _replace(eval_ctx: EvalContext, s: str, old: str, new: str, count: int | None = None) -> str:
    """``replace`` refusing a result over the limit before building it."""
    _text_of(s, "|replace's value")
    check_size(replaced_size(str(s), str(old), str(new), count), what="replace()")
    return jinja_filters.do_replace(eval_ctx, s, old, new, count)


def check_printf_arguments(fmt: str, values: Any) -> None:
    """Refuse ``fmt % values`` when its fields' text would be over the limit, before it runs."""
    check_printf(fmt)
    estimate = TextEstimate(mode="str", limit=MAX_VALUE_CHARS, what="the result of %")
    estimate.add(fmt)
    positional = values if isinstance(values, tuple) else (values,)
    at = 0
    for match in _PRINTF_FIELD.finditer(fmt):
        key, conversion = match.groups()
        if conversion == "%":
            continue
        if key is not None and isinstance(values, Mapping):
            value = values.get(key)
        elif at < len(positional):
            value, at = positional[at], at + 1
        else:
            continue  # too few values: % itself refuses
        estimate.add(value, quoted=conversion in "ra")


def _format(value: str, *args: Any, **kwargs: Any) -> str:
    """``format`` (printf style) without ``*``, huge widths, or fields of huge text."""
    check_printf_arguments(str(value), kwargs or args)
    return jinja_filters.do_format(value, *args, **kwargs)


@pass_eval_context
def _tojson(eval_ctx: EvalContext, value: Any, indent: int | None = None) -> str:
    """``tojson`` with a small indent, its size estimated before it is built."""
    if indent is not None and as_int(indent) > 8:
        raise ExpressionError("tojson indent is limited to 8")
    text_size(value, mode="json", limit=MAX_VALUE_CHARS, what="|tojson", indent=as_int(indent))
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
    estimate = TextEstimate(mode="str", limit=MAX_VALUE_CHARS, what="join()")
    separator = len(str(d))
    for item in items:  # an item's text bounds the text of any of its attributes
        estimate.add(item, extra=separator)
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


def _format_fields_size(fmt: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
    """Refuse ``fmt.format(...)`` whose fields' text would be over the limit, before it runs."""
    estimate = TextEstimate(mode="str", limit=MAX_VALUE_CHARS, what="format()")
    auto = 0
    for text, field, spec, conversion in string.Formatter().parse(fmt):
        width = max((int(number) for number in _NUMBER.findall(spec or "")), default=0)
        estimate.add(text, extra=width)
        if field is None:
            continue
        name = re.split(r"[.\[]", field, maxsplit=1)[0]
        if name == "":
            value = args[auto] if auto < len(args) else None
            auto += 1
        elif name.isdecimal():  # as str.format reads an index ("²" is a key to it)
            value = args[int(name)] if int(name) < len(args) else None
        else:
            value = kwargs.get(name)
        estimate.add(value, quoted=conversion in ("r", "a"))


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
            self.filters[name] = _guard_filter(name, _GUARDED_FILTERS.get(name, original))

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
            check_multiply(left, right)
        elif operator == "+":
            check_add(left, right)
        elif operator == "%" and isinstance(left, str):
            check_printf_arguments(left, right)
        elif operator == "**":
            check_power(left, right)
        return check_result(super().call_binop(context, operator, left, right), operator)

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        """Calls checked against the budget; methods that could build huge values refused."""
        tick()
        if isinstance(__obj, types.BuiltinMethodType):
            owner = getattr(__obj, "__self__", None)
            name = __obj.__name__
            if isinstance(owner, TEXT_TYPES):
                if name in {"split", "rsplit"} and __self.is_safe_callable(__obj):
                    return check_result(capped_split(__obj, args, kwargs), f"{name}()")
                args = check_text_method(owner, name, args, kwargs)
            elif isinstance(owner, int) and name == "to_bytes":
                check_to_bytes(args, kwargs)
        result = super().call(__context, __obj, *args, **kwargs)
        return check_result(result, "a call's result")

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        """``str.format`` without nested or huge format specifications or fields."""
        wrapper = super().wrap_str_format(value)
        if wrapper is None:
            return None
        fmt = value.__self__
        check_format_string(fmt)
        is_format_map = value.__name__ == "format_map"

        def checked(*args: Any, **kwargs: Any) -> str:
            """The format call, its fields estimated before and its result charged after."""
            tick()
            if is_format_map and len(args) == 1 and isinstance(args[0], Mapping):
                _format_fields_size(fmt, (), args[0])
            else:
                _format_fields_size(fmt, args, kwargs)
            result = wrapper(*args, **kwargs)
            charge(len(result), what="format()")
            return result

        return checked


class _GuardLoopsAndConcat(NodeTransformer):
    """Rewrite a parsed template so loops and ``~`` go through the budget."""

    def visit_For(self, node: nodes.For) -> nodes.Node:
        """Iterate through guarded_iter."""
        self.generic_visit(node)
        iterable = node.iter
        assert isinstance(iterable, nodes.Expr)
        node.iter = _call(guarded_iter, [iterable], iterable.lineno)
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        """Concatenate through guarded_concat."""
        self.generic_visit(node)
        return _call(guarded_concat, node.nodes, node.lineno)


def _call(function: Callable[..., Any], args: list[nodes.Expr], lineno: int) -> nodes.Call:
    """A call node of a guard function that templates cannot name or shadow."""
    import_name = f"{function.__module__}.{function.__name__}"
    return nodes.Call(nodes.ImportedName(import_name), args, [], None, None, lineno=lineno)


def guard_template(tree: nodes.Template) -> nodes.Template:
    """The same template with its loops and concatenations budgeted."""
    result = _GuardLoopsAndConcat().visit(tree)
    assert isinstance(result, nodes.Template)
    return result
