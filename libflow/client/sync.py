"""``SyncLibflowClient``: the async client for code that is not async, on a loop of its own.

A thin wrapper: every method of the async client's parts is there under the same name,
and blocks until done; async iterators become plain iterators.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from types import TracebackType
from typing import Any, Self

from libflow.client.client import LibflowClient


class _Part:
    """A part of the client (``library``, ``runs``...) whose calls block."""

    def __init__(
        self, part: object, run: Callable[[Any], Any], loop: asyncio.AbstractEventLoop
    ) -> None:
        self._part = part
        self._run = run
        self._loop = loop

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self._part, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            result = method(*args, **kwargs)
            if isinstance(result, AsyncIterator):
                return _blocking_iterator(result, self._run)
            return self._run(result)

        return call


def _blocking_iterator(items: AsyncIterator[Any], run: Callable[[Any], Any]) -> Iterator[Any]:
    while True:
        try:
            yield run(anext(items))
        except StopAsyncIteration:
            return


class SyncLibflowClient:
    """The client for synchronous code: ``with SyncLibflowClient(url, key, project) as lf``."""

    def __init__(
        self, url: str | None = None, api_key: str | None = None, project_id: str | None = None
    ) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._client = LibflowClient(url, api_key, project_id)
        self._run(self._client.__aenter__())
        self.library: Any = _Part(self._client.library, self._run, self._loop)
        self.workflows: Any = _Part(self._client.workflows, self._run, self._loop)
        self.runs: Any = _Part(self._client.runs, self._run, self._loop)
        self.webhooks: Any = _Part(self._client.webhooks, self._run, self._loop)
        self.secrets: Any = _Part(self._client.secrets, self._run, self._loop)

    def _run(self, work: Coroutine[Any, Any, Any] | Any) -> Any:
        if not asyncio.iscoroutine(work):
            work = _await(work)
        return asyncio.run_coroutine_threadsafe(work, self._loop).result()

    def health(self) -> dict[str, Any]:
        """``/readyz``: whether the server and what it depends on are up."""
        return dict(self._run(self._client.health()))

    def close(self) -> None:
        """Close the session and stop the client's loop."""
        if self._loop.is_closed():
            return
        self._run(self._client.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


async def _await(awaitable: Any) -> Any:
    return await awaitable
