"""The run record: its schema, assembly from case entries, the gate, atomic writing.

Knows nothing of pytest: the plugin hands it case entries (as they arrived on test
reports, from this process or from xdist workers) and options.
"""

from __future__ import annotations

import json
import os
import platform
import secrets
import subprocess
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable

SCHEMA_VERSION = "1.0"
SCHEMA_PATH = Path(__file__).with_name("record.schema.json")
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


def versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {"python": platform.python_version()}
    for name in KEY_PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


# ---------------------------------------------------------------- thresholds / gate
@dataclass(frozen=True)
class Threshold:
    task: str
    metric: str  # as the user wrote it (after TASK.)
    key: str  # the summary key it names
    value: float

    @property
    def label(self) -> str:
        return f"{self.task}.{self.metric}"


def parse_threshold(text: str, tasks: dict[str, Any]) -> Threshold:
    """``TASK.METRIC=VALUE`` → Threshold; a ``ValueError`` with a usable message otherwise."""
    name, sep, raw = text.partition("=")
    task, dot, metric = name.strip().partition(".")
    if not sep or not dot:
        raise ValueError(f"threshold {text!r}: expected TASK.METRIC=VALUE, e.g. extraction.f1=0.95")
    if task not in tasks:
        raise ValueError(f"threshold {text!r}: unknown task {task!r}; known: {', '.join(sorted(tasks))}")
    key = tasks[task].resolve_metric(metric)
    if key is None:
        known = sorted(set(tasks[task].metrics) | set(tasks[task].metric_aliases))
        raise ValueError(f"threshold {text!r}: unknown metric {metric!r} for {task}; known: {', '.join(known)}")
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"threshold {text!r}: {raw.strip()!r} is not a number") from None
    return Threshold(task=task, metric=metric, key=key, value=value)


def evaluate_gate(thresholds: Iterable[Threshold], summary: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """Each threshold is met when the summary value is >= it. A threshold whose task ran no
    case is missed (a gate that cannot be evaluated must not pass silently)."""
    thresholds = list(thresholds)
    if not thresholds:
        return None
    checks = []
    for t in thresholds:
        value = (summary.get(t.task) or {}).get(t.key)
        passed = value is not None and value >= t.value
        check = {"metric": t.label, "key": t.key, "threshold": t.value, "value": value, "passed": passed}
        if value is None:
            check["reason"] = f"no {t.task} case ran"
        checks.append(check)
    return {"passed": all(c["passed"] for c in checks), "thresholds": checks}


# ---------------------------------------------------------------- assembly
def sort_cases(cases: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(cases, key=lambda c: (c["task"], c["case_id"]))


def build_record(
    *,
    run_id: str,
    started_at: str,
    agent: str,
    model: str | None,
    options: dict[str, Any],
    cases: list[dict[str, Any]],
    summary: dict[str, dict[str, Any]],
    gate: dict[str, Any] | None,
    rootdir: Path,
) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id,
        "started_at": started_at,
        "finished_at": now_iso(),
        "git_sha": git_sha(rootdir),
        "agent": agent,
        "model": model,
        "options": options,
        "versions": versions(),
        "summary": summary,
        "cases": sort_cases(cases),
        "gate": gate,
    }


@lru_cache(maxsize=1)
def _validator():
    import jsonschema

    schema = json.loads(SCHEMA_PATH.read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def validate_record(record: dict[str, Any]) -> list[str]:
    """Schema violations as readable strings (empty when valid)."""
    return [
        f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
        for e in sorted(_validator().iter_errors(record), key=lambda e: list(map(str, e.absolute_path)))
    ]


def write_json_atomic(path: Path, data: Any) -> None:
    """Write to a temp file in the same folder, fsync, then rename over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2, ensure_ascii=False, default=str)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


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


# ---------------------------------------------------------------- journal (crash-safe)
class Journal:
    """``runs/<run_id>.jsonl``: a header line, then one line per finished case, each flushed
    and fsynced as it is written, so a run killed with SIGKILL loses no finished case."""

    def __init__(self, path: Path, header: dict[str, Any]) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(path, "a", encoding="utf-8")
        self._write({"kind": "header", **header})

    def _write(self, obj: dict[str, Any]) -> None:
        self._fh.write(json.dumps(obj, ensure_ascii=False, default=str) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def append(self, entry: dict[str, Any]) -> None:
        self._write({"kind": "case", **entry})

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.close()


@dataclass
class StoredRun:
    """A finished or interrupted run, read back from its record or its journal."""

    path: Path
    run_id: str | None
    agent: str | None
    model: str | None
    cases: dict[tuple[str, str], dict[str, Any]]


def load_run(path: Path) -> StoredRun:
    """Read a run record (``.json``) or journal (``.jsonl``; a torn last line is ignored)."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        header: dict[str, Any] = {}
        cases: dict[tuple[str, str], dict[str, Any]] = {}
        for line in text.splitlines():
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue  # the line being written when the process died
            kind = obj.pop("kind", None)
            if kind == "header" and not header:
                header = obj
            elif kind == "case":
                cases[(obj["task"], obj["case_id"])] = obj
        return StoredRun(path, header.get("run_id"), header.get("agent"), header.get("model"), cases)
    record = json.loads(text)
    cases = {(c["task"], c["case_id"]): c for c in record.get("cases", [])}
    return StoredRun(path, record.get("run_id"), record.get("agent"), record.get("model"), cases)


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
    newest = max(candidates, key=lambda p: p.stat().st_mtime)
    # prefer the record of that run when both exist (it is complete), else its journal
    return newest
