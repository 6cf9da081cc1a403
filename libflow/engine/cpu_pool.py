"""The threads that do the CPU work of runs (renders, parsing, measuring) off the event loop.

A render can take up to a second (RENDER_SECONDS): on the event loop that second would
stall every other request of the process. Here it runs on one of CPU_THREADS threads while
the loop goes on; a thread cannot be stopped from outside, so each piece of work bounds
itself (the render budget's ticks check the run's deadline). Cancelling the awaiting task
abandons work that has not started yet.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

# Threads for the CPU work of all runs of a process. The GIL lets one run at a time, so
# more would not add throughput; enough of them that a slow render does not hold up the
# quick ones queued behind it (the interpreter switches threads every 5 ms).
CPU_THREADS = 8

P = ParamSpec("P")
T = TypeVar("T")

_pool: ThreadPoolExecutor | None = None
_pool_pid = 0
_pool_lock = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    """The process's pool, created on first use (and again in a forked child)."""
    global _pool, _pool_pid
    with _pool_lock:
        if _pool is None or _pool_pid != os.getpid():
            _pool = ThreadPoolExecutor(max_workers=CPU_THREADS, thread_name_prefix="libflow-cpu")
            _pool_pid = os.getpid()
        return _pool


async def off_loop(function: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """Run ``function`` on a CPU thread (with the caller's context variables) and await it."""
    context = contextvars.copy_context()
    call = functools.partial(context.run, function, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(_executor(), call)
