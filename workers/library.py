"""Jobs of the file library: process a finalized file, recover stuck ones, sweep, re-embed."""

from __future__ import annotations

import time
from typing import Any

from libflow.jobs import InProcessJobQueue, Job, chooses_lane
from libflow.library import files, reembed
from libflow.library.processing import pipeline
from libflow.resources import job_resources


@chooses_lane(pipeline.lane_of_file)
async def process_file(ctx: dict[str, Any], file_id: str) -> None:
    """Download, extract, chunk, embed, index and thumbnail one finalized file."""
    resources = job_resources(ctx)
    await pipeline.process_file(
        file_id,
        storage=resources.storage,
        embedder=resources.embedder,
        job_try=int(ctx.get("job_try", 1)),
        # In-process jobs of a server alone (not one of a group): no other process runs any.
        sole_runner=isinstance(resources.jobs, InProcessJobQueue) and resources.jobs.sole_runner,
    )


async def recover_stuck_files(ctx: dict[str, Any], stuck_after: float | None = None) -> int:
    """Re-queue files whose processing was interrupted (a worker died); fail them after N tries."""
    return await pipeline.recover_stuck_files(job_resources(ctx).jobs, stuck_after)


async def remove_abandoned_uploads(ctx: dict[str, Any]) -> int:
    """Delete records whose upload was never finalized within 24 hours, and their bytes."""
    return await files.remove_abandoned_uploads(job_resources(ctx).storage)


async def reembed_stale_chunks(ctx: dict[str, Any]) -> int:
    """Re-embed a batch of files another embedder indexed; queue the next batch if one is left."""
    resources = job_resources(ctx)
    done = await reembed.reembed_stale_chunks(resources.embedder)
    if done.more:
        # More may be stale: the next batch now, not at the next tick half an hour away.
        await resources.jobs.enqueue(
            Job.REEMBED_STALE_CHUNKS, job_id=f"reembed_stale_chunks:{time.time_ns()}"
        )
    return done.files
