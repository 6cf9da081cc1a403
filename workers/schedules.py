"""The schedules job: queue the runs of every schedule whose tick has come."""

from __future__ import annotations

from typing import Any

from libflow.resources import job_resources
from libflow.workflows import schedules


async def fire_schedules(ctx: dict[str, Any]) -> None:
    """Claim each due tick once (whichever process looks first) and queue its run."""
    resources = job_resources(ctx)
    await schedules.fire_due_schedules(resources.runs, resources.jobs, resources.reads)
