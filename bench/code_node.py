"""The code node's cost: a small transform in JavaScript against the same transform without it.

The transform sums, counts and takes the maximum of ITEMS numbers. Three comparisons, each
measured in the same run as its baseline:

- V8 itself (mini-racer in this process): creating and disposing of an isolate, what every
  script pays since each gets a fresh one, against evaluating the transform in a warm one.
- A script through ``libflow.engine.javascript.run_script`` (a sandbox process, a fresh
  isolate, JSON both ways) against the same transform as a plain Python function: one at a
  time (p50) and with MAX_CONCURRENT_SCRIPTS in flight (calls a second).
- runsync of event -> code -> set_output against event -> set_output whose value is the same
  transform as one Jinja expression (the engine's Python path), on a libflow server
  (``run_server.py``, SQLite, every run recorded): runs a second with CONCURRENCY in flight.

Nothing is pinned: the sandboxes are the server's children and would share its CPU. Run
alone with ``python -m bench.code_node``.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
from py_mini_racer import mini_racer

from bench._common import (
    BenchError,
    Report,
    Result,
    create_project,
    free_port,
    libflow_env,
    libflow_server,
    percentile,
    request_json,
    run_alone,
)
from libflow.engine.javascript import MAX_CONCURRENT_SCRIPTS, MIB, run_script, script_of

NAME = "code_node"
ITEMS = list(range(1, 51))
EXPECTED = {"total": sum(ITEMS), "count": len(ITEMS), "max": max(ITEMS)}
SOURCE = (
    "const items = inputs.items;\n"
    "return {total: items.reduce((a, b) => a + b, 0), count: items.length, "
    "max: Math.max(...items)};"
)
EXPRESSION = '{{ {"total": inputs["items"] | sum, "count": inputs["items"] | length, "max": inputs["items"] | max} }}'  # noqa: E501
ISOLATES = 200  # isolates created and disposed of, after WARMUP of them
WARMUP = 20
EVALS = 2000
SCRIPT_CALLS = 300
THROUGHPUT_SECONDS = 5.0
CONCURRENCY = 8  # runsync calls in flight
RATIO_GOAL = 0.3  # runsync with a code node against the expression (measured 0.34 to 0.41)
ROUTE = "/api/publicv1/projects/{projectId}/workflows/{workflowId}/runsync"


def definition(transform: dict[str, Any]) -> dict[str, Any]:
    """event -> ``transform`` (node id ``t``) -> output ``out``, if it is not the output itself."""
    nodes = [{"id": "start", "type": "event", "event": "run"}, transform]
    edges = [{"from": "start", "to": "t"}]
    if transform["type"] != "set_output":
        nodes.append({"id": "out", "type": "set_output", "name": "out", "value": "{{ nodes.t }}"})
        edges.append({"from": "t", "to": "out"})
    return {"timeoutSeconds": 30, "nodes": nodes, "edges": edges}


CODE_DEFINITION = definition({"id": "t", "type": "code", "source": SOURCE})
EXPRESSION_DEFINITION = definition(
    {"id": "t", "type": "set_output", "name": "out", "value": EXPRESSION}
)


def plain_python(data_json: str) -> str:
    """The transform in Python, JSON in and out as the script's is."""
    items = json.loads(data_json)["inputs"]["items"]
    return json.dumps({"total": sum(items), "count": len(items), "max": max(items)})


# V8 in this process


async def isolate_figures() -> tuple[float, float]:
    """Median ms to create and dispose of an isolate, and to evaluate the transform in one."""
    loop = asyncio.get_running_loop()
    startups = []
    for index in range(WARMUP + ISOLATES):
        started = time.perf_counter()
        with mini_racer(loop):
            pass
        if index >= WARMUP:
            startups.append((time.perf_counter() - started) * 1000)
    script = f"JSON.stringify((function (inputs) {{ {SOURCE} }})({json.dumps({'items': ITEMS})}))"
    evals = []
    with mini_racer(loop) as racer:
        for _ in range(EVALS):
            started = time.perf_counter()
            answer = await racer.eval_cancelable(script)
            evals.append((time.perf_counter() - started) * 1000)
    if not isinstance(answer, str) or json.loads(answer) != EXPECTED:
        raise BenchError(f"unexpected answer from V8: {answer!r}")
    return statistics.median(startups), statistics.median(evals)


# Scripts through a sandbox, and the same in Python


async def script_figures() -> tuple[float, float, float, float]:
    """p50 ms and calls/s of run_script, then of the plain Python transform."""
    data_json = json.dumps({"inputs": {"items": ITEMS}, "nodes": {}, "event": "run"})
    script = script_of(SOURCE, data_json)

    async def one() -> None:
        answer = await run_script(
            script, timeout_seconds=1.0, deadline=time.monotonic() + 30, memory_bytes=64 * MIB
        )
        if answer.outcome != "value" or json.loads(answer.text) != EXPECTED:
            raise BenchError(f"unexpected script answer: {answer}")

    for _ in range(WARMUP):
        await one()
    latencies = []
    for _ in range(SCRIPT_CALLS):
        started = time.perf_counter()
        await one()
        latencies.append((time.perf_counter() - started) * 1000)
    per_second = await _throughput(lambda: one(), MAX_CONCURRENT_SCRIPTS)

    python_latencies = []
    for _ in range(SCRIPT_CALLS):
        started = time.perf_counter()
        plain_python(data_json)
        python_latencies.append((time.perf_counter() - started) * 1000)
    calls = 0
    started = time.perf_counter()
    while time.perf_counter() - started < THROUGHPUT_SECONDS:
        plain_python(data_json)
        calls += 1
    python_per_second = calls / (time.perf_counter() - started)
    return (
        percentile(latencies, 50),
        per_second,
        percentile(python_latencies, 50),
        python_per_second,
    )


async def _throughput(call: Callable[[], Awaitable[None]], in_flight: int) -> float:
    """Calls a second of ``call`` over THROUGHPUT_SECONDS with ``in_flight`` at once."""
    done = 0
    started = time.perf_counter()
    deadline = started + THROUGHPUT_SECONDS

    async def loop() -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            await call()
            done += 1

    await asyncio.gather(*(loop() for _ in range(in_flight)))
    return done / (time.perf_counter() - started)


# runsync on a server


async def runsync_figures(url: str, key: str) -> tuple[float, float]:
    """p50 ms one at a time, and runs a second with CONCURRENCY in flight."""
    body = {"inputs": {"items": ITEMS}}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def one() -> None:
            async with session.post(url, json=body, headers={"Authorization": key}) as response:
                answer = await response.json()
            if response.status != 200 or answer["result"]["outputs"]["out"] != EXPECTED:
                raise BenchError(f"unexpected runsync answer: {response.status} {answer}")

        for _ in range(WARMUP):
            await one()
        latencies = []
        for _ in range(SCRIPT_CALLS):
            started = time.perf_counter()
            await one()
            latencies.append((time.perf_counter() - started) * 1000)
        return percentile(latencies, 50), await _throughput(one, CONCURRENCY)


def run() -> Report:
    """Measure V8, the sandbox and the server, each against its baseline."""
    startup_ms, eval_ms = asyncio.run(isolate_figures())
    script_ms, scripts_per_second, python_ms, python_per_second = asyncio.run(script_figures())
    work = Path(tempfile.mkdtemp(prefix="libflow-bench-code-"))
    try:
        port, data_dir = free_port(), work / "data"
        env = libflow_env(data_dir)
        project, key = create_project(env)
        with libflow_server(port, data_dir, env):
            base = f"http://127.0.0.1:{port}"
            urls = []
            for name, body in (("code", CODE_DEFINITION), ("expression", EXPRESSION_DEFINITION)):
                created = request_json(
                    "POST",
                    f"{base}/api/publicv1/projects/{project}/workflows",
                    body={"name": f"bench {name}", "definition": body},
                    api_key=key,
                )
                urls.append(
                    base + ROUTE.format(projectId=project, workflowId=created["workflowId"])
                )
            code_ms, code_per_second = asyncio.run(runsync_figures(urls[0], key))
            expression_ms, expression_per_second = asyncio.run(runsync_figures(urls[1], key))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    warm, python, expression = "eval in a warm isolate", "plain Python", "Jinja expression"
    rows = [
        Result(NAME, "isolate start-up (create + dispose)", startup_ms, "ms", eval_ms, warm),
        Result(NAME, "script via sandbox p50", script_ms, "ms", python_ms, python),
        Result(
            NAME,
            f"scripts/s via sandboxes ({MAX_CONCURRENT_SCRIPTS} at once)",
            scripts_per_second,
            "calls/s",
            python_per_second,
            python,
        ),
        Result(NAME, "runsync code node p50", code_ms, "ms", expression_ms, expression),
        Result(
            NAME,
            f"runsync code node ({CONCURRENCY} at once)",
            code_per_second,
            "runs/s",
            expression_per_second,
            expression,
            goal=f">= {RATIO_GOAL:.2f}x",
            met=code_per_second >= RATIO_GOAL * expression_per_second,
        ),
    ]
    notes = [
        f"code_node: the transform sums, counts and takes the max of {len(ITEMS)} numbers; "
        f"isolates: median of {ISOLATES} after {WARMUP}, evals: median of {EVALS}; scripts "
        f"and Python: {SCRIPT_CALLS} one at a time, then {THROUGHPUT_SECONDS:g} s; runsync: "
        f"{SCRIPT_CALLS} one at a time, then {THROUGHPUT_SECONDS:g} s with {CONCURRENCY} in "
        "flight, each run recorded in SQLite; nothing pinned",
        "code_node: a script via a sandbox = JSON of its data, a pipe to a sandbox process, a "
        "fresh isolate, the wrapper, the value's JSON back; plain Python = json.loads, the "
        "transform, json.dumps",
    ]
    return Report(rows, notes)


def main() -> int:
    """Run the benchmark alone and print its table."""
    return run_alone(NAME, run)


if __name__ == "__main__":
    sys.exit(main())
