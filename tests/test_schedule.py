"""The one list of periodic jobs, read by arq cron on workers and by in-process timers."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import Any

import pytest
from arq.cron import next_cron

from libflow.jobs import Job, check_job_functions
from libflow.schedule import PERIODIC_JOBS, Periodic
from workers.functions import JOB_FUNCTIONS
from workers.worker import cron_jobs, functions


def test_every_job_name_has_its_function() -> None:
    check_job_functions(JOB_FUNCTIONS)
    assert {f.name for f in functions()} == {job.value for job in Job}


def test_a_missing_or_misnamed_job_function_refuses_to_start() -> None:
    missing = {job: fn for job, fn in JOB_FUNCTIONS.items() if job is not Job.PROCESS_FILE}
    with pytest.raises(RuntimeError, match="process_file"):
        check_job_functions(missing)
    swapped = {**JOB_FUNCTIONS, Job.PROCESS_FILE: JOB_FUNCTIONS[Job.SWEEP_DELIVERIES]}
    with pytest.raises(RuntimeError, match="misnamed"):
        check_job_functions(swapped)


def test_workers_cron_the_same_list_the_embedded_server_times() -> None:
    crons = {job.name: job for job in cron_jobs()}
    assert set(crons) == {f"cron:{periodic.job.value}" for periodic in PERIODIC_JOBS}
    for periodic in PERIODIC_JOBS:
        cron = crons[f"cron:{periodic.job.value}"]
        assert cron.coroutine is JOB_FUNCTIONS[periodic.job]
        assert cron.run_at_startup == periodic.at_start


@pytest.mark.parametrize("periodic", PERIODIC_JOBS, ids=lambda p: p.job.value)
def test_each_cron_fires_at_the_interval_the_timers_use(periodic: Periodic) -> None:
    fields: dict[str, Any] = periodic.cron_fields()
    moment = datetime(2026, 1, 1, tzinfo=UTC)
    fired = []
    for _ in range(4):
        moment = next_cron(moment, microsecond=0, **fields)
        fired.append(moment)
    gaps = {(later - earlier).total_seconds() for earlier, later in itertools.pairwise(fired)}
    assert gaps == {periodic.seconds}


def test_an_interval_cron_cannot_express_is_refused() -> None:
    with pytest.raises(ValueError, match="does not divide"):
        Periodic(Job.SWEEP_DELIVERIES, seconds=7).cron_fields()
