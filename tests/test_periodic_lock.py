"""The periodic jobs of a group of API processes run in the one holding the data dir's lock."""

from __future__ import annotations

from pathlib import Path

from libflow.schedule import PERIODIC_LOCK, PeriodicLock


def test_one_holder_at_a_time_and_another_takes_the_lock_once_it_is_let_go(
    tmp_path: Path,
) -> None:
    first, second = PeriodicLock(tmp_path / PERIODIC_LOCK), PeriodicLock(tmp_path / PERIODIC_LOCK)

    assert first.try_take()
    assert not second.try_take()
    assert first.try_take()  # its holder keeps it

    first.release()  # as the kernel does when the holder dies
    assert second.try_take()
    assert not first.try_take()
    second.release()
