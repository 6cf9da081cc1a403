"""Batches for the local model: concurrent embed calls share them, cut to waste little padding.

Each file's processing embeds its own 2-3 passages. Run call by call, a batch is padded to
its longest passage: a 300-word document's last passage (about 100 word pieces) cost as much
as its full ones, about 18% of int8 inference spent on padding. So the calls of one event
loop queue here and one task runs the model for all of them: each round pools what is
waiting (search queries first, then passages, the calls in turn), cuts the pool, longest
first, into the runs that cost the fewest padded tokens, and runs the one holding the
longest passage of the call first in line (so every call advances), then puts that call
last in line if it has more.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import numpy as np

from libflow.library.embeddings.interface import EmbeddingError, Vectors

Item = TypeVar("Item")
# What one more model call costs beyond its tokens, in padded tokens (the thread hand-off,
# the session's set-up, pooling): a batch is cut in two only to save more than that.
CALL_OVERHEAD_TOKENS = 16
# The pool of a round, in batches: enough passages to group by length, little to sort.
POOL_BATCHES = 4
# A batch of more than one passage holds at most this many padded tokens. Attention's memory
# grows with the batch times its length squared, and ONNX Runtime's arena keeps the largest
# batch's size for the life of the process: 16 passages of 256 word pieces took about 165 MiB
# more than 4 of them, for no speed (int8 on this 2-core CPU: 68 chunks/s at 16 x 256,
# 70 at 4 x 256; short passages still run 16 at a time, where batching pays: 18 word
# pieces, 650 chunks/s 4 at a time against 850 at 16).
BATCH_TOKENS = 1024


def padding_runs(
    lengths: Sequence[int], limit: int, max_tokens: int = BATCH_TOKENS
) -> list[tuple[int, int]]:
    """``lengths`` (longest first) cut into runs of at most ``limit``: the fewest padded tokens.

    A run of more than one holds at most ``max_tokens`` padded tokens (its count times its
    first, longest, length). A run costs those tokens plus CALL_OVERHEAD_TOKENS; the cuts
    are the cheapest (dynamic programming over where each run ends). Returns ``(start,
    end)`` pairs, in order.
    """
    count = len(lengths)
    best = [0] * (count + 1)  # best[i]: the least cost of the first i lengths
    cut = [0] * (count + 1)
    for end in range(1, count + 1):
        best[end], cut[end] = min(
            (best[start] + (end - start) * lengths[start] + CALL_OVERHEAD_TOKENS, start)
            for start in range(max(0, end - limit), end)
            if start == end - 1 or (end - start) * lengths[start] <= max_tokens
        )
    runs = []
    end = count
    while end:
        runs.append((cut[end], end))
        end = cut[end]
    return runs[::-1]


@dataclass(eq=False)
class _Call(Generic[Item]):
    """One embed call: its items, the rows still to run (longest first), its vectors."""

    items: Sequence[Item]
    lengths: list[int]
    vectors: Vectors
    done: asyncio.Future[Vectors]
    waiting: deque[int] = field(default_factory=deque)
    # Rows without their vector yet: those waiting and those in a batch under way.
    left: int = 0


class Batcher(Generic[Item]):
    """Runs ``infer`` for every embed call made on one event loop, a batch at a time.

    ``infer`` (blocking, run in a thread) embeds one batch, its items of about one length;
    ``exclusive`` is held around each batch. Up to ``parallel`` batches run at once, each
    taken from what is waiting as the one before it was (a graph session runs one inference
    a thread: two at once keep two cores busy without the cost of splitting one inference).
    """

    def __init__(
        self,
        infer: Callable[[list[Item]], Vectors],
        length: Callable[[Item], int],
        *,
        batch_size: int,
        dimensions: int,
        exclusive: Callable[[], contextlib.AbstractAsyncContextManager[object]],
        parallel: int = 1,
    ) -> None:
        self._infer = infer
        self._length = length
        self._batch_size = batch_size
        self._dimensions = dimensions
        self._exclusive = exclusive
        self._parallel = parallel
        self._queries: deque[_Call[Item]] = deque()
        self._passages: deque[_Call[Item]] = deque()
        self._runners: set[asyncio.Task[None]] = set()

    async def embed(self, items: Sequence[Item], *, query: bool = False) -> Vectors:
        """One vector per item, in order; ``query`` (a search) goes before passages."""
        lengths = [self._length(item) for item in items]
        call = _Call(
            items,
            lengths,
            np.empty((len(items), self._dimensions), dtype=np.float32),
            asyncio.get_running_loop().create_future(),
            deque(sorted(range(len(items)), key=lambda i: -lengths[i])),
            len(items),
        )
        (self._queries if query else self._passages).append(call)
        while len(self._runners) < self._parallel:
            runner = asyncio.create_task(self._run())
            self._runners.add(runner)
            # A finished task holds its event loop: the batcher (kept per loop, weakly) must not.
            runner.add_done_callback(self._runners.discard)
        # Cancelled (its job's budget, a shutdown): the future is too, and the runners drop
        # the call's remaining rows.
        return await call.done

    async def _run(self) -> None:
        try:
            while (line := self._next_line()) is not None:
                await self._round(line)
        except BaseException:
            # The runner itself ended early (cancelled at shutdown, or a bug): no call waits
            # for it in vain.
            for line in (self._queries, self._passages):
                while line:
                    call = line.popleft()
                    if not call.done.done():
                        call.done.set_exception(
                            EmbeddingError("the embedder stopped", transient=True)
                        )
            raise
        finally:
            # Now, not in the done callback (a loop turn later): a call made meanwhile
            # found this runner still counted, started none, and waited for good.
            runner = asyncio.current_task()
            if runner is not None:
                self._runners.discard(runner)

    def _next_line(self) -> deque[_Call[Item]] | None:
        """The line with rows to run, queries first (its finished calls dropped), or None."""
        for line in (self._queries, self._passages):
            for call in [call for call in line if call.done.done()]:
                line.remove(call)  # cancelled by its caller, or failed with a batch
            if any(call.waiting for call in line):
                return line
        return None

    async def _round(self, line: deque[_Call[Item]]) -> None:
        """Run one batch from the calls of ``line``; finish or requeue the calls it served."""
        front = next(call for call in line if call.waiting)
        rows = self._pool(line)
        first = rows.index((front, front.waiting[0]))
        start, end = next(
            (s, e)
            for s, e in padding_runs([c.lengths[i] for c, i in rows], self._batch_size)
            if s <= first < e
        )
        batch = rows[start:end]
        served = list(dict.fromkeys(call for call, _ in batch))
        for call, index in batch:
            call.waiting.remove(index)
        # The call first in line has its turn: it waits behind the others for its next.
        if front.waiting:
            line.remove(front)
            line.append(front)
        try:
            async with self._exclusive():
                vectors = await asyncio.to_thread(self._infer, [c.items[i] for c, i in batch])
        except Exception as err:
            # The batch's calls fail together (the model failed, not one of their texts).
            for call in served:
                with contextlib.suppress(ValueError):
                    line.remove(call)
                if not call.done.done():
                    call.done.set_exception(err)
            return
        for row, (call, index) in enumerate(batch):
            call.vectors[index] = vectors[row]
            call.left -= 1
        for call in served:
            if call.left or call.done.done():
                continue
            with contextlib.suppress(ValueError):
                line.remove(call)
            call.done.set_result(call.vectors)

    def _pool(self, line: deque[_Call[Item]]) -> list[tuple[_Call[Item], int]]:
        """The rows of the calls first in line (up to POOL_BATCHES batches), longest first."""
        limit = POOL_BATCHES * self._batch_size
        rows: list[tuple[_Call[Item], int]] = []
        for call in line:
            rows.extend((call, i) for i in itertools.islice(call.waiting, limit - len(rows)))
            if len(rows) >= limit:
                break
        rows.sort(key=lambda row: -row[0].lengths[row[1]])
        return rows
