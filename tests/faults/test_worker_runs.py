"""Async runs on a real worker process: a cancel reaches it; its death fails the run once."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.faults.conftest import ServerFactory
from tests.faults.processes import Process, Server, Worker, http_json, wait_for
from tests.private_redis import PrivateRedis
from tests.workflow_helpers import chain, output

LEASE_SECONDS = "2"


@pytest.fixture
def server(start_server: ServerFactory, postgres_url: str, private_redis: PrivateRedis) -> Server:
    return start_server(
        LIBFLOW_DATABASE_URL=postgres_url,
        LIBFLOW_REDIS_URL=private_redis.url,
        LIBFLOW_RUN_LEASE_SECONDS=LEASE_SECONDS,
    )


def long_run() -> dict[str, Any]:
    """Sets ``before``, waits 30 s, sets ``after``."""
    return chain(
        output("before", 1),
        {"id": "wait", "type": "delay", "seconds": 30},
        output("after", 2),
        timeout=60,
    )


def start_long_run(server: Server) -> tuple[str, str, str]:
    """A project, its key, and the id of a queued long run."""
    project_id, key = server.create_project()
    api = f"{server.url}/api/publicv1/projects/{project_id}"
    status, workflow = http_json(
        "POST", f"{api}/workflows", {"name": "long", "definition": long_run()}, Authorization=key
    )
    assert status == 201, workflow
    status, run = http_json(
        "POST", f"{api}/workflows/{workflow['workflowId']}/runs", {}, Authorization=key
    )
    assert status == 202, run
    return api, key, run["runId"]


def run_record(api: str, key: str, run_id: str) -> dict[str, Any]:
    status, run = http_json("GET", f"{api}/runs/{run_id}", Authorization=key)
    assert status == 200, run
    return dict(run)


def wait_for_status(
    api: str, key: str, run_id: str, statuses: set[str], timeout: float
) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        run = run_record(api, key, run_id)
        return run if run["status"] in statuses else None

    return wait_for(reached, timeout, f"run {run_id} never reached {statuses}")


def test_a_cancel_stops_a_run_on_another_process_within_a_second(
    server: Server, tmp_path: Path
) -> None:
    api, key, run_id = start_long_run(server)
    worker = Worker(server, tmp_path / "worker.log")
    worker.start()
    try:
        cancel_and_check(api, key, run_id)
        assert worker.alive, worker.output()
    finally:
        worker.stop()


def cancel_and_check(api: str, key: str, run_id: str) -> None:
    wait_for_status(api, key, run_id, {"running"}, 60)
    time.sleep(0.3)  # into the delay
    began = time.monotonic()
    status, answer = http_json("POST", f"{api}/runs/{run_id}/cancel", {}, Authorization=key)
    assert status == 202, answer
    run = wait_for_status(api, key, run_id, {"cancelled", "succeeded", "failed"}, 5)
    assert time.monotonic() - began < 2, f"cancelled after {time.monotonic() - began:.2f} s"
    assert (run["status"], run["outputs"], run["error"]["code"]) == (
        "cancelled",
        {"before": 1},
        "CANCELLED",
    )


def test_a_killed_workers_run_is_failed_interrupted_and_never_run_again(
    server: Server, tmp_path: Path
) -> None:
    api, key, run_id = start_long_run(server)
    worker = Worker(server, tmp_path / "worker.log")
    worker.start()
    running = wait_for_status(api, key, run_id, {"running"}, 60)
    worker.kill()  # SIGKILL: its lease is no longer renewed

    second = Worker(server, tmp_path / "worker2.log")
    second.start()
    try:
        check_interrupted(api, key, run_id, running)
        assert second.alive, second.output()
    finally:
        second.stop()


def check_interrupted(api: str, key: str, run_id: str, running: dict[str, Any]) -> None:
    # The lease (2 s) runs out; the sweep (every 2 s, on the new worker) fails the run.
    run = wait_for_status(api, key, run_id, {"failed", "succeeded", "cancelled"}, 30)
    assert (run["status"], run["error"]["code"]) == ("failed", "INTERRUPTED")
    assert run["startedDate"] == running["startedDate"]
    # Not claimed again: the new worker leaves it as it is.
    time.sleep(3)
    assert run_record(api, key, run_id) == run


def test_a_worker_runs_on_uvloop(server: Server, tmp_path: Path) -> None:
    env = {**server.env, "LIBFLOW_LOG_LEVEL": "INFO"}  # the line is logged at INFO
    worker = Process([sys.executable, "run_worker.py"], env, tmp_path / "worker.log")
    worker.start()
    try:
        wait_for(lambda: '"event loop: uvloop"' in worker.output(), 30, "no uvloop in the log")
    finally:
        worker.stop()
