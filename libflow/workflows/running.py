"""The runs this process is running: their leases, and the cancels that must reach them.

A run with a record in the database is registered here while it runs (async runs from
their claim, runsync runs once they are recorded as running). This process renews their
leases every third of ``lease_seconds``; a process that dies stops renewing, and the sweep
fails its runs INTERRUPTED once their leases run out.

A cancel is written to the run's row (``cancel_requested_at``) and signalled: in the
embedded shape directly (and to the other API processes of a group, ``Siblings``), in the
scaled shape on a Redis channel every process listens to, so it reaches a worker on another
machine at once. A process that missed the signal sees the row when it next renews its
leases (every second without Redis).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from libflow.errors import LibflowError
from libflow.ids import utcnow
from libflow.models import WorkflowRun
from libflow.workflows.run_event_files import FileEventBus
from libflow.workflows.run_events import EventBus, MemoryEventBus, RedisEventBus
from libflow.workflows.siblings import Siblings, siblings_dir

logger = logging.getLogger("libflow.running")

CANCEL_CHANNEL = "libflow:run-cancels"
CANCEL_TOPIC = "cancel"
RUN_EVENTS_DIR = "run-events"
# A cancel that arrives before its run is registered here (claimed a moment later) still
# stops it if the run registers within this long.
CANCEL_REMEMBERED_SECONDS = 60.0
# Without Redis, how often the rows are read for cancels other processes wrote.
CANCEL_POLL_SECONDS = 1.0
REDIS_RETRY_SECONDS = 1.0


class RunningRuns:
    """This process's running runs (by run id), their leases and cancels."""

    def __init__(
        self, lease_seconds: float, redis: Redis | None, siblings: Siblings | None = None
    ) -> None:
        self.lease_seconds = lease_seconds
        self._redis = redis
        self._siblings = siblings
        if siblings is not None:
            siblings.on(CANCEL_TOPIC, self.cancel_here)
        self._tasks: dict[str, asyncio.Task[object]] = {}
        self._cancelled: dict[str, float] = {}  # run id -> when a cancel was asked for

    def lease_until(self) -> timedelta:
        """How far ahead a lease written now reaches."""
        return timedelta(seconds=self.lease_seconds)

    def add(self, run_id: str, task: asyncio.Task[object]) -> None:
        """Register a run; a cancel that came first stops it now."""
        self._tasks[run_id] = task
        if run_id in self._cancelled:
            task.cancel()

    def discard(self, run_id: str) -> None:
        """The run ended (its record is written)."""
        self._tasks.pop(run_id, None)

    def cancel_requested(self, run_id: str) -> bool:
        """Whether the run was stopped by a cancel (rather than a shutdown or disconnect)."""
        return run_id in self._cancelled

    def cancel_here(self, run_id: str) -> None:
        """Stop the run if it runs in this process; remember the cancel for a while."""
        now = time.monotonic()
        self._cancelled[run_id] = now
        if len(self._cancelled) > 1000:
            for old, when in list(self._cancelled.items()):
                if now - when > CANCEL_REMEMBERED_SECONDS:
                    del self._cancelled[old]
        task = self._tasks.get(run_id)
        if task is not None and not task.done():
            task.cancel()

    async def signal_cancel(self, run_id: str) -> None:
        """Stop the run wherever it runs (its row already says so)."""
        self.cancel_here(run_id)
        if self._siblings is not None:
            self._siblings.send(CANCEL_TOPIC, run_id)
        if self._redis is not None:
            try:
                await self._redis.publish(CANCEL_CHANNEL, run_id)
            except (RedisError, OSError) as err:
                # The process running it reads the row when it next renews its leases.
                logger.warning(
                    "run %s: cancel not signalled (%r); the lease renewal sees it", run_id, err
                )

    async def renew_leases(self) -> None:
        """Renew the leases of this process's runs; stop those whose rows ask to be cancelled."""
        if not self._tasks:
            return
        ids = list(self._tasks)
        now = utcnow()
        await WorkflowRun.filter(id__in=ids, status="running").update(
            lease_until=now + self.lease_until()
        )
        await self.check_cancels(ids)

    async def check_cancels(self, ids: list[str] | None = None) -> None:
        """Stop the runs here whose rows carry a cancel."""
        ids = ids if ids is not None else list(self._tasks)
        if not ids:
            return
        asked = await WorkflowRun.filter(id__in=ids, cancel_requested_at__isnull=False).values_list(
            "id", flat=True
        )
        for run_id in asked:
            self.cancel_here(str(run_id))

    async def renew_forever(self) -> None:
        renew_every = self.lease_seconds / 3
        last_renewal = time.monotonic()
        while True:
            await asyncio.sleep(CANCEL_POLL_SECONDS if self._redis is None else renew_every)
            try:
                if time.monotonic() - last_renewal >= renew_every:
                    last_renewal = time.monotonic()
                    await self.renew_leases()
                else:
                    await self.check_cancels()
            except Exception as err:  # the database away: the next round tries again
                logger.warning("run leases not renewed: %r", err)

    async def listen_forever(self, redis: Redis) -> None:
        unheard = False  # said once an outage, not every retry (once a second)
        while True:
            try:
                async with redis.pubsub(ignore_subscribe_messages=True) as pubsub:
                    await pubsub.subscribe(CANCEL_CHANNEL)
                    if unheard:
                        logger.info("cancel signals heard again: Redis is back")
                        unheard = False
                    async for message in pubsub.listen():
                        data = message.get("data")
                        if isinstance(data, bytes | str):
                            self.cancel_here(data.decode() if isinstance(data, bytes) else data)
            except (RedisError, OSError) as err:
                if not unheard:
                    logger.warning("cancel signals unheard until Redis is back: %r", err)
                    unheard = True
                # Missed signals are in the rows: look once we are back.
                await asyncio.sleep(REDIS_RETRY_SECONDS)
                with contextlib.suppress(Exception):
                    await self.check_cancels()


class RunControl:
    """What runs of this process share: the event bus, the running runs, and the runs
    started in tasks of their own (runsync with events), stopped at shutdown."""

    def __init__(self, events: EventBus, running: RunningRuns) -> None:
        self.events = events
        self.running = running
        self._started: set[asyncio.Task[Any]] = set()

    def start(self, run: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run ``run`` in a task of its own, kept until it ends."""
        task = asyncio.create_task(run)
        self._started.add(task)
        task.add_done_callback(self._ended)
        return task

    def _ended(self, task: asyncio.Task[Any]) -> None:
        self._started.discard(task)
        error = None if task.cancelled() else task.exception()
        # A LibflowError (a refused run) is its caller's answer, not a fault.
        if error is not None and not isinstance(error, LibflowError):
            logger.error("a run started in its own task failed", exc_info=error)

    async def stop(self) -> None:
        """Stop the runs started here (each records itself as cancelled)."""
        for task in self._started:
            task.cancel()
        await asyncio.gather(*self._started, return_exceptions=True)


@asynccontextmanager
async def open_run_control(
    lease_seconds: float, redis: Redis | None, group_data_dir: Path | None = None
) -> AsyncIterator[RunControl]:
    """The bus and the registry, with their tasks.

    The bus: Redis streams with Redis; without it, this process's memory, or for a group
    of API processes (``group_data_dir``, their data dir) files there, siblings woken.
    """
    siblings: Siblings | None = None
    events: EventBus
    if redis is not None:
        events = RedisEventBus(redis)
    elif group_data_dir is not None:
        siblings = _open_siblings(group_data_dir)
        events = FileEventBus(group_data_dir / RUN_EVENTS_DIR, siblings)
    else:
        events = MemoryEventBus()
    running = RunningRuns(lease_seconds, redis, siblings)
    tasks = [asyncio.create_task(running.renew_forever())]
    if redis is not None:
        tasks.append(asyncio.create_task(running.listen_forever(redis)))
    if isinstance(events, FileEventBus):
        tasks.append(asyncio.create_task(events.prune_forever()))
    control = RunControl(events, running)
    try:
        yield control
    finally:
        await control.stop()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await events.close()
        if siblings is not None:
            siblings.close()


def _open_siblings(data_dir: Path) -> Siblings | None:
    """This process's socket among the group's; None (and polling alone) if it cannot be."""
    siblings = Siblings(siblings_dir(data_dir))
    try:
        siblings.open()
    except OSError as err:
        logger.warning("API processes not woken by each other (they poll): %r", err)
        siblings.close()
        return None
    return siblings
