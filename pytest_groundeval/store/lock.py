"""One run per ``--run-record`` path: an advisory lock (``fcntl.flock``) that the controller
takes at start and holds for the session, so a second run given the same path is a usage
error (naming the path and the other run's pid) instead of two runs clobbering one journal
and one record without a word.

The lock is on ``<journal>.lock`` beside the journal (``<record>.jsonl``): every record path
that shares a journal shares the lock (``x.json`` and ``x.txt`` both journal to ``x.jsonl``).
The kernel releases an flock when its process dies, so a lock file left by a killed run is
not held: the next run takes it (a stale lock is not an error). The file holds the holder's
pid (for the message) and is removed when the session ends. A default record path
(``runs/<new run id>.json``) is unique to its run and is not locked.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest


class RunLock:
    def __init__(self, path: Path, fd: int, made: list[Path]) -> None:
        self.path = path
        self._fd: int | None = fd
        self._made = made  # folders made for the lock (removed again when still empty)

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            self.path.unlink(missing_ok=True)  # while still held: no one can be holding this file
        finally:
            os.close(fd)  # releases the lock
        for folder in self._made:  # deepest first; a run that wrote its record there keeps it
            try:
                folder.rmdir()
            except OSError:
                break


def lock_path(record: Path) -> Path:
    journal = record.with_suffix(".jsonl")
    return journal.with_name(journal.name + ".lock")


def acquire(record: Path) -> RunLock | None:
    """The lock for ``record``'s paths, or a usage error when another live run holds it. None
    when the lock file cannot be made (the folder is not writable: the record and journal
    writes then say so themselves)."""
    path = lock_path(record).absolute()
    made = [p for p in [path.parent, *path.parent.parents] if not p.exists()]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            who = f"pid {holder}" if holder else "another process (its pid is not written yet)"
            raise pytest.UsageError(
                f"groundeval: --run-record {record}: another groundeval run ({who}) is writing this record and "
                f"its journal {record.with_suffix('.jsonl')} (lock {path}); wait for it to finish, or give this "
                "run another --run-record path") from None
        # the holder before us may have removed the file between our open and our lock: then we
        # hold a lock on a name no one else sees; open the path again
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return RunLock(path, fd, made)


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 64, 0).decode().strip()
        return int(text) if text else None
    except (OSError, ValueError):
        return None
