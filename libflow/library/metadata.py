"""A file's metadata and search filters on it: the rules every caller checks them by.

Metadata (DESIGN 13) is at most MAX_METADATA_KEYS keys matching METADATA_KEY, each holding a
string of at most MAX_METADATA_STRING characters, a finite number (an integer within
JavaScript's safe range, which every JSON reader keeps exact) or a boolean.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from libflow.errors import ValidationFailed
from libflow.library.vectors import MetadataValue

MAX_METADATA_KEYS = 32
MAX_METADATA_STRING = 1000
MAX_SAFE_INTEGER = 2**53 - 1
METADATA_KEY = r"^[A-Za-z0-9_.-]{1,64}$"
# How many values one key of a filter may admit ({"in": [...]}).
MAX_FILTER_VALUES = 100
_KEY = re.compile(METADATA_KEY)


def metadata_value(value: Any) -> MetadataValue:
    """``value`` if it may be a metadata value; ValueError saying why not otherwise."""
    if isinstance(value, bool | float):
        return value  # non-finite numbers never get past the JSON reader
    if isinstance(value, int):
        if abs(value) > MAX_SAFE_INTEGER:
            raise ValueError(f"integers must lie within +-{MAX_SAFE_INTEGER}")
        return value
    if isinstance(value, str):
        if len(value) > MAX_METADATA_STRING:
            raise ValueError(f"strings must be at most {MAX_METADATA_STRING} characters")
        return value
    raise ValueError("must be a string, a number or a boolean")


def filter_values(value: Any) -> tuple[MetadataValue, ...]:
    """The values a filter admits for its key: ``value``, or those of ``{"in": [...]}``."""
    if not isinstance(value, dict):
        return (metadata_value(value),)
    if set(value) != {"in"} or not isinstance(value["in"], list):
        raise ValueError('must be a value, or {"in": [values]}')
    if not 1 <= len(value["in"]) <= MAX_FILTER_VALUES:
        raise ValueError(f'"in" must hold 1 to {MAX_FILTER_VALUES} values')
    return tuple(metadata_value(item) for item in value["in"])


def parse_filter(raw: Any, field: str = "filter") -> dict[str, tuple[MetadataValue, ...]]:
    """A filter object checked by the rules above (VALIDATION_ERROR naming each problem)."""
    if not isinstance(raw, Mapping):
        raise ValidationFailed(
            f"{field} must be an object", details=[{"field": field, "problem": "not an object"}]
        )
    problems = []
    if len(raw) > MAX_METADATA_KEYS:
        problems.append({"field": field, "problem": f"more than {MAX_METADATA_KEYS} keys"})
    parsed = {}
    for key, value in raw.items():
        if not isinstance(key, str) or not _KEY.match(key):
            problems.append(
                {"field": f"{field}.{key}", "problem": f"key must match {METADATA_KEY}"}
            )
            continue
        try:
            parsed[key] = filter_values(value)
        except ValueError as err:
            problems.append({"field": f"{field}.{key}", "problem": str(err)})
    if problems:
        said = "; ".join(f"{p['field']}: {p['problem']}" for p in problems)
        raise ValidationFailed(f"invalid {field}: {said}", details=problems)
    return parsed
