"""Expressions: lookups such as ``{{ inputs.name }}`` render without Jinja, exactly as Jinja
would; runs evaluate inline or on a CPU thread alike; bounded operations still work."""

from __future__ import annotations

from typing import Any

import pytest

from libflow.engine.expressions import evaluate, render, render_text
from libflow.engine.render_budget import ExpressionError, RunAllowance
from libflow.engine.value_size import text_size

CONTEXT: dict[str, Any] = {
    "inputs": {
        "name": "Ada",
        "count": 3,
        "ratio": 0.5,
        "flag": True,
        "nothing": None,
        "items": "a key, not dict.items",
        "nested": {"list": [1, 2], "deep": {"x": "y"}},
    },
    "nodes": {"greet": {"text": "Hello"}},
    "event": {"name": "run"},
}


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("{{ inputs.name }}", "Ada"),
        ("{{ inputs.count }}", 3),
        ("{{ inputs.ratio }}", 0.5),
        ("{{ inputs.flag }}", True),
        ("{{ inputs.nothing }}", None),
        ("{{ inputs['nested'].deep }}", {"x": "y"}),
        ("{{ inputs.nested.list }}", [1, 2]),
        ("{{ inputs.items }}", "a key, not dict.items"),
    ],
)
def test_a_single_lookup_keeps_its_native_value(source: str, expected: Any) -> None:
    assert render(source, CONTEXT) == expected


@pytest.mark.parametrize(
    ("source", "through_jinja"),
    [
        ("{{ nodes.greet.text }}, {{ inputs.name }}!", "{{ nodes.greet.text ~ '' }}, Ada!"),
        ("n={{ inputs.count }} r={{ inputs.ratio }}", "n={{ 3 }} r={{ 0.5 }}"),
        ("{{ inputs.flag }}/{{ inputs.nothing }}", "{{ true }}/{{ none }}"),
        ("{{ inputs.nested }}", "{{ {'list': [1, 2], 'deep': {'x': 'y'}} }}"),
    ],
)
def test_text_with_lookups_renders_as_jinja_renders_it(source: str, through_jinja: str) -> None:
    assert render_text(source, CONTEXT) == render_text(through_jinja, CONTEXT)


def test_a_missing_key_still_fails_as_jinja_fails() -> None:
    with pytest.raises(ExpressionError, match=r"undefined|no attribute"):
        render("{{ inputs.unknown }}", CONTEXT)


def test_a_lookup_past_a_non_dict_is_left_to_jinja() -> None:
    # "Ada".upper is a method: Jinja's sandbox decides what that renders as.
    assert render_text("{{ inputs.name.upper() }}", CONTEXT) == "ADA"
    assert render("{{ inputs.nested.list[1] }}", CONTEXT) == 2


# --- runs evaluate fields inline when they can, on a CPU thread otherwise ---------------------


@pytest.mark.parametrize(
    ("source", "text_only"),
    [
        ("{{ inputs.name }}", False),
        ("{{ inputs.nested }}", False),
        ("{{ inputs.nested.list[1] }}", False),
        ("{{ nodes.greet.text }}, {{ inputs.name }}!", True),
        ("{{ inputs.nested }}", True),
        ("{{ inputs.name.upper() }}", True),
        ("{% for i in range(3) %}{{ i }}{% endfor %}", True),
    ],
)
async def test_evaluate_answers_as_render_does(source: str, text_only: bool) -> None:
    expected = render_text(source, CONTEXT) if text_only else render(source, CONTEXT)
    run = RunAllowance()
    assert await evaluate(source, CONTEXT, run=run, text_only=text_only) == expected
    assert await evaluate([{"x": source}], CONTEXT, run=run, text_only=text_only) == [
        {"x": expected}
    ]


async def test_evaluate_copies_what_it_answers() -> None:
    answer = await evaluate("{{ inputs.nested }}", CONTEXT, run=RunAllowance())
    answer["list"].append(3)
    assert CONTEXT["inputs"]["nested"]["list"] == [1, 2]


async def test_text_built_by_a_runs_renders_is_charged_to_the_run() -> None:
    run = RunAllowance()
    run.chars_left = 10
    assert await evaluate("{{ inputs.name }}", CONTEXT, run=run, text_only=True) == "Ada"
    assert run.chars_left == 7
    with pytest.raises(ExpressionError, match="the run's expressions built more text"):
        await evaluate("{{ 'a' * 20 }}", CONTEXT, run=run)


# --- operations keep working within their limits ------------------------------------------------


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("{{ 'a,b,,c'.split(',') }}", ["a", "b", "", "c"]),
        ("{{ 'a b  c'.split() }}", ["a", "b", "c"]),
        ("{{ 'a,b,c'.rsplit(',', 1) }}", ["a,b", "c"]),
        ("{{ 'a,b,c'.split(sep=',', maxsplit=1) }}", ["a", "b,c"]),
        ("{{ 'a\nb\r\nc'.splitlines() }}", ["a", "b", "c"]),
        ("{{ (258).to_bytes(2, 'big') | list }}", [1, 2]),
        ("{{ (10 ** 20) * (10 ** 20) }}", 10**40),
        ("{{ 'é'.upper() }}", "É"),
        ("{{ '%s-%r' % ('a', 'b') }}", "a-'b'"),
        ("{{ '%(x)s' % {'x': [1]} }}", "[1]"),
        ("{{ '{}/{x!r:>5}'.format([1], x='y') }}", "[1]/  'y'"),
        ("{{ '{\u0663}{\u00b2}'.format(0, 1, 2, 3, **{'\u00b2': 'k'}) }}", "3k"),
        ("{{ ['a', 1, [2]] | join('-') }}", "a-1-[2]"),
        ("{{ {'b': '<'} | tojson }}", '{"b": "\\u003c"}'),
        ("{{ [1, 'x'] | string }}", "[1, 'x']"),
        ("{{ 'x' ~ [1] ~ none }}", "x[1]null"),  # ~ spells data as an output does: JSON
        ("{{ '<&>' | escape }}", "&lt;&amp;&gt;"),
        ("{{ 'a b' | urlencode }}", "a%20b"),
        ("{{ 'x' | center(5) }}", "  x  "),
    ],
)
def test_bounded_operations_still_answer_as_python_and_jinja_do(source: str, expected: Any) -> None:
    assert render(source, CONTEXT) == expected


VALUES: list[Any] = [
    "plain",
    "quote ' and \\ back",
    "tab\tand\nnewline\x00",
    "é and 😀",
    12345678901234567890,
    -1.5e300,
    None,
    True,
    [1, "two", [3.0, None]],
    {"k": ["v", {"n": 1}], "<": "&'"},
    ("tuple",),
    {"a": 1}.items(),
    {i: "" for i in range(1000)},  # JSON quotes keys that are not text: "1": ""
    {True: 1, False: 2},
    {None: 1},
    {1.5: 3},
]


@pytest.mark.parametrize("value", VALUES)
def test_the_text_estimate_is_an_upper_bound(value: Any) -> None:
    assert text_size(value, mode="str", limit=10**6, what="v") >= len(str(value))
    if not isinstance(value, type({}.items())):
        as_json = render_text("{{ v | tojson }}", {"v": value})
        assert text_size(value, mode="json", limit=10**6, what="v") >= len(as_json)
        indented = render_text("{{ v | tojson(2) }}", {"v": value})
        assert text_size(value, mode="json", limit=10**6, what="v", indent=2) >= len(indented)


def test_a_small_value_sharing_one_list_many_times_is_estimated_by_its_text() -> None:
    shared = ["x" * 1000] * 1000
    value = [shared] * 1000  # 1,000,000 strings as text, three lists in memory
    with pytest.raises(ExpressionError, match="over the limit"):
        text_size(value, mode="str", limit=10**6, what="the value")


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("Passages: {{ hits }}", 'Passages: [{"name": "a.txt", "page": null, "ok": true}]'),
        ("{{ flag }} and {{ nothing }}", "true and null"),
        ("{{ 'é' ~ hits[0] }}", 'é{"name": "a.txt", "page": null, "ok": true}'),
        ("{{ 1.5 }} {{ 'text' }}", "1.5 text"),
    ],
)
def test_data_inside_text_reads_as_json_not_as_python(source: str, expected: str) -> None:
    context = {"hits": [{"name": "a.txt", "page": None, "ok": True}], "flag": True, "nothing": None}
    assert render(source, context) == expected


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("{{ nodes.b.text }}", "nodes.b is undefined: no node 'b' ran before this one"),
        ("Total: {{ nodes['b'].text }}", "nodes.b is undefined: no node 'b' ran before this one"),
        ("{{ inputs.amount > 3 }}", "inputs.amount is undefined: the run has no input 'amount'"),
    ],
)
def test_a_missing_node_or_input_is_named_in_the_workflows_words(
    source: str, expected: str
) -> None:
    context = {"nodes": {"a": {"text": "x"}}, "inputs": {"name": "Ada"}}
    with pytest.raises(ExpressionError) as failed:
        render(source, context)
    assert str(failed.value).startswith(expected), failed.value


def test_a_missing_field_of_a_node_keeps_jinjas_words() -> None:
    with pytest.raises(ExpressionError, match="has no attribute 'missing'"):
        render("{{ nodes.a.missing }}", {"nodes": {"a": {"text": "x"}}, "inputs": {}})
