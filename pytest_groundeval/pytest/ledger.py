"""An xdist worker's crash ledger (read by ``crashes.py`` in the controller when the worker
dies): a line when an agent call starts, on which thread the agent is called, when the call
ends, and when a pytest-timeout timer fired; ``faulthandler`` writes its dump beside it, naming
the thread that received the fatal signal. Lines are written unbuffered (``os.write``): the
kernel keeps them when the process dies. Pure of pytest (the evaluator hands :meth:`WorkerLedger.on_agent_thread` to the runner, ``runner.CallObservers``).
"""

from __future__ import annotations

import faulthandler
import json
import os
import threading
from pathlib import Path
from typing import Any, Callable

from pytest_groundeval.model import CaseRef

def _key(ref: CaseRef) -> list:
    return list(ref.key)


class WorkerLedger:
    """A worker's side: calls started and ended, timers that fired."""

    def __init__(self, folder: Path, worker_id: str) -> None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
        self._fd: int | None = os.open(folder / f"{worker_id}.jsonl", flags, 0o600)
        self._fault = open(folder / f"{worker_id}.fault", "w")  # noqa: SIM115 - held until the process ends
        faulthandler.enable(file=self._fault, all_threads=True)
        self._lock = threading.Lock()

    def _line(self, **obj: Any) -> None:
        with self._lock:
            if self._fd is not None:
                os.write(self._fd, json.dumps(obj).encode() + b"\n")

    def call(self, ref: CaseRef, fn: Callable[[], Any]) -> Any:
        self._line(event="start", key=_key(ref), thread=threading.get_ident())
        try:
            return fn()
        finally:
            self._line(event="end", key=_key(ref))

    def on_agent_thread(self, ref: CaseRef) -> None:
        """The agent is called for ``ref`` on this thread (a call policy's deadline runs it on a
        thread of its own)."""
        self._line(event="thread", key=_key(ref), thread=threading.get_ident())

    def on_tools_offered(self, ref: CaseRef, tools: list[str]) -> None:
        """The harness gave the agent of ``ref`` tools (``toolcalls.ToolLog.offer``): a crash
        after this keeps the case in ``grounded`` (crashes.py)."""
        self._line(event="offered", key=_key(ref), tools=list(tools))

    def timed_out(self, ref: CaseRef, message: str) -> None:
        self._line(event="timeout", key=_key(ref), message=message)

    def close(self) -> None:
        """The ledger's file (the fault file stays open: faulthandler may hold it until the
        process exits, after pytest's own faulthandler clean-up)."""
        with self._lock:
            fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
