"""Jobs of the run queue: drain it (run what was queued), and sweep it."""

from __future__ import annotations

from typing import Any

from libflow.resources import job_resources
from libflow.workflows import run_queue


async def run_workflows(ctx: dict[str, Any]) -> None:
    """Claim and run queued runs until the queue is empty."""
    resources = job_resources(ctx)
    await run_queue.drain_run_queue(
        control=resources.runs,
        jobs=resources.jobs,
        reads=resources.reads,
        services_for=resources.node_services,
        job_id=str(ctx.get("job_id", "")),
        job_try=int(ctx.get("job_try", 1)),
    )


async def sweep_runs(ctx: dict[str, Any]) -> None:
    """Fail the runs whose process died; wake a drain for runs a lost wake-up left queued."""
    resources = job_resources(ctx)
    await run_queue.sweep_runs(resources.runs, resources.jobs)
