"""Run events of a group of API processes: files in the data dir, siblings woken.

Two buses on one directory stand for two processes (each has its own socket among the
siblings, as each process of a group has).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from libflow.workflows.run_event_files import FileEventBus
from libflow.workflows.run_events import EVENTS_KEPT_SECONDS, RUN_FINISHED, RunEvent
from libflow.workflows.running import RunningRuns
from libflow.workflows.siblings import Siblings, siblings_dir

RUN = "0123456789abcdef0123456789abcdef"


@pytest.fixture
async def processes(tmp_path: Path) -> AsyncIterator[tuple[FileEventBus, FileEventBus]]:
    """Buses of two processes on one data dir."""
    opened: list[Siblings] = []
    buses = []
    for _ in range(2):
        siblings = Siblings(siblings_dir(tmp_path))
        siblings.open()
        opened.append(siblings)
        buses.append(FileEventBus(tmp_path / "run-events", siblings))
    try:
        yield buses[0], buses[1]
    finally:
        for bus in buses:
            await bus.close()
        for siblings in opened:
            siblings.close()


def events(*names: str, first: int = 1) -> list[RunEvent]:
    return [RunEvent(first + i, name, f'{{"n":{first + i}}}') for i, name in enumerate(names)]


async def test_events_published_by_one_process_are_read_by_another(
    processes: tuple[FileEventBus, FileEventBus],
) -> None:
    running, watching = processes
    running.publish(RUN, events("run.started", "node.started"))
    await running.flush()

    assert await watching.read(RUN, 0, 0) == events("run.started", "node.started")
    assert await watching.read(RUN, 1, 0) == events("node.started", first=2)
    assert await watching.last_id(RUN) == 2


async def test_a_waiting_watcher_gets_the_events_another_process_publishes(
    processes: tuple[FileEventBus, FileEventBus],
) -> None:
    running, watching = processes
    watcher = asyncio.create_task(watching.read(RUN, 0, 30))
    await asyncio.sleep(0.1)  # the watcher waits
    running.publish(RUN, events("run.started"))

    assert await watcher == events("run.started")


async def test_a_finished_run_ends_every_read_at_once(
    processes: tuple[FileEventBus, FileEventBus],
) -> None:
    running, watching = processes
    running.publish(RUN, events("run.started", RUN_FINISHED))
    await running.flush()

    assert [e.name for e in await watching.read(RUN, 0, 30)] == ["run.started", RUN_FINISHED]
    assert await watching.read(RUN, 2, 30) == []  # no wait: nothing follows run.finished


async def test_the_end_published_by_another_process_follows_the_runs_own_events(
    processes: tuple[FileEventBus, FileEventBus],
) -> None:
    running, sweeping = processes
    running.publish(RUN, events("run.queued", "run.started"))
    await running.flush()
    # The sweep (or a cancel of a queued run) publishes the end where it runs.
    sweeping.publish(RUN, [RunEvent(await sweeping.last_id(RUN) + 1, RUN_FINISHED, "{}")])
    await sweeping.flush()

    names = [event.name for event in await running.read(RUN, 0, 0)]
    assert names == ["run.queued", "run.started", RUN_FINISHED]


async def test_a_run_id_that_is_not_an_id_names_no_file(
    processes: tuple[FileEventBus, FileEventBus], tmp_path: Path
) -> None:
    bus, _ = processes
    bus.publish("../escape", events("run.started"))
    await bus.flush()

    assert await bus.read("../escape", 0, 0) == []
    assert not (tmp_path / "escape").exists()
    assert os.listdir(tmp_path / "run-events") == []


async def test_files_idle_past_the_time_events_are_kept_are_removed(
    processes: tuple[FileEventBus, FileEventBus],
) -> None:
    bus, _ = processes
    bus.publish(RUN, events("run.started"))
    await bus.flush()

    bus.prune_files(now=time.time() + 60)
    assert await bus.last_id(RUN) == 1
    bus.prune_files(now=time.time() + EVENTS_KEPT_SECONDS + 60)
    assert os.listdir(bus.directory) == []


async def test_a_cancel_signalled_in_one_process_stops_the_run_in_another(tmp_path: Path) -> None:
    here, there = Siblings(siblings_dir(tmp_path)), Siblings(siblings_dir(tmp_path))
    here.open()
    there.open()
    try:
        asking = RunningRuns(30, None, here)
        running = RunningRuns(30, None, there)
        run = asyncio.create_task(asyncio.sleep(30))
        running.add(RUN, run)
        await asking.signal_cancel(RUN)
        with pytest.raises(asyncio.CancelledError):
            await run
        assert running.cancel_requested(RUN)
    finally:
        here.close()
        there.close()
