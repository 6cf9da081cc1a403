"""Server-sent events: a run's events written as a ``text/event-stream`` response."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web

from libflow.logs import request_id_var
from libflow.workflows.run_events import RUN_FINISHED, RunEvent

# A comment line this often keeps proxies from closing a quiet stream.
KEEPALIVE_SECONDS = 15.0
# What a client waits before reconnecting if the stream breaks (EventSource's ``retry``).
RETRY_MILLISECONDS = 2000


def wants_events(request: web.Request) -> bool:
    """Whether the client asked for an event stream (``Accept: text/event-stream``)."""
    return "text/event-stream" in request.headers.get("Accept", "")


async def stream_events(
    request: web.Request,
    events: AsyncIterator[RunEvent | None],
    finished_data: Callable[[], Awaitable[str]],
) -> web.StreamResponse:
    """Write ``events`` as SSE until ``run.finished``, whose data ``finished_data`` gives.

    The response starts with the first event (or keep-alive), so an error before it is
    still a JSON error answer. None from ``events`` means "nothing happened".
    """
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream; charset=utf-8",
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",  # nginx: do not hold events back in a buffer
        }
    )
    # Sent here: the middleware adds it to an answer after the handler, too late for a
    # stream whose headers went out with its first event.
    request_id = request_id_var.get()
    if request_id is not None:
        response.headers["X-Request-Id"] = request_id
    last_write = time.monotonic()
    async for event in events:
        if not response.prepared:
            await response.prepare(request)
            await response.write(f"retry: {RETRY_MILLISECONDS}\n\n".encode())
        if event is None:
            if time.monotonic() - last_write >= KEEPALIVE_SECONDS:
                await response.write(b": keep-alive\n\n")
                last_write = time.monotonic()
            continue
        data = await finished_data() if event.name == RUN_FINISHED else event.data
        await response.write(_frame(event.id, event.name, data))
        last_write = time.monotonic()
    if not response.prepared:
        await response.prepare(request)
    await response.write_eof()
    return response


def _frame(event_id: int, name: str, data: str) -> bytes:
    # JSON text holds no raw newline (json.dumps escapes them): one data line per event.
    return f"id: {event_id}\nevent: {name}\ndata: {data}\n\n".encode()
