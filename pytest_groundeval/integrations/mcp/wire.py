"""The line protocol between the stdio MCP server (``server.py``, started by an agent's MCP
client) and the harness's side of a case (``host.py``): one JSON object per line over a Unix
socket. Standard library only: the server imports nothing heavy.

The server's first line is ``{"op": "hello", "token": ..., "pid": ...}`` (the spec file's
token: a connection without it is closed unanswered); the harness answers ``{"tools": [...]}``
(each ``{"name", "description", "inputSchema"}``). Then ``{"op": "call", "id": N, "name": ...,
"arguments": {...}}`` lines, answered in any order by ``{"id": N, "text": ..., "error": bool}``.
"""

from __future__ import annotations

import json
import os
import socket
import time
from typing import Any

MAX_LINE = 64 * 1024 * 1024  # one message; a tool result is bounded far below this by the record
CHUNK = 1 << 20  # bytes read at most at once


def send(sock: socket.socket, message: dict[str, Any]) -> None:
    sock.sendall(json.dumps(message, ensure_ascii=False).encode("utf-8") + b"\n")


def _raised_by_a_handler(exc: OSError) -> None:
    """Re-raise what a signal handler raised during a read (the harness's call timeout, a
    ``TimeoutError`` subclass with no errno): it is not the end of the stream."""
    if exc.errno is None and type(exc) is not TimeoutError:  # (a socket timeout is TimeoutError itself)
        raise exc


class Lines:
    """The JSON messages arriving on a socket, one per line (None at end of stream). A long
    line (an agent's 50 MB answer) is gathered in one growing buffer, scanned once."""

    def __init__(self, sock: socket.socket, spin: float = 0.0) -> None:
        self.sock = sock
        self.spin = spin  # seconds to poll (yielding the CPU) for a quick answer before sleeping in recv
        self._buffer = bytearray()
        self._scanned = 0  # no newline before this offset of the buffer
        self._chunk: memoryview | None = None

    def next(self) -> dict[str, Any] | None:
        while (end := self._buffer.find(b"\n", self._scanned)) < 0:
            self._scanned = len(self._buffer)
            if not self._fill():
                return None
            if len(self._buffer) > MAX_LINE:
                return None
        line = self._buffer[:end]
        del self._buffer[:end + 1]
        self._scanned = 0
        try:
            message = json.loads(line)
        except ValueError:
            return None
        return message if isinstance(message, dict) else None

    def _fill(self) -> bool:
        """More bytes into the buffer (read into one reused chunk: ``recv(1 MiB)`` would allocate
        and free a megabyte each time); False at the end of the stream."""
        if self._chunk is None:
            self._chunk = memoryview(bytearray(CHUNK))
        try:
            n = self._polled() if self.spin else None
            if n is None:
                n = self.sock.recv_into(self._chunk)
        except OSError as exc:
            _raised_by_a_handler(exc)
            return False
        if not n:
            return False
        self._buffer += self._chunk[:n]
        return True

    def _polled(self) -> int | None:
        """What arrives within ``spin`` seconds, polled without sleeping (None: nothing yet). An
        answer that takes a few tens of microseconds on the other CPU is then read without this
        process going to sleep and waiting, on a busy machine, to be scheduled again; the CPU is
        yielded between polls, so a peer on this CPU runs meanwhile."""
        end = time.perf_counter() + self.spin
        while True:
            try:
                return self.sock.recv_into(self._chunk, 0, socket.MSG_DONTWAIT)
            except BlockingIOError:
                pass
            if time.perf_counter() >= end:
                return None
            os.sched_yield()

    def take(self, size: int) -> bytes | None:
        """The next ``size`` raw bytes (a blob sent after a line that announced it), None at end of stream."""
        while len(self._buffer) < size:
            if not self._fill():
                return None
        with memoryview(self._buffer) as view:
            blob = bytes(view[:size])
        del self._buffer[:size]
        self._scanned = 0
        return blob


__all__ = ["Lines", "send"]
