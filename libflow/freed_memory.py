"""Giving freed heap memory back to the system, now and then.

glibc's malloc keeps what a process frees in its arenas for reuse and returns it only when
the top of a heap is free. A long-lived server that embeds passages (ONNX Runtime's
buffers), runs SQLite queries and parses requests on several threads frees memory all over
its heaps, so its RSS only climbs: on the 30-minute soak every API process grew by 5-7 MiB
a minute, and one ``malloc_trim(0)`` called from outside handed back 120 MiB of a 1.5 GiB
process at once. Every API process and worker calls it once a minute, in a thread (it
walks every arena; the loop goes on meanwhile).

Elsewhere than glibc (musl, macOS) there is no ``malloc_trim`` and this does nothing.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import functools
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

logger = logging.getLogger("libflow.memory")

RELEASE_EVERY_SECONDS = 60.0


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim: Callable[[int], int] = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    return trim


def release_freed_memory() -> bool:
    """Return the free pages of every malloc arena to the system; whether any were."""
    trim = _malloc_trim()
    return bool(trim is not None and trim(0))


@asynccontextmanager
async def releasing_freed_memory(
    every: float = RELEASE_EVERY_SECONDS,
) -> AsyncIterator[None]:
    """While inside, release freed memory every ``every`` seconds (where malloc can)."""
    if _malloc_trim() is None:
        yield
        return
    task = asyncio.create_task(_release_every(every))
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def _release_every(every: float) -> None:
    while True:
        await asyncio.sleep(every)
        try:
            await asyncio.to_thread(release_freed_memory)
        except Exception as err:  # an upkeep, never a reason to stop serving
            logger.warning("could not release freed memory: %r", err)
