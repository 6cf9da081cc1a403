"""Secrets: put, list and delete by name; sealed at rest; read by runs and never shown.

Through the public API on both shapes: no answer, run record, event or log line holds a
secret's value, and the database holds it sealed only.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import secrets as random
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import asyncpg
import pytest
from aiohttp import ClientResponse, web
from aiohttp.test_utils import TestServer, unused_port
from tortoise import Tortoise
from tortoise.connection import connections
from tortoise.migrations.executor import MigrationExecutor, MigrationTarget

from libflow.db.connection import APP_LABEL, tortoise_config
from libflow.engine.run_secrets import RunSecrets
from libflow.logs import JsonFormatter
from libflow.workflows.run_events import MAX_EVENT_VALUE_CHARS, MemoryEventBus, RunEventLog
from settings import Settings
from tests.conftest import POSTGRES_URL, Api, ClientFactory, Shape, new_project
from tests.run_helpers import events_of, start, wait_for_status
from tests.webhook_helpers import create_webhook, deliver, event_body, standard_headers
from tests.workflow_helpers import (
    API,
    chain,
    create,
    get_run,
    ok_json,
    output,
    run_definition,
    runsync,
)

ROOT = Path(__file__).resolve().parents[1]
# With characters JSON escapes: a value that comes back inside a JSON body is hidden too.
TOKEN = f'tok-"{random.token_hex(12)}"-end'
# As is, in a JSON body, and in a JSON body sent back as a JSON string (httpbin's ``data``).
SPELLINGS = (TOKEN, json.dumps(TOKEN)[1:-1], json.dumps(json.dumps(TOKEN))[1:-1])


def secrets_url(api: Api, name: str = "") -> str:
    """The project's secrets, or one of them."""
    base = f"{API}/projects/{api.project_id}/secrets"
    return f"{base}/{name}" if name else base


async def put_secret(api: Api, name: str, value: Any) -> ClientResponse:
    """PUT a secret's value."""
    return await api.client.put(secrets_url(api, name), json={"value": value}, headers=api.headers)


async def stored(api: Api, name: str, value: str) -> None:
    """PUT a secret that must be accepted."""
    response = await put_secret(api, name, value)
    assert response.status == 204, await response.text()


async def listed(api: Api) -> list[dict[str, Any]]:
    """GET the project's secrets."""
    found: list[dict[str, Any]] = await ok_json(
        await api.client.get(secrets_url(api), headers=api.headers)
    )
    return found


def assert_hidden(text: str) -> None:
    """No spelling of TOKEN in ``text``."""
    for spelling in SPELLINGS:
        assert spelling not in text


async def node_failure(api: Api, definition: dict[str, Any], **body: Any) -> dict[str, Any]:
    """Run a definition whose node must fail; its error."""
    status, answer = await run_definition(api, definition, **body)
    assert status == 500, answer
    error: dict[str, Any] = answer["result"]["error"]
    assert error["code"] == "NODE_FAILED"
    return error


async def secret_length(api: Api, name: str) -> int:
    """How long a run finds the secret (its length is not the secret: it is shown)."""
    status, answer = await run_definition(
        api, chain(output("n", f"{{{{ secrets.{name}|length }}}}"))
    )
    assert status == 200, answer
    length: int = answer["result"]["outputs"]["n"]
    return length


# The API


async def test_put_answers_204_and_the_list_shows_names_and_dates_only(shaped_api: Api) -> None:
    response = await put_secret(shaped_api, "TOKEN", TOKEN)
    assert response.status == 204
    assert await response.read() == b""
    await stored(shaped_api, "another_one", "x")
    response = await shaped_api.client.get(secrets_url(shaped_api), headers=shaped_api.headers)
    text = await response.text()
    assert_hidden(text)
    found = json.loads(text)
    assert [secret["name"] for secret in found] == ["TOKEN", "another_one"]
    assert all(set(secret) == {"name", "createdDate", "updatedDate"} for secret in found)


async def test_put_replaces_a_value_and_keeps_its_created_date(shaped_api: Api) -> None:
    await stored(shaped_api, "KEY", "abc")
    [first] = await listed(shaped_api)
    assert await secret_length(shaped_api, "KEY") == 3
    await stored(shaped_api, "KEY", "abcdef")
    [second] = await listed(shaped_api)
    assert second["createdDate"] == first["createdDate"]
    assert second["updatedDate"] >= first["updatedDate"]
    assert await secret_length(shaped_api, "KEY") == 6


async def test_delete_answers_204_then_404_and_runs_no_longer_read_it(shaped_api: Api) -> None:
    await stored(shaped_api, "GONE", TOKEN)
    response = await shaped_api.client.delete(
        secrets_url(shaped_api, "GONE"), headers=shaped_api.headers
    )
    assert response.status == 204
    assert await listed(shaped_api) == []
    response = await shaped_api.client.delete(
        secrets_url(shaped_api, "GONE"), headers=shaped_api.headers
    )
    assert response.status == 404
    assert (await response.json())["error"] == "NOT_FOUND"
    error = await node_failure(shaped_api, chain(output("x", "{{ secrets.GONE }}")))
    assert "GONE" in error["message"]


async def test_names_must_match_the_pattern(shaped_api: Api) -> None:
    for name in ("1st", "has-dash", "dotted.name", "caf\u00e9", "a" * 65, "sp%20ace"):
        response = await put_secret(shaped_api, name, "value")
        body = await response.json()
        assert (response.status, body["error"]) == (400, "VALIDATION_ERROR"), name
        assert body["details"][0]["field"] == "name"
        response = await shaped_api.client.delete(
            secrets_url(shaped_api, name), headers=shaped_api.headers
        )
        assert response.status == 400, name
    for name in ("_", "a" * 64, "Z9_z"):
        await stored(shaped_api, name, "value")
    assert await listed(shaped_api) != []


async def test_values_are_refused_past_65536_bytes_of_utf8(shaped_api: Api) -> None:
    await stored(shaped_api, "ASCII", "x" * 65_536)
    await stored(shaped_api, "WIDE", "\u00e9" * 32_768)  # 65,536 bytes in 32,768 characters
    for value in ("\u00e9" * 32_768 + "x", "x" * 65_537, ""):
        response = await put_secret(shaped_api, "TOO_LONG", value)
        text = await response.text()
        assert response.status == 400, len(value)
        body = json.loads(text)
        assert body["error"] == "VALIDATION_ERROR"
        assert body["details"][0]["field"] == "value"
        assert "xxxxxxxxxx" not in text and "\\u00e9\\u00e9" not in text  # not quoted back
    assert [secret["name"] for secret in await listed(shaped_api)] == ["ASCII", "WIDE"]
    assert await secret_length(shaped_api, "WIDE") == 32_768


async def test_a_value_must_be_text_in_a_json_object(shaped_api: Api) -> None:
    url = secrets_url(shaped_api, "X")
    for body in ({"value": 12}, {"value": None}, {}, ["x"]):
        response = await shaped_api.client.put(url, json=body, headers=shaped_api.headers)
        assert response.status == 400, body
        assert (await response.json())["error"] == "VALIDATION_ERROR"
    response = await shaped_api.client.put(url, data=b"{", headers=shaped_api.headers)
    assert (response.status, (await response.json())["error"]) == (400, "INVALID_JSON")


async def test_another_projects_key_is_forbidden(shaped_api: Api) -> None:
    _other, other_key = await new_project("other")
    headers = {"Authorization": other_key}
    for method in ("GET", "PUT", "DELETE"):
        url = secrets_url(shaped_api, "" if method == "GET" else "X")
        response = await shaped_api.client.request(
            method, url, json={"value": "v"}, headers=headers
        )
        assert response.status == 403, method


async def test_a_run_of_another_project_cannot_read_the_secret(shaped_api: Api) -> None:
    await stored(shaped_api, "TOKEN", TOKEN)
    other_id, other_key = await new_project("other")
    other = Api(shaped_api.client, shaped_api.shape, other_id, other_key)
    error = await node_failure(other, chain(output("x", "{{ secrets.TOKEN }}")))
    assert "unknown secret 'TOKEN'" in error["message"]


# At rest


async def raw_rows(sql: str) -> list[dict[str, Any]]:
    """Rows read past the ORM, as a database dump would show them."""
    rows: list[dict[str, Any]] = await connections.get("default").execute_query_dict(sql)
    return rows


async def test_the_database_holds_the_value_sealed_only(shaped_api: Api) -> None:
    await stored(shaped_api, "TOKEN", TOKEN)
    await stored(shaped_api, "SAME", TOKEN)
    [status, _answer] = await run_definition(shaped_api, chain(output("x", "{{ secrets.TOKEN }}")))
    assert status == 200
    rows = await raw_rows(
        f"SELECT * FROM project_secrets WHERE project_id = '{shaped_api.project_id}'"
    )
    assert len(rows) == 2
    for row in rows:
        assert row["value"].startswith("enc1:")
        assert_hidden(json.dumps(row, default=str))
    # One value under two names: two different sealed values (a fresh nonce each).
    assert rows[0]["value"] != rows[1]["value"]
    runs = await raw_rows(
        f"SELECT * FROM workflow_runs WHERE project_id = '{shaped_api.project_id}'"
    )
    assert_hidden(json.dumps(runs, default=str))
    if shaped_api.shape.name == "embedded":  # the database files themselves, WAL included
        data_dir = shaped_api.shape.settings.data_dir
        for path in data_dir.glob("libflow.sqlite3*"):
            assert TOKEN.encode() not in path.read_bytes(), path.name


async def test_a_sealed_value_copied_into_another_row_does_not_open(shaped_api: Api) -> None:
    await stored(shaped_api, "TOKEN", TOKEN)
    await stored(shaped_api, "DECOY", "harmless")
    connection = connections.get("default")
    mark = "?" if connection.capabilities.dialect == "sqlite" else "$1"
    [row] = await raw_rows(
        f"SELECT value FROM project_secrets WHERE project_id = '{shaped_api.project_id}'"
        " AND name = 'TOKEN'"
    )
    await connection.execute_query(
        f"UPDATE project_secrets SET value = {mark} WHERE name = 'DECOY'"
        f" AND project_id = '{shaped_api.project_id}'",
        [row["value"]],
    )
    error = await node_failure(shaped_api, chain(output("x", "{{ secrets.DECOY }}")))
    assert "secret 'DECOY' cannot be read" in error["message"]
    assert_hidden(json.dumps(error))


async def test_webhook_secrets_are_sealed_and_still_verify(shaped_api: Api) -> None:
    created = await create_webhook(shaped_api)
    webhook_id, first = created["webhookId"], created["secret"]
    query = f"SELECT * FROM webhooks WHERE id = '{webhook_id}'"
    [row] = await raw_rows(query)
    assert row["secret"].startswith("enc1:")
    assert first not in json.dumps(row, default=str)
    response = await shaped_api.client.post(
        f"{API}/projects/{shaped_api.project_id}/webhooks/{webhook_id}/rotate",
        headers=shaped_api.headers,
    )
    second = (await ok_json(response))["secret"]
    [row] = await raw_rows(query)
    assert row["secret"].startswith("enc1:") and row["previous_secret"].startswith("enc1:")
    text = json.dumps(row, default=str)
    assert first not in text and second not in text
    for secret in (first, second):  # the previous one verifies during its grace period
        body = event_body(secret=secret[-6:])
        response = await deliver(shaped_api, webhook_id, body, standard_headers(secret, body))
        assert response.status == 200, await response.text()


# Runs


@dataclass
class Echo:
    """A local HTTP API that answers with what it was sent (a header, in its body too; the
    body parsed, and as the text it was, a JSON string in JSON, as httpbin answers)."""

    server: TestServer
    seen: list[str] = field(default_factory=list)

    def url(self) -> str:
        """Where runs POST to it."""
        return str(self.server.make_url("/echo"))


@pytest.fixture
async def echo() -> AsyncIterator[Echo]:
    """The echo API, on loopback."""
    app = web.Application()
    found = Echo(TestServer(app, host="127.0.0.1"))

    async def answer(request: web.Request) -> web.Response:
        authorization = request.headers.get("Authorization", "")
        found.seen.append(authorization)
        data = await request.text()
        return web.json_response(
            {"authorization": authorization, "sent": json.loads(data), "data": data},
            headers={"X-Echo": authorization},
        )

    app.router.add_post("/echo", answer)
    await found.server.start_server()
    try:
        yield found
    finally:
        await found.server.close()


@pytest.fixture
async def open_api(start_app: ClientFactory, shape: Shape) -> Api:
    """A project on each shape whose runs may reach this machine (the echo API)."""
    settings = shape.settings.model_copy(update={"http_allow_private": True})
    client = await start_app(settings)
    project_id, key = await new_project()
    return Api(client, Shape(shape.name, settings), project_id, key)


@contextmanager
def json_log_lines() -> Iterator[io.StringIO]:
    """What libflow's own log handler writes meanwhile (JSON lines, as on stderr)."""
    lines = io.StringIO()
    handler = logging.StreamHandler(lines)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield lines
    finally:
        root.removeHandler(handler)


def calling(echo: Echo) -> dict[str, Any]:
    """A workflow that sends TOKEN to the echo API and outputs what came back."""
    return chain(
        {
            "id": "call",
            "type": "http_request",
            "method": "POST",
            "url": echo.url(),
            "headers": {"Authorization": "Bearer {{ secrets.TOKEN }}"},
            "json": {"token": "{{ secrets.TOKEN }}"},
            "timeoutSeconds": 5,
        },
        output("sent", "Bearer {{ secrets.TOKEN }}"),
        output("echoed", "{{ nodes.call.json }}"),
        output("header", "{{ nodes.call.headers['x-echo'] }}"),
        output("text", "{{ nodes.call.text }}"),
    )


def assert_outputs_show_names(outputs: dict[str, Any]) -> None:
    """The outputs of ``calling``: every value, sent or echoed, shown as [secret:TOKEN]."""
    assert outputs["sent"] == "Bearer [secret:TOKEN]"
    assert outputs["echoed"] == {
        "authorization": "Bearer [secret:TOKEN]",
        "sent": {"token": "[secret:TOKEN]"},
        "data": json.dumps({"token": "[secret:TOKEN]"}),
    }
    assert outputs["header"] == "Bearer [secret:TOKEN]"
    assert json.loads(outputs["text"]) == outputs["echoed"]  # the raw text, twice escaped


async def test_a_queued_run_sends_the_value_and_shows_only_its_name(
    open_api: Api, echo: Echo, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    await stored(open_api, "TOKEN", TOKEN)
    workflow = await create(open_api, calling(echo))
    with json_log_lines() as lines:
        run = await start(open_api, workflow["workflowId"])
        await open_api.run_jobs()
        record = await wait_for_status(open_api, run["runId"])
        events = await events_of(open_api, run["runId"])
    assert echo.seen == [f"Bearer {TOKEN}"]  # the value itself went out
    assert record["status"] == "succeeded", record["error"]
    assert_outputs_show_names(record["outputs"])
    assert_hidden(json.dumps(record))
    assert_hidden(json.dumps(await get_run(open_api, run["runId"])))
    assert_hidden(json.dumps([event.data for event in events]))
    [finished] = [e for e in events if e.name == "node.finished" and e.data["node"] == "call"]
    assert finished.data["output"]["headers"]["x-echo"] == "Bearer [secret:TOKEN]"
    assert {"name": "sent", "value": "Bearer [secret:TOKEN]"} in [
        e.data for e in events if e.name == "output"
    ]
    assert_hidden(caplog.text)
    assert_hidden(lines.getvalue())


async def test_runsync_answers_with_the_name_in_place_of_the_value(
    open_api: Api, echo: Echo, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    await stored(open_api, "TOKEN", TOKEN)
    workflow = await create(open_api, calling(echo))
    response = await open_api.client.post(
        f"{API}/projects/{open_api.project_id}/workflows/{workflow['workflowId']}/runsync",
        headers=open_api.headers,
    )
    text = await response.text()
    assert response.status == 200, text
    assert echo.seen == [f"Bearer {TOKEN}"]
    assert_hidden(text)
    assert_outputs_show_names(json.loads(text)["result"]["outputs"])
    response = await open_api.client.get(
        f"{API}/projects/{open_api.project_id}/runs", headers=open_api.headers
    )
    [record] = await ok_json(response)
    assert_outputs_show_names(record["outputs"])
    assert_hidden(caplog.text)


async def test_runsync_with_events_streams_names_only(open_api: Api, echo: Echo) -> None:
    await stored(open_api, "TOKEN", TOKEN)
    workflow = await create(open_api, calling(echo))
    response = await open_api.client.post(
        f"{API}/projects/{open_api.project_id}/workflows/{workflow['workflowId']}/runsync",
        headers={**open_api.headers, "Accept": "text/event-stream"},
    )
    text = await response.text()
    assert response.status == 200
    assert "run.finished" in text and "[secret:TOKEN]" in text
    assert_hidden(text)


async def test_a_sub_runs_record_shows_the_name_of_a_secret_it_was_given(
    shaped_api: Api,
) -> None:
    api = shaped_api
    await stored(api, "TOKEN", TOKEN)
    child = await create(
        api,
        chain(
            {"id": "k", "type": "input", "name": "key", "valueType": "string"},
            output("length", "{{ inputs.key | length }}"),
        ),
        name="child",
    )
    call = {
        "id": "sub",
        "type": "call_workflow",
        "workflowId": child["workflowId"],
        "inputs": {"key": "{{ secrets.TOKEN }}"},
    }
    parent = await create(api, chain(call, output("n", "{{ nodes.sub.outputs.length }}")))
    status, answer = await runsync(api, parent["workflowId"])
    assert status == 200 and answer["result"]["outputs"]["n"] == len(TOKEN), answer
    response = await api.client.get(
        f"{API}/projects/{api.project_id}/runs?trigger=call", headers=api.headers
    )
    [sub_run] = await ok_json(response)
    assert sub_run["inputs"] == {"key": "[secret:TOKEN]"}
    assert_hidden(json.dumps(sub_run))


def test_a_stream_holds_back_only_what_may_begin_or_split_a_secret() -> None:
    secrets = RunSecrets(_no_secrets, _no_secrets)
    assert secrets.sendable("ends with tok") == 13  # no secret read: all of it goes
    secrets.used["TOKEN"] = "tok-123"
    assert secrets.sendable("ends with tok") == 10
    assert secrets.sendable("ends with tok-12") == 10
    assert secrets.sendable("tok-123 is whole") == 16  # redacted whole as it is
    assert secrets.sendable("ends with t") == 10
    assert secrets.sendable("ends with tick") == 14
    # A whole value whose end may begin another: cut before it, not inside it.
    secrets.used["ECHO"] = "abca"
    assert secrets.sendable("xxabca") == 2
    assert secrets.sendable("say abcab") == 4
    secrets.used["PATH"] = "a/b/a"  # its percent-encoded spelling too
    assert secrets.sendable("url=a%2Fb%2Fa") == 4


async def test_an_event_value_too_big_to_send_is_dropped_before_it_is_redacted() -> None:
    redacted: list[dict[str, Any]] = []

    def redact(data: dict[str, Any]) -> dict[str, Any]:
        redacted.append(data)
        return data

    log = RunEventLog("run", redact=redact)
    log.attach(MemoryEventBus())
    log.emit("output", {"name": "big", "value": "x" * (MAX_EVENT_VALUE_CHARS + 1)}, "value")
    # Not copied whole on the event loop only to be dropped.
    assert redacted == [{"name": "big", "value": None, "truncated": True}]


async def test_an_event_value_that_redaction_makes_too_big_is_dropped() -> None:
    secrets = RunSecrets(_no_secrets, _no_secrets)
    secrets.used["X"] = "q"  # one character: replaced wherever it occurs
    bus = MemoryEventBus()
    log = RunEventLog("run", redact=secrets.redact)
    log.attach(bus)
    log.emit("output", {"name": "big", "value": "q" * (MAX_EVENT_VALUE_CHARS // 2)}, "value")
    [event] = await bus.read("run", 0, 0)
    assert json.loads(event.data) == {"name": "big", "value": None, "truncated": True}


def test_a_value_is_redacted_however_deep_it_is_nested() -> None:
    secrets = RunSecrets(_no_secrets, _no_secrets)
    secrets.used["TOKEN"] = TOKEN
    deep: Any = {"auth": f"Bearer {TOKEN}"}
    for _ in range(900):  # an HTTP answer may nest this deep; a run's own values may not
        deep = [deep]
    redacted = secrets.redact(deep)
    for _ in range(900):
        [redacted] = redacted
    assert redacted == {"auth": "Bearer [secret:TOKEN]"}


# Every character an encoder below escapes: non-ASCII, "/", "\\", '"', " ", "&", "<", ">".
AWKWARD = 'pä/b\\c"d e&f<g>'


def _lower_hex(text: str) -> str:
    return re.sub("%[0-9A-F]{2}", lambda match: match.group(0).lower(), text)


@pytest.mark.parametrize(
    ("encode", "decode"),
    [
        # an echo's JSON answer holding the JSON body it was sent, as a string (httpbin)
        (
            lambda v: json.dumps({"data": json.dumps({"q": v})}),
            lambda t: json.loads(json.loads(t)["data"])["q"],
        ),
        (
            lambda v: json.dumps({"data": json.dumps({"q": v}, ensure_ascii=False)}),
            lambda t: json.loads(json.loads(t)["data"])["q"],
        ),
        # a JSON text in a query string; a value in a path (quote keeps "/")
        (lambda v: quote(json.dumps({"q": v})), lambda t: json.loads(unquote(t))["q"]),
        (lambda v: "/a/" + quote(v), unquote),
        # lower-case hex; PHP's json_encode ("\/"); Go's encoding/json ("\u0026" for "&")
        (lambda v: "q=" + _lower_hex(quote(v, safe="")), unquote),
        (lambda v: json.dumps({"q": v}).replace("/", "\\/"), lambda t: json.loads(t)["q"]),
        (
            lambda v: json.dumps({"q": v}).translate(
                str.maketrans({"&": "\\u0026", "<": "\\u003c", ">": "\\u003e"})
            ),
            lambda t: json.loads(t)["q"],
        ),
    ],
    ids=["json in json", "utf8 json in json", "json in a query", "path", "lower hex", "php", "go"],
)
def test_a_value_as_other_encoders_spell_it_is_redacted(
    encode: Callable[[str], str], decode: Callable[[str], str]
) -> None:
    secrets = RunSecrets(_no_secrets, _no_secrets)
    secrets.used["KEY"] = AWKWARD
    redacted = secrets.redact_text(encode(AWKWARD))
    assert AWKWARD in decode(encode(AWKWARD))  # the encoding is what it says
    assert "[secret:KEY]" in decode(redacted)
    assert AWKWARD not in decode(redacted)


async def _no_secrets(*args: Any) -> Any:
    raise AssertionError("nothing is loaded here")


async def test_a_failure_message_holding_a_value_shows_its_name_in_logs_too(
    shaped_api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    await stored(shaped_api, "TOKEN", TOKEN)
    definition = chain({"id": "deny", "type": "fail", "message": "refused {{ secrets.TOKEN }}"})
    with json_log_lines() as lines:
        status, answer = await run_definition(shaped_api, definition)
    assert status == 500
    assert answer["result"]["error"]["message"] == "refused [secret:TOKEN]"
    assert_hidden(json.dumps(answer))
    workflow_runs = await ok_json(
        await shaped_api.client.get(
            f"{API}/projects/{shaped_api.project_id}/runs", headers=shaped_api.headers
        )
    )
    assert workflow_runs[0]["error"]["message"] == "refused [secret:TOKEN]"
    # The node's failure is logged, with the name where the value was.
    assert "refused [secret:TOKEN]" in caplog.text
    assert "refused [secret:TOKEN]" in lines.getvalue()
    assert_hidden(caplog.text)
    assert_hidden(lines.getvalue())


async def test_an_unknown_secret_fails_the_node_naming_it(shaped_api: Api) -> None:
    await stored(shaped_api, "TOKEN", TOKEN)
    definition = chain(
        {"id": "greet", "type": "template", "template": "{{ secrets.TOKEN }} {{ secrets.NOPE }}"}
    )
    error = await node_failure(shaped_api, definition)
    assert error["node"] == "greet"
    assert "unknown secret 'NOPE'" in error["message"]
    assert_hidden(json.dumps(error))


async def test_a_secret_named_by_an_expression_is_read_and_redacted(shaped_api: Api) -> None:
    await stored(shaped_api, "TOKEN", TOKEN)
    definition = chain(
        {"id": "which", "type": "input", "name": "which", "valueType": "string"},
        output("value", "{{ secrets[inputs.which] }}"),
        output("quoted", "{{ secrets[inputs.which]|tojson }}"),
    )
    status, answer = await run_definition(shaped_api, definition, inputs={"which": "TOKEN"})
    assert status == 200, answer
    assert answer["result"]["outputs"] == {
        "value": "[secret:TOKEN]",
        "quoted": '"[secret:TOKEN]"',
    }


async def test_secrets_cannot_be_listed_by_a_template(shaped_api: Api) -> None:
    await stored(shaped_api, "TOKEN", TOKEN)
    for template in ("{{ secrets }}", "{% for s in secrets %}{{ s }}{% endfor %}"):
        error = await node_failure(shaped_api, chain(output("all", template)))
        assert_hidden(json.dumps(error))


# The migration of webhook secrets, and key rotation


@pytest.fixture
async def own_shape(shape: Shape) -> AsyncIterator[Shape]:
    """Each shape with a database of the test's own: these tests touch every row of it."""
    if shape.name == "embedded":
        yield shape
        return
    name = f"libflow_secrets_{random.token_hex(4)}"
    admin = await asyncpg.connect(POSTGRES_URL, timeout=5)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        database_url = f"{POSTGRES_URL.rsplit('/', 1)[0]}/{name}"
        yield Shape(shape.name, shape.settings.model_copy(update={"database_url": database_url}))
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


def with_key(settings: Settings, key: str) -> Settings:
    """The same deployment with another LIBFLOW_SECRET_KEY, on a port of its own."""
    port = unused_port()
    return settings.model_copy(
        update={"secret_key": key, "port": port, "public_base_url": f"http://127.0.0.1:{port}"}
    )


async def migrated_to(settings: Settings, name: str, sql: str) -> list[dict[str, Any]]:
    """Migrate the database to ``name`` (backwards too) while no app runs; then ``sql``'s rows."""
    config = tortoise_config(settings.resolved_database_url)
    context = await Tortoise.init(config=config, _create_db=False)
    try:
        executor = MigrationExecutor(context.db(), config["apps"])
        await executor.migrate([MigrationTarget(APP_LABEL, name)])
        rows: list[dict[str, Any]] = await context.db().execute_query_dict(sql)
        return rows
    finally:
        await context.close_connections()


async def start_on(start_app: ClientFactory, settings: Settings, api: Api | None) -> Api:
    """An app on ``settings``: for ``api``'s project, or a new one."""
    client = await start_app(settings)
    if api is None:
        project_id, key = await new_project()
        return Api(client, Shape("x", settings), project_id, key)
    return Api(client, Shape(api.shape.name, settings), api.project_id, api.api_key)


async def test_the_migration_seals_webhook_secrets_stored_in_clear(
    start_app: ClientFactory, own_shape: Shape
) -> None:
    api = await start_on(start_app, own_shape.settings, None)
    created = await create_webhook(api)
    await api.client.close()
    # Back to the schema before secrets: the migration's reverse opens the secret again.
    query = f"SELECT secret FROM webhooks WHERE id = '{created['webhookId']}'"
    [row] = await migrated_to(own_shape.settings, "0006_runs_as_resources", query)
    assert row["secret"] == created["secret"]
    api = await start_on(start_app, with_key(own_shape.settings, "test-secret"), api)
    [row] = await raw_rows(query)
    assert row["secret"].startswith("enc1:")
    body = event_body()
    headers = standard_headers(created["secret"], body)
    response = await deliver(api, created["webhookId"], body, headers)
    assert response.status == 200, await response.text()
    await stored(api, "TOKEN", TOKEN)  # the table is back


def rotate_key(settings: Settings, new_key: str, old_key: str) -> subprocess.CompletedProcess[str]:
    """``libflow secrets rotate-key --json`` as an operator runs it, on the deployment."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("LIBFLOW_") or k == "LIBFLOW_MODEL_CACHE_DIR"
    }
    env.update(
        LIBFLOW_DATA_DIR=str(settings.data_dir),
        LIBFLOW_SECRET_KEY=new_key,
        LIBFLOW_OLD_SECRET_KEY=old_key,
    )
    if settings.database_url:
        env["LIBFLOW_DATABASE_URL"] = settings.database_url
    return subprocess.run(
        [sys.executable, "-m", "libflow", "secrets", "rotate-key", "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def test_rotate_key_reseals_everything_under_the_new_key(
    start_app: ClientFactory, own_shape: Shape
) -> None:
    old = with_key(own_shape.settings, "the-old-key")
    api = await start_on(start_app, old, None)
    await stored(api, "TOKEN", TOKEN)
    created = await create_webhook(api)
    await api.client.close()

    # A new key alone cannot read what the old one sealed: the run says so, not the value.
    api = await start_on(start_app, with_key(old, "the-new-key"), api)
    error = await node_failure(api, chain(output("x", "{{ secrets.TOKEN }}")))
    assert "secret 'TOKEN' cannot be read" in error["message"]
    await api.client.close()

    refused = rotate_key(old, "the-new-key", "not-the-old-key")
    assert refused.returncode == 1
    assert "nothing was changed" in refused.stderr and "Traceback" not in refused.stderr
    rotated = rotate_key(old, "the-new-key", "the-old-key")
    assert rotated.returncode == 0, rotated.stderr
    assert json.loads(rotated.stdout)["resealed"] == 2  # the secret and the webhook's
    again = rotate_key(old, "the-new-key", "the-old-key")
    assert json.loads(again.stdout) == {
        **json.loads(rotated.stdout),
        "resealed": 0,
        "alreadyNew": 2,
    }

    api = await start_on(start_app, with_key(old, "the-new-key"), api)
    assert await secret_length(api, "TOKEN") == len(TOKEN)
    body = event_body()
    headers = standard_headers(created["secret"], body)
    response = await deliver(api, created["webhookId"], body, headers)
    assert response.status == 200, await response.text()
