"""The keeper's kill (agents/host_main.kill_descendants) returns only once every descendant is
gone, however long a killed process takes to exit (on a busy machine, one in uninterruptible
sleep exits when its I/O is done): the session's end is "nothing of the agent is left"."""

from __future__ import annotations

import os
import threading

from pytest_groundeval.agents import host_main

SLOW = 4242  # a "process" that exits 1.5 s after its first SIGKILL (no bound on rounds hides it)


def _slow_tree(monkeypatch, me: int, dies_after: float):
    killed: dict[int, threading.Event] = {}
    gone = threading.Event()

    def children():
        return {} if gone.is_set() else {me: [SLOW]}

    def kill(pid, sig):
        assert pid == SLOW
        if pid not in killed:
            killed[pid] = threading.Event()
            timer = threading.Timer(dies_after, gone.set)
            timer.daemon = True
            timer.start()

    monkeypatch.setattr(host_main, "_children", children)
    monkeypatch.setattr(host_main.os, "kill", kill)
    monkeypatch.setattr(host_main, "_reap_others", lambda server: None)
    return gone


def test_the_kill_waits_for_a_slow_dying_descendant(monkeypatch):
    gone = _slow_tree(monkeypatch, os.getpid(), dies_after=1.5)
    host_main.kill_descendants(server=-1)
    assert gone.is_set()  # returned only once the killed process was gone


def test_the_kill_gives_up_at_its_timeout_on_a_process_that_never_exits(monkeypatch):
    gone = _slow_tree(monkeypatch, os.getpid(), dies_after=3600)
    host_main.kill_descendants(server=-1, timeout=0.2)
    assert not gone.is_set()
