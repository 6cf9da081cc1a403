"""Freed heap memory goes back to the system now and then (glibc's malloc_trim)."""

from __future__ import annotations

import asyncio
import platform

import pytest

from libflow import freed_memory


def test_freed_memory_is_released_where_malloc_can() -> None:
    garbage = [bytes(4096 + i) for i in range(20_000)]  # about 80 MB, then freed
    del garbage
    # A call through ctypes with a wrong signature dies; without glibc there is nothing to call.
    released = freed_memory.release_freed_memory()
    if platform.libc_ver()[0] == "glibc":
        assert freed_memory._malloc_trim() is not None
    else:
        assert freed_memory._malloc_trim() is None
        assert released is False


async def test_release_runs_every_interval_while_inside(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(freed_memory, "release_freed_memory", lambda: calls.append(1) or True)
    async with freed_memory.releasing_freed_memory(every=0.01):
        while len(calls) < 3:
            await asyncio.sleep(0.01)
    seen = len(calls)
    await asyncio.sleep(0.05)
    assert len(calls) == seen  # stopped on exit


async def test_a_failed_release_is_logged_and_the_next_one_still_runs(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[int] = []

    def failing() -> bool:
        calls.append(1)
        raise OSError("no")

    monkeypatch.setattr(freed_memory, "release_freed_memory", failing)
    async with freed_memory.releasing_freed_memory(every=0.01):
        while len(calls) < 2:
            await asyncio.sleep(0.01)
    assert "could not release freed memory" in caplog.text
