"""A run's server-sent events: a ``text/event-stream`` parser and a follower that resumes.

``follow_events`` yields a run's events from the first to ``run.finished``; a stream that
breaks is opened again with ``Last-Event-ID`` so that no event is lost or seen twice.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
from yarl import URL

from libflow.client.errors import ApiError, LibflowError, NotAnApiAnswer, RateLimitedError
from libflow.client.transport import RATE_LIMIT_RETRIES, Transport

RUN_FINISHED = "run.finished"
# The largest event is run.finished, which carries a whole run record (at most 4 MiB on a
# libflow server): past this a line is not a libflow event, and is refused before it is held.
MAX_EVENT_BYTES = 16 * 1024 * 1024
# The server sends a keep-alive every 15 s: this long without a byte, the stream is broken.
STREAM_SILENCE_SECONDS = 60.0
# Reconnections in a row that get no event before a run is given up on.
RECONNECT_ATTEMPTS = 10
# Until the server says otherwise (its ``retry:`` field): the wait before reconnecting.
DEFAULT_RETRY_SECONDS = 2.0


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
        """The events completed by ``chunk``; LibflowError for a line past MAX_EVENT_BYTES."""
        self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        if len(self._buffer) > MAX_EVENT_BYTES:
            raise LibflowError(f"an event stream line is over {MAX_EVENT_BYTES} bytes")
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
                raise LibflowError(f"an event's data is over {MAX_EVENT_BYTES} bytes")
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


async def follow_events(
    transport: Transport, url: URL, last_event_id: str | None = None
) -> AsyncIterator[ServerSentEvent]:
    """A run's events from after ``last_event_id`` to run.finished, across broken connections.

    A connection that breaks is opened again with the last event's id in ``Last-Event-ID``;
    after RECONNECT_ATTEMPTS in a row without an event, LibflowError. Until a first stream is
    open nothing is retried but a 429: an unknown run or an unreachable server is said at once.
    """
    parser = EventStreamParser(last_event_id)
    opened = False
    failures = rate_limited = 0
    # No total: a run is followed for as long as it runs; silence is what breaks a stream.
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=STREAM_SILENCE_SECONDS)
    while True:
        headers = {"Accept": "text/event-stream"}
        if parser.last_id is not None:
            headers["Last-Event-ID"] = parser.last_id
        try:
            async with transport.stream(url, headers, timeout) as response:
                if not response.content_type.startswith("text/event-stream"):
                    raise LibflowError(f"GET {url}: {response.status}: not an event stream")
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
        except (ApiError, NotAnApiAnswer) as err:
            if not opened or err.status < 500:
                raise
            problem = str(err)
        except (aiohttp.ClientError, TimeoutError) as err:
            if not opened:
                if isinstance(err, aiohttp.ClientError):
                    raise  # the caller says "cannot reach the server"
                raise LibflowError(f"GET {url}: no answer") from err
            problem = str(err) or type(err).__name__
        failures += 1
        if failures > RECONNECT_ATTEMPTS:
            raise LibflowError(f"GET {url}: the event stream broke: {problem}")
        await asyncio.sleep(parser.retry_seconds or DEFAULT_RETRY_SECONDS)
        # What came of an event cut in the middle is dropped: it comes again, whole.
        retry_seconds = parser.retry_seconds
        parser = EventStreamParser(parser.last_id)
        parser.retry_seconds = retry_seconds
