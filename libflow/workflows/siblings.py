"""The API processes of one data dir, woken by each other: a run's new events, a cancel.

Each process binds a Unix datagram socket in a directory named after the data dir (under
the temp dir: a socket's path must stay short) and sends a message to every other socket
there. A message only wakes its receiver: what it is about is already written (a run's
events in the data dir, a cancel in the run's row), so a message that is lost (a process
starting, a full buffer) costs a poll interval, never an event or a cancel.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import logging
import os
import secrets
import socket
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

logger = logging.getLogger("libflow.siblings")

# A topic and a run id: far below any datagram limit.
MAX_MESSAGE_BYTES = 256
Handler = Callable[[str], None]


def siblings_dir(data_dir: Path) -> Path:
    """The directory of the sockets of every process serving ``data_dir``."""
    digest = hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"libflow-{digest}"


class Siblings:
    """This process's socket among its siblings', and what each topic's messages call."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._socket: socket.socket | None = None
        self._path: Path | None = None
        self._handlers: dict[str, Handler] = {}

    def open(self) -> None:
        """Bind this process's socket and read what siblings send (on the running loop)."""
        self._path = self.directory / f"{os.getpid()}-{secrets.token_hex(4)}.sock"
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.setblocking(False)
        for last_try in (False, True):
            self.directory.mkdir(mode=0o700, exist_ok=True)
            info = self.directory.stat()
            if info.st_uid != os.getuid() or stat.S_IMODE(info.st_mode) & 0o077:
                # Another user's directory: neither trust its messages nor send it run ids.
                sock.close()
                raise PermissionError(f"{self.directory} is not this user's alone")
            try:
                sock.bind(str(self._path))
                break
            except FileNotFoundError:
                if last_try:  # removed again by a sibling that was the last to close
                    sock.close()
                    raise
        self._socket = sock
        asyncio.get_running_loop().add_reader(sock.fileno(), self._receive)

    def on(self, topic: str, handler: Handler) -> None:
        """Call ``handler(text)`` for each message of ``topic`` a sibling sends."""
        self._handlers[topic] = handler

    def send(self, topic: str, *texts: str) -> None:
        """Send each text to every sibling now; never waits (a full sibling misses it)."""
        if self._socket is None or not texts:
            return
        messages = [f"{topic}\n{text}".encode()[:MAX_MESSAGE_BYTES] for text in texts]
        try:
            names = os.listdir(self.directory)
        except OSError:
            return
        for name in names:
            path = self.directory / name
            if path == self._path or not name.endswith(".sock"):
                continue
            try:
                for message in messages:
                    self._socket.sendto(message, str(path))
            except OSError as err:
                if err.errno == errno.ECONNREFUSED:
                    # Nothing reads it: a process that died without removing its socket.
                    with contextlib.suppress(OSError):
                        path.unlink()
                elif err.errno not in (errno.ENOENT, errno.EAGAIN, errno.ENOBUFS):
                    logger.debug("sibling %s not told: %r", name, err)

    def _receive(self) -> None:
        assert self._socket is not None
        while True:
            try:
                message = self._socket.recv(MAX_MESSAGE_BYTES)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as err:
                logger.warning("sibling messages unreadable: %r", err)
                return
            topic, _, text = message.decode(errors="replace").partition("\n")
            handler = self._handlers.get(topic)
            if handler is not None:
                handler(text)

    def close(self) -> None:
        """Stop reading and remove this process's socket."""
        if self._socket is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(self._socket.fileno())
            self._socket.close()
            self._socket = None
        if self._path is not None:
            with contextlib.suppress(OSError):
                self._path.unlink()
                self.directory.rmdir()  # the last one out: no empty directory left behind
            self._path = None
