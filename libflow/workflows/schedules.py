"""Schedules of workflows: five-field cron in a time zone; each tick queues one run.

A schedule's ``next_run_at`` is its next tick, in UTC. Firing a tick moves it on with a
conditional update (only while it still holds the tick that was read) in the transaction
that inserts the run, so whichever process updates the row first queues the run and any
other one updates nothing. The tick after is counted from now, not from the tick that
fired: ticks missed while nothing ran are not caught up (one run after an outage, at most).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from cronsim import CronSim, CronSimError
from tortoise.backends.base.client import BaseDBAsyncClient

from libflow.db.fast_reads import FastReads
from libflow.db.group_commit import commit_together
from libflow.engine import InvalidInputs, UnknownEvent, check_run
from libflow.errors import NotFound, ValidationFailed
from libflow.ids import possible_id, utcnow
from libflow.jobs import JobQueue
from libflow.models import Schedule, WorkflowRun
from libflow.workflows import run_queue
from libflow.workflows.running import RunControl
from libflow.workflows.runs import record_refused_run
from libflow.workflows.versions import RunTarget, find_run_target, get_workflow

logger = logging.getLogger("libflow.schedules")

TRIGGER = "schedule"
CRON_FIELDS = 5
# Due ticks one call fires; the rest wait for the next call, a second later.
MAX_FIRED_AT_ONCE = 100
# Ticks of cronsim tried for one later than a moment: the ones of an hour clocks went
# back over (at most an hour's worth: 60 for a cron of every minute), and then one.
_TICKS_TRIED = 120
# Moves a schedule's tick on in the given transaction; True if this call did.
Claim = Callable[[BaseDBAsyncClient], Awaitable[bool]]


def next_tick(cron: str, timezone: str, after: datetime) -> datetime | None:
    """The first tick of ``cron`` in ``timezone`` strictly after ``after``, in UTC.

    None when there is none within cronsim's horizon (50 years).
    """
    local = after.astimezone(ZoneInfo(timezone))
    # In the hour clocks go back, cronsim (working on the wall clock) can give a tick of
    # the hour's first pass, already gone: "30 1 * * *" asked at 01:10 of the second pass
    # gives 01:30 of the first. Fired as due, it would be due again at once, every call
    # until the hour ends. The next tick is the first that is really later.
    for tick in itertools.islice(CronSim(cron, local), _TICKS_TRIED):
        moment = tick.astimezone(UTC)
        if moment > after:
            return moment
    return None


def first_tick(cron: str, timezone: str, now: datetime) -> datetime:
    """The next tick of a new schedule; VALIDATION_ERROR naming each bad field."""
    problems = _cron_problems(cron) + _timezone_problems(timezone)
    if not problems:
        tick = next_tick(cron, timezone, now)
        if tick is not None:
            return tick
        problems.append({"field": "cron", "problem": "has no tick in the next 50 years"})
    fields = ", ".join(problem["field"] for problem in problems)
    raise ValidationFailed(f"invalid schedule: {fields}", details=problems)


def _cron_problems(cron: str) -> list[dict[str, str]]:
    # cronsim also reads six fields (seconds first): the contract is five.
    if len(cron.split()) != CRON_FIELDS:
        return [{"field": "cron", "problem": "must have exactly five fields"}]
    try:
        CronSim(cron, datetime(2000, 1, 1, tzinfo=UTC))
    except CronSimError as err:
        return [{"field": "cron", "problem": str(err)}]
    return []


def _timezone_problems(timezone: str) -> list[dict[str, str]]:
    try:
        ZoneInfo(timezone)
    except (ValueError, KeyError, OSError):  # a malformed name, an unknown one, unreadable
        return [{"field": "timezone", "problem": "must be an IANA time zone name"}]
    return []


async def create_schedule(
    project_id: str,
    workflow_id: str,
    *,
    cron: str,
    timezone: str,
    event: str,
    inputs: dict[str, Any],
    reads: FastReads,
) -> Schedule:
    """A schedule of a workflow; its event and inputs are checked against the latest version."""
    tick = first_tick(cron, timezone, utcnow())
    target = await find_run_target(project_id, workflow_id, None, reads)
    check_run(target.definition, event, inputs)
    # The inputs are kept as given: defaults are those of the version a tick runs.
    return await Schedule.create(
        project_id=project_id,
        workflow_id=target.workflow_id,
        cron=cron,
        timezone=timezone,
        event=event,
        inputs=inputs,
        next_run_at=tick,
    )


async def list_schedules(project_id: str, workflow_id: str) -> list[Schedule]:
    """The workflow's schedules, oldest first."""
    workflow = await get_workflow(project_id, workflow_id)
    return await Schedule.filter(workflow_id=workflow.id).order_by("created_at", "id")


async def get_schedule(project_id: str, workflow_id: str, schedule_id: str) -> Schedule:
    """One schedule of one of the project's workflows."""
    schedule = None
    if possible_id(schedule_id) and possible_id(workflow_id):
        schedule = await Schedule.get_or_none(
            id=schedule_id, project_id=project_id, workflow_id=workflow_id
        )
    if schedule is None:
        raise NotFound(f"schedule {schedule_id!r} not found")
    return schedule


async def delete_schedule(project_id: str, workflow_id: str, schedule_id: str) -> None:
    """Delete a schedule: once this returns, no tick of it fires (a claim finds no row)."""
    schedule = await get_schedule(project_id, workflow_id, schedule_id)
    await schedule.delete()


async def fire_due_schedules(
    control: RunControl, jobs: JobQueue, reads: FastReads, now: datetime | None = None
) -> int:
    """Queue one run for each due tick (the fire_schedules job); how many were queued.

    ``now`` is the clock's reading (tests move it).
    """
    moment = now or utcnow()
    due = (
        await Schedule.filter(next_run_at__lte=moment)
        .order_by("next_run_at")
        .limit(MAX_FIRED_AT_ONCE)
    )
    # Together: their commits share transactions (group commit) rather than queue one by one.
    fired = await asyncio.gather(
        *(_fire(schedule, moment, control, reads) for schedule in due), return_exceptions=True
    )
    queued = sum(1 for result in fired if result is True)
    if queued:
        await run_queue.wake_run_job(jobs)
    for result in fired:
        if isinstance(result, BaseException):
            raise result
    return queued


class _TickTaken(Exception):
    """Another process fired this tick first: roll back what was written with the claim."""


async def _fire(schedule: Schedule, now: datetime, control: RunControl, reads: FastReads) -> bool:
    """Claim the schedule's due tick and queue its run, in one transaction; False if not."""
    try:
        target = await find_run_target(schedule.project_id, schedule.workflow_id, None, reads)
    except NotFound:
        return False  # its workflow is gone, and the schedule with it (a cascade)
    claim = _claim_of(schedule, now)
    try:
        run = run_queue.queued_record(
            target, event=schedule.event, inputs=schedule.inputs, trigger=TRIGGER
        )
    except (UnknownEvent, InvalidInputs) as refused:
        # The workflow changed since the schedule was made: the run record shows why.
        await _record_refused(target, schedule, refused, claim)
        return False
    # A process that then loses the claim leaves this event on the bus, for a run id that
    # no record has; it expires with the bus's other events.
    await run_queue.announce_queued(control, run)

    async def queue(db: BaseDBAsyncClient) -> bool:
        if not await claim(db):
            return False
        await run.save(using_db=db, force_create=True)
        return True

    queued: bool = await commit_together(queue)
    if queued:
        logger.info("schedule %s: queued run %s", schedule.id, run.id)
    return queued


def _claim_of(schedule: Schedule, now: datetime) -> Claim:
    """The conditional write that moves the schedule's tick on; True if this call did."""
    following = next_tick(schedule.cron, schedule.timezone, now)

    async def claim(db: BaseDBAsyncClient) -> bool:
        still_due = Schedule.filter(id=schedule.id, next_run_at=schedule.next_run_at)
        if following is None:
            # Nothing left to fire (a tick on a date cron finds within 50 years only).
            logger.warning("schedule %s has no tick left: it ends", schedule.id)
            return await still_due.using_db(db).delete() == 1
        return await still_due.using_db(db).update(next_run_at=following) == 1

    return claim


async def _record_refused(
    target: RunTarget,
    schedule: Schedule,
    refused: UnknownEvent | InvalidInputs,
    claim: Claim,
) -> None:
    """Record the tick's refused run as failed, in the transaction of its claim."""

    async def claim_with(db: BaseDBAsyncClient, _record: WorkflowRun) -> None:
        if not await claim(db):
            raise _TickTaken

    try:
        await record_refused_run(
            target,
            event=schedule.event,
            inputs=schedule.inputs,
            trigger=TRIGGER,
            error=refused,
            record_with=claim_with,
        )
    except _TickTaken:
        return
