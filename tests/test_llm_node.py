"""The llm node against a local server speaking OpenAI's chat completions protocol."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer, unused_port

from libflow.engine.nodes.llm import MAX_EVENT_BYTES, MAX_REQUEST_BYTES
from libflow.engine.ssrf import MAX_RESPONSE_BYTES
from tests import llm_server as fake_llm_api
from tests.conftest import Api, ClientFactory, Shape, new_project, wait_until_processed
from tests.hostile.conftest import healthz_stays_responsive, peak_rss_growth
from tests.llm_server import MODEL_SNAPSHOT, LlmServer
from tests.run_helpers import events_of, read_events, start, wait_for_status
from tests.webhook_helpers import create_webhook, deliver, standard_headers, wait_for_deliveries
from tests.workflow_helpers import (
    call,
    chain,
    create,
    ok_json,
    output,
    run_definition,
    runs_of,
    runsync,
)

# The fixture, bound by assignment: an imported name that parameters shadow trips ruff's F811.
llm_server = fake_llm_api.llm_server

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
MODEL = "gpt-4o-mini"
QUESTION = {"question": "What is six times seven?"}
MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "{{ inputs.question }}"},
]


def asking(**fields: Any) -> dict[str, Any]:
    """A workflow: the question input, an llm node ``ask`` asking it, its result as output."""
    node = {"id": "ask", "type": "llm", "messages": MESSAGES, **fields}
    return chain(
        {"id": "q", "type": "input", "name": "question", "valueType": "string", "required": True},
        node,
        output("answer", "{{ nodes.ask }}"),
    )


def with_llm(shape: Shape, server: LlmServer, **settings: Any) -> Shape:
    """The shape with LIBFLOW_LLM_* pointing at the fake server (and ``settings``)."""
    values = {
        "llm_base_url": server.base_url,
        "llm_api_key": server.api_key,
        "llm_model": MODEL,
        **settings,
    }
    return Shape(shape.name, shape.settings.model_copy(update=values))


async def open_api(start_app: ClientFactory, shape: Shape) -> Api:
    """A server of ``shape`` and a project on it."""
    client = await start_app(shape.settings)
    project_id, secret = await new_project()
    return Api(client, shape, project_id, secret)


@pytest.fixture
async def llm_api(start_app: ClientFactory, embedded: Shape, llm_server: LlmServer) -> Api:
    """A project on the embedded shape whose llm nodes call the fake server."""
    return await open_api(start_app, with_llm(embedded, llm_server))


@pytest.fixture
async def shaped_llm_api(start_app: ClientFactory, shape: Shape, llm_server: LlmServer) -> Api:
    """The same on each deployment shape in turn (a worker runs queued runs when scaled)."""
    return await open_api(start_app, with_llm(shape, llm_server))


def node_failure(status: int, body: dict[str, Any]) -> str:
    """The message of a runsync answer that must be a failure of node ``ask``."""
    assert status == 500, body
    error = body["result"]["error"]
    assert (error["code"], error["node"]) == ("NODE_FAILED", "ask"), error
    message: str = error["message"]
    return message


# Answers


async def test_the_answer_carries_text_usage_model_and_finish_reason(
    llm_api: Api, llm_server: LlmServer
) -> None:
    status, body = await run_definition(llm_api, asking(), inputs=QUESTION)
    assert status == 200, body
    assert body["result"]["outputs"]["answer"] == {
        "text": "The answer is 42.",
        "json": None,
        "usage": {"promptTokens": 7, "completionTokens": 4},  # "Be brief." + the question
        "model": MODEL + MODEL_SNAPSHOT,  # the model the provider reports
        "finishReason": "stop",
    }


async def test_the_usage_is_recorded_in_the_node_timings(llm_api: Api) -> None:
    created = await create(llm_api, asking())
    await runsync(llm_api, created["workflowId"], inputs=QUESTION)
    [run] = await runs_of(llm_api, created["workflowId"])
    assert run["nodeTimings"]["ask"]["usage"] == {"promptTokens": 7, "completionTokens": 4}
    assert "usage" not in run["nodeTimings"]["q"]


async def test_the_request_is_a_streamed_chat_completion_with_the_settings_key(
    llm_api: Api, llm_server: LlmServer
) -> None:
    await run_definition(llm_api, asking(), inputs=QUESTION)
    [request] = llm_server.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["Authorization"] == f"Bearer {llm_server.api_key}"
    assert request.body == {
        "model": MODEL,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is six times seven?"},
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
    }


async def test_the_request_carries_temperature_max_tokens_and_json_format(
    llm_api: Api, llm_server: LlmServer
) -> None:
    llm_server.reply = ['{"answer": 42}']
    definition = asking(
        temperature="{{ 0.1 * 2 }}",
        maxTokens=50,
        responseFormat="json",
        messages=[{"role": "user", "content": "Answer in JSON: {{ inputs.question }}"}],
    )
    status, body = await run_definition(llm_api, definition, inputs=QUESTION)
    assert status == 200, body
    [request] = llm_server.requests
    assert request.body == {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Answer in JSON: What is six times seven?"}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.2,
        "max_tokens": 50,
        "response_format": {"type": "json_object"},
    }


async def test_the_node_s_model_and_templated_api_key_win_over_the_settings(
    llm_api: Api, llm_server: LlmServer
) -> None:
    llm_server.api_key = "sk-from-the-workflow"  # no longer the one the settings name
    definition = asking(model="gpt-4.1-nano", apiKey="{{ inputs.key }}")
    status, body = await run_definition(
        llm_api, definition, inputs={**QUESTION, "key": "sk-from-the-workflow"}
    )
    assert status == 200, body
    [request] = llm_server.requests
    assert request.headers["Authorization"] == "Bearer sk-from-the-workflow"
    assert request.body["model"] == "gpt-4.1-nano"
    assert body["result"]["outputs"]["answer"]["model"] == "gpt-4.1-nano" + MODEL_SNAPSHOT


async def test_a_content_that_renders_to_a_value_is_sent_as_json_text(
    llm_api: Api, llm_server: LlmServer
) -> None:
    definition = asking(messages=[{"role": "user", "content": "{{ {'n': 6, 'm': 7} }}"}])
    status, body = await run_definition(llm_api, definition, inputs=QUESTION)
    assert status == 200, body
    assert llm_server.requests[0].body["messages"] == [
        {"role": "user", "content": '{"n": 6, "m": 7}'}
    ]


# Streaming


async def runsync_deltas(api: Api, workflow_id: str) -> tuple[list[Any], list[str]]:
    """A runsync of QUESTION with its events streamed: the events, and the deltas' texts."""
    response = await call(
        api,
        "POST",
        f"/{workflow_id}/runsync",
        json={"inputs": QUESTION},
        headers={"Accept": "text/event-stream"},
    )
    events = await read_events(response)
    return events, [e.data["text"] for e in events if e.name == "llm.delta"]


async def test_llm_delta_events_stream_the_text_in_order(
    shaped_llm_api: Api, llm_server: LlmServer
) -> None:
    llm_server.reply = ["Forty", "-two", " is", " the", " answer."]
    llm_server.chunk_delay = 0.1  # over the 50 ms the node coalesces deltas within
    created = await create(shaped_llm_api, asking())
    queued = await start(shaped_llm_api, created["workflowId"], inputs=QUESTION)
    await shaped_llm_api.run_jobs()
    run = await wait_for_status(shaped_llm_api, queued["runId"])
    assert run["status"] == "succeeded", run
    events = await events_of(shaped_llm_api, queued["runId"])
    names = [(e.name, e.data.get("node")) for e in events]
    deltas = [e.data for e in events if e.name == "llm.delta"]
    assert {d["node"] for d in deltas} == {"ask"}
    assert "".join(d["text"] for d in deltas) == "Forty-two is the answer."
    assert len(deltas) > 1  # as the text came, not all of it at the end
    first = names.index(("llm.delta", "ask"))
    last = len(names) - 1 - names[::-1].index(("llm.delta", "ask"))
    assert names.index(("node.started", "ask")) < first
    assert last < names.index(("node.finished", "ask"))
    assert run["outputs"]["answer"]["text"] == "Forty-two is the answer."


async def test_a_secret_the_model_echoes_in_two_deltas_is_redacted_in_the_events(
    llm_api: Api, llm_server: LlmServer
) -> None:
    token = "tok-7f3a9c21e8"
    response = await llm_api.client.put(
        f"/api/publicv1/projects/{llm_api.project_id}/secrets/TOKEN",
        json={"value": token},
        headers=llm_api.headers,
    )
    assert response.status == 204, await response.text()
    # Each half in an event of its own (the node coalesces within 50 ms): whole in neither.
    llm_server.reply = ["Your token is tok-7f", "3a9c21e8, keep it."]
    llm_server.chunk_delay = 0.2
    definition = asking(messages=[{"role": "user", "content": "Echo {{ secrets.TOKEN }}"}])
    created = await create(llm_api, definition)
    _, deltas = await runsync_deltas(llm_api, created["workflowId"])
    assert "".join(deltas) == "Your token is [secret:TOKEN], keep it."
    assert deltas[0] == "Your token is "  # sent at once: only the secret's start waits


async def test_fast_deltas_are_coalesced_into_few_events(
    llm_api: Api, llm_server: LlmServer
) -> None:
    llm_server.reply = [f"w{i} " for i in range(300)]
    created = await create(llm_api, asking())
    events, deltas = await runsync_deltas(llm_api, created["workflowId"])
    assert "".join(deltas) == "".join(llm_server.reply)
    assert 1 <= len(deltas) < 30
    assert events[-1].name == "run.finished"


# JSON answers


async def test_json_mode_parses_the_answer(llm_api: Api, llm_server: LlmServer) -> None:
    llm_server.reply = ['{"answer"', ": 42, ", '"unit": null}']
    definition = asking(
        responseFormat="json", messages=[{"role": "user", "content": "Reply in JSON."}]
    )
    status, body = await run_definition(llm_api, definition, inputs=QUESTION)
    assert status == 200, body
    answer = body["result"]["outputs"]["answer"]
    assert answer["json"] == {"answer": 42, "unit": None}
    assert answer["text"] == '{"answer": 42, "unit": null}'


async def test_json_mode_with_an_answer_that_is_not_json_fails_the_node(
    llm_api: Api, llm_server: LlmServer
) -> None:
    llm_server.reply = ["Sure! ", "It is 42."]
    definition = asking(
        responseFormat="json", messages=[{"role": "user", "content": "Reply in JSON."}]
    )
    created = await create(llm_api, definition)
    status, body = await runsync(llm_api, created["workflowId"], inputs=QUESTION)
    assert "not valid JSON" in node_failure(status, body)
    [run] = await runs_of(llm_api, created["workflowId"])
    timing = run["nodeTimings"]["ask"]
    assert timing["status"] == "failed"
    assert timing["usage"] == {"promptTokens": 3, "completionTokens": 2}  # spent all the same


# Provider errors and retries


async def test_a_429_is_retried_after_its_retry_after(llm_api: Api, llm_server: LlmServer) -> None:
    llm_server.fail_next(429, retry_after="1")
    started = time.monotonic()
    status, body = await run_definition(llm_api, asking(), inputs=QUESTION)
    assert status == 200, body
    assert len(llm_server.requests) == 2
    assert time.monotonic() - started >= 1.0
    assert body["result"]["outputs"]["answer"]["text"] == "The answer is 42."


async def test_5xx_answers_are_retried_with_backoff(llm_api: Api, llm_server: LlmServer) -> None:
    llm_server.fail_next(500)
    llm_server.fail_next(503)
    status, body = await run_definition(llm_api, asking(), inputs=QUESTION)
    assert status == 200, body
    assert len(llm_server.requests) == 3


async def test_a_retry_that_would_pass_the_run_s_timeout_fails_the_node_at_once(
    llm_api: Api, llm_server: LlmServer
) -> None:
    llm_server.fail_next(429, retry_after="20")
    definition = asking()
    definition["timeoutSeconds"] = 5
    started = time.monotonic()
    status, body = await run_definition(llm_api, definition, inputs=QUESTION)
    message = node_failure(status, body)
    assert "Rate limit reached" in message
    assert "timeout" in message
    assert time.monotonic() - started < 3
    assert len(llm_server.requests) == 1


async def test_a_provider_400_fails_the_node_with_the_provider_s_message(
    llm_api: Api, llm_server: LlmServer
) -> None:
    status, body = await run_definition(llm_api, asking(maxTokens=999_999), inputs=QUESTION)
    message = node_failure(status, body)
    assert "max_tokens is too large: 999999" in message
    assert len(llm_server.requests) == 1  # a 4xx is not retried


async def test_an_error_in_the_middle_of_the_stream_fails_the_node(
    llm_api: Api, llm_server: LlmServer
) -> None:
    llm_server.error_after = 2
    status, body = await run_definition(llm_api, asking(), inputs=QUESTION)
    assert "The model stopped: overloaded." in node_failure(status, body)
    assert len(llm_server.requests) == 1


async def test_an_unreachable_provider_is_retried_until_the_run_s_time_is_short(
    start_app: ClientFactory, embedded: Shape, llm_server: LlmServer
) -> None:
    closed = f"http://127.0.0.1:{unused_port()}/v1"  # nothing listens there
    api = await open_api(start_app, with_llm(embedded, llm_server, llm_base_url=closed))
    definition = asking()
    definition["timeoutSeconds"] = 2
    started = time.monotonic()
    status, body = await run_definition(api, definition, inputs=QUESTION)
    message = node_failure(status, body)
    assert "could not be reached" in message
    assert "would pass the run's timeout" in message
    assert time.monotonic() - started < 2.5


async def test_without_a_model_configured_the_node_fails(
    start_app: ClientFactory, embedded: Shape, llm_server: LlmServer
) -> None:
    api = await open_api(start_app, with_llm(embedded, llm_server, llm_model=None))
    status, body = await run_definition(api, asking(), inputs=QUESTION)
    assert "LIBFLOW_LLM_MODEL" in node_failure(status, body)
    assert llm_server.requests == []


async def test_without_a_provider_configured_the_node_fails(api: Api) -> None:
    status, body = await run_definition(api, asking(model=MODEL), inputs=QUESTION)
    assert "LIBFLOW_LLM_BASE_URL" in node_failure(status, body)


async def test_messages_from_an_expression_are_checked_when_the_node_runs(
    llm_api: Api, llm_server: LlmServer
) -> None:
    definition = asking(messages="{{ inputs.messages }}")
    inputs = {**QUESTION, "messages": [{"role": "robot", "content": "beep"}]}
    status, body = await run_definition(llm_api, definition, inputs=inputs)
    assert "role must be one of" in node_failure(status, body)
    assert llm_server.requests == []


# Hostile answers: bounded before they are held, the event loop free meanwhile


def content_chunk(text: str) -> bytes:
    """One server-sent chunk carrying ``text`` as a content delta."""
    chunk = {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": text}}],
    }
    return f"data: {json.dumps(chunk)}\n\n".encode()


async def test_an_answer_over_the_response_limit_fails_the_node(
    llm_api: Api, llm_server: LlmServer
) -> None:
    llm_server.raw_stream = [content_chunk("x" * 4000)] * 1600  # 6.4 MB, never [DONE]
    async with healthz_stays_responsive(llm_api.client):
        with peak_rss_growth() as growth:
            status, body = await run_definition(llm_api, asking(), inputs=QUESTION)
    assert f"over the limit of {MAX_RESPONSE_BYTES} bytes" in node_failure(status, body)
    assert growth.mib < 100


async def test_an_event_over_its_limit_fails_the_node(llm_api: Api, llm_server: LlmServer) -> None:
    llm_server.raw_stream = [
        b'data: {"choices": [{"delta": {"content": "' + b"a" * 2 * MAX_EVENT_BYTES
    ]
    async with healthz_stays_responsive(llm_api.client):
        status, body = await run_definition(llm_api, asking(), inputs=QUESTION)
    assert f"over {MAX_EVENT_BYTES} bytes" in node_failure(status, body)


async def test_messages_over_the_request_limit_fail_the_node_before_any_request(
    llm_api: Api, llm_server: LlmServer
) -> None:
    big = {"role": "user", "content": "{{ 'x' * 1000000 }}"}  # 9 MB in all
    async with healthz_stays_responsive(llm_api.client):
        status, body = await run_definition(llm_api, asking(messages=[big] * 9), inputs=QUESTION)
    assert f"over the limit of {MAX_REQUEST_BYTES} bytes" in node_failure(status, body)
    assert llm_server.requests == []


async def test_a_stream_that_never_ends_stops_at_the_run_s_timeout(
    llm_api: Api, llm_server: LlmServer
) -> None:
    llm_server.stall = True
    definition = asking()
    definition["timeoutSeconds"] = 1
    started = time.monotonic()
    status, body = await run_definition(llm_api, definition, inputs=QUESTION)
    assert status == 504, body
    assert (body["result"]["error"]["code"], body["result"]["error"]["node"]) == (
        "RUN_TIMEOUT",
        "ask",
    )
    assert time.monotonic() - started < 3


# Publishing


async def publish_refused(api: Api, definition: dict[str, Any]) -> list[dict[str, Any]]:
    """Publish ``definition`` as a new version, which must be refused; the problems."""
    created = await create(api, asking())
    response = await call(
        api, "POST", f"/{created['workflowId']}/versions", json={"definition": definition}
    )
    body = await ok_json(response, 400)
    assert body["error"] == "INVALID_WORKFLOW"
    details: list[dict[str, Any]] = body["details"]
    return details


async def test_publishing_refuses_an_llm_node_without_messages(api: Api) -> None:
    definition = asking()
    del definition["nodes"][2]["messages"]
    details = await publish_refused(api, definition)
    assert {"node": "ask", "problem": "missing required field 'messages'"} in details


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"messages": []}, "non-empty array"),
        ({"messages": [{"role": "robot", "content": "hi"}]}, "role must be one of"),
        ({"messages": [{"role": "user"}]}, "exactly role and content"),
        ({"messages": [{"role": "user", "content": 42}]}, "content must be a string"),
        ({"responseFormat": "xml"}, "must be one of text, json"),
        ({"temperature": 3}, "at most 2"),
    ],
)
async def test_publishing_refuses_a_bad_llm_node_naming_it(
    api: Api, fields: dict[str, Any], problem: str
) -> None:
    details = await publish_refused(api, asking(**fields))
    assert any(d["node"] == "ask" and problem in d["problem"] for d in details), details


# The examples

HANDBOOK = (
    "Travel handbook.\n"
    "Expenses are reimbursed within 14 days of the receipt being filed.\n"
    "Train travel is booked in second class.\n"
)
ASKED = "How fast are expenses reimbursed?"
CITED = "Expenses are reimbursed within 14 days [1]."


def example(name: str) -> dict[str, Any]:
    """A workflow file of examples/: ``{name, definition}``."""
    loaded: dict[str, Any] = json.loads((EXAMPLES / name).read_text(encoding="utf-8"))
    return loaded


async def upload_handbook(api: Api) -> str:
    """The handbook, uploaded and searchable; its file id."""
    record = await api.upload(HANDBOOK.encode(), name="handbook.txt", file_type="txt")
    await wait_until_processed(api, record["id"])
    file_id: str = record["id"]
    return file_id


def assert_asked_with_the_passage(server: LlmServer) -> None:
    """The model was given the numbered passage and the question."""
    [request] = server.requests
    prompt = request.body["messages"][-1]["content"]
    assert "[1] handbook.txt: " in prompt
    assert "reimbursed within 14 days" in prompt
    assert prompt.endswith(f"Question: {ASKED}")


async def test_the_rag_example_answers_from_the_library(
    llm_api: Api, llm_server: LlmServer
) -> None:
    file_id = await upload_handbook(llm_api)
    llm_server.reply = [CITED]
    rag = example("rag_runsync.json")
    created = await create(llm_api, rag["definition"], name=rag["name"])
    status, body = await runsync(llm_api, created["workflowId"], inputs={"question": ASKED})
    assert status == 200, body
    outputs = body["result"]["outputs"]
    assert outputs["answer"] == CITED
    assert outputs["sources"][0]["fileId"] == file_id
    assert_asked_with_the_passage(llm_server)


@pytest.fixture
async def answers() -> AsyncIterator[tuple[str, list[Any]]]:
    """A local endpoint the webhook example posts its answers to: (its URL, what it got)."""
    received: list[Any] = []

    async def receive(request: web.Request) -> web.Response:
        received.append(await request.json())
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_post("/answers", receive)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield str(server.make_url("/answers")), received
    finally:
        await server.close()


async def test_the_webhook_example_posts_the_answer(
    start_app: ClientFactory,
    embedded: Shape,
    llm_server: LlmServer,
    answers: tuple[str, list[Any]],
) -> None:
    # The answers endpoint is on loopback, which http_request refuses unless allowed.
    api = await open_api(start_app, with_llm(embedded, llm_server, http_allow_private=True))
    file_id = await upload_handbook(api)
    llm_server.reply = [CITED]
    url, received = answers
    webhook = await create_webhook(api, example("webhook_answer.json")["definition"])
    payload = json.dumps({"question": ASKED, "responseUrl": url}).encode()
    response = await deliver(
        api, webhook["webhookId"], payload, standard_headers(webhook["secret"], payload)
    )
    assert response.status == 200, await response.text()
    [delivery] = await wait_for_deliveries(api, webhook["webhookId"], 1)
    assert delivery["status"] == "succeeded", delivery
    assert received == [{"question": ASKED, "answer": CITED, "sources": [file_id]}]
    assert_asked_with_the_passage(llm_server)
