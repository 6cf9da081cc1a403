"""Shared batches of the local model: padding-aware runs, concurrent calls, queries first."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import numpy as np
import pytest

from libflow.library.embeddings.batching import CALL_OVERHEAD_TOKENS, Batcher, padding_runs
from libflow.library.embeddings.interface import EmbeddingError, Vectors
from libflow.library.embeddings.local import LocalEmbedder

DIMENSIONS = 4


def test_a_short_passage_is_not_padded_to_the_long_ones() -> None:
    # A 300-word document: two full passages and a short last one.
    assert padding_runs([256, 256, 100], 16) == [(0, 2), (2, 3)]


def test_passages_of_one_length_share_a_batch_up_to_its_size() -> None:
    assert padding_runs([200] * 5, 16) == [(0, 5)]
    runs = padding_runs([200] * 5, 2)
    assert sorted(end - start for start, end in runs) == [1, 2, 2]
    assert [start for start, _ in runs[1:]] == [end for _, end in runs[:-1]]
    # Splitting saves fewer padded tokens than a model call costs: one batch.
    assert padding_runs([100, 100 - CALL_OVERHEAD_TOKENS // 2], 16) == [(0, 2)]


def test_long_passages_share_a_batch_up_to_its_token_budget() -> None:
    assert padding_runs([256] * 8, 16) == [(0, 4), (4, 8)]
    assert padding_runs([256] * 8, 16, max_tokens=2048) == [(0, 8)]
    # Short passages still fill the batch: the budget bounds rows times length.
    assert padding_runs([30] * 16, 16) == [(0, 16)]
    # A passage longer than the budget runs alone.
    assert padding_runs([2000, 2000], 16) == [(0, 1), (1, 2)]


class Model:
    """Records each batch; a row's vector is its length in the first column."""

    def __init__(self, fail_on: int | None = None) -> None:
        self.batches: list[list[int]] = []
        self.fail_on = fail_on
        self.release = asyncio.Event()

    def infer(self, items: list[int]) -> Vectors:
        self.batches.append(list(items))
        if self.fail_on in items:
            raise EmbeddingError("the model failed", transient=False)
        vectors = np.zeros((len(items), DIMENSIONS), dtype=np.float32)
        vectors[:, 0] = items
        return vectors

    @contextlib.asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        await self.release.wait()  # the first batch waits until the test lets it go
        yield


def batcher(
    model: Model,
    batch_size: int = 16,
    *,
    parallel: int = 1,
    infer: Callable[[list[int]], Vectors] | None = None,
) -> Batcher[int]:
    return Batcher(
        infer or model.infer,
        lambda item: item,
        batch_size=batch_size,
        dimensions=DIMENSIONS,
        exclusive=model.exclusive,
        parallel=parallel,
    )


async def test_concurrent_calls_share_batches_and_get_their_own_rows_in_order() -> None:
    model = Model()
    shared = batcher(model)
    documents = [[128, 128, 50], [128, 49], [128, 128, 48]]
    calls = [asyncio.create_task(shared.embed(d)) for d in documents]
    await asyncio.sleep(0)
    model.release.set()
    results = await asyncio.gather(*calls)
    for document, vectors in zip(documents, results, strict=True):
        assert vectors[:, 0].tolist() == document
    # Two batches, each of about one length, rather than three padded to 128.
    assert sorted(map(sorted, model.batches)) == [[48, 49, 50], [128] * 5]


async def test_a_search_query_goes_before_waiting_passages() -> None:
    model = Model()
    shared = batcher(model, batch_size=2)
    passages = asyncio.create_task(shared.embed([256] * 6))
    await asyncio.sleep(0)
    query = asyncio.create_task(shared.embed([12], query=True))
    await asyncio.sleep(0)
    model.release.set()
    await asyncio.gather(passages, query)
    # The first batch was under way when the query came; the query's is next.
    assert model.batches[1] == [12]


async def test_calls_take_turns_so_a_long_document_does_not_hold_up_short_ones() -> None:
    model = Model()
    shared = batcher(model, batch_size=2)
    long = asyncio.create_task(shared.embed([200] * 8))
    await asyncio.sleep(0)
    short = asyncio.create_task(shared.embed([200]))
    await asyncio.sleep(0)
    model.release.set()
    await short
    assert not long.done()
    await long


async def test_a_cancelled_call_is_dropped_and_the_others_finish() -> None:
    model = Model()
    shared = batcher(model, batch_size=2)
    first = asyncio.create_task(shared.embed([256, 256]))
    await asyncio.sleep(0)
    cancelled = asyncio.create_task(shared.embed([100] * 6))
    last = asyncio.create_task(shared.embed([50]))
    await asyncio.sleep(0)
    cancelled.cancel()
    model.release.set()
    assert (await first)[:, 0].tolist() == [256, 256]
    assert (await last)[:, 0].tolist() == [50]
    assert cancelled.cancelled()
    assert all(100 not in batch for batch in model.batches)


async def test_a_failed_batch_fails_its_calls_and_the_next_calls_go_on() -> None:
    model = Model(fail_on=256)
    shared = batcher(model, batch_size=2)
    failing = asyncio.create_task(shared.embed([256, 256]))
    await asyncio.sleep(0)
    model.release.set()
    with pytest.raises(EmbeddingError):
        await failing
    assert (await shared.embed([30]))[:, 0].tolist() == [30]


async def test_a_batcher_of_two_runs_two_batches_at_once() -> None:
    # Each batch waits in the model until a second one is there too: one at a time would
    # break the barrier.
    both = threading.Barrier(2, timeout=5)
    model = Model()
    model.release.set()

    def infer(items: list[int]) -> Vectors:
        both.wait()
        return model.infer(items)

    shared = batcher(model, batch_size=2, parallel=2, infer=infer)
    first, second = await asyncio.gather(shared.embed([200, 200]), shared.embed([20, 20]))
    assert first[:, 0].tolist() == [200, 200] and second[:, 0].tolist() == [20, 20]
    assert sorted(map(sorted, model.batches)) == [[20, 20], [200, 200]]


async def test_one_call_split_across_batches_at_once_gets_its_rows_in_order() -> None:
    model = Model()
    model.release.set()
    shared = batcher(model, batch_size=2, parallel=3)
    items = [(7 * i) % 23 + 1 for i in range(20)]
    assert (await shared.embed(items))[:, 0].tolist() == items
    assert sorted(row for batch in model.batches for row in batch) == sorted(items)


async def test_a_call_made_as_the_last_one_ends_is_run() -> None:
    model = Model()
    model.release.set()
    shared = batcher(model)
    await shared.embed([30])
    # Called in this task's very turn (no task of its own, as wait_for would make), while
    # the runner that served the first call has ended: it must not count as running.
    async with asyncio.timeout(5):
        second = await shared.embed([40])
    assert second[:, 0].tolist() == [40]


async def test_a_failed_batch_fails_its_call_while_another_batch_of_it_runs() -> None:
    model = Model(fail_on=256)
    model.release.set()
    shared = batcher(model, batch_size=1, parallel=2)
    with pytest.raises(EmbeddingError):
        await shared.embed([256, 30, 40])
    assert (await shared.embed([30]))[:, 0].tolist() == [30]


@pytest.mark.usefixtures("semantic_search")
async def test_calls_at_once_get_the_vectors_of_calls_one_at_a_time(tmp_path: Path) -> None:
    embedder = await LocalEmbedder.open(backend="onnx", batch_size=4, cache_dir=tmp_path)
    documents = [[("word " * (9 * i % 50)) + f"text {i}.{j}" for j in range(3)] for i in range(6)]
    together = await asyncio.gather(*(embedder.embed(d) for d in documents))
    for document, vectors in zip(documents, together, strict=True):
        alone = await embedder.embed(document)
        # fp32: padding is masked out, so batch-mates change nothing but rounding.
        assert np.min(np.sum(vectors * alone, axis=1)) > 0.999_99
