"""Ids no row can have (too long, NUL bytes, not URL-safe) name nothing: 404, never a 500."""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import quote

import pytest

from libflow.ids import new_ordered_id, possible_id
from tests.conftest import Api
from tests.library_helpers import assert_error
from tests.workflow_helpers import SPEC_EXAMPLE

# Longer than an id column, a NUL byte (PostgreSQL refuses it in any text), non-ASCII.
IMPOSSIBLE_IDS = ["a" * 33, "a\x00b", "\u00e9" * 10]

P = "/api/publicv1/projects/{projectId}"
# (method, path, JSON body): every route that looks an id up, with the id as {id}.
LOOKUPS: list[tuple[str, str, dict[str, Any] | None]] = [
    ("GET", P + "/library/files/{id}", None),
    ("DELETE", P + "/library/files/{id}", None),
    ("GET", P + "/library/files/{id}/download", None),
    ("GET", P + "/library/files/{id}/thumbnail", None),
    ("PATCH", P + "/library/files/{id}", {"name": "b.pdf"}),
    ("GET", P + "/library/files/{id}/chunks", None),
    ("POST", P + "/library/files/{id}/reprocess", None),
    ("GET", P + "/library/files?dir={id}", None),
    ("GET", P + "/library/search?q=report&dir={id}", None),
    ("POST", P + "/library/files", {"originalname": "a.pdf", "fileType": "pdf", "dir": "{id}"}),
    ("POST", P + "/library/dirs", {"name": "Reports", "parent": "{id}"}),
    ("GET", P + "/workflows/{id}", None),
    ("POST", P + "/workflows/{id}/versions", {"definition": SPEC_EXAMPLE}),
    ("GET", P + "/workflows/{id}/runs", None),
    ("POST", P + "/workflows/{id}/runsync", {}),
    ("POST", P + "/workflows/{id}/runs", {}),
    ("GET", P + "/workflows/{id}/schedules", None),
    ("POST", P + "/workflows/{id}/schedules", {"cron": "0 9 * * 1"}),
    ("GET", P + "/workflows/{id}/schedules/{id}", None),
    ("DELETE", P + "/workflows/{id}/schedules/{id}", None),
    ("GET", P + "/workflows/{id}/webhooks", None),
    ("POST", P + "/workflows/{id}/webhooks", {}),
    ("GET", P + "/runs/{id}", None),
    ("POST", P + "/runs/{id}/cancel", None),
    ("GET", P + "/runs/{id}/events", None),
    ("GET", P + "/webhooks/{id}", None),
    ("DELETE", P + "/webhooks/{id}", None),
    ("POST", P + "/webhooks/{id}/rotate", None),
    ("GET", P + "/webhooks/{id}/deliveries", None),
    ("POST", P + "/webhooks/{id}/deliveries/{id}/replay", None),
    ("POST", "/webhooks/{id}", {}),
]


@pytest.mark.parametrize(
    ("method", "path", "body"), LOOKUPS, ids=[f"{m} {p.removeprefix(P)}" for m, p, _ in LOOKUPS]
)
async def test_an_id_no_row_can_have_is_404_not_found(
    shaped_api: Api, method: str, path: str, body: dict[str, Any] | None
) -> None:
    api = shaped_api
    # A NUL in a JSON body is refused before any lookup (see tests/test_security.py).
    for impossible in [i for i in IMPOSSIBLE_IDS if body is None or "\x00" not in i]:
        url = path.replace("{projectId}", api.project_id).replace("{id}", quote(impossible))
        json_body = None
        if body is not None:
            json_body = {k: impossible if v == "{id}" else v for k, v in body.items()}
        response = await api.client.request(method, url, headers=api.headers, json=json_body)
        await assert_error(response, 404, "NOT_FOUND")


def test_ordered_ids_sort_by_when_they_were_made_and_stay_opaque(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Milliseconds across a hex digit's carry (...fff -> ...000), without waiting for them.
    clock = iter([0x19_0000_0FFE, 0x19_0000_0FFF, 0x19_0000_1000])
    monkeypatch.setattr(time, "time_ns", lambda: next(clock) * 1_000_000)
    made = [new_ordered_id() for _ in range(3)]
    monkeypatch.undo()
    assert made == sorted(made)
    assert all(len(i) == 32 and possible_id(i) and i[0].isdigit() for i in made)
    # 120 random bits after the time: ids made in one millisecond still differ.
    assert len({new_ordered_id() for _ in range(10_000)}) == 10_000
