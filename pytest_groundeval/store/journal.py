"""The journal (``runs/<run_id>.jsonl``) and reading stored runs back.

A header line, then one line per finished case. Each line is written and flushed to the
operating system as the case is reported, so a process killed with SIGKILL loses no
finished case (the kernel holds the bytes). ``fsync`` (durability against a machine
crash) runs on a background thread, grouping whatever lines arrived since the last one,
and once more at close: the hot path never waits for the disk.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from pytest_groundeval.model import SCHEMA_VERSION, CaseResult
from pytest_groundeval.store.record import open_private

SYNC_INTERVAL_S = 0.2


class JournalWriteError(OSError):
    """A line could not be written (disk full, I/O error): the journal takes no more lines and
    the message names the path and why."""

    def __init__(self, path: Path, cause: OSError) -> None:
        super().__init__(cause.errno, cause.strerror or str(cause))
        self.path = path
        self.message = f"could not write the journal {path}: {cause.strerror or cause}"

    def __str__(self) -> str:
        return self.message


class Journal:
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


@dataclass
class StoredRun:
    """A finished or interrupted run, read back from its record or its journal. ``agent`` and
    ``model`` are what that run asked for (``--agent``/``--model``); ``answered_by`` and
    ``answered_model`` what its record says answered (None from a journal)."""

    path: Path
    run_id: str | None
    agent: str | None
    model: str | None
    cases: dict[tuple[str, str], CaseResult]
    answered_by: str | None = None
    answered_model: str | None = None


def _case(obj: dict[str, Any], path: Path, where: str) -> CaseResult:
    try:
        return CaseResult.model_validate(obj)
    except ValidationError as e:
        raise ValueError(f"{path}: {where} is not a groundeval {SCHEMA_VERSION} case result "
                         f"({e.errors()[0]['loc']}: {e.errors()[0]['msg']}); re-run instead") from None


def load_run(path: Path) -> StoredRun:
    """Read a run record (``.json``) or journal (``.jsonl``; a torn last line is ignored)."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        header: dict[str, Any] = {}
        cases: dict[tuple[str, str], CaseResult] = {}
        for n, line in enumerate(text.splitlines(), 1):
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue  # the line being written when the process died
            kind = obj.pop("kind", None)
            if kind == "header" and not header:
                header = obj
            elif kind == "case":
                case = _case(obj, path, f"line {n}")
                cases[case.result_key] = case
        if not header and not cases:
            raise ValueError(f"{path}: the journal is empty (its run was stopped before it wrote its first "
                             "line): nothing to resume; re-run instead")
        _check_version(header.get("schema_version"), path)
        asked = header.get("requested") or {}
        agents = sorted({c.agent for c in cases.values() if c.agent})
        models = sorted({c.model for c in cases.values() if c.model})
        return StoredRun(path, header.get("run_id"), asked.get("agent"), asked.get("model"), cases,
                         ", ".join(agents) or None, ", ".join(models) or None)
    record = json.loads(text)
    _check_version(record.get("schema_version"), path)
    cases = {}
    for i, obj in enumerate(record.get("cases", [])):
        case = _case(obj, path, f"cases[{i}]")
        cases[case.result_key] = case
    asked = record.get("requested") or {}
    return StoredRun(path, record.get("run_id"), asked.get("agent"), asked.get("model"), cases,
                     record.get("agent"), record.get("model"))


def _check_version(version: Any, path: Path) -> None:
    if version != SCHEMA_VERSION:
        raise ValueError(f"{path}: written by another groundeval record format ({version!r}; this one reads "
                         f"{SCHEMA_VERSION!r}); re-run instead")


def find_run(spec: str, runs_dir: Path) -> Path:
    """``last`` → the newest record or journal under ``runs_dir``; else the path itself."""
    if spec != "last":
        path = Path(spec)
        if not path.exists():
            raise FileNotFoundError(f"no run record or journal at {path}")
        return path
    candidates = [p for p in runs_dir.glob("*.json*") if p.suffix in (".json", ".jsonl")] if runs_dir.is_dir() else []
    if not candidates:
        raise FileNotFoundError(f"no run under {runs_dir} to resume ('last')")
    return max(candidates, key=lambda p: p.stat().st_mtime)
