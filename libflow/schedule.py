"""The one list of periodic jobs: arq cron runs it on workers, timers run it in-process.

Both shapes read ``PERIODIC_JOBS``, so a job cannot run twice an hour on workers and only
at start-up in the embedded server. An interval divides the minute or the hour, so arq's
cron fields can express it exactly (``cron_fields``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from libflow.jobs import Job, JobQueue
from libflow.models import LibraryFile, ProcessingStatus
from libflow.webhooks.inbox import requeue_pending_deliveries, settle_interrupted_deliveries


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


async def resume_in_process(jobs: JobQueue) -> None:
    """At an embedded server's start: pick up what its last stop interrupted.

    Nothing else runs jobs in that shape, so every file still pending or processing lost
    its job, and every claimed delivery was cut off by the stop.
    """
    unfinished = LibraryFile.filter(
        finalized_at__isnull=False,
        status__in=[ProcessingStatus.PENDING, ProcessingStatus.PROCESSING],
    )
    for file_id in await unfinished.values_list("id", flat=True):
        await jobs.enqueue(Job.PROCESS_FILE, file_id)
    await settle_interrupted_deliveries(stale_after=timedelta(0))
    await requeue_pending_deliveries(jobs, older_than=timedelta(0))
