"""The run record: assembly from case results, atomic writing, and comparison.

Knows nothing of pytest: the reporter hands it case results (as they arrived on test
reports, from this process or from xdist workers), the summary and the options.
"""

from __future__ import annotations

import json
import os
import platform
import secrets
import subprocess
import tempfile
from datetime import datetime, timezone
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable, Mapping

import orjson

from pytest_groundeval.store.redact import redact_json
from pytest_groundeval.model import (SCHEMA_VERSION, BudgetRecord, CaseResult, Completeness, GateRecord, GitInfo,
                                     LangSmithRecord, RunRecord, RunUsage, TaskSummary)

SCHEMA_PATH = Path(__file__).parent.parent / "record.schema.json"
KEY_PACKAGES = (
    "groundeval", "pytest", "pytest-xdist", "healthchain", "fhir.resources",
    "pydantic", "anthropic", "langgraph", "langchain", "langchain-core", "langsmith",
)
# per-case keys that legitimately differ between two runs of the same cases
VOLATILE_CASE_KEYS = ("duration_s", "resumed_from", "rescored_from")


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_run_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


def git_sha(cwd: Path) -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return None
    sha = out.stdout.strip()
    return sha if out.returncode == 0 and len(sha) == 40 else None


def _git(cwd: Path, *args: str) -> str | None:
    """``git ARGS`` in ``cwd``: its output, stripped (None: git missing, not a work tree, failed)."""
    try:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_info(cwd: Path) -> GitInfo | None:
    """The record's ``git`` block (:class:`GitInfo`), read as the langsmith SDK reads its own
    (``langsmith.env.get_git_info``: ``rev-parse HEAD``, ``rev-parse --abbrev-ref HEAD``,
    ``status --porcelain`` non-empty); None outside a work tree or before its first commit."""
    commit = git_sha(cwd)
    if commit is None:
        return None
    status = _git(cwd, "status", "--porcelain")
    return GitInfo(commit=commit, branch=_git(cwd, "rev-parse", "--abbrev-ref", "HEAD") or None,
                   dirty=None if status is None else status != "")


def versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {"python": platform.python_version()}
    for name in KEY_PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def sort_cases(cases: Iterable[CaseResult]) -> list[CaseResult]:
    return sorted(cases, key=lambda c: (c.task, c.case_id, c.repeat or 0))


def summarize(tasks: Mapping[str, Any], cases: list[CaseResult]) -> dict[str, TaskSummary]:
    """The record's summary: each task's own aggregates over its cases (``Task.summary``: its
    figures and their specs), given in case-id order (bootstrap resamples and float sums must
    not depend on the order results arrived in). The reporter's and ``groundeval merge``'s,
    so a merged record sums up the same."""
    by_task: dict[str, list[CaseResult]] = {}
    for c in sort_cases(cases):
        by_task.setdefault(c.task, []).append(c)
    return {name: tasks[name].summary(rs) for name, rs in by_task.items()}


def user_subset(selection: Mapping[str, Any], deselected: int) -> bool:
    """Did the user run a subset on purpose (``-k``, ``-m``, ``--lf``, node ids, or any eval
    item deselected)?"""
    node_ids = [a for a in selection.get("args", []) if "::" in a]
    return bool(selection.get("keyword") or selection.get("markexpr") or selection.get("last_failed")
                or node_ids or deselected)


def build_record(  # noqa: PLR0913 - every part of the record, named
    *,
    run_id: str,
    started_at: str,
    agent: str,
    model: str | None,
    requested: dict[str, str | None],
    options: dict[str, Any],
    cases: list[CaseResult],
    summary: dict[str, TaskSummary],
    completeness: Completeness,
    usage: RunUsage,
    budget: BudgetRecord | None,
    gate: GateRecord | None,
    rootdir: Path,
    reruns: list[CaseResult] | None = None,
    langsmith: LangSmithRecord | None = None,
    finished_at: str | None = None,
    provenance: tuple[str | None, dict[str, str | None]] | None = None,
    git: GitInfo | None = None,
) -> RunRecord:
    """The run record, built once from every part (nothing is patched in after). A merged run
    passes its shards' ``finished_at``, ``provenance`` (commit, package versions) and ``git``
    block; a session passes the ``git`` block it read (the one its LangSmith experiments carry)
    and leaves the rest to be read here (now, ``rootdir``'s commit, the installed packages)."""
    from pytest_groundeval.run.repeats import repeat_records

    return RunRecord(
        schema_version=SCHEMA_VERSION,
        run_id=run_id,
        started_at=started_at,
        finished_at=finished_at or now_iso(),
        git_sha=provenance[0] if provenance is not None else git_sha(rootdir),
        git=git if provenance is not None or git is not None else git_info(rootdir),
        agent=agent,
        model=model,
        requested=requested,
        options=options,
        versions=provenance[1] if provenance is not None else versions(),
        summary=summary,
        cases=sort_cases(cases),
        completeness=completeness,
        usage=usage,
        budget=budget,
        gate=gate,
        langsmith=langsmith,
        repeats=repeat_records(cases),
        reruns=sort_cases(reruns) if reruns else None,
    )


def escape_unencodable(value: Any) -> Any:
    """``value`` with every string JSON cannot carry as UTF-8 (a lone surrogate, say) escaped
    as ``\\udXXX`` text: stored and shown, never a crash of the run."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
            return value
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {escape_unencodable(k): escape_unencodable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [escape_unencodable(v) for v in value]
    return value


def case_json(result: CaseResult) -> tuple[CaseResult, dict[str, Any], bytes]:
    """A result as plain data and as JSON bytes, redacted (``redact.py``); a result holding
    text JSON cannot encode comes back escaped (result, data and bytes alike)."""
    data = result.model_dump(mode="json")
    try:
        blob = orjson.dumps(data)
    except (orjson.JSONEncodeError, TypeError):
        data = escape_unencodable(data)
        result, blob = CaseResult.model_validate(data), orjson.dumps(data, default=str)
    red = redact_json(blob)  # the one redaction step: nothing leaves a case with a key in it
    if red != blob:
        data = orjson.loads(red)
        result, blob = CaseResult.model_validate(data), red
    return result, data, blob


# Every file the harness writes (record, journal, cache entries) is readable by its owner
# only: they hold model outputs and the patient data the cases are built from.
FILE_MODE = 0o600


def open_private(path: Path) -> int:
    """``path`` opened for writing afresh, mode :data:`FILE_MODE` (also when it existed)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    os.fchmod(fd, FILE_MODE)
    return fd


def write_json_atomic(path: Path, data: bytes | Iterable[bytes]) -> None:
    """Write to a temp file in the same folder (mode :data:`FILE_MODE`, as ``mkstemp``
    makes it), fsync, then rename over ``path``. ``data``: the bytes, or chunks of them
    (written one by one: a large record is never one object in memory)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            for chunk in ((data,) if isinstance(data, (bytes, bytearray)) else data):
                fh.write(chunk)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


@lru_cache(maxsize=1)
def _validator():
    import jsonschema

    schema = json.loads(SCHEMA_PATH.read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def validate_record(record: dict[str, Any]) -> list[str]:
    """Violations of the committed JSON Schema, as readable strings (empty when valid).
    Records are typed when built; this is for readers of the file (and the tests)."""
    return [
        f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
        for e in sorted(_validator().iter_errors(record), key=lambda e: list(map(str, e.absolute_path)))
    ]


def comparable(record: dict[str, Any]) -> dict[str, Any]:
    """The parts of a record that must be equal between two runs of the same cases
    (serial vs ``-n 2``, resumed vs uninterrupted): cases without timings, and the summary."""
    return {
        "summary": record["summary"],
        "gate": record["gate"],
        "cases": [
            {
                k: ([{a: b for a, b in att.items() if a != "duration_s"} for att in v] if k == "attempt_log" else v)
                for k, v in c.items()
                if k not in VOLATILE_CASE_KEYS
            }
            for c in record["cases"]
        ],
    }
