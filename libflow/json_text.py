"""Text JSON can carry but the database cannot store: NUL and unpaired surrogates.

``"\\u0000"`` and a lone ``"\\ud800"`` are valid JSON, and SQLite stores them, but PostgreSQL
refuses both in text and jsonb. They are refused alike on every shape, where they arrive.
"""

from __future__ import annotations

import re
from typing import Any

# In the raw bytes: a NUL byte, or an escape that may decode to NUL or to a surrogate.
_HINT = re.compile(rb"\x00|\\u(?:0000|[dD][89a-fA-F])")
# In decoded text: NUL, or a surrogate (json.loads joins a valid pair into one character).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")

UNSTORABLE_PROBLEM = (
    "holds a NUL character (\\u0000) or an unpaired surrogate, which cannot be stored"
)


def may_hold_unstorable(raw: bytes) -> bool:
    """A cheap look at the raw body: False means its decoded text is storable."""
    return _HINT.search(raw) is not None


def holds_unstorable(value: Any) -> bool:
    """Whether a string anywhere in ``value`` (keys too) cannot be stored; iterative, for depth."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if _UNSTORABLE.search(item):
                return True
        elif isinstance(item, dict):
            pending.extend(item)
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return False
