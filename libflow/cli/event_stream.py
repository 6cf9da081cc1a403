"""Reading a run's server-sent events (``GET .../runs/:runId/events``).

A ``text/event-stream`` parser, and ``follow_run_events``: a run's events from its first to
``run.finished``; a stream that breaks is opened again with ``Last-Event-ID`` so that no
event is lost or seen twice.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp

from libflow.cli.api_client import RATE_LIMIT_RETRIES, RateLimitedError, answer_error, json_body
from libflow.cli.output import CliError
from libflow.engine.run_budget import MAX_RUN_RECORD_BYTES

RUN_FINISHED = "run.finished"
# The largest event is run.finished, which carries a whole run record: past this a line is
# not an event of a libflow server, and is refused before it is held.
MAX_EVENT_BYTES = 4 * MAX_RUN_RECORD_BYTES
# The server sends a keep-alive every 15 s: this long without a byte, the stream is broken.
STREAM_SILENCE_SECONDS = 60.0
# Reconnections in a row that get no event before a run is given up on.
RECONNECT_ATTEMPTS = 10
# Until the server says otherwise (its ``retry:`` field): the wait before reconnecting.
DEFAULT_RETRY_SECONDS = 2.0


class _StreamBroken(Exception):
    """The server failed (5xx) while serving the event stream; worth reconnecting."""

    def __init__(self, error: CliError) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass(frozen=True, slots=True)
class ServerSentEvent:
    """One event of a ``text/event-stream``: its id, name and data text."""

    id: str | None
    name: str
    data: str

    def json_data(self) -> Any:
        """The data as JSON, or as the text it is when it is not JSON."""
        try:
            return json.loads(self.data)
        except ValueError:
            return self.data

    def number(self) -> int | str | None:
        """The id as a number when it is one (libflow's are 1, 2, 3... per run)."""
        return int(self.id) if self.id is not None and self.id.isdecimal() else self.id


class EventStreamParser:
    """Bytes of a ``text/event-stream`` in, whole events out (the WHATWG rules we need).

    ``last_id`` is the id of the last whole event, what a reconnection resumes after.
    """

    def __init__(self, last_id: str | None = None) -> None:
        self.last_id = last_id
        self.retry_seconds: float | None = None
        self._buffer = b""
        self._id = last_id
        self._name = ""
        self._data: list[str] = []
        self._data_bytes = 0

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """The events completed by ``chunk``; CliError for a line past MAX_EVENT_BYTES."""
        self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        if len(self._buffer) > MAX_EVENT_BYTES:
            raise CliError(f"an event stream line is over {MAX_EVENT_BYTES} bytes")
        events: list[ServerSentEvent] = []
        for raw in lines:
            event = self._line(raw.removesuffix(b"\r").decode("utf-8", errors="replace"))
            if event is not None:
                events.append(event)
        return events

    def _line(self, line: str) -> ServerSentEvent | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "data":
            self._data_bytes += len(value)
            if self._data_bytes > MAX_EVENT_BYTES:
                raise CliError(f"an event's data is over {MAX_EVENT_BYTES} bytes")
            self._data.append(value)
        elif field == "event":
            self._name = value
        elif field == "id" and "\0" not in value:
            self._id = value
        elif field == "retry" and value.isdecimal():
            self.retry_seconds = int(value) / 1000
        return None

    def _dispatch(self) -> ServerSentEvent | None:
        # An id counts once its event is whole: a stream cut inside an event resumes before it.
        self.last_id = self._id
        data, name = self._data, self._name or "message"
        self._data, self._data_bytes, self._name = [], 0, ""
        if not data:
            return None
        return ServerSentEvent(self.last_id, name, "\n".join(data))


async def follow_run_events(
    session: aiohttp.ClientSession, project_url: str, api_key: str, run_id: str
) -> AsyncIterator[ServerSentEvent]:
    """The run's events from its first to run.finished, across broken connections.

    A connection that breaks is opened again with the last event's id in ``Last-Event-ID``;
    after RECONNECT_ATTEMPTS in a row without an event, CliError. Until a first stream is
    open nothing is retried but a 429: an unknown run or an unreachable server is said at once.
    """
    url = f"{project_url}/runs/{run_id}/events"
    parser = EventStreamParser()
    opened = False
    failures = rate_limited = 0
    while True:
        try:
            async with _open_stream(session, url, api_key, parser.last_id) as response:
                opened = True
                rate_limited = 0
                async for chunk in response.content.iter_any():
                    for event in parser.feed(chunk):
                        failures = 0
                        yield event
                        if event.name == RUN_FINISHED:
                            return
            problem = "the stream ended before run.finished"
        except RateLimitedError as err:
            rate_limited += 1
            if rate_limited > RATE_LIMIT_RETRIES:
                raise
            await asyncio.sleep(err.retry_after)
            continue
        except _StreamBroken as err:
            if not opened:
                raise err.error from None
            problem = str(err)
        except (aiohttp.ClientError, TimeoutError) as err:
            if not opened:
                if isinstance(err, aiohttp.ClientError):
                    raise  # the command says "cannot reach the server"
                raise CliError(f"GET {url}: no answer") from err
            problem = str(err) or type(err).__name__
        failures += 1
        if failures > RECONNECT_ATTEMPTS:
            raise CliError(f"GET {url}: the event stream broke: {problem}")
        await asyncio.sleep(parser.retry_seconds or DEFAULT_RETRY_SECONDS)
        # What came of an event cut in the middle is dropped: it comes again, whole.
        retry_seconds = parser.retry_seconds
        parser = EventStreamParser(parser.last_id)
        parser.retry_seconds = retry_seconds


@asynccontextmanager
async def _open_stream(
    session: aiohttp.ClientSession, url: str, api_key: str, last_id: str | None
) -> AsyncIterator[aiohttp.ClientResponse]:
    """The run's event stream, from after ``last_id``: an error unless the answer is one."""
    headers = {"Authorization": api_key, "Accept": "text/event-stream"}
    if last_id is not None:
        headers["Last-Event-ID"] = last_id
    # No total: a run is followed for as long as it runs; silence is what breaks a stream.
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=STREAM_SILENCE_SECONDS)
    async with session.get(url, headers=headers, timeout=timeout) as response:
        if response.status >= 400:
            error = answer_error(f"GET {url}", response, await json_body(response))
            raise _StreamBroken(error) if response.status >= 500 else error
        if not response.content_type.startswith("text/event-stream"):
            raise CliError(f"GET {url}: {response.status}: not an event stream")
        yield response
