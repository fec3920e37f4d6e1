"""The agent host's process (``python -m pytest_groundeval.agents.host_main SPEC ROOTDIR``),
started by ``agents/host.py``: two processes, standard library only until the agent is imported.
(``--command EXE ARGS``: the same keeper around an ``mcp:COMMAND``, :func:`command`.)

* The **keeper** (this process): a Linux child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``),
  so every process the agent starts stays its descendant, a double fork or ``setsid``
  included. It imports nothing of the agent. On its control socket (fd ``GROUNDEVAL_HOST_CTL``)
  ``r`` kills every descendant but the server (the end of a case whose agent declares
  per-case processes), answered ``r``; end of stream (the harness closed it, or died) kills
  every descendant and exits. When the server exits it kills every descendant, writes the
  server's status (``{"exit": N}`` or ``{"signal": N}``) on the control socket and exits.
* The **server** (its forked child): imports the user's ``module:Class``, and answers the
  harness's ``run`` requests over the agent socket (fd ``GROUNDEVAL_HOST_FD``), one JSON object per line
  (``integrations/mcp/wire.py``), with its doorbell (the pipe fd ``GROUNDEVAL_HOST_BELL``:
  ``host_server.Channel``). See ``agents/host.py`` for the messages.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import socket
import sys
import time
from typing import Any

PR_SET_CHILD_SUBREAPER = 36


def subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux; False elsewhere)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _children() -> dict[int, list[int]]:
    """Every live process's children, from ``/proc`` (zombies left out)."""
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] == b"Z":
            continue
        tree.setdefault(int(fields[1]), []).append(int(entry))
    return tree


KILL_WAIT = 20.0  # seconds a killed descendant may take to be gone (less than the harness's 30 s wait)


def kill_descendants(server: int, keep: frozenset[int] = frozenset(), timeout: float = KILL_WAIT) -> None:
    """SIGKILL every descendant of this process but ``keep`` (and theirs), and return once none
    is left: a killed process is gone only when it has exited (one in uninterruptible sleep on a
    busy machine exits when its I/O is done), and one forking while it is killed is caught in
    the next round. Gives up after ``timeout`` seconds (a process stuck in the kernel)."""
    me = os.getpid()
    deadline, pause = time.monotonic() + timeout, 0.001
    while True:
        tree = _children()
        todo, targets = list(tree.get(me, [])), []
        while todo:  # (a kept process is spared, not its children)
            pid = todo.pop()
            if pid not in keep:
                targets.append(pid)
            todo.extend(tree.get(pid, []))
        if not targets:
            return
        for pid in targets:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _reap_others(server)
        if time.monotonic() >= deadline:
            return
        time.sleep(pause)  # killed processes exit, and their orphans reach this reaper
        pause = min(pause * 2, 0.05)


def _status(code: int) -> dict[str, int]:
    if os.WIFSIGNALED(code):
        return {"signal": os.WTERMSIG(code)}
    return {"exit": os.WEXITSTATUS(code) if os.WIFEXITED(code) else code}


def keep(server: int, ctl: socket.socket) -> int:
    """The keeper's loop: until the server exits or the harness closes the control socket."""
    pidfd = os.pidfd_open(server)
    while True:
        ready, _, _ = select.select([ctl, pidfd], [], [], 5.0)
        _reap_others(server)
        if pidfd in ready:
            _, code = os.waitpid(server, 0)
            kill_descendants(server)
            try:
                ctl.sendall(json.dumps(_status(code)).encode() + b"\n")
            except OSError:
                pass
            return 0
        if ctl in ready:
            try:
                data = ctl.recv(64)
            except OSError:
                data = b""
            if not data:  # the harness is done with this host (or gone)
                kill_descendants(server)
                return 0
            if b"r" in data:
                kill_descendants(server, keep=frozenset({server}))
                ctl.sendall(b"r")


def _reap_others(server: int) -> None:
    """Reap the orphans that died (never the server: its status is read by :func:`keep`)."""
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return
        if info is None or info.si_pid == server:
            return
        os.waitpid(info.si_pid, 0)


def command(argv: list[str]) -> int:
    """``--command EXE ARGS``: the keeper of an ``mcp:COMMAND`` (``agents/command.py``): runs
    it with this process's stdin, stdout and stderr, and when it exits (or this keeper gets
    SIGTERM: the harness ended the attempt) kills every process it started, then exits as it
    did (its status, or its signal)."""
    subreaper()
    child = os.fork()
    if child == 0:
        try:
            os.execv(argv[0], argv)
        finally:
            os._exit(127)
    for fd in (0, 1):  # the command's pipes close when it and its descendants are gone, not with the keeper
        os.dup2(os.open(os.devnull, os.O_RDWR), fd)

    def stop(signum: int, frame: Any) -> None:
        kill_descendants(child)
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _, code = os.waitpid(child, 0)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    kill_descendants(child)
    if os.WIFSIGNALED(code):
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the command's signal, without a core of this keeper
        signal.signal(os.WTERMSIG(code), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(code))
    return os.WEXITSTATUS(code) if os.WIFEXITED(code) else 1


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--command":
        return command(argv[1:])
    spec, rootdir = argv[0], argv[1] or None
    agent_fd, ctl_fd = int(os.environ.pop("GROUNDEVAL_HOST_FD")), int(os.environ.pop("GROUNDEVAL_HOST_CTL"))
    bell = int(os.environ.pop("GROUNDEVAL_HOST_BELL"))
    path = json.loads(os.environ.pop("GROUNDEVAL_HOST_PATH", "[]"))
    sys.path[:] = [p for p in path if isinstance(p, str)] + [p for p in sys.path if p not in path]
    subreaper()
    server = os.fork()
    if server == 0:
        os.close(ctl_fd)
        from pytest_groundeval.agents.host_server import serve

        serve(spec, rootdir, socket.socket(fileno=agent_fd), bell)
        os._exit(0)
    os.close(agent_fd)
    os.close(bell)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # ended by its control socket (or SIGKILL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    return keep(server, socket.socket(fileno=ctl_fd))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
