"""JavaScript in V8 (mini-racer): a fresh isolate per script, in sandbox processes.

A script is a function body compiled with ``new Function("inputs", "nodes", "event", body)``
and called on JSON data; its return value comes back as JSON. The isolate sees nothing of
the host: V8 has no require, fetch, process, file or network access, and the wrapper also
removes mini-racer's timers and ArrayBuffer, typed arrays and WebAssembly (their memory lives
outside the V8 heap, where the memory limit does not see it). Each script gets an isolate of
its own, made for it and disposed of after it (about 1.5 ms of CPU, mostly spent while its
sandbox waits for it): nothing a script leaves behind (a global, a changed prototype, a
pending promise) is seen by another.

Isolates run in sandbox processes, MAX_CONCURRENT_SCRIPTS at most, each running one script at
a time, because V8 can abort the whole process it runs in: a 512 Mi-character ``split("")``
is a fatal "invalid size" error, and one regex ``replace`` of such a string runs for seconds
past any timeout until V8's heap is exhausted (fatal). In a sandbox that ends the sandbox
only: its script fails and the next one gets a new sandbox. V8 ends a script at its timeout
or its memory limit; this side kills a sandbox still silent KILL_GRACE_SECONDS past the
timeout, or CANCEL_GRACE_SECONDS after its caller was cancelled. The caller's event loop
never waits on V8: a script is sent and awaited from one of MAX_CONCURRENT_SCRIPTS threads
(the others queue). Sandboxes get no environment from this process (no secrets).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import math
import os
import re
import select
import struct
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, BinaryIO, Final, Literal

from libflow.engine.run_budget import MAX_NODE_RESULT_BYTES
from libflow.errors import LibflowError

if TYPE_CHECKING:
    from py_mini_racer import MiniRacer

MAX_SOURCE_CHARS: Final = 64 * 1024  # one script's body
# Scripts running at once in a process (2 cores: more would not add throughput). Each runs
# in a sandbox of its own, so this also bounds the memory of scripts: 4 x memoryMb at most.
MAX_CONCURRENT_SCRIPTS: Final = 4
KILL_GRACE_SECONDS: Final = 1.0  # a sandbox still silent this long past its timeout is killed
CANCEL_GRACE_SECONDS: Final = 0.1  # what the script of a cancelled caller has left to end
SANDBOX_START_SECONDS: Final = 30.0  # a new sandbox imports libflow and starts V8
CHECK_SECONDS: Final = 2.0  # compiling a body at publish
CHECK_MEMORY_BYTES: Final = 64 * 1024 * 1024
MIB: Final = 1024 * 1024
# The new Function() of ECMA-262 (CreateDynamicFunction) puts the body on the third line of
# the source it compiles: V8's line numbers are the body's plus 2.
_BODY_LINE_OFFSET: Final = 2
_SOURCE_URL: Final = "libflow-code"  # names the body's script in V8's messages and stacks
# What a sandbox reads of a script, and this side of an answer (the value's JSON is at most
# MAX_NODE_RESULT_BYTES characters, up to 3 bytes each in UTF-8; messages are cut).
_MAX_REQUEST_BYTES: Final = 2**31 - 1
_MAX_REPLY_BYTES: Final = 3 * MAX_NODE_RESULT_BYTES + 64
_MAX_ERROR_TEXT_BYTES: Final = 64 * 1024
_POLL_SECONDS: Final = 0.05  # how often a waiting thread looks at its call's deadline
_FRAME: Final = struct.Struct(">II")  # a frame: header length, payload length
_LINE_BREAK: Final = re.compile(r"\r\n|[\n\r\u2028\u2029]")
_V8_MESSAGE: Final = re.compile(r"([^:\n]*):(-?\d+): (.*)", re.DOTALL)
_TAGGED: Final = re.compile(r"\x01(\w+):(\"(?:[^\"\\]|\\.)*\")\x01", re.DOTALL)
_STACK_LINE: Final = re.compile(re.escape(_SOURCE_URL) + r":(\d+):\d+")

# Runs the body in a fresh isolate. It removes what reaches outside the V8 heap or the host
# (mini-racer's timers use SharedArrayBuffer), compiles the body with new Function (so the
# body cannot close the function around it), and keeps its own references to what it uses
# after the body ran. A thrown error keeps V8's message (which has the throw's line); the
# ``finally`` makes V8 write it as \x01stage:"message"\x01 for this side to read exactly.
# It returns "V" + the value's JSON, "C" (compiled only), "P" (a promise), "L" + the length
# of JSON over the limit, or "E" + why the value is not JSON.
_WRAPPER: Final = """(function (source, data, limit, compileOnly) {
  "use strict";
  const global = globalThis, toText = String, stringify = JSON.stringify, parse = JSON.parse;
  const NativePromise = Promise, errorPrototype = Error.prototype;
  for (const name of ["ArrayBuffer", "SharedArrayBuffer", "DataView", "Atomics", "WebAssembly",
      "Int8Array", "Uint8Array", "Uint8ClampedArray", "Int16Array", "Uint16Array",
      "Int32Array", "Uint32Array", "Float16Array", "Float32Array", "Float64Array",
      "BigInt64Array", "BigUint64Array"]) {
    delete global[name];
  }
  global.setTimeout = global.clearTimeout = global.__timer_manager = undefined;
  let stage = "compile", value;
  try {
    const body = new Function("inputs", "nodes", "event", source);
    if (compileOnly) return "C";
    stage = "run";
    const args = parse(data);
    value = body(args.inputs, args.nodes, args.event);
  } finally {
    const tag = stage;
    try {
      errorPrototype.toString = function () {
        let message;
        try {
          message = toText(this.message) || toText(this.name);
        } catch (unreadable) {
          message = "an error whose message cannot be read";
        }
        return "\\u0001" + tag + ":" + stringify(message) + "\\u0001";
      };
    } catch (frozen) {}
  }
  if (value instanceof NativePromise) return "P";
  let text;
  try {
    text = stringify(value);
  } catch (error) {
    try {
      return "E" + toText(error && error.message);
    } catch (unreadable) {
      return "E";
    }
  }
  if (text === undefined) return "Vnull";
  return text.length > limit ? "L" + text.length : "V" + text;
})"""


Outcome = Literal[
    "value", "not_json", "too_large", "promise", "error", "timeout", "memory", "crashed",
    "cancelled",
]  # fmt: skip


@dataclass(frozen=True, slots=True)
class ScriptAnswer:
    """How a script ended: ``text`` is the value's JSON ("value"), V8's message of a thrown
    error ("error"), why the value is not JSON ("not_json") or its JSON's length
    ("too_large"); ``cut_by_deadline`` when the caller's deadline came before the timeout."""

    outcome: Outcome
    text: str = ""
    cut_by_deadline: bool = False


class SandboxUnavailable(LibflowError):
    """No sandbox process could be started (mini-racer missing, or it crashed at start)."""

    code = "NODE_FAILED"


def script_of(source: str, data_json: str) -> bytes:
    """The script calling body ``source`` on ``data_json`` (``{inputs, nodes, event}``)."""
    return _call_wrapper(source, data_json, compile_only=False)


async def run_script(
    script: bytes, *, timeout_seconds: float, deadline: float, memory_bytes: int
) -> ScriptAnswer:
    """Run ``script`` in a sandbox within ``timeout_seconds`` and never past ``deadline``
    (``time.monotonic()``), its V8 heap within ``memory_bytes``.

    A cancelled caller returns at once; its script is stopped, its sandbox killed if need be.
    """
    call = _Call(script, timeout_seconds, deadline, memory_bytes)
    future = asyncio.get_running_loop().run_in_executor(_executor(), _SCRIPTS.run, call)
    try:
        kind, text = await future
    except asyncio.CancelledError:
        call.cancel()
        raise
    return _answer(kind, text, call.cut_by_deadline)


_MARKED: Final[dict[str, Outcome]] = {
    "V": "value", "E": "not_json", "L": "too_large", "P": "promise"
}  # fmt: skip
_PASSED_ON: Final[dict[str, Outcome]] = {
    kind: kind for kind in ("error", "timeout", "memory", "cancelled")
}


def _answer(kind: str, text: str, cut_by_deadline: bool) -> ScriptAnswer:
    """A sandbox's reply as a ScriptAnswer (a value is marked by the wrapper's first letter)."""
    if kind == "value":
        return ScriptAnswer(_MARKED.get(text[:1], "crashed"), text[1:], cut_by_deadline)
    return ScriptAnswer(_PASSED_ON.get(kind, "crashed"), text, cut_by_deadline)


def _call_wrapper(source: str, data_json: str, *, compile_only: bool) -> bytes:
    """The wrapper called on ``source`` and the data: JSON literals are JavaScript."""
    arguments = ",".join(
        (
            json.dumps(f"{source}\n//# sourceURL={_SOURCE_URL}"),
            json.dumps(data_json),
            str(MAX_NODE_RESULT_BYTES),
            "true" if compile_only else "false",
        )
    )
    return f"{_WRAPPER}({arguments})".encode()


def thrown_message(text: str, source: str) -> str:
    """``<message> (line N)`` from V8's message of an error thrown by (or compiling) the body.

    The line is the throw's (for an error raised inside a built-in: the body's line that
    called it); a syntax error is ``SyntaxError: <message> (line N)``.
    """
    match = _V8_MESSAGE.match(text)
    if match is None:
        return text.split("\n", 1)[0] or "the script failed"
    resource, v8_line, rest = match.group(1), int(match.group(2)), match.group(3)
    tagged = _TAGGED.match(rest)
    stage = tagged.group(1) if tagged else "run"
    message = json.loads(tagged.group(2)) if tagged else rest.split("\n", 1)[0]
    line: int | None = None
    if stage == "compile" or resource == _SOURCE_URL:
        line = v8_line - _BODY_LINE_OFFSET
    else:  # thrown inside a built-in (JSON.parse): the first frame in the body
        frame = _STACK_LINE.search(rest)
        line = None if frame is None else int(frame.group(1)) - _BODY_LINE_OFFSET
    if stage == "compile":
        message = f"SyntaxError: {message}"
    if line is None:
        return str(message)
    # A body ending mid-statement fails on the lines new Function adds after it.
    lines = len(_LINE_BREAK.findall(source)) + 1
    return f"{message} (line {min(max(line, 1), lines)})"


def source_problem(source: str) -> str | None:
    """Why ``source`` cannot be a script's body, or None; blocking (call it off the loop).

    V8 compiles it (new Function, never called) in the checking sandbox.
    """
    if not source.strip():
        return "must not be empty"
    if len(source) > MAX_SOURCE_CHARS:
        return f"must be at most {MAX_SOURCE_CHARS} characters"
    call = _Call(
        _call_wrapper(source, "null", compile_only=True),
        CHECK_SECONDS,
        math.inf,
        CHECK_MEMORY_BYTES,
    )
    try:
        with _CHECK_LOCK:
            kind, text = _CHECKS.run(call)
    except SandboxUnavailable:
        return None  # the run reports it, with a syntax error if there is one
    if kind == "error":
        return f"has a syntax error: {thrown_message(text, source).removeprefix('SyntaxError: ')}"
    return None


# The sandbox processes (this side)


@dataclass(slots=True)
class _Call:
    """One script sent to a sandbox: its limits, and when this side stops waiting for it."""

    script: bytes
    timeout_seconds: float  # the script's own limit
    caller_deadline: float  # time.monotonic() past which the caller does not wait
    memory_bytes: int
    cut_by_deadline: bool = False  # the caller's deadline came before the timeout
    deadline: float = math.inf  # when the sandbox is killed if it has not answered
    cancelled: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def seconds(self) -> float:
        """The script's time from now: its timeout, never past the caller's deadline."""
        left = self.caller_deadline - time.monotonic()
        self.cut_by_deadline = left < self.timeout_seconds
        return max(min(self.timeout_seconds, left), 0.0)

    def wait_until(self, deadline: float) -> None:
        """Stop waiting at ``deadline`` (or earlier, if already cancelled)."""
        with self._lock:
            self.deadline = min(self.deadline, deadline)

    def cancel(self) -> None:
        """The caller was cancelled: its script has CANCEL_GRACE_SECONDS, then is killed."""
        with self._lock:
            self.cancelled = True
            self.deadline = min(self.deadline, time.monotonic() + CANCEL_GRACE_SECONDS)


class _Died(Exception):
    """The sandbox process ended or broke the protocol."""


class _Sandbox:
    """One sandbox process: a request in on stdin, an answer out on stdout."""

    def __init__(self) -> None:
        # No inherited environment (the sandbox never holds the server's secrets), only the
        # import path of this process, so the sandbox imports the same libflow.
        path = os.pathsep.join(entry for entry in sys.path if entry)
        try:
            self.process = subprocess.Popen(  # noqa: S603  (our own interpreter and module)
                [sys.executable, "-c", f"from {__name__} import serve_scripts; serve_scripts()"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,  # V8's fatal errors print a C stack trace
                env={"PYTHONPATH": path},
                start_new_session=True,  # a ^C in the terminal is the parent's to handle
            )
        except OSError as err:
            raise SandboxUnavailable(f"the JavaScript sandbox could not start ({err})") from err
        start = _Call(b"", SANDBOX_START_SECONDS, math.inf, 0)
        start.wait_until(time.monotonic() + SANDBOX_START_SECONDS)
        try:
            header, _ = self._read_frame(start)
        except (_Died, TimeoutError):
            header = {}
        if header.get("kind") != "ready":
            self.kill()
            raise SandboxUnavailable("the JavaScript sandbox process did not start")

    def evaluate(self, call: _Call) -> tuple[str, str]:
        """Run one script: (kind, text); "timeout" after killing a sandbox that overran."""
        seconds = call.seconds()
        header = json.dumps({"seconds": seconds, "memory": call.memory_bytes}).encode()
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(_FRAME.pack(len(header), len(call.script)) + header)
            self.process.stdin.write(call.script)
            self.process.stdin.flush()
        except OSError:
            return "crashed", ""
        call.wait_until(time.monotonic() + seconds + KILL_GRACE_SECONDS)
        try:
            reply, payload = self._read_frame(call)
        except _Died:
            return "crashed", ""
        except TimeoutError:
            self.kill()
            return ("cancelled" if call.cancelled else "timeout"), ""
        return str(reply.get("kind")), payload.decode(errors="replace")

    def _read_frame(self, call: _Call) -> tuple[dict[str, Any], bytes]:
        """One frame from the sandbox; TimeoutError past the call's deadline."""
        sizes = self._read(_FRAME.size, call)
        header_size, payload_size = _FRAME.unpack(sizes)
        if header_size > 4096 or payload_size > _MAX_REPLY_BYTES:
            raise _Died
        try:
            header = json.loads(self._read(header_size, call))
        except ValueError:
            raise _Died from None
        return header if isinstance(header, dict) else {}, self._read(payload_size, call)

    def _read(self, size: int, call: _Call) -> bytes:
        """``size`` bytes of stdout, waiting at most until the call's deadline."""
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        data = bytearray()
        while len(data) < size:
            left = call.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            ready, _, _ = select.select([fd], [], [], min(left, _POLL_SECONDS))
            if ready:
                chunk = os.read(fd, min(size - len(data), MIB))
                if not chunk:
                    raise _Died
                data += chunk
        return bytes(data)

    def alive(self) -> bool:
        """Whether the process still runs."""
        return self.process.poll() is None

    def kill(self) -> None:
        """End the process now and reap it."""
        with contextlib.suppress(OSError):
            self.process.kill()
        self.process.wait()
        self.close_pipes()

    def stop(self) -> None:
        """End the process at its next request (end of input), killing it if it lingers."""
        self.close_pipes()
        try:
            self.process.wait(1.0)
        except subprocess.TimeoutExpired:
            self.kill()

    def close_pipes(self) -> None:
        """Close this side's ends of the pipes."""
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


class _Sandboxes:
    """Idle sandbox processes, each given to one call at a time; a broken one is replaced."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[_Sandbox] = []
        self._pid = os.getpid()

    def run(self, call: _Call) -> tuple[str, str]:
        """Run ``call`` in an idle (or new) sandbox: (kind, text)."""
        if call.cancelled:
            return "cancelled", ""
        sandbox = self._take()
        kind = "crashed"
        try:
            kind, text = sandbox.evaluate(call)
            return kind, text
        finally:
            with self._lock:
                if kind not in {"crashed", "cancelled"} and sandbox.alive():
                    self._idle.append(sandbox)
                else:
                    sandbox.kill()

    def _take(self) -> _Sandbox:
        with self._lock:
            if self._pid != os.getpid():  # a forked child: those sandboxes are its parent's
                self._idle, self._pid = [], os.getpid()
            while self._idle:
                sandbox = self._idle.pop()
                if sandbox.alive():
                    return sandbox
                sandbox.kill()
        return _Sandbox()

    def stop(self) -> None:
        """Stop every idle sandbox (at exit)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for sandbox in idle:
            sandbox.stop()


_SCRIPTS = _Sandboxes()
_CHECKS = _Sandboxes()  # compiles only, one at a time: never waits behind running scripts
_CHECK_LOCK = threading.Lock()
atexit.register(_SCRIPTS.stop)
atexit.register(_CHECKS.stop)

_threads: ThreadPoolExecutor | None = None
_threads_pid = 0
_threads_lock = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    """The MAX_CONCURRENT_SCRIPTS threads that wait on sandboxes (again in a forked child)."""
    global _threads, _threads_pid
    with _threads_lock:
        if _threads is None or _threads_pid != os.getpid():
            _threads = ThreadPoolExecutor(MAX_CONCURRENT_SCRIPTS, thread_name_prefix="libflow-js")
            _threads_pid = os.getpid()
        return _threads


# The sandbox side (a process of its own: ``serve_scripts``)


def serve_scripts() -> None:
    """Run each script read on stdin in a fresh V8 isolate; answer on stdout; end at EOF."""
    protocol = os.fdopen(os.dup(1), "wb")
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # nothing else may write to the protocol
    asyncio.run(_serve(sys.stdin.buffer, protocol))


async def _serve(requests: BinaryIO, answers: BinaryIO) -> None:
    """The sandbox's loop: one request at a time, until the other side closes stdin.

    Each script's isolate is made before its request comes (after the previous answer was
    sent), so its start-up is not part of the script's time; it is disposed of before the
    script's answer is sent, so a script V8 could not stop holds up no other.
    """
    from py_mini_racer import init_mini_racer  # only sandboxes load V8, never the server

    init_mini_racer(ignore_duplicate_init=True)
    _write_frame(answers, {"kind": "ready"}, b"")
    loop = asyncio.get_running_loop()
    while True:
        with contextlib.ExitStack() as isolate:
            racer = isolate.enter_context(_new_isolate(loop))
            request = await asyncio.to_thread(_read_request, requests)
            if request is None:
                return
            header, script = request
            kind, text = await _evaluate(
                racer, script, float(header["seconds"]), int(header["memory"])
            )
        payload = text.encode()
        if kind == "error":  # a thrown message can be as long as the script made it
            payload = payload[:_MAX_ERROR_TEXT_BYTES]
        _write_frame(answers, {"kind": kind}, payload)


def _new_isolate(loop: asyncio.AbstractEventLoop) -> contextlib.AbstractContextManager[MiniRacer]:
    """A fresh V8 isolate and context, disposed of when the block ends."""
    from py_mini_racer import mini_racer

    return mini_racer(loop)


async def _evaluate(
    racer: MiniRacer, script: str, seconds: float, memory_bytes: int
) -> tuple[str, str]:
    """Evaluate ``script`` in ``racer`` under its time and memory limits."""
    from py_mini_racer import JSEvalException, JSOOMException

    racer.set_hard_memory_limit(memory_bytes)
    try:
        value = await asyncio.wait_for(racer.eval_cancelable(script), seconds)
    except TimeoutError:
        return "timeout", ""
    except JSOOMException:
        return "memory", ""
    except JSEvalException as err:
        return "error", str(err)
    return "value", value if isinstance(value, str) else ""


def _read_request(stream: BinaryIO) -> tuple[dict[str, Any], str] | None:
    """One request (header and script), or None at the end of input."""
    sizes = stream.read(_FRAME.size)
    if len(sizes) < _FRAME.size:
        return None
    header_size, script_size = _FRAME.unpack(sizes)
    if header_size > 4096 or script_size > _MAX_REQUEST_BYTES:
        return None
    header = json.loads(stream.read(header_size))
    script = stream.read(script_size)
    if len(script) < script_size:
        return None
    return header, script.decode()


def _write_frame(stream: BinaryIO, header: dict[str, Any], payload: bytes) -> None:
    """Write one frame and flush it."""
    encoded = json.dumps(header).encode()
    stream.write(_FRAME.pack(len(encoded), len(payload)) + encoded + payload)
    stream.flush()
