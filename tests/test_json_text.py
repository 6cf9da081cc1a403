"""How libflow writes JSON: orjson, the standard library for what orjson refuses, and
stored JSON text embedded as it is."""

from __future__ import annotations

import json

from libflow.json_text import RawJson, dumps


def test_stored_json_text_is_embedded_as_it_is() -> None:
    stored = '{"city":"Zürich","n":1}'
    assert dumps({"metadata": RawJson(stored), "k": [1]}) == (
        b'{"metadata":' + stored.encode() + b',"k":[1]}'
    )


def test_stored_json_text_survives_the_fallback_for_what_orjson_refuses() -> None:
    # An integer beyond 64 bits elsewhere in the value sends it to the standard library.
    written = dumps({"big": 2**70, "steps": RawJson('{"queued":"2026-11-25T00:00:00.000Z"}')})
    assert json.loads(written) == {"big": 2**70, "steps": {"queued": "2026-11-25T00:00:00.000Z"}}
