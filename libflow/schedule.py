"""The one list of periodic jobs: arq cron runs it on workers, timers run it in-process.

Both shapes read ``PERIODIC_JOBS``, so a job cannot run twice an hour on workers and only
at start-up in the embedded server. An interval divides the minute or the hour, so arq's
cron fields can express it exactly (``cron_fields``). In a group of API processes
(``--workers``) the timers run in one of them at a time: the one holding the data dir's
``PERIODIC_LOCK``, which the kernel lets go of when that process dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from libflow.ids import utcnow
from libflow.jobs import InProcessJobQueue, Job, JobQueue
from libflow.models import LibraryFile, ProcessingStatus
from libflow.supervisor import group_started_at
from libflow.webhooks.inbox import requeue_pending_deliveries, settle_interrupted_deliveries
from settings import Settings

logger = logging.getLogger("libflow.schedule")

PERIODIC_LOCK = "periodic-jobs.lock"
# How often a process of a group that does not run the timers tries to take them over.
TAKE_OVER_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class Periodic:
    """A job queued every ``seconds`` (and at start-up when ``at_start``)."""

    job: Job
    seconds: int
    at_start: bool = False
    # Minutes past the hour of the first run, for jobs of an interval of a minute or more:
    # spreads hourly jobs so they do not all start at :00.
    offset_minutes: int = 0

    def cron_fields(self) -> dict[str, int | set[int]]:
        """arq's ``cron`` keyword arguments for this interval."""
        if self.seconds < 60 and 60 % self.seconds == 0:
            return {"second": set(range(0, 60, self.seconds))}
        minutes, rest = divmod(self.seconds, 60)
        if rest == 0 and 60 % minutes == 0:
            start = self.offset_minutes % minutes
            return {"minute": set(range(start, 60, minutes)), "second": 0}
        if self.seconds % 3600 == 0 and 24 % (self.seconds // 3600) == 0:
            hours = self.seconds // 3600
            return {"hour": set(range(0, 24, hours)), "minute": self.offset_minutes, "second": 0}
        raise ValueError(f"{self.job}: {self.seconds} s does not divide a minute, hour or day")


PERIODIC_JOBS: tuple[Periodic, ...] = (
    # Deliveries accepted while Redis was down wait in the inbox for this sweep.
    Periodic(Job.SWEEP_DELIVERIES, seconds=2, at_start=True),
    # Runs whose process stopped renewing their lease; runs a lost wake-up left queued.
    Periodic(Job.SWEEP_RUNS, seconds=2, at_start=True),
    # Schedules' ticks (each claimed once, whichever process looks first). Every two seconds,
    # as the sweeps, not every second: arq queues a cron job a second ahead, and a burst
    # worker (tests, one-off runs) only ends when its queue is empty for a moment.
    Periodic(Job.FIRE_SCHEDULES, seconds=2, at_start=True),
    # A file still processing long after its job's time limit lost its worker.
    Periodic(Job.RECOVER_STUCK_FILES, seconds=60),
    # At start-up too: a process starting with a new embedder re-embeds the index (and
    # the job queues itself again until nothing is stale).
    Periodic(Job.REEMBED_STALE_CHUNKS, seconds=1800, at_start=True, offset_minutes=7),
    Periodic(Job.REMOVE_ABANDONED_UPLOADS, seconds=3600, offset_minutes=17),
)


async def resume_in_process(jobs: JobQueue, started: datetime | None = None) -> None:
    """At an embedded server's start: pick up what its last stop interrupted.

    ``started``: when this server, or its group of API processes, started (default now).
    Only API processes run jobs in that shape, so every delivery claimed before then was
    cut off by the stop, and every file still pending or processing may have lost its job
    (a file another process of the group holds keeps it: its claim is fenced).
    """
    unfinished = LibraryFile.filter(
        finalized_at__isnull=False,
        status__in=[ProcessingStatus.PENDING, ProcessingStatus.PROCESSING],
    )
    for file_id in await unfinished.values_list("id", flat=True):
        await jobs.enqueue(Job.PROCESS_FILE, file_id)
    stale_after = max(utcnow() - (started or utcnow()), timedelta(0))
    await settle_interrupted_deliveries(stale_after=stale_after)
    await requeue_pending_deliveries(jobs, older_than=timedelta(0))


class PeriodicLock:
    """An exclusive ``flock`` on a file: held by one process of a group at a time."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._fd: int | None = None

    def try_take(self) -> bool:
        """Take the lock if no other holder has it; True if this one holds it now."""
        if self._fd is not None:
            return True
        self._path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        self._fd = fd
        return True

    def release(self) -> None:
        """Let another process take it."""
        if self._fd is not None:
            os.close(self._fd)  # closing the last descriptor releases the flock
            self._fd = None


@asynccontextmanager
async def periodic_jobs_in_process(
    queue: InProcessJobQueue, settings: Settings
) -> AsyncIterator[None]:
    """The embedded shape's stand-in for arq cron, for as long as the block runs.

    A server alone runs the timers; in a group, the one holding ``PERIODIC_LOCK`` does, so
    each job is queued once per tick whatever the number of processes, and another takes
    over within TAKE_OVER_SECONDS of its death.
    """
    await resume_in_process(queue, group_started_at())
    lock = PeriodicLock(settings.data_dir / PERIODIC_LOCK) if settings.workers > 1 else None
    # Start-up jobs are queued before the server answers when this process runs the timers
    # (a caller that waits for the queue to drain then finds them done).
    holds = lock is None or lock.try_take()
    if holds:
        if lock is not None:
            logger.info("the periodic jobs run in this process (pid %d)", os.getpid())
        await _queue_start_up_jobs(queue)
    task = asyncio.create_task(_run_periodic_jobs(queue, lock, holds=holds))
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        if lock is not None:
            lock.release()


async def _queue_start_up_jobs(queue: InProcessJobQueue) -> None:
    for periodic in PERIODIC_JOBS:
        if periodic.at_start:
            await queue.enqueue(periodic.job)


async def _run_periodic_jobs(
    queue: InProcessJobQueue, lock: PeriodicLock | None, *, holds: bool
) -> None:
    if not holds:
        assert lock is not None
        while True:  # flock has no waiting that the loop could await
            if lock.try_take():
                break
            await asyncio.sleep(TAKE_OVER_SECONDS)
        logger.info("the periodic jobs run in this process (pid %d)", os.getpid())
        await _queue_start_up_jobs(queue)
    timers = [asyncio.create_task(_every(queue, periodic)) for periodic in PERIODIC_JOBS]
    try:
        await asyncio.gather(*timers)
    finally:
        for timer in timers:
            timer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*timers, return_exceptions=True)


async def _every(queue: InProcessJobQueue, periodic: Periodic) -> None:
    while True:
        await asyncio.sleep(periodic.seconds)
        await queue.enqueue(periodic.job)
