"""Runs started asynchronously: queued (committed before the 202), claimed once, run, swept.

queued (the runs table is the queue) -> running (claimed by one process, under a lease it
renews) -> succeeded | failed | timed_out | cancelled. Redis only wakes workers up
(``wake_run_job``); a sweep wakes them for what a lost wake-up left queued, and fails
INTERRUPTED the runs whose process stopped renewing its lease (never run twice: at most
once from the claim on). The embedded server is its own worker.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from tortoise.backends.base.client import BaseDBAsyncClient

from libflow.db.fast_reads import FastReads
from libflow.db.group_commit import commit_together
from libflow.db.moments import query_moment
from libflow.db.outages import dependency_down
from libflow.engine import InvalidInputs, NodeServices, UnknownEvent, check_run
from libflow.errors import NotFound
from libflow.ids import utcnow
from libflow.jobs import Drain, Job, JobQueue, drain, wake_job
from libflow.models import WorkflowRun
from libflow.workflows.run_events import RUN_FINISHED, RUN_QUEUED, RunEvent
from libflow.workflows.running import RunControl
from libflow.workflows.runs import INTERRUPTED, new_record, record_refused_run, run_version
from libflow.workflows.versions import RunTarget, find_run_target

logger = logging.getLogger("libflow.run_queue")

# Runs one drain job keeps going at once (most wait on I/O).
RUNS_AT_ONCE = 64
# A drain stops claiming after this (arq bounds a job's time), and queues its successor.
DRAIN_SECONDS = 60
# Runs queued this long are woken again by the sweep (a wake-up was lost).
REQUEUE_AFTER = timedelta(seconds=2)
ServicesFor = Callable[[str], NodeServices]


def queued_record(
    target: RunTarget, *, event: str, inputs: dict[str, Any] | None, trigger: str
) -> WorkflowRun:
    """A queued run of ``target`` (not saved); UnknownEvent or InvalidInputs first."""
    checked = check_run(target.definition, event, inputs)
    return new_record(target, None, event=event, trigger=trigger, status="queued", inputs=checked)


async def announce_queued(control: RunControl, run: WorkflowRun) -> None:
    """Publish ``run.queued``, the run's first event, before its record is committed.

    Written through to the bus before the commit: a worker that claims the run at once
    must find it there (its own events follow it).
    """
    control.events.publish(run.id, [RunEvent(1, RUN_QUEUED, json.dumps({"runId": run.id}))])
    await control.events.flush()


async def queue_run(
    target: RunTarget,
    *,
    event: str,
    inputs: dict[str, Any] | None,
    trigger: str,
    control: RunControl,
    jobs: JobQueue,
) -> WorkflowRun:
    """Queue a run; it is committed when this returns, and a worker is woken.

    A refused run (UnknownEvent, InvalidInputs) is recorded as failed and the error raised,
    as runsync does.
    """
    try:
        run = queued_record(target, event=event, inputs=inputs, trigger=trigger)
    except (UnknownEvent, InvalidInputs) as refused:
        await record_refused_run(target, event=event, inputs=inputs, trigger=trigger, error=refused)
        raise
    await announce_queued(control, run)
    await commit_together(lambda db: run.save(using_db=db, force_create=True))
    await wake_run_job(jobs)
    return run


async def wake_run_job(jobs: JobQueue) -> bool:
    """Queue a job that drains the run queue; False when the job queue is down (the sweep will)."""
    return await wake_job(jobs, Job.RUN_WORKFLOWS, "queued runs wait")


# PostgreSQL: workers skip the rows another worker is claiming. SQLite has one writer.
_CLAIM_SQL = {
    "postgres": (
        'UPDATE "workflow_runs" SET "status" = \'running\', "lease_until" = $1'
        ' WHERE "id" IN (SELECT "id" FROM "workflow_runs" WHERE "status" = \'queued\''
        ' ORDER BY "started_at" LIMIT $2 FOR UPDATE SKIP LOCKED) RETURNING "id"'
    ),
    "sqlite": (
        'UPDATE "workflow_runs" SET "status" = \'running\', "lease_until" = ?'
        ' WHERE "id" IN (SELECT "id" FROM "workflow_runs" WHERE "status" = \'queued\''
        ' ORDER BY "started_at" LIMIT ?) RETURNING "id"'
    ),
}


async def claim(limit: int, lease: timedelta) -> list[WorkflowRun]:
    """Up to ``limit`` queued runs, now running under this process's lease, oldest first."""

    async def claim(db: BaseDBAsyncClient) -> list[str]:
        sql = _CLAIM_SQL[db.capabilities.dialect]
        rows = await db.execute_query_dict(sql, [query_moment(db, utcnow() + lease), limit])
        return [row["id"] for row in rows]

    claimed = await commit_together(claim)
    if not claimed:
        return []
    return list(await WorkflowRun.filter(id__in=claimed).order_by("started_at"))


async def drain_run_queue(
    *,
    control: RunControl,
    jobs: JobQueue,
    reads: FastReads,
    services_for: ServicesFor,
    job_id: str,
    job_try: int,
) -> None:
    """Claim and run queued runs until the queue is empty (the run_workflows job)."""
    lease = control.running.lease_until()

    async def run(claimed: WorkflowRun) -> None:
        await _run_claimed(control, reads, services_for, claimed)

    queue = Drain(
        claim=lambda limit: claim(limit, lease),
        run=run,
        wake=lambda: wake_run_job(jobs),
        transient=dependency_down,
        at_once=RUNS_AT_ONCE,
        seconds=DRAIN_SECONDS,
        what="a queued run",
    )
    await drain(queue, job_id=job_id, job_try=job_try)


async def _run_claimed(
    control: RunControl, reads: FastReads, services_for: ServicesFor, run: WorkflowRun
) -> None:
    """Run one claimed run to its end; it is never given back to the queue."""
    if run.cancel_requested_at is not None:
        control.running.cancel_here(run.id)  # cancelled while it was being claimed
    try:
        target = await find_run_target(run.project_id, run.workflow_id, str(run.version), reads)
    except NotFound as gone:
        await _end_unrun(control, run, gone.code, gone.message)
        return
    try:
        await run_version(
            target,
            event=run.event,
            inputs=run.inputs,
            trigger=run.trigger,
            services=services_for(run.project_id),
            control=control,
            claimed=run,
        )
    except (UnknownEvent, InvalidInputs) as refused:  # checked when queued: cannot happen today
        await _end_unrun(control, run, refused.code, refused.message)


async def _end_unrun(control: RunControl, run: WorkflowRun, code: str, message: str) -> None:
    """Fail a claimed run that could not begin."""
    await WorkflowRun.filter(id=run.id, status="running").update(
        status="failed",
        status_code=500,
        error={"code": code, "node": None, "message": message},
        finished_at=utcnow(),
    )
    await publish_finished(control, run.id)


async def publish_finished(control: RunControl, run_id: str) -> None:
    """Tell watchers a run ended that its own process did not end (cancelled, swept)."""
    last = await control.events.last_id(run_id)
    control.events.publish(run_id, [RunEvent(last + 1, RUN_FINISHED, "{}")])


async def sweep_runs(control: RunControl, jobs: JobQueue) -> None:
    """Fail the runs whose process stopped renewing their lease; wake a drain if needed."""
    now = utcnow()
    stale = await WorkflowRun.filter(status="running", lease_until__lt=now).values_list(
        "id", flat=True
    )
    for run_id in stale:
        failed = await WorkflowRun.filter(id=run_id, status="running", lease_until__lt=now).update(
            status="failed", status_code=500, error=INTERRUPTED.to_json(), finished_at=now
        )
        if failed:
            logger.error("run %s: its process stopped mid-run", run_id)
            await publish_finished(control, str(run_id))
    waiting = WorkflowRun.filter(status="queued", started_at__lte=now - REQUEUE_AFTER)
    if await waiting.exists():
        await wake_run_job(jobs)
