"""Preparing a file in a child process, under the file's memory and time budgets.

Extraction (OCR included), chunking and thumbnail rendering run in a child forked for this one
file by the preparation server (``zygote``), which this process starts on first use and which
ends with it. The child caps its own address space (CHILD_MEMORY_BYTES more than it starts
with) and CPU time; this side kills it after EXTRACTION_SECONDS (OCR_EXTRACTION_SECONDS for a
pdf or an image, which OCR may read). So even a bomb no check foresaw, or a
crash in a parser's C code, ends only the child: its file fails or counts a crash, and the
worker or server goes on. The answer comes back as files in the job's temporary directory,
read here with size limits and checked field by field.

Small plain text (txt, csv and md up to IN_PROCESS_BYTES) is prepared here instead, on a
thread: decoding and chunking it is bounded by its size, and no parser's C code runs.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import math
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from libflow.library.embeddings.interface import ESTIMATED_SIZING, PassageSizing
from libflow.library.filetypes import OCR_TYPES
from libflow.library.processing import zygote
from libflow.library.processing.budgets import (
    CHILD_MEMORY_BYTES,
    EXTRACTION_SECONDS,
    MAX_CHUNKS,
    MAX_TEXT_CHARS,
    MIB,
    OCR_EXTRACTION_SECONDS,
    BudgetExceeded,
)
from libflow.library.processing.chunking import Chunk
from libflow.library.processing.extracted import ExtractionError
from libflow.library.processing.prepare import (
    Prepared,
    prepare_file,
    prepare_plain_text,
    storable,
)
from libflow.library.processing.thumbnails import ThumbnailError

# How long the server may take to start (it imports the parsing libraries), and a child to
# be forked and then, once killed, to be reported.
_START_SECONDS = 60.0
_FORK_SECONDS = 30.0
_KILL_SECONDS = 10.0
# What this side reads of a child's answer: text is at most 4 bytes a character in UTF-8,
# and each passage repeats at most its overlap of the text, as JSON.
_MAX_TEXT_BYTES = 4 * MAX_TEXT_CHARS
_MAX_RESULT_BYTES = 3 * _MAX_TEXT_BYTES + MIB
_MAX_THUMBNAIL_BYTES = 4 * MIB
_MAX_MESSAGE_CHARS = 1_000
_MAX_PAGE_NAME_CHARS = 255  # an xlsx sheet's name is at most 31
# txt, csv and md files this small are prepared in this process. Decoding and chunking 16 KiB
# costs at most about 40 ms of CPU (random bytes, through charset detection; 300 words of
# prose: 2 ms), within budgets a child would never reach, where a child costs about 10 ms of
# CPU (fork, exit, answer files): a quarter of a short document's processing besides the
# model (ingest of 300-word documents, measured).
IN_PROCESS_BYTES = 16 * 1024
_IN_PROCESS_TYPES = frozenset({"txt", "csv", "md"})


class ChildCrashed(Exception):
    """The child died without an answer (a signal, an exit without a result): a crash."""


class PreparationFailed(Exception):
    """The child raised an error of libflow's own (a bug); str(err) names its type."""


class _PreparationServer:
    """The process-wide preparation server, started on first use and again if it died."""

    def __init__(self, module: str = zygote.__name__) -> None:
        self._module = module  # the server's code, run as ``python -m``
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._directory: str | None = None
        self._socket: str | None = None

    def socket_path(self) -> str:
        """Where the running server listens (blocking: it may start it)."""
        with self._lock:
            if self._process is not None and self._process.poll() is None and self._socket:
                return self._socket
            self._stop()
            return self._start()

    def _start(self) -> str:
        # A private directory: only this user may connect to the socket inside.
        self._directory = tempfile.mkdtemp(prefix="libflow-prepare-")
        path = str(Path(self._directory) / "socket")
        environment = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        self._process = subprocess.Popen(  # noqa: S603  (our own interpreter and module)
            [sys.executable, "-m", self._module, path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=environment,
            start_new_session=True,  # a ^C in the terminal is the parent's to handle
        )
        assert self._process.stdout is not None
        ready, _, _ = select.select([self._process.stdout], [], [], _START_SECONDS)
        # One read of what is there, not readline(): a server that wrote part of a line and
        # hung would hold this thread (and every later file) for good. The server writes
        # READY with one write, which a pipe delivers whole.
        if not ready or os.read(self._process.stdout.fileno(), 64) != zygote.READY:
            self._stop()
            raise ChildCrashed("the preparation server did not start")
        self._socket = path
        return path

    def _stop(self) -> None:
        process, self._process, self._socket = self._process, None, None
        if process is not None:
            if process.stdin is not None:
                with contextlib.suppress(OSError):
                    process.stdin.close()  # end of input: the server kills its children
            try:
                process.wait(_KILL_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            if process.stdout is not None:
                process.stdout.close()
        if self._directory is not None:
            shutil.rmtree(self._directory, ignore_errors=True)
            self._directory = None

    def stop(self) -> None:
        """Stop the server and its children (at exit)."""
        with self._lock:
            self._stop()


_SERVER = _PreparationServer()
atexit.register(_SERVER.stop)


async def start_preparation_server() -> None:
    """Start the preparation server now rather than on the first file (worker start-up)."""
    await asyncio.to_thread(_SERVER.socket_path)


def preparation_server_running() -> bool:
    """Whether this process's preparation server is up."""
    process = _SERVER._process
    return process is not None and process.poll() is None


def stop_preparation_server() -> None:
    """Stop the preparation server (blocking): the next file starts one, as installed then."""
    _SERVER.stop()


async def prepare(
    path: Path,
    file_type: str,
    *,
    size: int,
    chunk: bool,
    work_dir: Path,
    sizing: PassageSizing = ESTIMATED_SIZING,
) -> Prepared:
    """``prepare_file`` of the local copy at ``path`` (``size`` bytes) under the file's budgets:
    here, on a thread, for small plain text; in a child (``prepare_in_child``) otherwise."""
    if prepared_here(file_type, size):
        return await asyncio.to_thread(_prepare_here, path, file_type, chunk, sizing)
    return await prepare_in_child(path, file_type, chunk=chunk, work_dir=work_dir, sizing=sizing)


def prepared_here(file_type: str, size: int) -> bool:
    """Whether a file of this type and size is prepared in this process (small plain text)."""
    return file_type in _IN_PROCESS_TYPES and size <= IN_PROCESS_BYTES


async def prepare_small_text(
    data: bytes, *, chunk: bool, sizing: PassageSizing = ESTIMATED_SIZING
) -> Prepared:
    """``prepare`` of small plain text already read whole (``prepared_here``), on a thread."""
    if len(data) > IN_PROCESS_BYTES:
        raise ValueError("only small plain text is prepared from memory")
    return await asyncio.to_thread(_prepare_text_here, data, chunk, sizing)


def _prepare_here(path: Path, file_type: str, chunk: bool, sizing: PassageSizing) -> Prepared:
    """``prepare_file`` in this process, its text as a child's answer would bring it back."""
    return storable(prepare_file(path, file_type, chunk=chunk, sizing=sizing))


def _prepare_text_here(data: bytes, chunk: bool, sizing: PassageSizing) -> Prepared:
    """``prepare_plain_text`` in this process, its text as a child's answer would bring it."""
    return storable(prepare_plain_text(data, chunk=chunk, sizing=sizing))


async def prepare_in_child(
    path: Path,
    file_type: str,
    *,
    chunk: bool,
    work_dir: Path,
    sizing: PassageSizing = ESTIMATED_SIZING,
) -> Prepared:
    """``prepare_file`` of the local copy at ``path``, in a child under the file's budgets.

    Raises ExtractionError, ThumbnailError or BudgetExceeded as prepare_file does (memory and
    time budgets included), ChildCrashed when the child died, PreparationFailed for a bug.
    """
    out = work_dir / "prepared"
    out.mkdir()
    seconds = preparation_seconds(file_type)
    request = {
        "source": str(path),
        "file_type": file_type,
        "chunk": chunk,
        "out_dir": str(out),
        "memory_bytes": CHILD_MEMORY_BYTES,
        "cpu_seconds": math.ceil(seconds),
        "sizing": sizing.to_json(),
    }
    code = await _run_child(request, seconds)
    return await asyncio.to_thread(_read_answer, out, code, seconds)


def preparation_seconds(file_type: str) -> float:
    """The child's time budget for a file of ``file_type``: longer where OCR may read it."""
    return OCR_EXTRACTION_SECONDS if file_type in OCR_TYPES else EXTRACTION_SECONDS


async def _run_child(request: dict[str, Any], seconds: float) -> int:
    """Have the server fork a child for ``request``; its exit code once it has ended."""
    reader, writer = await _connect()
    try:
        writer.write(json.dumps(request).encode() + b"\n")
        await writer.drain()
        async with asyncio.timeout(_FORK_SECONDS):
            _message(await reader.readline(), "pid")
        try:
            async with asyncio.timeout(seconds) as clock:
                return _message(await reader.readline(), "exit")
        except TimeoutError:
            if not clock.expired():
                raise
            await _abandon(reader, writer)
            raise BudgetExceeded(f"preparing the file took longer than {seconds} s") from None
        except asyncio.CancelledError:
            # The job was cancelled (shutdown, its processing budget): the child goes too,
            # before the job's temporary directory is removed under it.
            await asyncio.shield(_abandon(reader, writer))
            raise
    except (OSError, TimeoutError) as err:
        raise ChildCrashed(f"the preparation server failed ({err!r})") from err
    finally:
        writer.close()


async def _connect() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to the server, which is started again once if it went away."""
    for attempt in (1, 2):
        path = await asyncio.to_thread(_SERVER.socket_path)
        try:
            return await asyncio.open_unix_connection(path)
        except OSError:
            if attempt == 2:
                raise
            await asyncio.to_thread(_SERVER.stop)
    raise AssertionError("unreachable")


async def _abandon(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Tell the server to kill the child (half-close), and wait until it has been reaped."""
    with contextlib.suppress(OSError, TimeoutError, ValueError):
        writer.write_eof()
        async with asyncio.timeout(_KILL_SECONDS):
            await reader.readline()


def _message(line: bytes, field: str) -> int:
    """The integer ``field`` of one line from the server."""
    if not line:
        raise ChildCrashed("the preparation server stopped")
    value = json.loads(line).get(field)
    if not isinstance(value, int):
        raise ChildCrashed(f"the preparation server answered without {field!r}")
    return value


def _describe_exit(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"exited with status {code}"


def _read_limited(path: Path, limit: int) -> bytes:
    """The file's bytes, refusing one larger than ``limit``."""
    with path.open("rb") as file:
        data = file.read(limit + 1)
    if len(data) > limit:
        raise ChildCrashed(f"the child's {path.name} is larger than it can be")
    return data


def _read_answer(out: Path, code: int, seconds: float) -> Prepared:
    """Turn the files a child wrote (and how it ended) into a Prepared or the error it met."""
    if code == -signal.SIGXCPU:
        raise BudgetExceeded(f"preparing the file took more than {seconds} s of CPU")
    if code != 0:
        raise ChildCrashed(f"the process preparing the file was {_describe_exit(code)}")
    try:
        answer = json.loads(_read_limited(out / zygote.RESULT, _MAX_RESULT_BYTES))
    except (OSError, ValueError) as err:
        raise ChildCrashed("the process preparing the file left no answer") from err
    if not isinstance(answer, dict):
        raise ChildCrashed("the process preparing the file left a malformed answer")
    if "error" in answer:
        raise _error_of(answer)
    return Prepared(
        text=_read_limited(out / zygote.TEXT, _MAX_TEXT_BYTES).decode("utf-8", errors="replace"),
        chunks=_chunks_of(answer.get("chunks")),
        pages=_optional_int(answer.get("pages")),
        ocr_pages=_optional_int(answer.get("ocr_pages")),
        thumbnail=(
            _read_limited(out / zygote.THUMBNAIL, _MAX_THUMBNAIL_BYTES)
            if answer.get("thumbnail") is True
            else None
        ),
    )


def _error_of(answer: dict[str, Any]) -> Exception:
    """The exception a child's error answer stands for."""
    message = str(answer.get("message", ""))[:_MAX_MESSAGE_CHARS]
    kind = answer.get("error")
    if kind == "memory":
        return BudgetExceeded(
            f"preparing the file needs more than {CHILD_MEMORY_BYTES // MIB} MiB of memory"
        )
    if kind == "budget":
        return BudgetExceeded(message)
    if kind == "extraction":
        return ExtractionError(message)
    if kind == "thumbnail":
        return ThumbnailError(message)
    if kind == "unexpected":
        return PreparationFailed(message)
    return ChildCrashed("the process preparing the file left a malformed answer")


def _optional_int(value: object) -> int | None:
    """A page number or count of an answer: None or a whole number, checked."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise ChildCrashed("the process preparing the file left a malformed answer")


def _chunks_of(value: object) -> list[Chunk]:
    """The passages of an answer, each ``[text, page, page name, tokens]``, checked."""
    if not isinstance(value, list) or len(value) > MAX_CHUNKS:
        raise ChildCrashed("the process preparing the file left malformed passages")
    chunks = []
    for seq, item in enumerate(value):
        if not (isinstance(item, list) and len(item) == 4 and isinstance(item[0], str)):
            raise ChildCrashed("the process preparing the file left malformed passages")
        chunks.append(
            Chunk(
                item[0],
                _optional_int(item[1]),
                seq,
                page_name=_page_name(item[2]),
                tokens=_optional_int(item[3]),
            )
        )
    return chunks


def _page_name(value: object) -> str | None:
    """A passage's page name (an xlsx sheet) of an answer: None or a short string, checked."""
    if value is None or (isinstance(value, str) and len(value) <= _MAX_PAGE_NAME_CHARS):
        return value
    raise ChildCrashed("the process preparing the file left malformed passages")
