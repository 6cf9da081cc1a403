"""The event loop a server or worker process runs on: uvloop where it is installed.

uvloop (libuv underneath, as in uvicorn) runs the same aiohttp application in fewer
instructions than asyncio's own loop: about 7% less CPU a runsync and 7% less a file read,
measured through the whole stack (docs/benchmarks.md). ``LIBFLOW_EVENT_LOOP=asyncio`` keeps
the standard library's loop, for asyncio's debug mode or a platform uvloop does not build on.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
from collections.abc import Callable

from settings import EventLoopKind

logger = logging.getLogger("libflow.event_loop")


def loop_factory(kind: EventLoopKind) -> Callable[[], asyncio.AbstractEventLoop]:
    """What makes a new loop of ``kind``; asyncio's, with a warning, when uvloop is missing."""
    if kind == "uvloop":
        if importlib.util.find_spec("uvloop") is not None:
            import uvloop

            return uvloop.new_event_loop
        logger.warning("uvloop is not installed here: running on asyncio's own event loop")
    return asyncio.new_event_loop


def new_event_loop(kind: EventLoopKind) -> asyncio.AbstractEventLoop:
    """A new event loop of ``kind``, made the current one of this thread."""
    loop = loop_factory(kind)()
    asyncio.set_event_loop(loop)
    logger.info("event loop: %s", type(loop).__module__.partition(".")[0])
    return loop
