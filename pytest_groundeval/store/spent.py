"""What each agent attempt spent, written as it is reported, beside the journal
(``<run>.jsonl.spent-<pid>``, one file per pytest process: xdist workers write their own).

A case's usage reaches the journal only when the case finishes. A session killed mid-case
(SIGKILL) would lose what its unfinished cases had already paid for, and ``--resume`` runs
them again. So each attempt writes a ``sent`` line as it starts and a ``spent`` line each time
its running usage is known (``calls.report_spent``, and its end: ``done``). Each line goes to
the kernel at once (``os.write``, no user-space buffer), so a SIGKILL loses none.

``--resume`` reads the files of the journal it resumes (:func:`unfinished`): the cases with
no line in that journal paid what their attempts last reported; an attempt with no ``done``
line was cut by the kill, and what it spent after its last report is unknown (counted, not
guessed).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson

from pytest_groundeval.store.record import FILE_MODE

SUFFIX = ".spent-"
WORKERINPUT = "groundeval_spent_journal"  # xdist: the controller's journal, beside which a worker writes
_SINK: "SpentLog | None" = None


class SpentLog:
    def __init__(self, journal: Path) -> None:
        self.path = journal.with_name(f"{journal.name}{SUFFIX}{os.getpid()}")
        self._fd: int | None = None

    def write(self, obj: dict[str, Any]) -> None:
        try:
            if self._fd is None:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, FILE_MODE)
            os.write(self._fd, orjson.dumps(obj, default=str) + b"\n")
        except OSError:
            pass  # bookkeeping for a later resume: never a reason to fail the case

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def open_sink(journal: Path | None) -> None:
    """This process's attempts write beside ``journal`` (None: nowhere)."""
    global _SINK
    if _SINK is not None:
        _SINK.close()
    _SINK = SpentLog(journal) if journal is not None else None


def sent(case: tuple, attempt: int) -> None:
    if _SINK is not None:
        _SINK.write({"kind": "sent", "case": list(case), "attempt": attempt})


def spent(case: tuple, attempt: int, usage: dict[str, Any] | None, done: bool = False) -> None:
    if _SINK is not None and (usage or done):
        _SINK.write({"kind": "spent", "case": list(case), "attempt": attempt, "usage": usage or None, "done": done})


def files_of(journal: Path) -> list[Path]:
    return sorted(journal.parent.glob(f"{journal.name}{SUFFIX}*"))


def remove(journal: Path) -> None:
    for path in files_of(journal):
        path.unlink(missing_ok=True)


def unfinished(journal: Path, finished: set[tuple]) -> tuple[list[dict[str, Any]], int, set[tuple]]:
    """What the attempts of cases not in ``finished`` (result keys) reported, as written
    beside ``journal``: each attempt's last usage, the number of attempts cut before their
    end, and those cases."""
    last: dict[tuple, dict[str, Any]] = {}
    for path in files_of(journal):
        try:
            lines = path.read_bytes().splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                obj = orjson.loads(line)
                case, attempt = tuple(obj["case"]), int(obj["attempt"])
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                continue  # the line being written at the kill
            if case in finished:
                continue
            entry = last.setdefault((path.name, case, attempt), {"usage": None, "done": False})
            if obj.get("kind") == "spent":
                entry["usage"] = obj.get("usage") if isinstance(obj.get("usage"), dict) else entry["usage"]
                entry["done"] = entry["done"] or obj.get("done") is True
    usages = [e["usage"] for e in last.values() if e["usage"]]
    cut = sum(not e["done"] for e in last.values())
    return usages, cut, {key[1] for key in last}
