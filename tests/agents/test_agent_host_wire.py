"""The agent host's channel read (``integrations/mcp/wire.Lines`` with ``spin``): an answer is
polled for a moment before the reader sleeps in ``recv``; what the blocking read would do
(a later message, the end of the stream, the harness's call timeout) still holds."""

from __future__ import annotations

import socket
import threading

import pytest

from pytest_groundeval.integrations.mcp.wire import Lines


class _Watched:
    """A socket whose blocking reads are announced (``blocking``) and counted."""

    def __init__(self, sock: socket.socket, raise_polling: BaseException | None = None) -> None:
        self.sock, self.raise_polling = sock, raise_polling
        self.blocking, self.polls, self.blocked = threading.Event(), 0, 0

    def recv_into(self, buffer, nbytes=0, flags=0):
        if flags & socket.MSG_DONTWAIT:
            self.polls += 1
            if self.raise_polling is not None:
                raise self.raise_polling
        else:
            self.blocked += 1
            self.blocking.set()
        return self.sock.recv_into(buffer, nbytes, flags)


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def test_a_waiting_answer_is_read_by_polling_without_a_blocking_read(pair):
    a, b = pair
    watched = _Watched(b)
    a.sendall(b'{"op": "done", "id": 1}\n')
    assert Lines(watched, spin=1.0).next() == {"op": "done", "id": 1}
    assert watched.polls >= 1 and watched.blocked == 0


def test_an_answer_later_than_the_poll_is_read_by_the_blocking_read(pair):
    a, b = pair
    watched = _Watched(b)
    sender = threading.Thread(target=lambda: (watched.blocking.wait(30), a.sendall(b'{"op": "done", "id": 2}\n')))
    sender.start()
    assert Lines(watched, spin=1e-5).next() == {"op": "done", "id": 2}
    sender.join()
    assert watched.polls >= 1 and watched.blocked == 1


def test_the_end_of_the_stream_while_polling_is_none(pair):
    a, b = pair
    a.close()
    assert Lines(b, spin=1.0).next() is None


class _CallTimeout(TimeoutError):
    """As the harness's call timeout: raised by a signal handler, no errno."""


def test_the_call_timeout_raised_while_polling_is_not_the_end_of_the_stream(pair):
    _, b = pair
    with pytest.raises(_CallTimeout):
        Lines(_Watched(b, raise_polling=_CallTimeout("deadline")), spin=1.0).next()
