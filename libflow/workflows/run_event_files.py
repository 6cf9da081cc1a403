"""A group's run events: one append-only file per run in the data dir, siblings woken.

With several API processes (``--workers``) and no Redis, a run executing in one process
must stream to a watcher connected to another. The process running a run appends its
events to ``<data dir>/run-events/<run id>`` (a line each: ``id<TAB>name<TAB>data``, the
data being JSON, which holds no raw tab or newline) and sends the run id to its siblings
(``Siblings``), so their watchers read the new lines at once; a watcher also looks every
``POLL_SECONDS`` in case a message was lost. Nothing goes through the database: its one
writer is the busiest thing a group shares. Files are removed ``EVENTS_KEPT_SECONDS``
after their last event, or sooner, oldest first, past ``MAX_FILES_BYTES``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from libflow.ids import possible_id
from libflow.workflows.run_events import (
    EVENTS_KEPT_SECONDS,
    MAX_MEMORY_EVENT_CHARS,
    RUN_FINISHED,
    Batch,
    BatchedWrites,
    RunEvent,
)
from libflow.workflows.siblings import Siblings

logger = logging.getLogger("libflow.run_events")

TOPIC = "events"
# How often a waiting watcher reads its run's file without being woken.
POLL_SECONDS = 0.5
# New bytes up to this are read on the loop (a page-cache copy); more in a thread.
INLINE_READ_BYTES = 64 * 1024
# What the files of all runs may hold on disk; past it the oldest go first.
MAX_FILES_BYTES = 1024 * 1024 * 1024
PRUNE_SECONDS = 600.0
# A run's events read by this process are kept in memory while watched, and this long after.
TAIL_IDLE_SECONDS = 60.0


@dataclass(slots=True)
class _Tail:
    """What this process has read of one run's file."""

    offset: int = 0
    events: list[RunEvent] = field(default_factory=list)
    chars: int = 0
    finished: bool = False
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    reading: asyncio.Lock = field(default_factory=asyncio.Lock)
    touched: float = field(default_factory=time.monotonic)


class FileEventBus:
    """The bus of a group of API processes without Redis (see the module's docstring)."""

    def __init__(self, directory: Path, siblings: Siblings | None) -> None:
        self.directory = directory
        self._siblings = siblings
        self._writes = BatchedWrites(self._write)
        self._tails: OrderedDict[str, _Tail] = OrderedDict()
        self._chars = 0
        directory.mkdir(parents=True, exist_ok=True)
        if siblings is not None:
            siblings.on(TOPIC, self._wake)

    def publish(self, run_id: str, events: list[RunEvent]) -> None:
        """Queue events for the writer task."""
        self._writes.publish(run_id, events)

    async def _write(self, batch: Batch) -> None:
        """Append a batch to the runs' files (in a thread), then wake their watchers here and
        in the sibling processes."""
        try:
            written = await asyncio.to_thread(self._append, batch)
        except OSError as err:
            logger.warning("run events lost: %r", err)
            return
        for run_id in written:
            self._wake(run_id)
        if self._siblings is not None:
            self._siblings.send(TOPIC, *written)

    def _append(self, batch: list[tuple[str, list[RunEvent]]]) -> list[str]:
        """Append each run's events to its file (in a thread); the runs written."""
        lines: dict[str, list[bytes]] = {}
        for run_id, events in batch:
            if possible_id(run_id):
                lines.setdefault(run_id, []).extend(
                    f"{event.id}\t{event.name}\t{event.data}\n".encode() for event in events
                )
        for run_id, run_lines in lines.items():
            # O_APPEND: each write lands whole at the end, whichever process writes.
            fd = os.open(self._path(run_id), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                data = memoryview(b"".join(run_lines))
                while data:
                    data = data[os.write(fd, data) :]
            finally:
                os.close(fd)
        return list(lines)

    async def flush(self) -> None:
        """Wait until what was published before this call is in its file."""
        await self._writes.flush()

    async def read(self, run_id: str, after: int, wait: float) -> list[RunEvent]:
        """Events after ``after``; waits up to ``wait`` s for the next ones."""
        if not possible_id(run_id):
            return []
        tail = self._tail(run_id)
        deadline = time.monotonic() + wait
        while True:
            await self._catch_up(run_id, tail)
            found = [event for event in tail.events if event.id > after]
            remaining = deadline - time.monotonic()
            if found or tail.finished or remaining <= 0:
                return found
            changed = tail.changed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), min(remaining, POLL_SECONDS))

    async def last_id(self, run_id: str) -> int:
        """The id of the run's last event in its file (0: none)."""
        if not possible_id(run_id):
            return 0
        tail = self._tail(run_id)
        await self._catch_up(run_id, tail)
        return max((event.id for event in tail.events), default=0)

    async def close(self) -> None:
        """Let the writer write what is queued."""
        await self._writes.close()

    async def prune_forever(self) -> None:
        """Remove old files every PRUNE_SECONDS, and forget what nobody watches."""
        while True:
            try:
                await asyncio.to_thread(self.prune_files)
            except OSError as err:
                logger.warning("old run events not removed: %r", err)
            self._forget_idle()
            await asyncio.sleep(PRUNE_SECONDS)

    def prune_files(self, now: float | None = None) -> None:
        """Remove files idle past EVENTS_KEPT_SECONDS, then the oldest past MAX_FILES_BYTES."""
        now = time.time() if now is None else now
        files: list[tuple[float, int, Path]] = []
        for entry in os.scandir(self.directory):
            with contextlib.suppress(FileNotFoundError):
                info = entry.stat()
                files.append((info.st_mtime, info.st_size, Path(entry.path)))
        files.sort()
        total = sum(size for _, size, _ in files)
        for mtime, size, path in files:
            if now - mtime <= EVENTS_KEPT_SECONDS and total <= MAX_FILES_BYTES:
                break
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            total -= size

    def _path(self, run_id: str) -> Path:
        return self.directory / run_id

    def _tail(self, run_id: str) -> _Tail:
        tail = self._tails.get(run_id)
        if tail is None:
            tail = self._tails[run_id] = _Tail()
            if self._chars > MAX_MEMORY_EVENT_CHARS:
                self._forget_idle(keep=run_id, idle=0)
        self._tails.move_to_end(run_id)
        tail.touched = time.monotonic()
        return tail

    def _wake(self, run_id: str) -> None:
        tail = self._tails.get(run_id)
        if tail is not None:
            tail.changed.set()
            tail.changed = asyncio.Event()

    async def _catch_up(self, run_id: str, tail: _Tail) -> None:
        """Read what was appended to the run's file since this process last looked."""
        async with tail.reading:
            try:
                size = os.stat(self._path(run_id)).st_size
            except FileNotFoundError:
                return
            if size <= tail.offset:
                return
            if size - tail.offset <= INLINE_READ_BYTES:
                data = _read_from(self._path(run_id), tail.offset)
            else:
                data = await asyncio.to_thread(_read_from, self._path(run_id), tail.offset)
            whole = data.rfind(b"\n") + 1  # a line still being written waits for its end
            for line in data[:whole].splitlines():
                ident, name, text = line.decode().split("\t", 2)
                tail.events.append(RunEvent(int(ident), name, text))
                tail.chars += len(text) + 64
                if self._tails.get(run_id) is tail:  # not forgotten meanwhile
                    self._chars += len(text) + 64
                tail.finished = tail.finished or name == RUN_FINISHED
            tail.offset += whole

    def _forget_idle(self, keep: str | None = None, idle: float = TAIL_IDLE_SECONDS) -> None:
        """Forget the runs read here that nobody read lately (oldest first); a file stays."""
        now = time.monotonic()
        for run_id, tail in list(self._tails.items()):
            if run_id == keep or tail.reading.locked() or now - tail.touched < idle:
                continue
            if idle == 0 and self._chars <= MAX_MEMORY_EVENT_CHARS:
                return
            del self._tails[run_id]
            self._chars -= tail.chars


def _read_from(path: Path, offset: int) -> bytes:
    try:
        with path.open("rb") as f:
            f.seek(offset)
            return f.read()
    except FileNotFoundError:
        return b""
