"""The cyclic garbage collector in a long-lived libflow process: the API server and workers.

What start-up loaded lives as long as the process (the embedding model alone is millions
of objects). Left to the cyclic GC, every full collection walks all of it and pauses the
loop for a quarter of a second (runsync p99: 280 ms, 23 ms frozen): it is frozen once
started. No ``gc.collect()`` first: a full collection at every start-up cost the test suite
minutes (many apps and burst workers start in one process); what little garbage is frozen
is freed once unfrozen.

Requests and jobs are freed by their reference counts (tests/test_run_garbage.py keeps runs,
queued runs, deliveries and file processing free of cycles), but with 32 requests in flight
several thousand of their objects are alive at once: at Python's default of 700 new
objects the young generation was collected every few requests, walking the live ones each
time for nothing (the GC took 6-8% of runsync's CPU). Above what requests in flight hold,
a collection comes only with real growth.
"""

from __future__ import annotations

import gc

# The young generation's threshold (Python's default: 700 new objects). Measured at 10,000,
# the count stayed at 5,000-7,000 under 32 runsyncs in flight and no collection ran.
YOUNG_THRESHOLD = 20_000


def keep_start_up_objects() -> None:
    """Once started: freeze what start-up made, and collect young objects less often.

    The threshold is process-wide and stays when the process serves no more (tests start
    many apps in one process): it suits any process that ran libflow.
    """
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *gc.get_threshold()[1:])


def release_start_up_objects() -> None:
    """At cleanup: what was frozen may become garbage (several apps may start and stop in
    one process), which only a collection that sees it can free."""
    gc.unfreeze()
