"""Watching a run: its events after a given id, live until ``run.finished``.

A watcher that comes late, or back with the id of the last event it saw, gets every event
after it, then the live ones. A run whose events are gone (kept EVENTS_KEPT_SECONDS; a short
runsync run publishes none) still ends its watchers' streams: once the record says it
ended, they get ``run.finished``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from libflow.models import WorkflowRun
from libflow.workflows.run_events import RUN_FINISHED, EventBus, RunEvent

# How long one read waits for events: also how often a watcher is told nothing happened.
READ_WAIT_SECONDS = 5.0
# How long a watcher waits for events before it asks the database whether the run ended.
CHECK_RECORD_AFTER = 5.0
FINISHED_STATUSES = frozenset({"succeeded", "failed", "timed_out", "cancelled"})


async def watch_run(run_id: str, after: int, events: EventBus) -> AsyncIterator[RunEvent | None]:
    """The run's events after ``after``, ending with ``run.finished``; None when idle.

    None comes after each READ_WAIT_SECONDS without events (a stream sends a keep-alive).
    """
    last = after
    quiet_since = time.monotonic()
    first = True  # the first read does not wait: a run that ended long ago ends at once
    while True:
        found = await events.read(run_id, last, 0 if first else READ_WAIT_SECONDS)
        for event in found:
            yield event
            last = event.id
            if event.name == RUN_FINISHED:
                return
        if found:
            quiet_since = time.monotonic()
            first = False
            continue
        if first or time.monotonic() - quiet_since >= CHECK_RECORD_AFTER:
            quiet_since = time.monotonic()
            found_status = await WorkflowRun.filter(id=run_id).values_list("status", flat=True)
            status = [str(value) for value in found_status]
            if not status or status[0] in FINISHED_STATUSES:
                # Its end may have been published as we asked: read once more, then end.
                for event in await events.read(run_id, last, 0):
                    yield event
                    last = event.id
                    if event.name == RUN_FINISHED:
                        return
                yield RunEvent(last + 1, RUN_FINISHED, "{}")
                return
        if not first:
            yield None
        first = False
