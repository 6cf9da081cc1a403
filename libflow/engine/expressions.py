"""Expressions in workflow fields: Jinja2 in the sandbox, with native values for ``{{ x }}``.

Runs evaluate fields with ``evaluate``: what needs Jinja renders on a CPU thread
(``libflow.engine.cpu_pool``), never on the event loop; plain lookups such as
``{{ inputs.name }}`` of small values are answered inline, which costs far less than the
hop to a thread and back. Over 400 lines: compiling (with the publish-time token budget),
the inline fast path and the threaded render share the compiled-template cache and must
agree on what each field renders to; the next addition here should split compiling off.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jinja2 import TemplateError, UndefinedError, nodes
from jinja2.environment import Template, TemplateExpression
from jinja2.runtime import Undefined

from libflow.engine.cpu_pool import off_loop
from libflow.engine.definition import MAX_VALUE_DEPTH
from libflow.engine.render_budget import (
    MAX_TEXT_CHARS,
    ExpressionError,
    RunAllowance,
    charge,
    render_budget,
    tick,
)
from libflow.engine.sandbox import ExpressionSandbox, guard_template
from libflow.engine.value_size import value_text, value_text_size

MAX_NATIVE_BYTES = 8 * 1024 * 1024  # a native value, measured as JSON would be
# A looked-up value is copied inline (on the event loop) only while this small, as JSON.
INLINE_NATIVE_BYTES = 4096
_PLANS_KEPT = 4096
_UNSUPPORTED = (nodes.Extends, nodes.Include, nodes.Import, nodes.FromImport)

_env = ExpressionSandbox()


Path = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _Compiled:
    """One templated string, compiled: a native expression or a text template.

    ``lookups`` is set when the source holds nothing but text and ``{{ a.b.c }}`` (or
    ``a["b"]``) lookups: those render without Jinja, which costs more than a small
    workflow's whole run. Anything the shortcut cannot answer goes to Jinja.
    """

    expression: TemplateExpression | None
    template: Template | None
    lookups: tuple[str | Path, ...] | None = None


def has_expressions(value: str) -> bool:
    """Whether a string holds any Jinja markup at all (plain strings skip the engine)."""
    return "{" in value and ("{{" in value or "{%" in value or "{#" in value)


@functools.lru_cache(maxsize=2048)
def _compile(source: str, text_only: bool) -> _Compiled:
    """Parse, guard and compile a templated string; cached because versions never change."""
    try:
        tree = _env.parse(source)
        for unsupported in _UNSUPPORTED:
            if next(tree.find_all(unsupported), None) is not None:
                raise ExpressionError("extends, include and import are not supported")
        lookups = _lookups(tree)
        tree = guard_template(tree)
        single = None if text_only else _single_expression(source, tree)
        if single is not None:
            body = [nodes.Assign(nodes.Name("result", "store"), single, lineno=1)]
            expression = TemplateExpression(
                _env.from_string(nodes.Template(body, lineno=1)), undefined_to_none=False
            )
            compiled = _Compiled(expression=expression, template=None, lookups=lookups)
        else:
            compiled = _Compiled(expression=None, template=_env.from_string(tree), lookups=lookups)
        _remember_plan(source, text_only, compiled)
        return compiled
    except TemplateError as err:
        line = getattr(err, "lineno", None)
        where = f" at line {line}" if line else ""
        raise ExpressionError(f"template syntax error{where}: {err.message}") from err
    except (RecursionError, MemoryError, SyntaxError) as err:
        raise ExpressionError("the template is nested too deeply to compile") from err


# What the inline path knows of each compiled source: its lookups (and whether its value is
# native), or None when it needs Jinja. A source not in here has not been compiled yet:
# compiling is CPU work too, so it happens on a CPU thread, and the next run goes inline.
_PLANS: dict[tuple[str, bool], tuple[tuple[str | Path, ...], bool] | None] = {}


def _remember_plan(source: str, text_only: bool, compiled: _Compiled) -> None:
    """Note how the inline path may answer a compiled source."""
    if len(_PLANS) >= _PLANS_KEPT:
        _PLANS.clear()  # rebuilt as sources are rendered again
    plan = None
    if compiled.lookups is not None:
        plan = (compiled.lookups, compiled.expression is not None)
    _PLANS[(source, text_only)] = plan


def _single_expression(source: str, tree: nodes.Template) -> nodes.Expr | None:
    """The expression when the source is exactly one ``{{ ... }}``, else None."""
    stripped = source.strip()
    if not (stripped.startswith("{{") and stripped.endswith("}}")):
        return None
    body = tree.body
    if len(body) != 1 or not isinstance(body[0], nodes.Output) or len(body[0].nodes) != 1:
        return None
    expr = body[0].nodes[0]
    return None if isinstance(expr, nodes.TemplateData) else expr


def _lookups(tree: nodes.Template) -> tuple[str | Path, ...] | None:
    """The text and lookup paths of a template made of nothing else, or None."""
    parts: list[str | Path] = []
    for statement in tree.body:
        if not isinstance(statement, nodes.Output):
            return None
        for node in statement.nodes:
            if isinstance(node, nodes.TemplateData):
                parts.append(node.data)
                continue
            path = _path(node)
            if path is None:
                return None
            parts.append(path)
    return tuple(parts)


def _path(node: nodes.Node) -> Path | None:
    """``("a", "b", "c")`` for ``a.b.c`` or ``a["b"].c``; None for any other expression."""
    if isinstance(node, nodes.Name) and node.ctx == "load":
        return (node.name,)
    if isinstance(node, nodes.Getattr):
        parent = _path(node.node)
        return None if parent is None else (*parent, node.attr)
    if (
        isinstance(node, nodes.Getitem)
        and isinstance(node.arg, nodes.Const)
        and isinstance(node.arg.value, str)
    ):
        parent = _path(node.node)
        return None if parent is None else (*parent, node.arg.value)
    return None


_MISSING: Any = object()


def _look_up(path: Path, context: Mapping[str, Any]) -> Any:
    """The value at ``path`` when every step is a key of a dict, else _MISSING.

    The sandbox reads a dict's keys before its attributes, so for dicts this is
    exactly what Jinja would find; anything else (a missing key, a global such as
    ``range``, an attribute) is left to Jinja.
    """
    value = context.get(path[0], _MISSING)
    for key in path[1:]:
        if not isinstance(value, dict):
            return _MISSING
        value = value.get(key, _MISSING)
    return value


def _render_lookups(
    lookups: tuple[str | Path, ...], context: Mapping[str, Any], *, native: bool
) -> Any:
    """Render without Jinja, or _MISSING when a lookup needs Jinja's own rules."""
    if native:
        [path] = lookups
        assert isinstance(path, tuple)
        value = _look_up(path, context)
        return value if value is _MISSING else to_json_value(value)
    texts: list[str] = []
    size = 0
    for part in lookups:
        if isinstance(part, str):
            text = part
        else:
            value = _look_up(part, context)
            if value is _MISSING:
                return _MISSING
            tick()
            value_text_size(value, limit=MAX_TEXT_CHARS, what="an output")  # as _finalize does
            text = value_text(value)
            charge(len(text), what="an output")
        size += len(text)
        if size > MAX_TEXT_CHARS:
            raise ExpressionError(f"the rendered text is over {MAX_TEXT_CHARS} characters")
        texts.append(text)
    return "".join(texts)


def check_syntax(source: str, *, text_only: bool = False) -> str | None:
    """The syntax problem of a templated string, or None when it compiles.

    Compiled in the mode its field renders in: ``text_only`` for template nodes.
    """
    if not has_expressions(source):
        return None
    try:
        _compile(source, text_only)
    except ExpressionError as err:
        return str(err)
    return None


def count_tokens(source: str, limit: int) -> int:
    """The tokens Jinja's lexer finds in a templated string, counted up to ``limit`` + 1.

    Compiling costs in proportion to a template's tokens, and far more than lexing them:
    a definition's tokens are counted (and bounded) before anything is compiled.
    """
    if not has_expressions(source):
        return 0
    count = 0
    try:
        for _token in _env.lex(source):
            count += 1
            if count > limit:
                break
    except TemplateError:
        pass  # compiling reports the syntax error
    return count


def render(value: Any, context: Mapping[str, Any]) -> Any:
    """Render every string inside ``value`` (dicts and lists too); ``{{ x }}`` keeps x's type.

    On the calling thread: runs use ``evaluate``, which keeps Jinja off the event loop.
    """
    with render_budget():
        return _render(value, context, text_only=False, depth=0)


def render_text(source: str, context: Mapping[str, Any]) -> str:
    """Render a template to text, even when it is a single expression (calling thread)."""
    with render_budget():
        result = _render(source, context, text_only=True, depth=0)
    assert isinstance(result, str)
    return result


async def evaluate(
    value: Any, context: Mapping[str, Any], *, run: RunAllowance, text_only: bool = False
) -> Any:
    """Render a field of a run, within ``run``'s allowance (RunOutOfTime past its timeout).

    Inline when it is plain lookups of small values, on a CPU thread otherwise.
    """
    quick = _render_inline(value, context, text_only, 0, run)
    if quick is not _MISSING:
        return quick
    return await off_loop(_render_within, value, context, text_only, run)


def _render_within(
    value: Any, context: Mapping[str, Any], text_only: bool, run: RunAllowance
) -> Any:
    """Render on a CPU thread with a fresh budget within the run's allowance."""
    with render_budget(run):
        return _render(value, context, text_only=text_only, depth=0)


def _render_inline(
    value: Any, context: Mapping[str, Any], text_only: bool, depth: int, run: RunAllowance
) -> Any:
    """The rendered value when no part of it needs Jinja nor much work, else _MISSING."""
    if isinstance(value, str):
        if not has_expressions(value):
            return value
        plan = _PLANS.get((value, text_only))
        if plan is None:
            return _MISSING
        lookups, native = plan
        return _inline_lookups(lookups, context, native=native, run=run)
    if depth >= MAX_VALUE_DEPTH:
        return _MISSING
    if isinstance(value, Mapping):
        rendered: dict[str, Any] = {}
        for key, item in value.items():
            result = rendered[key] = _render_inline(item, context, text_only, depth + 1, run)
            if result is _MISSING:
                return _MISSING
        return rendered
    if isinstance(value, list | tuple):
        items = []
        for item in value:
            result = _render_inline(item, context, text_only, depth + 1, run)
            if result is _MISSING:
                return _MISSING
            items.append(result)
        return items
    return value


def _is_scalar(value: Any) -> bool:
    """Whether a value is JSON text, a finite number, a boolean or null."""
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or type(value) in (str, int, bool)


def _inline_lookups(
    lookups: tuple[str | Path, ...],
    context: Mapping[str, Any],
    *,
    native: bool,
    run: RunAllowance,
) -> Any:
    """Lookups answered inline: scalars, and small containers as a native value."""
    if native:
        [path] = lookups
        assert isinstance(path, tuple)
        value = _look_up(path, context)
        if value is _MISSING or _is_scalar(value):
            return value
        try:
            return _to_json(value, [INLINE_NATIVE_BYTES], 0)
        except ExpressionError:
            return _MISSING  # too big to copy here, or not JSON: the thread says which
    texts: list[str] = []
    size = 0
    for part in lookups:
        if isinstance(part, str):
            text = part
        else:
            value = _look_up(part, context)
            if value is _MISSING or not _is_scalar(value):
                return _MISSING
            text = value_text(value)  # as _finalize does
        size += len(text)
        if size > MAX_TEXT_CHARS:
            return _MISSING
        texts.append(text)
    run.spend_chars(size)
    return "".join(texts)


def _render(value: Any, context: Mapping[str, Any], *, text_only: bool, depth: int) -> Any:
    """Render one value of a definition within the current budget."""
    if isinstance(value, str):
        if not has_expressions(value):
            return value
        return _render_string(value, context, text_only=text_only)
    if depth >= MAX_VALUE_DEPTH:
        raise ExpressionError(f"the value is nested deeper than {MAX_VALUE_DEPTH} levels")
    if isinstance(value, Mapping):
        return {
            key: _render(item, context, text_only=text_only, depth=depth + 1)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [_render(item, context, text_only=text_only, depth=depth + 1) for item in value]
    return value


def _render_string(source: str, context: Mapping[str, Any], *, text_only: bool) -> Any:
    """Evaluate one templated string."""
    compiled = _compile(source, text_only)
    if (source, text_only) not in _PLANS:
        _remember_plan(source, text_only, compiled)  # compiled before the plans were cleared
    if compiled.lookups is not None:
        native = compiled.expression is not None
        rendered = _render_lookups(compiled.lookups, context, native=native)
        if rendered is not _MISSING:
            return rendered
    try:
        if compiled.expression is not None:
            result = compiled.expression(context)
            if isinstance(result, Undefined):
                str(result)  # StrictUndefined raises with the reason (undefined, unsafe)
            return to_json_value(result)
        assert compiled.template is not None
        return _stream_text(compiled.template, context)
    except ExpressionError:
        raise
    except Exception as err:  # any failure inside a template is the template's problem
        raise ExpressionError(_describe_missing(err, source, context) or _describe(err)) from None


def _stream_text(template: Template, context: Mapping[str, Any]) -> str:
    """Render to text, stopping as soon as the output passes MAX_TEXT_CHARS."""
    parts: list[str] = []
    size = 0
    for part in template.generate(context):
        size += len(part)
        if size > MAX_TEXT_CHARS:
            raise ExpressionError(f"the rendered text is over {MAX_TEXT_CHARS} characters")
        parts.append(part)
    return "".join(parts)


_NO_KEY = re.compile(r"'dict object' has no (?:attribute|element) '?(.+?)'?")
_MISSING_HINTS = {
    "nodes": "no node {name!r} ran before this one (a node reads the nodes upstream of it "
    "through edges, on a branch that ran)",
    "inputs": "the run has no input {name!r} (an input node names it, with a default or required)",
}


def _describe_missing(err: Exception, source: str, context: Mapping[str, Any]) -> str | None:
    """``nodes.x`` or ``inputs.x`` that the run lacks, said in the workflow's words, where
    Jinja says only "'dict object' has no attribute 'x'" (of which dict, it does not say)."""
    if not isinstance(err, UndefinedError):
        return None
    found = _NO_KEY.fullmatch(str(err.message))
    if found is None:
        return None
    name = found.group(1)
    for scope, hint in _MISSING_HINTS.items():
        values = context.get(scope)
        spelled = rf"\b{scope}\s*(?:\.\s*{re.escape(name)}\b|\[\s*['\"]{re.escape(name)}['\"])"
        if isinstance(values, Mapping) and name not in values and re.search(spelled, source):
            return f"{scope}.{name} is undefined: " + hint.format(name=name)
    return None


def _describe(err: Exception) -> str:
    """A one-line reason for an exception raised inside a template."""
    message = getattr(err, "message", None) or str(err) or type(err).__name__
    if isinstance(err, TemplateError | ExpressionError):
        return str(message)
    return f"{type(err).__name__}: {message}"


def to_json_value(value: Any) -> Any:
    """A JSON-compatible copy of an expression's value, refused past MAX_NATIVE_BYTES."""
    budget = [MAX_NATIVE_BYTES]
    return _to_json(value, budget, 0)


def _spend(budget: list[int], size: int) -> None:
    """Take ``size`` bytes from a native value's budget."""
    budget[0] -= size
    if budget[0] < 0:
        raise ExpressionError(f"the value is over {MAX_NATIVE_BYTES} bytes")


def _to_json(value: Any, budget: list[int], depth: int) -> Any:
    """Copy one level of a native value into JSON types."""
    if depth > MAX_VALUE_DEPTH:
        raise ExpressionError(f"the value is nested deeper than {MAX_VALUE_DEPTH} levels")
    if value is None or isinstance(value, bool):
        _spend(budget, 5)
        return value
    if isinstance(value, str):
        _spend(budget, len(value) + 2)
        return str(value)  # a Markup becomes plain text
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            raise ExpressionError(f"{value} is not a JSON number")
        _spend(budget, 8)
        return value
    if isinstance(value, Mapping):
        tick()
        result: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str | int | float | bool) and key is not None:
                raise ExpressionError(f"a {type(key).__name__} cannot be a JSON object key")
            _spend(budget, len(str(key)) + 4)
            result[str(key)] = _to_json(item, budget, depth + 1)
        return result
    if isinstance(value, list | tuple | range):
        tick()
        return [_to_json(item, budget, depth + 1) for item in value]
    if isinstance(value, Undefined):
        str(value)  # raises the reason
    raise ExpressionError(f"the expression's value is a {type(value).__name__}, not JSON data")
