"""The llm node: a chat completion from an OpenAI-compatible API, its text streamed as it comes.

The node POSTs ``{LIBFLOW_LLM_BASE_URL}/chat/completions`` with ``stream: true`` and reads the
server-sent events: each content delta goes to the run's events as ``llm.delta`` (coalesced,
see DELTA_INTERVAL_SECONDS), the last chunks carry the finish reason and the token usage.
A 429 or 5xx answer (or no connection at all) is retried with backoff, honouring
Retry-After, while the run has time left; any other answer fails the node with the
provider's own message. The base URL is the operator's setting, so unlike http_request it
is not held to public addresses.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import math
import random
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeGuard

import aiohttp

from libflow.engine.cpu_pool import off_loop
from libflow.engine.definition import Node
from libflow.engine.node_fields import message_problem
from libflow.engine.nodes.state import (
    NodeFailure,
    RunListener,
    RunState,
    field_value,
    int_field,
    number_field,
)
from libflow.engine.render_budget import MAX_RUN_JSON_VALUES, json_values_bound
from libflow.engine.run_budget import measure
from libflow.engine.run_secrets import RunSecrets
from libflow.engine.ssrf import MAX_RESPONSE_BYTES, RequestFailed
from libflow.engine.value_size import TooBig

MAX_ATTEMPTS: Final = 5  # a 429 or 5xx is tried again at most 4 times (within the run's time)
FIRST_BACKOFF_SECONDS: Final = 0.5  # doubled each attempt, up to MAX_BACKOFF_SECONDS
MAX_BACKOFF_SECONDS: Final = 8.0
# llm.delta events: the first delta at once, then at most one event per interval with all
# the text received meanwhile, so a fast model does not send an event per token.
DELTA_INTERVAL_SECONDS: Final = 0.05
MAX_REQUEST_BYTES: Final = 8 * 1024 * 1024  # the messages of one request, as JSON
MAX_EVENT_BYTES: Final = 1024 * 1024  # the data of one server-sent event (one chunk)
MAX_ERROR_BODY_BYTES: Final = 64 * 1024  # what is read of an error answer
INLINE_JSON_BYTES: Final = 16 * 1024  # JSON this small is built and parsed on the loop
_TIMEOUT: Final = aiohttp.ClientTimeout(total=None, sock_connect=10)  # the run's timeout holds
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f]")


async def run_llm(node: Node, state: RunState) -> dict[str, Any]:
    """Ask the model for a completion of the messages: ``{text, json, usage, model, ...}``."""
    provider = state.services.llm
    if not provider.base_url:
        raise NodeFailure(
            "no model provider is configured: set LIBFLOW_LLM_BASE_URL to an OpenAI-compatible "
            "base URL (ending in /v1)"
        )
    model = await _optional_text(node, state, "model") or provider.model
    if not model:
        raise NodeFailure("no model to ask: set the node's 'model' field or LIBFLOW_LLM_MODEL")
    body = await _request_body(node, state, model)
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    api_key = await _optional_text(node, state, "apiKey") or provider.api_key
    if api_key:
        if _CONTROL.search(api_key):
            raise NodeFailure("the API key has a control character (such as CR or LF) in it")
        headers["Authorization"] = f"Bearer {api_key}"
    url = provider.base_url.rstrip("/") + "/chat/completions"
    deltas = _Deltas(node.id, state.listener, state.services.secrets)
    try:
        answer = await _complete(state, url, body, headers, deltas)
    finally:
        deltas.flush()
    if answer.usage is not None:
        state.usage[node.id] = answer.usage  # tokens were spent even if the JSON is refused
    text = "".join(answer.parts)
    parsed = await _parse_json(text, state) if node.config["responseFormat"] == "json" else None
    result: dict[str, Any] = {
        "text": text,
        "json": parsed,
        "usage": answer.usage or {"promptTokens": None, "completionTokens": None},
        "model": answer.model or model,
        "finishReason": answer.finish_reason,
    }
    await state.budget.hold_value(result, "the model's answer")
    return result


async def _optional_text(node: Node, state: RunState, name: str) -> str | None:
    """A text field the node may leave out (None when left out or rendered empty)."""
    if node.config[name] is None:
        return None
    value = await field_value(node, state, name)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise NodeFailure(f"field '{name}' must render to text, not {type(value).__name__}")
    return value


async def _request_body(node: Node, state: RunState, model: str) -> bytes:
    """The chat completion request, as JSON bytes (MAX_REQUEST_BYTES checked first)."""
    messages = await field_value(node, state, "messages")
    try:
        size = await measure(messages, MAX_REQUEST_BYTES)
    except TooBig:
        raise NodeFailure(
            f"the messages are over the limit of {MAX_REQUEST_BYTES} bytes of a model request"
        ) from None
    body: dict[str, Any] = {"model": model, "stream": True}
    if node.config["temperature"] is not None:
        body["temperature"] = await number_field(node, state, "temperature", 0, 2)
    if node.config["maxTokens"] is not None:
        body["max_tokens"] = await int_field(node, state, "maxTokens", 1, 1_000_000)
    if node.config["responseFormat"] == "json":
        body["response_format"] = {"type": "json_object"}
    if size <= INLINE_JSON_BYTES:
        return _encode(body, messages)
    return await off_loop(_encode, body, messages)


def _encode(body: dict[str, Any], messages: Any) -> bytes:
    """The request with its messages checked; a content rendered to a value is its JSON."""
    if isinstance(messages, list):
        messages = [_with_text_content(message) for message in messages]
    problem = message_problem(messages)
    if problem is not None:
        raise NodeFailure(f"field 'messages' {problem}")
    request = {**body, "messages": messages, "stream_options": {"include_usage": True}}
    return json.dumps(request).encode()


def _with_text_content(message: Any) -> Any:
    """A message whose content rendered to a native value, with that value as JSON text."""
    if isinstance(message, dict) and not isinstance(message.get("content", ""), str):
        return {**message, "content": json.dumps(message["content"], ensure_ascii=False)}
    return message


@dataclass(slots=True)
class _Answer:
    """What the stream said so far."""

    parts: list[str] = field(default_factory=list)
    model: str | None = None
    finish_reason: str | None = None
    usage: dict[str, int] | None = None

    def take(self, chunk: Any, deltas: _Deltas) -> None:
        """Take in one ``chat.completion.chunk`` (only the first choice is read)."""
        if not isinstance(chunk, dict):
            raise NodeFailure("the model provider sent a chunk that is not a JSON object")
        if chunk.get("error"):
            raise NodeFailure(f"the model provider failed mid-answer: {_message_of(chunk)}")
        if isinstance(chunk.get("model"), str):
            self.model = chunk["model"]
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            content = delta.get("content") if isinstance(delta, dict) else None
            if isinstance(content, str) and content:
                self.parts.append(content)
                deltas.add(content)
            if isinstance(choice.get("finish_reason"), str):
                self.finish_reason = choice["finish_reason"]
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
            if _is_count(prompt) and _is_count(completion):
                self.usage = {"promptTokens": prompt, "completionTokens": completion}


def _is_count(value: Any) -> TypeGuard[int]:
    """A token count as a record keeps it (at most 15 digits: room is kept for it)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10**15


class _Deltas:
    """Passes the model's text on as llm.delta events, coalesced per DELTA_INTERVAL_SECONDS."""

    def __init__(
        self, node_id: str, listener: RunListener | None, secrets: RunSecrets | None
    ) -> None:
        self._node_id = node_id
        self._listener = listener
        self._secrets = secrets
        self._pending: list[str] = []
        self._sent_at = -math.inf
        self._timer: asyncio.TimerHandle | None = None

    def add(self, text: str) -> None:
        """Send ``text`` now if the last event is an interval old, else with the next one."""
        if self._listener is None:
            return
        self._pending.append(text)
        if self._timer is not None:
            return
        wait = self._sent_at + DELTA_INTERVAL_SECONDS - time.monotonic()
        if wait <= 0:
            self._send_so_far()
        else:
            self._timer = asyncio.get_running_loop().call_later(wait, self._send_so_far)

    def _send_so_far(self) -> None:
        """Send the text so far, but for a tail that may begin a secret (more is coming)."""
        self.flush(last=False)

    def flush(self, *, last: bool = True) -> None:
        """Send the text not sent yet; unless it is the ``last``, without a secret's start."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._pending or self._listener is None:
            return
        text = "".join(self._pending)
        # Events are redacted one by one: a secret's first characters wait for the rest.
        cut = len(text) if last or self._secrets is None else self._secrets.sendable(text)
        self._pending = [text[cut:]] if cut < len(text) else []
        if cut:
            text = text[:cut]
            self._listener("llm.delta", {"node": self._node_id, "text": text}, "text")
            self._sent_at = time.monotonic()


async def _complete(
    state: RunState, url: str, body: bytes, headers: dict[str, str], deltas: _Deltas
) -> _Answer:
    """POST the request until it is answered, retrying 429, 5xx and failed connections."""
    budget = state.budget
    for attempt in range(1, MAX_ATTEMPTS + 1):
        wait: float | None = None
        try:
            async with (
                budget.requests,
                state.services.http.post(
                    url, data=body, headers=headers, timeout=_TIMEOUT, allow_redirects=False
                ) as response,
            ):
                if response.status == 200:
                    return await _read_answer(response, state, deltas)
                problem = await _problem_of(response, state)
                if response.status != 429 and response.status < 500:
                    raise NodeFailure(problem)
                wait = _retry_after(response.headers)
        except (aiohttp.InvalidURL, aiohttp.NonHttpUrlClientError) as err:
            raise NodeFailure(f"LIBFLOW_LLM_BASE_URL is not a usable URL: {err}") from None
        except aiohttp.ClientError as err:  # before any answer: _read_answer turns its own
            problem = f"the model provider could not be reached ({type(err).__name__}: {err})"
        if attempt == MAX_ATTEMPTS:
            break
        if wait is None:
            backoff = min(MAX_BACKOFF_SECONDS, FIRST_BACKOFF_SECONDS * 2 ** (attempt - 1))
            wait = backoff * random.uniform(0.5, 1)  # jitter: retries of many runs spread out
        if time.monotonic() + wait >= budget.renders.deadline:
            raise NodeFailure(f"{problem}; a retry in {wait:.3g} s would pass the run's timeout")
        await asyncio.sleep(wait)
    raise NodeFailure(f"{problem} (after {MAX_ATTEMPTS} attempts)")


async def _read_answer(
    response: aiohttp.ClientResponse, state: RunState, deltas: _Deltas
) -> _Answer:
    """Read the stream to ``data: [DONE]`` (or its end after a finish reason)."""
    if response.content_type != "text/event-stream":
        raise NodeFailure(
            f"the model provider answered {response.content_type!r}, not a stream of events"
        )
    answer, events, read = _Answer(), _EventStream(), 0
    try:
        async for piece in response.content.iter_any():
            read += len(piece)
            if read > MAX_RESPONSE_BYTES:
                raise NodeFailure(
                    f"the model's answer is over the limit of {MAX_RESPONSE_BYTES} bytes"
                )
            state.budget.responses.take(len(piece))
            for data in events.feed(piece):
                if await _take_event(data, answer, state, deltas):
                    return answer
    except RequestFailed as err:
        raise NodeFailure(str(err)) from None
    except aiohttp.ClientError as err:
        raise NodeFailure(f"the model's answer broke off ({type(err).__name__}: {err})") from None
    for data in events.end():
        if await _take_event(data, answer, state, deltas):
            return answer
    if answer.finish_reason is None:
        raise NodeFailure("the model's answer ended before its last chunk")
    return answer


async def _take_event(data: bytes, answer: _Answer, state: RunState, deltas: _Deltas) -> bool:
    """Take in one event's data; True at ``[DONE]``."""
    if data.strip() == b"[DONE]":
        return True
    try:
        if len(data) <= INLINE_JSON_BYTES:
            chunk = json.loads(data)
        else:  # small chunks are bounded by their size; a large one is counted first
            values = json_values_bound(data)
            if not state.budget.renders.spend_json_values(values):
                raise NodeFailure(
                    f"a chunk of the model's answer holds up to {values} JSON values, over the "
                    f"run's limit of {MAX_RUN_JSON_VALUES} values parsed"
                )
            chunk = await off_loop(json.loads, data)
    except (ValueError, RecursionError):
        raise NodeFailure(
            f"the model provider sent a chunk that is not JSON: {data[:100]!r}"
        ) from None
    answer.take(chunk, deltas)
    return False


class _EventStream:
    """Server-sent events from a body that arrives in pieces: the data of each, in order."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._data: list[bytes] = []
        self._size = 0

    def feed(self, piece: bytes) -> list[bytes]:
        """The data of the events ``piece`` completes."""
        self._buffer += piece
        done: list[bytes] = []
        start = 0
        while (end := self._buffer.find(b"\n", start)) >= 0:
            self._line(bytes(self._buffer[start:end]).rstrip(b"\r"), done)
            start = end + 1
        del self._buffer[:start]
        if len(self._buffer) + self._size > MAX_EVENT_BYTES:
            raise NodeFailure(f"an event of the model's answer is over {MAX_EVENT_BYTES} bytes")
        return done

    def end(self) -> list[bytes]:
        """The data of the last event, when the body ended without its blank line."""
        done: list[bytes] = []
        if self._buffer:
            self._line(bytes(self._buffer).rstrip(b"\r"), done)
        self._line(b"", done)
        return done

    def _line(self, line: bytes, done: list[bytes]) -> None:
        if not line:  # a blank line ends an event
            if self._data:
                done.append(b"\n".join(self._data))
            self._data, self._size = [], 0
        elif line.startswith(b"data:"):
            value = line[6:] if line.startswith(b"data: ") else line[5:]
            self._data.append(value)
            self._size += len(value) + 1
        # Comments (":") and the event, id and retry fields carry nothing a completion needs.


async def _problem_of(response: aiohttp.ClientResponse, state: RunState) -> str:
    """What an error answer says: OpenAI's ``error.message``, else the start of its body."""
    raw = b""
    try:
        while len(raw) < MAX_ERROR_BODY_BYTES:
            piece = await response.content.read(MAX_ERROR_BODY_BYTES - len(raw))
            if not piece:
                break
            raw += piece
        state.budget.responses.take(len(raw))
    except RequestFailed as err:
        raise NodeFailure(str(err)) from None
    text = raw.decode("utf-8", errors="replace")
    try:
        message = _message_of(json.loads(text))
    except (ValueError, RecursionError):
        message = None
    if not message:
        message = " ".join(text.split())[:500] or response.reason or "no message"
    return f"the model provider answered {response.status}: {message}"


def _message_of(body: Any) -> str | None:
    """The message of an error body: ``{"error": {"message"}}``, ``{"error": "..."}``."""
    if not isinstance(body, dict):
        return None
    error = body.get("error")
    if isinstance(error, dict) and isinstance(message := error.get("message"), str):
        return message
    if isinstance(error, str):
        return error
    message = body.get("message")
    return message if isinstance(message, str) else None


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """The wait a 429 or 503 asks for: ``retry-after-ms``, else Retry-After (seconds or date)."""
    for name, scale in (("retry-after-ms", 0.001), ("Retry-After", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) * scale
        except ValueError:
            try:
                seconds = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
            except (TypeError, ValueError):
                continue
        if math.isfinite(seconds):
            return max(seconds, 0.0)
    return None


async def _parse_json(text: str, state: RunState) -> Any:
    """The answer parsed as JSON (responseFormat json); the node fails when it is not JSON."""
    values = json_values_bound(text)
    if not state.budget.renders.spend_json_values(values):
        raise NodeFailure(
            f"the model's answer holds up to {values} JSON values, over the run's limit of "
            f"{MAX_RUN_JSON_VALUES} values parsed"
        )
    try:
        if len(text) <= INLINE_JSON_BYTES:
            return json.loads(text)
        return await off_loop(json.loads, text)
    except ValueError as err:
        raise NodeFailure(
            f"the model's answer is not valid JSON ({err}), as responseFormat json requires"
        ) from None
    except RecursionError:
        raise NodeFailure("the model's answer is JSON nested too deeply to parse") from None
