"""The one reader and the one writer of stored runs.

:func:`read` gives a record (``runs/<run_id>.json``, a shard's record included: its
``completeness.shard`` is set) as a typed :class:`RunRecord`, or a journal
(``runs/<run_id>.jsonl``: a header line, then one line per case; a torn last line is
ignored) as a typed :class:`Journal`. Every file it cannot give that way is a
:class:`StoreError` naming the file, what is wrong and what to do: missing or unreadable,
not JSON, not a groundeval file (foreign), another (older) or a newer record format, or
not valid as one. What a file written before a field existed says is read in its own words
(``model.STORED``: a case error whose message begins "not run" is not run). The reporter's
``--resume`` / ``--rescore``, ``groundeval compare``, ``groundeval report`` and ``groundeval
merge`` all read through it.

:func:`write` writes a typed record: redacted (``redact.py``: nothing leaves a run with a
key in it), atomically (a temp file in the same folder, fsync, rename: a reader sees the
old file or the new one, never half of one), owner-only, and, when the record is complete,
with the journal it folds in removed (it holds nothing the record does not).
"""

from __future__ import annotations

import json
import os
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pytest_groundeval.model import (SCHEMA_VERSION, STORED, CaseResult, LegacySummaryError, MetricSpec, RunRecord,
                                     require_specs)
from pytest_groundeval.store.record import escape_unencodable, write_json_atomic
from pytest_groundeval.store.redact import redact_json


# the reviews beside a record (``reviews.py``: ``runs/<run_id>.reviews.jsonl``): neither a record nor a journal
REVIEWS_SUFFIX = ".reviews.jsonl"


class StoreError(ValueError):
    """A stored run that cannot be read; the message names the file and what to do."""


class Journal(BaseModel):
    """A run's journal as read back: its header and the cases it holds (one result per
    case and repeat, the last line of each; ``reruns``: later executions, kept apart)."""

    model_config = ConfigDict(extra="forbid")

    schema_version: str
    run_id: str | None = None
    started_at: str | None = None
    agent: str | None = None  # what --agent asked for
    model: str | None = None  # what --model asked for
    requested: dict[str, str | None] = Field(default_factory=dict)
    options: dict[str, Any] = Field(default_factory=dict)
    # per task, what each figure is: its ``specs`` line, written before the task's first case
    # (None: a journal written before journals declared them)
    specs: dict[str, list[MetricSpec]] | None = None
    cases: list[CaseResult] = Field(default_factory=list)
    reruns: list[CaseResult] = Field(default_factory=list)
    # the complete record a --resume of this journal wrote (its "folded" line): resuming it again
    # would pay for those cases twice
    folded_into: str | None = None

    @property
    def answered_by(self) -> str | None:
        """The agents that answered, as the cases name them (None: no case says)."""
        return ", ".join(sorted({c.agent for c in self.cases if c.agent})) or None

    @property
    def answered_model(self) -> str | None:
        return ", ".join(sorted({c.model for c in self.cases if c.model})) or None


def _version(text: Any) -> tuple[int, ...] | None:
    try:
        return tuple(int(p) for p in str(text).split("."))
    except ValueError:
        return None


def _check_version(version: Any, path: Path, what: str) -> None:
    if version == SCHEMA_VERSION:
        return
    found, ours = _version(version), _version(SCHEMA_VERSION)
    if version is None or found is None:
        raise StoreError(f"{path} is not a groundeval run record or journal (no record format version): "
                         "give a runs/*.json record or runs/*.jsonl journal a groundeval run wrote")
    if found > ours:  # type: ignore[operator]
        raise StoreError(f"{path}: {what} written by a newer groundeval record format ({version!r}; this one reads "
                         f"{SCHEMA_VERSION!r}): upgrade groundeval to read it")
    raise StoreError(f"{path}: {what} written by another groundeval record format ({version!r}; this one reads "
                     f"{SCHEMA_VERSION!r}): re-run its cases to get one this version reads")


def _invalid(path: Path, where: str, e: ValidationError) -> StoreError:
    first = e.errors()[0]
    loc = ".".join(map(str, first["loc"])) or "<root>"
    return StoreError(f"{path}: {where} is not valid in groundeval record format {SCHEMA_VERSION!r} "
                      f"({loc}: {first['msg']}); re-run its cases to get a valid one")


def _bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise StoreError(f"cannot read {path}: no such file (give the path of a run record or journal)") from None
    except IsADirectoryError:
        raise StoreError(f"cannot read {path}: a folder, not a run record or journal") from None
    except OSError as e:
        raise StoreError(f"cannot read {path}: {e.strerror or e}") from None


def _is_journal(path: Path, raw: bytes) -> bool:
    if path.suffix == ".jsonl":
        return True
    first = raw.split(b"\n", 1)[0]
    return first.startswith(b'{"kind":"header"') and raw.count(b"\n") >= 1 and path.suffix != ".json"


def _read_journal(path: Path, raw: bytes) -> Journal:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise StoreError(f"{path}: not a groundeval journal (not UTF-8 text: {e})") from None
    header: dict[str, Any] | None = None
    cases: dict[tuple, CaseResult] = {}
    reruns: list[CaseResult] = []
    specs: dict[str, list[Any]] = {}
    folded: str | None = None
    for n, line in enumerate(text.splitlines(), 1):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue  # the line being written when the process died
        if not isinstance(obj, dict):
            continue
        kind = obj.pop("kind", None)
        if kind == "header" and header is None:
            _check_version(obj.get("schema_version"), path, "a journal")
            header = obj
        elif kind == "folded" and header is not None and isinstance(obj.get("record"), str):
            folded = obj["record"]
        elif kind == "specs" and header is not None and isinstance(obj.get("task"), str):
            specs[obj["task"]] = obj.get("specs")
        elif kind in ("case", "rerun"):
            if header is None:
                break  # a journal's first line is its header
            try:
                case = CaseResult.model_validate(obj, context=STORED)
            except ValidationError as e:
                raise _invalid(path, f"line {n}", e) from None
            if kind == "case":
                cases[case.result_key] = case
            else:
                reruns.append(case)
    if header is None:
        if not cases and not text.strip():
            raise StoreError(f"{path}: the journal is empty (its run was stopped before it wrote its first line): "
                             "nothing in it; re-run instead")
        raise StoreError(f"{path} is not a groundeval journal (no header line): give a runs/*.jsonl journal a "
                         "groundeval run wrote")
    try:
        return Journal.model_validate({**{k: v for k, v in header.items() if k in Journal.model_fields},
                                       "specs": specs or None, "cases": list(cases.values()), "reruns": reruns,
                                       "folded_into": folded})
    except ValidationError as e:
        raise _invalid(path, "its header", e) from None


def _read_record(path: Path, raw: bytes, cases_only: bool) -> RunRecord:
    try:
        return RunRecord.model_validate_json(raw, context=STORED)  # the common case, in pydantic-core; else say why not
    except ValidationError:
        pass
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise StoreError(f"{path} is not a JSON run record ({e}): give a runs/*.json record a groundeval run "
                         "wrote") from None
    if not isinstance(data, dict):
        raise StoreError(f"{path} is not a groundeval run record (a JSON {type(data).__name__}): give a "
                         "runs/*.json record a groundeval run wrote")
    _check_version(data.get("schema_version"), path, "a record")
    try:
        require_specs(data, path)  # a record from before declared metrics: re-score it, never guess kinds
    except LegacySummaryError as e:
        if not cases_only:
            raise StoreError(str(e)) from None
        data["summary"] = {}  # --resume / --rescore read its cases only (and make a summary that declares)
    try:
        return RunRecord.model_validate(data, context=STORED)
    except ValidationError as e:
        raise _invalid(path, "the record", e) from None


def read(path: Path | str, *, cases_only: bool = False) -> RunRecord | Journal:
    """The run record or journal at ``path``, typed; a :class:`StoreError` otherwise.
    ``cases_only`` (``--resume`` / ``--rescore``): a record written before records declared
    their metrics is read too, its summary left out (its cases are all they use)."""
    path = Path(path)
    if path.name.endswith(REVIEWS_SUFFIX):
        record = path.with_name(path.name[: -len(REVIEWS_SUFFIX)] + ".json")
        raise StoreError(f"{path} is the reviews file of a run record (groundeval review), not a record or journal: "
                         f"give the record beside it ({record})")
    raw = _bytes(path)
    if _is_journal(path, raw):
        return _read_journal(path, raw)
    return _read_record(path, raw, cases_only)


def read_record(path: Path | str) -> RunRecord:
    """The run record at ``path`` (:func:`read`); a :class:`StoreError` for a journal too (for
    the commands that take a finished run's record: report, review, export)."""
    got = read(path)
    if isinstance(got, Journal):
        raise StoreError(f"{path} is a journal (its run wrote no record: killed, or cut short before it could): "
                         "give the run record (.json) its run writes, or --resume the journal to get one")
    return got


def _indented(model: BaseModel) -> bytes:
    """``model`` as indented JSON (pydantic-core's serializer: no dict in between); a string
    JSON cannot carry as UTF-8 (a lone surrogate) escaped, never a crash."""
    try:
        return model.model_dump_json(indent=2).encode("utf-8")
    except (ValueError, UnicodeEncodeError):  # (surrogates in a string) built first
        data = escape_unencodable(model.model_dump(mode="json"))
        return orjson.dumps(data, default=str, option=orjson.OPT_INDENT_2)


_CASES = b'\n  "cases": []'  # the record's own "cases" key: the only one at two spaces' depth


@dataclass
class Layout:
    """Where :func:`write` put a record's cases in its file, to read them back one at a time
    (:func:`read_written`): the file's size, the cases array's bytes (``[`` to ``]``), and
    each case's JSON as ``start, end`` byte offsets (flat, two machine integers a case)."""

    size: int = 0
    cases_at: tuple[int, int] = (0, 0)
    spans: array = field(default_factory=lambda: array("q"))


def record_chunks(record: RunRecord, redacted: Mapping[int, CaseResult] | None = None,
                  layout: Layout | None = None) -> Iterator[bytes]:
    """:func:`record_bytes` in pieces, each redacted: the record around its cases, then one
    case at a time, indented as at that depth (a large record is never all in memory as
    text; a secret lies inside one JSON string, never across pieces). ``redacted``: cases
    this session's redaction step already made (``record.case_json``'s results, by ``id``,
    holding the objects themselves so no id is reused): only the very objects listed skip
    a second pass; any other case (a copy, a stored or crashed case) is redacted here.
    ``layout``: filled in with where each piece went, as the pieces are written in order."""
    before, after = _indented(record.model_copy(update={"cases": []})).split(_CASES, 1)
    head = redact_json(before + b'\n  "cases": ')
    yield head
    start = at = len(head)
    if not record.cases:
        yield b"[]"
        at += 2
    else:
        for i, case in enumerate(record.cases):
            sep = b"[\n    " if i == 0 else b",\n    "
            chunk = sep + _indented(case).replace(b"\n", b"\n    ")
            chunk = chunk if redacted is not None and redacted.get(id(case)) is case else redact_json(chunk)
            if layout is not None:  # (the separator has no string in it: redaction leaves it as it was)
                layout.spans.extend((at + len(sep), at + len(chunk)))
            yield chunk
            at += len(chunk)
        yield b"\n  ]"
        at += 4
    tail = redact_json(after + b"\n")
    if layout is not None:
        layout.cases_at, layout.size = (start, at), at + len(tail)
    yield tail


def read_written(path: Path, layout: Layout) -> dict[str, Any]:
    """The record :func:`write` just wrote to ``path`` with ``layout``, as JSON data whose
    ``cases`` are read from the file one at a time each time they are gone through
    (:class:`WrittenCases`): exactly the file, never all its cases in memory at once. A file
    that is not the size it was written at (replaced since) is read whole."""
    with open(path, "rb", buffering=0) as fh:
        if os.fstat(fh.fileno()).st_size != layout.size:
            return orjson.loads(fh.readall())
        start, end = layout.cases_at
        record = orjson.loads(os.pread(fh.fileno(), start, 0) + b"[]" + os.pread(fh.fileno(), layout.size - end, end))
    record["cases"] = WrittenCases(path, layout)
    return record


class WrittenCases:
    """A written record's cases (:func:`read_written`), read from its file and parsed one at
    a time on each pass; ``len`` without reading any."""

    def __init__(self, path: Path, layout: Layout) -> None:
        self.path, self.spans = path, layout.spans

    def __len__(self) -> int:
        return len(self.spans) // 2

    def __iter__(self) -> Iterator[dict[str, Any]]:
        spans = self.spans
        with open(self.path, "rb", buffering=0) as fh:
            fd = fh.fileno()
            for i in range(0, len(spans), 2):
                yield orjson.loads(os.pread(fd, spans[i + 1] - spans[i], spans[i]))


def record_bytes(record: RunRecord) -> bytes:
    """The record as its file holds it (before redaction): indented JSON, as one dump."""
    return _indented(record) + b"\n"


def write(record: RunRecord, path: Path | str, *, journal: Path | None = None,
          redacted: Mapping[int, CaseResult] | None = None, layout: Layout | None = None) -> Path:
    """Write ``record`` to ``path``: redacted, atomically, owner-only, streamed case by case
    (:func:`record_chunks`; ``redacted``: its cases already redacted, as there; ``layout``:
    where its cases went, for :func:`read_written`). ``journal``:
    the run's journal (closed), removed once the record is on disk if the record is complete
    (not cut short); a record cut short keeps it. Raises ``OSError`` when it cannot be
    written (the file at ``path`` is then as it was, and the journal stays)."""
    path = Path(path)
    write_json_atomic(path, record_chunks(record, redacted, layout))
    if journal is not None and not record.completeness.cut_short:
        journal.unlink(missing_ok=True)
        from pytest_groundeval.store.spent import remove

        remove(journal)  # what its attempts spent: every case is in the record
    return path


# ---------------------------------------------------------------- a stored run, for --resume / --rescore
@dataclass
class StoredRun:
    """A finished or interrupted run read back (:func:`read`) for ``--resume`` / ``--rescore``.
    ``agent`` and ``model`` are what that run asked for (``--agent``/``--model``);
    ``answered_by`` and ``answered_model`` what answered (a record's; a journal's cases')."""

    path: Path
    run_id: str | None
    agent: str | None
    model: str | None
    cases: dict[tuple, CaseResult]
    answered_by: str | None = None
    answered_model: str | None = None
    folded_into: str | None = None  # a journal: the complete record a --resume of it wrote

    @classmethod
    def of(cls, path: Path, stored: RunRecord | Journal) -> "StoredRun":
        cases = {c.result_key: c for c in stored.cases}
        asked = stored.requested or {}
        if isinstance(stored, Journal):
            return cls(path, stored.run_id, asked.get("agent"), asked.get("model"), cases,
                       stored.answered_by, stored.answered_model, stored.folded_into)
        return cls(path, stored.run_id, asked.get("agent"), asked.get("model"), cases, stored.agent, stored.model)


def load_stored(path: Path) -> StoredRun:
    return StoredRun.of(path, read(path, cases_only=True))


def mark_folded(journal: Path, record: Path, run_id: str) -> None:
    """A journal whose cases a ``--resume`` finished into a complete record: a ``folded`` line
    naming that record, so the journal is not resumed (and paid for) again. Best effort: a
    journal that cannot be written to is left as it is."""
    try:
        with open(journal, "ab") as f:
            f.write(orjson.dumps({"kind": "folded", "record": str(Path(record).absolute()), "run_id": run_id}) + b"\n")
    except OSError:
        pass


def find_run(spec: str, runs_dir: Path) -> Path:
    """``last`` → the newest record or journal under ``runs_dir``; else the path itself."""
    if spec != "last":
        path = Path(spec).absolute()  # fixed now: an agent's chdir moves nothing
        if not path.exists():
            journal = path.with_suffix(".jsonl")
            if path.suffix == ".json" and journal.exists():  # killed before its record: its journal
                return journal
            raise FileNotFoundError(f"no run record or journal at {path}")
        return path
    candidates = [p for p in runs_dir.glob("*.json*") if p.suffix in (".json", ".jsonl")
                  and not p.name.endswith(REVIEWS_SUFFIX)] if runs_dir.is_dir() else []
    if not candidates:
        raise FileNotFoundError(f"no run under {runs_dir} to resume ('last')")
    return max(candidates, key=lambda p: p.stat().st_mtime)
