"""Every job function, by the ``Job`` name libflow queues it under."""

from __future__ import annotations

from libflow.jobs import Job, JobFunctions
from workers.deliveries import deliver_webhooks, sweep_deliveries
from workers.library import (
    process_file,
    recover_stuck_files,
    reembed_stale_chunks,
    remove_abandoned_uploads,
)
from workers.runs import run_workflows, sweep_runs
from workers.schedules import fire_schedules

JOB_FUNCTIONS: JobFunctions = {
    Job.PROCESS_FILE: process_file,
    Job.RECOVER_STUCK_FILES: recover_stuck_files,
    Job.REMOVE_ABANDONED_UPLOADS: remove_abandoned_uploads,
    Job.REEMBED_STALE_CHUNKS: reembed_stale_chunks,
    Job.DELIVER_WEBHOOKS: deliver_webhooks,
    Job.SWEEP_DELIVERIES: sweep_deliveries,
    Job.RUN_WORKFLOWS: run_workflows,
    Job.SWEEP_RUNS: sweep_runs,
    Job.FIRE_SCHEDULES: fire_schedules,
}
