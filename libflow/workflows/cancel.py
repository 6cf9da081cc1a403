"""Cancelling a run: a queued one ends at once, a running one is stopped where it runs."""

from __future__ import annotations

from libflow.engine.runner import CANCELLED_STATUS_CODE
from libflow.errors import RunFinished
from libflow.ids import utcnow
from libflow.models import WorkflowRun
from libflow.workflows.run_history import get_run
from libflow.workflows.run_queue import publish_finished
from libflow.workflows.running import RunControl
from libflow.workflows.runs import CANCELLED


async def cancel_run(project_id: str, run_id: str, control: RunControl) -> WorkflowRun:
    """Cancel a run; the record as it stands (a running one ends "cancelled" within a second).

    RunFinished for a run that has already ended.
    """
    run = await get_run(project_id, run_id)
    now = utcnow()
    if run.status == "queued":
        ended = await WorkflowRun.filter(id=run.id, status="queued").update(
            status="cancelled",
            status_code=CANCELLED_STATUS_CODE,
            error=CANCELLED.to_json(),
            finished_at=now,
        )
        if ended:
            await publish_finished(control, run.id)
            return await get_run(project_id, run_id)
    # Running (or claimed just now): the row tells a process that misses the signal.
    asked = await WorkflowRun.filter(id=run.id, status__in=("queued", "running")).update(
        cancel_requested_at=now
    )
    if not asked:
        raise RunFinished(f"run {run_id!r} has already ended")
    await control.running.signal_cancel(run.id)
    return await get_run(project_id, run_id)
