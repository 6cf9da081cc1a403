"""An llm node's overhead: runsync of event -> llm -> set_output against calling the model directly.

The model is a local server speaking OpenAI's streamed chat completions (the baseline server,
``serve-baseline``): every request is answered at once with CHUNKS content deltas of one word,
the finish reason, the usage and ``data: [DONE]``, so the figures are what libflow adds, not
a model's speed. The baseline is a client calling that server itself, as a program without
libflow would: POST ``/v1/chat/completions`` with ``stream: true`` and read the events to
``[DONE]``. libflow (``run_server.py``, LIBFLOW_LLM_BASE_URL at the model server) is called
through runsync of a workflow whose llm node asks the same request and whose set_output sets
the text; every run is recorded in SQLite, its deltas go to its event log (coalesced).
libflow is pinned to CPU 0, the model server to CPU 1; the client (this process, aiohttp)
is not pinned. Latency is measured one call at a time, throughput with CONCURRENCY calls in
flight. Run alone with ``python -m bench.llm_node``; ``python -m bench.llm_node
serve-baseline --port P`` serves the model.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from bench._common import (
    PYTHON,
    BenchError,
    Report,
    Result,
    create_project,
    free_port,
    libflow_env,
    libflow_server,
    main_with_baseline,
    percentile,
    request_json,
    server,
)

NAME = "llm_node"
LIBFLOW_CPU = 0
MODEL_CPU = 1
CHUNKS = 200  # content deltas of one answer, a word each: about a 200-token answer
MODEL = "bench-model"
WARMUP_CALLS = 50
LATENCY_CALLS = 400
CONCURRENCY = 16
THROUGHPUT_SECONDS = 5.0
MESSAGES = [{"role": "user", "content": "Say two hundred words."}]
ANSWER = "".join(f"w{i} " for i in range(CHUNKS))
DEFINITION: dict[str, Any] = {
    "timeoutSeconds": 30,
    "nodes": [
        {"id": "start", "type": "event", "event": "run"},
        {"id": "ask", "type": "llm", "messages": MESSAGES},
        {"id": "out", "type": "set_output", "name": "text", "value": "{{ nodes.ask.text }}"},
    ],
    "edges": [{"from": "start", "to": "ask"}, {"from": "ask", "to": "out"}],
}
ROUTE = "/api/publicv1/projects/{projectId}/workflows/{workflowId}/runsync"


# The model server (the baseline)


def _event(choices: list[dict[str, Any]], **extra: Any) -> bytes:
    chunk = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "model": MODEL, **extra}
    return f"data: {json.dumps({**chunk, 'choices': choices})}\n\n".encode()


# The whole answer, built once: the server's work per request is writing it.
STREAM = b"".join(
    [
        _event([{"index": 0, "delta": {"role": "assistant", "content": ""}}]),
        *(_event([{"index": 0, "delta": {"content": f"w{i} "}}]) for i in range(CHUNKS)),
        _event([{"index": 0, "delta": {}, "finish_reason": "stop"}]),
        _event([], usage={"prompt_tokens": 4, "completion_tokens": CHUNKS}),
        b"data: [DONE]\n\n",
    ]
)


async def chat_completions(request: web.Request) -> web.StreamResponse:
    """A streamed chat completion of CHUNKS deltas, one write per event as a model sends them."""
    await request.read()
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for event in STREAM.split(b"\n\n")[:-1]:
        await response.write(event + b"\n\n")
    await response.write_eof()
    return response


async def healthz(request: web.Request) -> web.Response:
    """Readiness for the benchmark runner."""
    return web.json_response({"status": "ok"})


def serve_model(port: int) -> None:
    """Serve the model until SIGTERM/SIGINT."""
    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_get("/healthz", healthz)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


# The client


Call = Callable[[aiohttp.ClientSession], Awaitable[None]]


def direct_call(model_url: str) -> Call:
    """One streamed completion read to [DONE], as a client of the model itself."""
    body = {
        "model": MODEL,
        "messages": MESSAGES,
        "stream": True,
        "stream_options": {"include_usage": True},
    }

    async def call(session: aiohttp.ClientSession) -> None:
        async with session.post(f"{model_url}/chat/completions", json=body) as response:
            text = []
            async for line in response.content:
                if line.startswith(b"data: {"):
                    for choice in json.loads(line[6:])["choices"]:
                        text.append(choice["delta"].get("content") or "")
            if response.status != 200 or "".join(text) != ANSWER:
                raise BenchError(f"unexpected answer from the model: {response.status}")

    return call


def runsync_call(url: str, key: str) -> Call:
    """One runsync of the llm workflow."""

    async def call(session: aiohttp.ClientSession) -> None:
        async with session.post(url, json={}, headers={"Authorization": key}) as response:
            answer = await response.json()
            if response.status != 200 or answer["result"]["outputs"]["text"] != ANSWER:
                raise BenchError(f"unexpected runsync answer: {response.status} {answer}")

    return call


@dataclass(frozen=True)
class Measured:
    """Latencies one at a time (ms) and calls a second with CONCURRENCY in flight."""

    p50_ms: float
    p99_ms: float
    per_second: float
    calls: int


async def measure(call: Call) -> Measured:
    """Warm up, time LATENCY_CALLS calls one by one, then count calls over THROUGHPUT_SECONDS."""
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        for _ in range(WARMUP_CALLS):
            await call(session)
        latencies = []
        for _ in range(LATENCY_CALLS):
            started = time.perf_counter()
            await call(session)
            latencies.append((time.perf_counter() - started) * 1000)
        done = 0
        deadline = time.perf_counter() + THROUGHPUT_SECONDS
        started = time.perf_counter()

        async def loop() -> None:
            nonlocal done
            while time.perf_counter() < deadline:
                await call(session)
                done += 1

        await asyncio.gather(*(loop() for _ in range(CONCURRENCY)))
        elapsed = time.perf_counter() - started
    return Measured(percentile(latencies, 50), percentile(latencies, 99), done / elapsed, done)


def run() -> Report:
    """Start the model and libflow, then measure the direct calls and the runsync calls."""
    work = Path(tempfile.mkdtemp(prefix="libflow-bench-llm-"))
    try:
        model_port, port = free_port(), free_port()
        model_url = f"http://127.0.0.1:{model_port}/v1"
        data_dir = work / "data"
        env = libflow_env(data_dir, LIBFLOW_LLM_BASE_URL=model_url, LIBFLOW_LLM_MODEL=MODEL)
        project, key = create_project(env)
        model_cmd = [PYTHON, "-m", "bench.llm_node", "serve-baseline", "--port", str(model_port)]
        with (
            server(model_cmd, port=model_port, env=env, log_path=work / "model.log", cpu=MODEL_CPU),
            libflow_server(port, data_dir, env, cpu=LIBFLOW_CPU),
        ):
            base = f"http://127.0.0.1:{port}"
            created = request_json(
                "POST",
                f"{base}/api/publicv1/projects/{project}/workflows",
                body={"name": "bench llm", "definition": DEFINITION},
                api_key=key,
            )
            url = base + ROUTE.format(projectId=project, workflowId=created["workflowId"])
            direct = asyncio.run(measure(direct_call(model_url)))
            libflow = asyncio.run(measure(runsync_call(url, key)))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    label = "direct call"
    rows = [
        Result(NAME, "runsync llm p50 latency", libflow.p50_ms, "ms", direct.p50_ms, label),
        Result(NAME, "runsync llm p99 latency", libflow.p99_ms, "ms", direct.p99_ms, label),
        Result(NAME, "llm node overhead p50", libflow.p50_ms - direct.p50_ms, "ms"),
        Result(
            NAME,
            f"runsync llm throughput ({CONCURRENCY} at once)",
            libflow.per_second,
            "req/s",
            direct.per_second,
            label,
        ),
    ]
    notes = [
        f"llm_node: a streamed answer of {CHUNKS} one-word deltas ({len(STREAM):,} bytes) from a "
        f"local OpenAI-compatible server on CPU {MODEL_CPU}; libflow on CPU {LIBFLOW_CPU}; "
        f"{WARMUP_CALLS} warm-up calls, {LATENCY_CALLS} timed one at a time, then "
        f"{THROUGHPUT_SECONDS:g} s with {CONCURRENCY} in flight ({direct.calls} / "
        f"{libflow.calls} calls, direct / libflow)",
        "llm_node: direct = an aiohttp client POSTing the completion and parsing each event to "
        "[DONE]; libflow = runsync of event -> llm -> set_output (the same request), each run "
        "recorded in SQLite before the answer",
    ]
    return Report(rows, notes)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, or serve the model with ``serve-baseline --port P``."""
    return main_with_baseline(argv, __doc__, NAME, run, serve_model)


if __name__ == "__main__":
    sys.exit(main())
