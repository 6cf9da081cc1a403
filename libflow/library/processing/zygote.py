"""The preparation server: ``python -m libflow.library.processing.zygote SOCKET``.

It loads the parsing libraries once, then forks one child per file, so a child starts in a
few milliseconds with everything in place (multiprocessing's fork server would also import
the parent's ``__main__`` again in every child: seconds for ``run_server.py``). A child
limits its own address space and CPU time, prepares the file (``prepare.prepare_file``) and
answers through files: ``result.json`` (pages, passages, or an error), ``text.txt`` and
``thumbnail.webp``. Nothing it writes is ever unpickled by the parent.

Protocol, on a fresh connection to SOCKET per file: the client sends one JSON line (the
request); the server answers ``{"pid": N}`` once the child is forked and ``{"exit": CODE}``
once it has ended (negative: the signal that killed it). A client that closes or half-closes
its connection before the exit line abandons the child, which is killed (SIGKILL) and then
reported. End of input on stdin (the parent process is gone) kills every child and ends the
server.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import json
import os
import resource
import selectors
import signal
import socket
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

import docx
import openpyxl
import pptx
import pypdfium2 as pdfium
from PIL import Image, ImageDraw

from libflow.library.embeddings.interface import ESTIMATED_SIZING, PassageSizing
from libflow.library.processing import chunking
from libflow.library.processing.budgets import BudgetExceeded
from libflow.library.processing.extracted import ExtractionError
from libflow.library.processing.ocr import ocr_engine
from libflow.library.processing.prepare import prepare_file, storable
from libflow.library.processing.thumbnails import ThumbnailError

RESULT = "result.json"
TEXT = "text.txt"
THUMBNAIL = "thumbnail.webp"
READY = b"ready\n"
# Exit code of a child whose own error handling failed (its answer may be missing).
_BROKEN = 70
_MAX_REQUEST_BYTES = 64 * 1024
# glibc's mallopt parameter, and its default value (which glibc raises as blocks are freed).
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD_BYTES = 128 * 1024
# What the CPU-time limit adds to the wall-clock budget: the parent's clock normally ends a
# child first; this one ends a child whose parent (and server) went away.
_CPU_GRACE_SECONDS = 5


# -- the child ------------------------------------------------------------------------------


def _address_space() -> int:
    """This process's current virtual size in bytes (Linux: VmSize)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    raise LookupError("VmSize")


def _limit(resource_kind: int, value: int) -> None:
    """Set a soft and hard limit, never above a hard limit this process already has."""
    _soft, hard = resource.getrlimit(resource_kind)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(resource_kind, (value, value))


def limit_self(memory_bytes: int, cpu_seconds: int) -> None:
    """Cap this process: ``memory_bytes`` more address space, ``cpu_seconds`` of CPU, no core."""
    _limit(resource.RLIMIT_CORE, 0)
    _limit(resource.RLIMIT_AS, _address_space() + memory_bytes)
    soft = cpu_seconds + _CPU_GRACE_SECONDS
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    # SIGXCPU at the soft limit, SIGKILL at the hard one should SIGXCPU be ignored.
    if hard == resource.RLIM_INFINITY or hard > soft + 1:
        resource.setrlimit(resource.RLIMIT_CPU, (soft, soft + 1))


def _sizing(request: dict[str, Any]) -> PassageSizing:
    """How the request's passages are cut: for its embedder, else by the estimate."""
    value = request.get("sizing")
    return ESTIMATED_SIZING if value is None else PassageSizing.from_json(value)


def _preload(request: dict[str, Any]) -> None:
    """Load the request's tokenizer here, once, rather than in each child (about 30 ms)."""
    with contextlib.suppress(Exception):  # a child meets the same error, and reports it
        chunking.preload(_sizing(request))


def prepare_and_answer(request: dict[str, Any]) -> None:
    """In the child: limit this process, prepare the file, and write the answer files."""
    limit_self(int(request["memory_bytes"]), int(request["cpu_seconds"]))
    out = Path(request["out_dir"])
    answer: dict[str, Any]
    try:
        prepared = storable(
            prepare_file(
                Path(request["source"]),
                str(request["file_type"]),
                chunk=bool(request["chunk"]),
                sizing=_sizing(request),
            )
        )
        (out / TEXT).write_text(prepared.text, encoding="utf-8")
        if prepared.thumbnail is not None:
            (out / THUMBNAIL).write_bytes(prepared.thumbnail)
        answer = {
            "pages": prepared.pages,
            "ocr_pages": prepared.ocr_pages,
            "chunks": [
                [chunk.text, chunk.page, chunk.page_name, chunk.tokens] for chunk in prepared.chunks
            ],
            "thumbnail": prepared.thumbnail is not None,
        }
        del prepared
    except MemoryError:
        # Handled once out of the except block below: the traceback keeps the frames (and
        # whatever filled the memory) alive until then.
        answer = {"error": "memory"}
    except BudgetExceeded as err:
        answer = {"error": "budget", "message": str(err)}
    except ExtractionError as err:
        answer = {"error": "extraction", "message": str(err)}
    except ThumbnailError as err:
        answer = {"error": "thumbnail", "message": str(err)}
    except Exception as err:
        answer = {"error": "unexpected", "message": type(err).__name__}
    # Written whole, then renamed: the parent reads a complete answer or none.
    partial = out / f"{RESULT}.partial"
    partial.write_text(json.dumps(answer, ensure_ascii=False), encoding="utf-8")
    partial.replace(out / RESULT)


# -- the server -----------------------------------------------------------------------------


class _Server:
    """Accepts requests, forks children, reports their ends, kills the abandoned ones."""

    def __init__(self, listener: socket.socket) -> None:
        self.listener = listener
        self.selector = selectors.DefaultSelector()
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        self.children: dict[int, socket.socket] = {}
        self.watched: dict[socket.socket, int] = {}

    def serve(self) -> None:
        """Run until stdin closes."""
        signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wakeup fd fires
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # ^C in a terminal is for the parent
        signal.set_wakeup_fd(self.wake_w)
        self.selector.register(self.listener, selectors.EVENT_READ)
        self.selector.register(self.wake_r, selectors.EVENT_READ)
        self.selector.register(sys.stdin.fileno(), selectors.EVENT_READ)
        sys.stdout.buffer.write(READY)
        sys.stdout.flush()
        # Nobody reads the pipe after this: a parser printing to stdout would fill it and
        # block its child, so stdout goes where stderr goes.
        os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
        while True:
            for key, _ in self.selector.select():
                source = key.fileobj
                if source is self.listener:
                    self._accept()
                elif source == self.wake_r:
                    with contextlib.suppress(BlockingIOError):
                        while os.read(self.wake_r, 512):
                            pass
                    self._reap()
                elif source == sys.stdin.fileno():
                    if not os.read(sys.stdin.fileno(), 512):
                        self._stop()
                        return
                elif isinstance(source, socket.socket):
                    self._abandoned(source)

    def _accept(self) -> None:
        conn, _ = self.listener.accept()
        try:
            conn.settimeout(5)
            request = json.loads(_read_line(conn))
            if not isinstance(request, dict):
                raise ValueError("a request is a JSON object")
        except (OSError, ValueError):
            conn.close()
            return
        _preload(request)
        pid = os.fork()
        if pid == 0:
            self._become_child(conn, request)
        self.children[pid] = conn
        try:
            conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
        except OSError:
            self._kill(pid)
            return
        conn.setblocking(False)
        self.selector.register(conn, selectors.EVENT_READ)
        self.watched[conn] = pid

    def _become_child(self, conn: socket.socket, request: dict[str, Any]) -> None:
        """In the forked child: drop the server's state, do the work, and exit."""
        code = _BROKEN
        try:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            self.selector.close()
            for own in (self.listener, conn, *self.children.values()):
                own.close()
            for fd in (self.wake_r, self.wake_w):
                os.close(fd)
            prepare_and_answer(request)
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)

    def _abandoned(self, conn: socket.socket) -> None:
        """The client closed its side (or sent more): kill its child, report the end."""
        pid = self.watched.pop(conn)
        self.selector.unregister(conn)
        self._kill(pid)

    def _kill(self, pid: int) -> None:
        # Not reaped yet (it is still in children), so the pid cannot have been reused.
        if pid in self.children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is None:
                continue
            if conn in self.watched:
                del self.watched[conn]
                self.selector.unregister(conn)
            with contextlib.suppress(OSError):
                conn.setblocking(True)
                conn.settimeout(5)
                message = {"exit": os.waitstatus_to_exitcode(status)}
                conn.sendall(json.dumps(message).encode() + b"\n")
            conn.close()

    def _stop(self) -> None:
        for pid in list(self.children):
            self._kill(pid)
        for pid in list(self.children):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


def _read_line(conn: socket.socket) -> bytes:
    """One newline-ended line (at most _MAX_REQUEST_BYTES)."""
    data = b""
    while not data.endswith(b"\n"):
        more = conn.recv(4096)
        if not more or len(data) + len(more) > _MAX_REQUEST_BYTES:
            raise ValueError("not a request line")
        data += more
    return data


def _warm_up() -> None:
    """Do once here what each child would otherwise do first, on small files made here.

    The first WEBP encoding, the first docx and pptx opened and the first text chunked cost
    a child 30-100 ms more than the next ones (lazy imports, parser and regex set-up). The
    OCR engine (with the `ocr` extra) is loaded here once, and its first reading done, rather
    than in every child: about 0.3 s and 100 MB of models.
    """
    with contextlib.suppress(Exception):  # a broken install fails each child's OCR instead
        ocr_engine()
    with tempfile.TemporaryDirectory(prefix="libflow-warm-") as tmp:
        folder = Path(tmp)
        document = pdfium.PdfDocument.new()
        try:
            document.new_page(72, 72).close()
            document.save(str(folder / "warm.pdf"))
        finally:
            document.close()
        picture = Image.new("RGB", (240, 60), "white")
        ImageDraw.Draw(picture).text((10, 10), "Warm 42", fill="black", font_size=32)
        picture.save(folder / "warm.png")
        text = docx.Document()
        text.add_paragraph("Warm words. Some more of them.")
        text.save(str(folder / "warm.docx"))
        deck = pptx.Presentation()
        deck.slides.add_slide(deck.slide_layouts[1]).shapes.title.text = "Warm"
        deck.save(str(folder / "warm.pptx"))
        (folder / "warm.txt").write_bytes("Warm words, caf\u00e9.".encode("cp1252"))
        sheets = openpyxl.Workbook()
        sheets.active.append(["Warm", 42])  # type: ignore[union-attr]
        sheets.save(folder / "warm.xlsx")
        (folder / "warm.html").write_text("<title>Warm</title><p>Warm <b>words</b></p>")
        warm = ("warm.pdf", "warm.png", "warm.docx", "warm.pptx", "warm.txt", "warm.xlsx")
        for name in (*warm, "warm.html"):
            with contextlib.suppress(Exception):  # a warm-up only: a child would meet it too
                prepare_file(folder / name, name.rsplit(".", 1)[1], chunk=True)


def _glibc() -> ctypes.CDLL | None:
    """The C library when it is glibc (it has mallopt and malloc_trim), else None."""
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    if libc is None or not (hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim")):
        return None
    return libc


def _unmap_what_is_freed() -> None:
    """Have glibc's malloc give freed memory back rather than keep it mapped.

    A child's memory budget is address space over what it starts with: memory the warm-up
    freed (the OCR engine's first reading frees hundreds of MB) but malloc kept mapped would
    be the child's on top of its budget. So large blocks are mapped on their own (unmapped
    when freed: a fixed threshold, where glibc would raise it after the first such free).
    Another malloc: the budget counts whatever it keeps.
    """
    libc = _glibc()
    if libc is not None:
        libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_BYTES)


def _trim_heap() -> None:
    """Give the heap's free memory back to the system (glibc), once warm."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


def main(argv: list[str]) -> int:
    """Serve on the Unix socket named by the first argument until stdin closes."""
    [path] = argv
    _unmap_what_is_freed()
    _warm_up()
    _trim_heap()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    try:
        _Server(listener).serve()
    finally:
        listener.close()
        with contextlib.suppress(OSError):
            os.unlink(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
