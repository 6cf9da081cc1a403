"""A run's events, in order, for whoever watches it: on this process or any other.

Each event of a run has an id, 1, 2, 3... The process running the run publishes its events
on a bus; watchers read them back from it with the id of the last one they saw. The
embedded shape keeps them in this process's memory (a group of API processes, in files of
the data dir: ``run_event_files``); the scaled shape keeps one Redis stream per run, so a
run executed by a worker streams to every API process. Either way events stay
readable ``EVENTS_KEPT_SECONDS`` after they were written (a late watcher gets the history).

``run.finished`` carries no data on the bus: its data is the run record, read by the
watcher from the database (where the run's end is written before the event is published).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from redis.asyncio import Redis
from redis.exceptions import RedisError

from libflow.engine.value_size import TooBig, stored_size
from libflow.json_text import utf8_json

logger = logging.getLogger("libflow.run_events")

RUN_QUEUED = "run.queued"
RUN_STARTED = "run.started"
RUN_FINISHED = "run.finished"
# Two hours from the last event: at least an hour after any run's end (runs last 300 s at most).
EVENTS_KEPT_SECONDS = 2 * 3600
# A value in an event (a node's output, an output's value) larger than this as JSON is sent
# as null with "truncated": true; the run record holds it whole.
MAX_EVENT_VALUE_CHARS = 256 * 1024
# What one run's events may hold in all; past it, values are truncated as above.
MAX_RUN_EVENT_CHARS = 8 * 1024 * 1024
# What the embedded shape keeps in memory; past it the oldest finished runs' events go first.
MAX_MEMORY_EVENT_CHARS = 128 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class RunEvent:
    """One event: its id within the run, its name, and its data as JSON text."""

    id: int
    name: str
    data: str


class EventBus(Protocol):
    """Where runs publish their events and watchers read them."""

    def publish(self, run_id: str, events: list[RunEvent]) -> None:
        """Hand over events in order; never blocks (a run does not wait for its watchers)."""
        ...

    async def flush(self) -> None:
        """Wait until what was published is readable by every process."""
        ...

    async def read(self, run_id: str, after: int, wait: float) -> list[RunEvent]:
        """The run's events after id ``after``, waiting up to ``wait`` s for some (0: none)."""
        ...

    async def last_id(self, run_id: str) -> int:
        """The id of the run's last published event (0: none)."""
        ...

    async def close(self) -> None:
        """Write what is still pending and let go."""
        ...


class RunEventLog:
    """The events of one run, as the process running it emits them.

    Until ``attach`` the events wait here (a runsync run nobody can watch yet costs a list
    append per event); attached, each is published as it happens. Values are measured and
    turned into JSON only when published.
    """

    def __init__(
        self, run_id: str, *, first_id: int = 1, redact: Callable[[Any], Any] | None = None
    ) -> None:
        self.run_id = run_id
        # Applied to each event's data as it is published: the run's secrets never leave.
        self._redact = redact
        self._next_id = first_id
        self._pending: list[tuple[str, dict[str, Any], str | None]] = []
        self._bus: EventBus | None = None
        self._chars = 0

    @property
    def attached(self) -> bool:
        """Whether events are published as they happen."""
        return self._bus is not None

    def emit(self, name: str, data: dict[str, Any], value_key: str | None = None) -> None:
        """Emit an event; ``value_key`` names the field that may be truncated when large."""
        if self._bus is None:
            self._pending.append((name, data, value_key))
            return
        self._bus.publish(self.run_id, [self._event(name, data, value_key)])

    def attach(self, bus: EventBus) -> None:
        """Publish the events so far, and each one from now on."""
        if self._bus is not None:
            return
        self._bus = bus
        pending, self._pending = self._pending, []
        if pending:
            bus.publish(self.run_id, [self._event(*item) for item in pending])

    def _event(self, name: str, data: dict[str, Any], value_key: str | None) -> RunEvent:
        data = self._within_limits(data, value_key)
        # Redacted once measured: a value too big for an event (a node's output may be
        # 8 MiB) is dropped, not copied whole on the event loop first. Measured again
        # after (at most an event's worth): "[secret:NAME]" may be far longer than the
        # value it replaces (one of two characters is replaced wherever it occurs).
        if self._redact is not None:
            data = self._within_limits(self._redact(data), value_key)
        text = utf8_json(data)
        self._chars += len(text)
        event = RunEvent(self._next_id, name, text)
        self._next_id += 1
        return event

    def _within_limits(self, data: dict[str, Any], value_key: str | None) -> dict[str, Any]:
        """``data``, its ``value_key`` dropped (``truncated``) when over what an event holds."""
        if value_key is None or value_key not in data:
            return data
        allowed = min(MAX_EVENT_VALUE_CHARS, MAX_RUN_EVENT_CHARS - self._chars)
        try:
            stored_size(data[value_key], max(allowed, 0))
        except TooBig:
            return {**data, value_key: None, "truncated": True}
        return data


def parse_last_event_id(value: str | None) -> int:
    """A ``Last-Event-ID`` header (or ``after`` parameter): 0 when absent or not an id."""
    if value is None:
        return 0
    value = value.strip()
    # isascii: str.isdigit also takes "²", which int() refuses.
    return int(value) if value.isascii() and value.isdigit() and len(value) <= 12 else 0


@dataclass(slots=True)
class _Log:
    events: list[RunEvent] = field(default_factory=list)
    chars: int = 0
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    touched: float = field(default_factory=time.monotonic)
    finished: bool = False


class MemoryEventBus:
    """The embedded shape's bus: the events of recent runs in this process's memory."""

    def __init__(self, *, max_chars: int = MAX_MEMORY_EVENT_CHARS) -> None:
        self._logs: OrderedDict[str, _Log] = OrderedDict()
        self._chars = 0
        self._max_chars = max_chars
        self._published = 0

    def publish(self, run_id: str, events: list[RunEvent]) -> None:
        """Append to the run's log and wake its watchers."""
        log = self._log(run_id)
        for event in events:
            log.events.append(event)
            log.chars += len(event.data) + 64
            self._chars += len(event.data) + 64
            log.finished = log.finished or event.name == RUN_FINISHED
        log.touched = time.monotonic()
        log.changed.set()
        log.changed = asyncio.Event()
        self._published += 1
        if self._chars > self._max_chars or self._published % 1000 == 0:
            self._prune()

    async def flush(self) -> None:
        """Published events are readable at once."""

    async def read(self, run_id: str, after: int, wait: float) -> list[RunEvent]:
        """Events after ``after``; waits for the next ones when there are none yet."""
        log = self._log(run_id)
        if not log.events or log.events[-1].id <= after:
            if log.finished or wait <= 0:
                return []
            changed = log.changed
            try:
                await asyncio.wait_for(changed.wait(), wait)
            except TimeoutError:
                return []
        return [event for event in log.events if event.id > after]

    async def last_id(self, run_id: str) -> int:
        """The last event's id, 0 when this process has none of the run's."""
        log = self._logs.get(run_id)
        return log.events[-1].id if log and log.events else 0

    async def close(self) -> None:
        """Nothing is pending: publishing is done in place."""

    def _log(self, run_id: str) -> _Log:
        log = self._logs.get(run_id)
        if log is None:
            log = self._logs[run_id] = _Log()
        return log

    def _prune(self) -> None:
        """Forget logs idle past EVENTS_KEPT_SECONDS, then the oldest finished, to fit."""
        now = time.monotonic()
        for run_id, log in list(self._logs.items()):
            over = self._chars > self._max_chars
            if now - log.touched > EVENTS_KEPT_SECONDS or (over and log.finished):
                self._forget(run_id, log)

    def _forget(self, run_id: str, log: _Log) -> None:
        del self._logs[run_id]
        self._chars -= log.chars


def stream_key(run_id: str) -> str:
    """The Redis stream of one run's events."""
    return f"libflow:run-events:{run_id}"


Batch = list[tuple[str, list[RunEvent]]]


class BatchedWrites:
    """Events published on one loop, written a batch at a time by one task.

    ``publish`` only queues: the task hands whatever is queued to ``write`` at once, so runs
    never wait on the writing and a burst of events costs one write, not one each.
    ``write`` reports its own failures (events are lost, logged; run records are not).
    """

    def __init__(self, write: Callable[[Batch], Awaitable[None]]) -> None:
        self._write_batch = write
        self._queued: deque[tuple[str, list[RunEvent]]] = deque()
        self._writer: asyncio.Task[None] | None = None
        # flush() callers waiting for the next batch, and for the batch being written.
        self._flushing: list[asyncio.Future[None]] = []
        self._sending: list[asyncio.Future[None]] = []
        self._in_flight = False

    def publish(self, run_id: str, events: list[RunEvent]) -> None:
        """Queue events for the writer task."""
        self._queued.append((run_id, events))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write())

    async def _write(self) -> None:
        while self._queued:
            batch = list(self._queued)
            self._queued.clear()
            # Who waits for this batch: flush() callers so far (their events are in it).
            self._sending, self._flushing = self._flushing, []
            self._in_flight = True
            try:
                await self._write_batch(batch)
            finally:
                self._in_flight = False
                sending, self._sending = self._sending, []
                for waiter in sending:
                    if not waiter.done():
                        waiter.set_result(None)

    async def flush(self) -> None:
        """Wait until what was published before this call is written.

        Only for that: under load the writer never idles, and waiting for it to would make
        each caller wait for everyone else's events too.
        """
        if not self._queued and not self._in_flight:
            return
        waiter = asyncio.get_running_loop().create_future()
        # Events still queued go in the next batch; without any, the batch in flight holds ours.
        (self._flushing if self._queued else self._sending).append(waiter)
        await waiter

    async def close(self) -> None:
        """Let the writer write what is queued."""
        if self._writer is not None:
            await asyncio.gather(self._writer, return_exceptions=True)


class RedisEventBus:
    """The scaled shape's bus: a Redis stream per run, written in batches by one task.

    ``publish`` only queues: a writer task sends whatever is queued in one pipeline, so
    runs never wait on Redis and a burst of events costs a round trip, not one each.
    Entries are ``<event id>-0``, so a watcher's last id is a stream position. If Redis is
    away, events are lost (logged); run records, in the database, are not.
    """

    def __init__(self, redis: Redis) -> None:
        self._redis = redis
        self._writes = BatchedWrites(self._send)

    def publish(self, run_id: str, events: list[RunEvent]) -> None:
        """Queue events for the writer task."""
        self._writes.publish(run_id, events)

    async def _send(self, batch: Batch) -> None:
        """One pipeline of XADDs (and EXPIREs) for a batch; failures are logged, not raised."""
        pipe = self._redis.pipeline(transaction=False)
        keys: set[str] = set()
        for run_id, events in batch:
            key = stream_key(run_id)
            keys.add(key)
            for event in events:
                pipe.xadd(key, {"n": event.name, "d": event.data}, id=f"{event.id}-0")
        for key in keys:
            pipe.expire(key, EVENTS_KEPT_SECONDS)
        try:
            results = await pipe.execute(raise_on_error=False)
        except (RedisError, OSError) as err:
            logger.warning("run events lost: Redis is unavailable (%r)", err)
            return
        failed = [result for result in results if isinstance(result, Exception)]
        if failed:
            logger.warning("%d run events were refused by Redis: %r", len(failed), failed[0])

    async def flush(self) -> None:
        """Wait until what was published before this call is written."""
        await self._writes.flush()

    async def read(self, run_id: str, after: int, wait: float) -> list[RunEvent]:
        """Events after ``after`` (XREAD, blocking up to ``wait``)."""
        found = await self._redis.xread(
            {stream_key(run_id): f"{after}-0"},
            count=1000,
            block=max(1, int(wait * 1000)) if wait > 0 else None,
        )
        events: list[RunEvent] = []
        for _key, entries in found or []:
            for entry_id, fields in entries:
                events.append(_event_of(entry_id, fields))
        return events

    async def last_id(self, run_id: str) -> int:
        """The last entry's event id (0: no stream)."""
        entries = await self._redis.xrevrange(stream_key(run_id), count=1)
        return _event_of(*entries[0]).id if entries else 0

    async def close(self) -> None:
        """Let the writer send what is queued."""
        await self._writes.close()


def _event_of(entry_id: bytes | str, fields: dict[Any, Any]) -> RunEvent:
    ident = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    values = {_text(key): _text(value) for key, value in fields.items()}
    return RunEvent(int(ident.split("-", 1)[0]), values["n"], values["d"])


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
