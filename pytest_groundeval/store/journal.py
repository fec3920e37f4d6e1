"""The journal (``runs/<run_id>.jsonl``), written as the cases are reported (read back by
``store.files.read``).

A header line, then one line per finished case. Each line is written and flushed to the
operating system as the case is reported, so a process killed with SIGKILL loses no
finished case (the kernel holds the bytes). ``fsync`` (durability against a machine
crash) runs on a background thread, grouping whatever lines arrived since the last one,
and once more at close: the hot path never waits for the disk.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import orjson
from pytest_groundeval.model import SCHEMA_VERSION
from pytest_groundeval.store.record import open_private

SYNC_INTERVAL_S = 0.2


def journal_batches(path: Path | str) -> list[dict[str, Any]]:
    """The ``batch`` lines of a journal (none in a record or an unreadable file)."""
    found = []
    try:
        lines = Path(path).read_bytes().splitlines()
    except OSError:
        return []
    for line in lines:
        if line.startswith(b'{"kind":"batch"'):
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue  # the line being written when the process died
            if isinstance(obj.get("id"), str) and isinstance(obj.get("custom_ids"), list):
                found.append(obj)
    return found


class JournalWriteError(OSError):
    """A line could not be written (disk full, I/O error): the journal takes no more lines and
    the message names the path and why."""

    def __init__(self, path: Path, cause: OSError) -> None:
        super().__init__(cause.errno, cause.strerror or str(cause))
        self.path = path
        self.message = f"could not write the journal {path}: {cause.strerror or cause}"

    def __str__(self) -> str:
        return self.message


class JournalWriter:
    """A run's journal being written (read back with ``store.files.read``)."""

    def __init__(self, path: Path, header: dict[str, Any]) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        # each run owns its journal: a reused path starts afresh (mode FILE_MODE); written with
        # os.write (no user-space buffer: a line is with the kernel when append returns, and a
        # failed write leaves nothing behind to fail again at close)
        self._fd: int | None = open_private(path)
        self.error: JournalWriteError | None = None  # the first write that failed
        self._dirty = threading.Event()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        try:
            self._write({"kind": "header", "schema_version": SCHEMA_VERSION, **header})
        except OSError:
            self._close_fd()
            raise
        self._syncer = threading.Thread(target=self._sync_loop, daemon=True, name="groundeval-journal")
        self._syncer.start()

    def _write(self, obj: dict[str, Any]) -> None:
        self._write_line(orjson.dumps(obj, default=str) + b"\n")

    def _write_line(self, line: bytes) -> None:
        with self._lock:
            if self.error is not None:
                raise self.error
            if self._fd is None:
                raise ValueError(f"the journal {self.path} is closed")
            view = memoryview(line)
            try:
                while view:
                    view = view[os.write(self._fd, view):]
            except OSError as e:  # disk full, I/O error, file size limit
                # a part of the line may be on disk: a torn last line, as after a kill (readers skip it)
                self.error = JournalWriteError(self.path, e)
                raise self.error from None
        self._dirty.set()

    def _sync_loop(self) -> None:
        while not self._closed.is_set():
            self._dirty.wait()
            if self._closed.is_set():
                return
            self._dirty.clear()
            self._sync()
            self._closed.wait(SYNC_INTERVAL_S)  # group the lines of the next interval

    def _sync(self) -> None:
        with self._lock:
            if self._fd is None:
                return
            try:
                os.fsync(self._fd)
            except OSError:
                pass

    def append_json(self, case: bytes, kind: str = "case") -> None:
        """A case result already serialised as a JSON object (kind ``rerun``: a later execution
        of a case already journalled, which readers leave out: the first result stands).
        Raises :class:`JournalWriteError` when it cannot be written (and for every line after
        that)."""
        self._write_line(b'{"kind":"' + kind.encode() + b'",' + case[1:] + b"\n")

    def append_specs(self, task: str, specs: list[dict[str, Any]]) -> None:
        """What each figure of ``task`` is (its ``MetricSpec`` list), once, before its first
        case: a journal is compared without its task installed, and declares only the tasks
        it holds cases of. Raises :class:`JournalWriteError` like :meth:`append_json`."""
        self._write({"kind": "specs", "task": task, "specs": specs})

    def append_batch(self, info: dict[str, Any]) -> None:
        """A batch this session's cases are answered by (``run/batch.py``): its id and the
        ``custom_id`` of each request, so a resumed session attaches to it instead of paying
        again. Raises :class:`JournalWriteError` like :meth:`append_json`."""
        self._write({"kind": "batch", **info})

    def _close_fd(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        if self._fd is None:
            return
        self._closed.set()
        self._dirty.set()
        self._syncer.join(timeout=5)
        with self._lock:
            try:
                os.fsync(self._fd)  # type: ignore[arg-type]
            except OSError as e:
                if self.error is None:
                    self.error = JournalWriteError(self.path, e)
            finally:
                self._close_fd()
