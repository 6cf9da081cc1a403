"""What one run may hold and record: its outputs, its nodes' results, its record, its HTTP.

Every limit is checked BEFORE the value is kept: a node whose result, output or response
would pass one fails (NODE_FAILED, the message naming the limit) and the run ends with
what it held so far, which always fits its record. The budgets of expressions (time,
text built, loops) are in ``libflow.engine.render_budget``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from libflow.engine.cpu_pool import off_loop
from libflow.engine.render_budget import RunAllowance
from libflow.engine.ssrf import ResponseAllowance
from libflow.engine.value_size import NeedsThread, TooBig, stored_size
from libflow.errors import LibflowError
from libflow.json_text import storable

MAX_RUN_OUTPUTS_BYTES = 1024 * 1024  # all outputs of a run, as compact JSON
MAX_NODE_RESULT_BYTES = 8 * 1024 * 1024  # one node's result, which later nodes can read
MAX_RUN_RESULTS_BYTES = 32 * 1024 * 1024  # all node results a run holds at once
MAX_RUN_RECORD_BYTES = 4 * 1024 * 1024  # a run's record: inputs, outputs, error, timings
MAX_ERROR_MESSAGE_CHARS = 4096  # a run's error message (longer ones are cut)
TIMING_RECORD_BYTES = 128  # one node's timing in a record, besides its node id
RECORD_FIELDS_BYTES = 256  # the rest of a record: ids, status, dates, the error's code
MAX_RUN_RESPONSE_BYTES = 16 * 1024 * 1024  # all HTTP response bodies of one run
MAX_CONCURRENT_REQUESTS = 8  # http_request calls of one run in flight at once; others wait
# Sub-runs (call_workflow, map) nest, and each has a run's budgets: unshared, a map of maps
# of maps would multiply them (32 at once per map, 21 KB each before any result: a runsync
# of four nested maps held a million sub-runs). So all the sub-runs under one run share:
MAX_SUB_RUNS = 10_000  # how many start, at every depth together (a map's MAX_MAP_ITEMS)
MAX_SUB_RUNS_AT_ONCE = 32  # how many of one depth run at once (a map's top concurrency)
MAX_SUB_RUN_RESULTS_BYTES = MAX_RUN_RESULTS_BYTES  # results the running ones hold at once
MAX_SUB_RUN_RESPONSE_BYTES = MAX_RUN_RESPONSE_BYTES  # HTTP responses the running ones read
MAX_SUB_RUN_REQUESTS = MAX_SUB_RUNS_AT_ONCE  # their HTTP requests in flight, together
# Values measured inline (on the event loop) while this few; larger ones on a CPU thread.
INLINE_MEASURE_ITEMS = 256


@contextlib.asynccontextmanager
async def _both(own: asyncio.Semaphore, shared: asyncio.Semaphore) -> AsyncIterator[None]:
    """A sub-run's request slot, then its tree's. Always in this order, and no one waits
    for a run's own slot while holding its tree's: nothing waits in a circle."""
    async with own, shared:
        yield


class OverBudget(LibflowError):
    """A node would take its run past one of its limits: the node fails."""

    code = "NODE_FAILED"


async def measure(value: Any, limit: int) -> int:
    """``stored_size`` of a value: inline when small, on a CPU thread otherwise."""
    try:
        return stored_size(value, limit, max_items=INLINE_MEASURE_ITEMS)
    except NeedsThread:
        return await off_loop(stored_size, value, limit)


def clip_message(message: str) -> str:
    """A run's error message cut to MAX_ERROR_MESSAGE_CHARS, as storable text."""
    message = storable(message)
    if len(message) <= MAX_ERROR_MESSAGE_CHARS:
        return message
    return message[: MAX_ERROR_MESSAGE_CHARS - 15] + " ... (cut here)"


class SubRunBudget:
    """What the sub-runs under one run, at every depth, may spend together.

    The limits on how many start and how many run at once are checked by ``running``;
    the results and responses the running ones hold, by their RunBudget (``sub_run``).
    Each depth has its own slots: a sub-run holds its slot while its own sub-runs wait
    for theirs, one depth further down, so no sub-run waits for a slot held by a run
    that waits for it.
    """

    def __init__(self) -> None:
        self.started = 0
        self.results_bytes = 0
        self.responses = ResponseAllowance(
            MAX_SUB_RUN_RESPONSE_BYTES, whose="the HTTP responses of the running sub-runs"
        )
        # Each sub-run has its own MAX_CONCURRENT_REQUESTS too: 32 at once per depth, and
        # depths nest, would be hundreds of connections from one run.
        self.requests = asyncio.Semaphore(MAX_SUB_RUN_REQUESTS)
        self._slots: dict[int, asyncio.Semaphore] = {}

    @contextlib.asynccontextmanager
    async def running(self, depth: int) -> AsyncIterator[None]:
        """Hold one of the slots of ``depth`` while a sub-run runs there.

        OverBudget once MAX_SUB_RUNS have started under the run.
        """
        slots = self._slots.get(depth)
        if slots is None:
            slots = self._slots[depth] = asyncio.Semaphore(MAX_SUB_RUNS_AT_ONCE)
        async with slots:
            if self.started >= MAX_SUB_RUNS:
                raise OverBudget(
                    f"a run starts at most {MAX_SUB_RUNS} sub-runs, its sub-runs' own included"
                )
            self.started += 1
            yield


@dataclass(slots=True)
class RunBudget:
    """What one run may still spend, and what it holds."""

    timings_bytes: int = 0  # what the run's node timings take in its record, at most
    renders: RunAllowance = field(default_factory=RunAllowance)
    responses: ResponseAllowance = field(
        default_factory=lambda: ResponseAllowance(MAX_RUN_RESPONSE_BYTES)
    )
    results_bytes: int = 0
    output_bytes: dict[str, int] = field(default_factory=dict)
    # A sub-run's: what it holds counts against what its tree's running sub-runs may hold.
    shared: SubRunBudget | None = None
    _inputs_bytes: int | None = None
    _requests: asyncio.Semaphore | None = None

    @classmethod
    def sub_run(cls, shared: SubRunBudget, timings_bytes: int) -> RunBudget:
        """The budget of a sub-run under the run whose sub-runs share ``shared``."""
        responses = ResponseAllowance(MAX_RUN_RESPONSE_BYTES, shared=shared.responses)
        return cls(timings_bytes=timings_bytes, responses=responses, shared=shared)

    def give_back(self) -> None:
        """The run ended: what it held of its tree's shared budget is free again."""
        if self.shared is not None:
            self.shared.results_bytes -= self.results_bytes
            self.responses.give_back()
            self.shared = None

    def start(self, timeout_seconds: float) -> None:
        """The run starts now: its renders stop themselves at its timeout."""
        self.renders.deadline = time.monotonic() + timeout_seconds

    @property
    def requests(self) -> contextlib.AbstractAsyncContextManager[Any]:
        """Held by each HTTP request a node makes: MAX_CONCURRENT_REQUESTS at once per run,
        and MAX_SUB_RUN_REQUESTS at once for all the sub-runs under one run."""
        if self._requests is None:
            self._requests = asyncio.Semaphore(MAX_CONCURRENT_REQUESTS)
        if self.shared is None:
            return self._requests
        return _both(self._requests, self.shared.requests)

    def hold(self, size: int, what: str) -> None:
        """Keep a node's result of ``size`` bytes; OverBudget past a node's or the run's limit."""
        if size > MAX_NODE_RESULT_BYTES:
            raise OverBudget(
                f"{what} is {size} bytes, over the limit of {MAX_NODE_RESULT_BYTES} bytes "
                "on a node's result"
            )
        if self.results_bytes + size > MAX_RUN_RESULTS_BYTES:
            raise OverBudget(
                f"{what} ({size} bytes) would take the results the run holds over their limit "
                f"of {MAX_RUN_RESULTS_BYTES} bytes"
            )
        if self.shared is not None:
            if self.shared.results_bytes + size > MAX_SUB_RUN_RESULTS_BYTES:
                raise OverBudget(
                    f"{what} ({size} bytes) would take the results the running sub-runs hold "
                    f"over their limit of {MAX_SUB_RUN_RESULTS_BYTES} bytes"
                )
            self.shared.results_bytes += size
        self.results_bytes += size

    async def hold_value(self, value: Any, what: str) -> None:
        """``hold`` a result that must be measured first (measuring stops at the node limit)."""
        try:
            size = await measure(value, MAX_NODE_RESULT_BYTES)
        except TooBig:
            raise OverBudget(
                f"{what} would be over the limit of {MAX_NODE_RESULT_BYTES} bytes on a node's "
                "result"
            ) from None
        self.hold(size, what)

    async def set_output(self, name: str, value: Any, inputs: Any) -> None:
        """Account for output ``name`` becoming ``value``; OverBudget past the limits."""
        others = sum(self.output_bytes.values()) - self.output_bytes.get(name, 0)
        entry = len(name) + 4  # "name": and a comma
        try:
            size = await measure(value, max(MAX_RUN_OUTPUTS_BYTES - others - entry, 0))
        except TooBig:
            raise OverBudget(
                f"output {name!r} would take the run's outputs over their limit of "
                f"{MAX_RUN_OUTPUTS_BYTES} bytes"
            ) from None
        if await self._record_base(inputs) + others + entry + size > MAX_RUN_RECORD_BYTES:
            raise OverBudget(
                f"output {name!r} would take the run's record (inputs, outputs, error and "
                f"timings) over its limit of {MAX_RUN_RECORD_BYTES} bytes"
            )
        self.output_bytes[name] = entry + size

    async def _record_base(self, inputs: Any) -> int:
        """What the record holds besides outputs: inputs, timings and room for an error."""
        if self._inputs_bytes is None:  # measured once, when the first output is set
            try:
                self._inputs_bytes = await measure(inputs, MAX_RUN_RECORD_BYTES)
            except TooBig:
                self._inputs_bytes = MAX_RUN_RECORD_BYTES
        reserved = self.timings_bytes + MAX_ERROR_MESSAGE_CHARS + RECORD_FIELDS_BYTES
        return self._inputs_bytes + reserved
