"""Lookups such as ``{{ inputs.name }}`` render without Jinja, exactly as Jinja would."""

from __future__ import annotations

from typing import Any

import pytest

from libflow.engine.expressions import render, render_text
from libflow.engine.render_budget import ExpressionError

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
