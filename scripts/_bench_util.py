"""Shared helpers for the run-level benchmarks (bench_concurrency, bench_memory, bench_cache).

Each benchmark builds a throw-away pytest project in a temp folder (a copy of the committed
eval files, a ``pytest.ini``, generated bundle files, sometimes an agents module), runs
``sys.executable -m pytest`` in it as a child process, and reads the wall time, the child's
peak RSS (``os.wait4``) and the JSON run record. Nothing here asserts on time: the machine
is shared, so the scripts print side-by-side numbers and ratios.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

ROOT = Path(__file__).resolve().parents[1]
SYNTHEA = ROOT / "fixtures" / "synthea"
WRITE_CASES = ROOT / "fixtures" / "write_cases"
EVALS = ROOT / "evals"

# env vars that could make a child talk to the network or a real account
_SCRUB_PREFIXES = ("LANGSMITH_", "LANGCHAIN_", "ANTHROPIC_", "OPENAI_")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_NS = uuid.UUID("7d0c3a52-3a8e-4c55-9f0e-6b1f2f3f9a11")  # fixed namespace: generated files are reproducible

GIVEN = ["Ada", "Bo", "Cyd", "Dee", "Eli", "Fay", "Gus", "Hal", "Ida", "Jo", "Kai", "Liv", "Max", "Noa", "Oz"]
FAMILY = ["Benchly", "Casewell", "Datum", "Evalson", "Fixture", "Gauge", "Harness", "Metric"]


class BenchFailure(SystemExit):
    """A run failed outright (crash, usage error, missing record): the script exits 1."""

    def __init__(self, message: str) -> None:
        print(f"\nBENCH FAILURE: {message}", file=sys.stderr)
        super().__init__(1)


# ------------------------------------------------------------------ the temp project
@contextmanager
def temp_project(prefix: str = "groundeval-bench-", keep: bool = False) -> Iterator[Path]:
    """A temp folder with a ``pytest.ini`` (so the rootdir is the folder itself), removed after."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        # the same plugin opt-outs as groundeval's own pyproject.toml (unused plugins that
        # cost ~1.5 s of start-up), so every run below starts like `pytest evals` does here
        (tmp / "pytest.ini").write_text("[pytest]\naddopts = -p no:langsmith_plugin -p no:anyio\n")
        yield tmp
    finally:
        if keep:
            print(f"(kept {tmp})")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def copy_evals(project: Path, names: Sequence[str] = ("test_extraction.py",)) -> None:
    for name in names:
        shutil.copy(EVALS / name, project / name)


def fixtures() -> list[Path]:
    return sorted(SYNTHEA.glob("*.json"))


def smallest_fixture_with_meds() -> Path:
    """The smallest committed bundle whose ground truth is not empty (so scoring means something)."""
    sys.path.insert(0, str(ROOT))
    from pytest_groundeval.tasks.extraction import active_medications

    for path in sorted(fixtures(), key=lambda p: p.stat().st_size):
        if active_medications(json.loads(path.read_bytes()), path.name):
            return path
    raise BenchFailure("no committed fixture has an active medication")


def copy_bundles(folder: Path, source: Path, n: int) -> None:
    """``n`` files holding the same bundle under distinct names."""
    folder.mkdir(parents=True, exist_ok=True)
    raw = source.read_bytes()
    for i in range(n):
        (folder / f"case-{i:05d}.json").write_bytes(raw)


def reidentify(text: str, index: int) -> str:
    """The same clinical content as a different patient: every UUID (resource ids, ``urn:uuid:``
    references, identifier values equal to ids) is replaced consistently by uuid5(index, old),
    and the patient's name is changed."""
    mapping: dict[str, str] = {}

    def sub(m: re.Match) -> str:
        old = m.group(0).lower()
        if old not in mapping:
            mapping[old] = str(uuid.uuid5(_NS, f"{index}:{old}"))
        return mapping[old]

    bundle = json.loads(_UUID.sub(sub, text))
    for entry in bundle.get("entry") or []:
        res = entry.get("resource") or {}
        if res.get("resourceType") == "Patient":
            res["name"] = [{"use": "official", "family": f"{FAMILY[index % len(FAMILY)]}{index}",
                            "given": [GIVEN[index % len(GIVEN)]]}]
    return json.dumps(bundle, ensure_ascii=False)


def reidentified_bundles(folder: Path, n: int) -> None:
    """``n`` distinct patients, cycling through the committed fixtures."""
    folder.mkdir(parents=True, exist_ok=True)
    sources = [p.read_text(encoding="utf-8") for p in fixtures()]
    for i in range(n):
        (folder / f"patient-{i:05d}.json").write_text(reidentify(sources[i % len(sources)], i), encoding="utf-8")


# ------------------------------------------------------------------ running pytest
def child_env(**extra: str) -> dict[str, str]:
    """The current environment minus API keys / tracing settings, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_SCRUB_PREFIXES)}
    env.update(extra)
    return env


@dataclass
class Run:
    label: str
    args: list[str]
    rc: int
    wall: float
    max_rss: int  # bytes, of the pytest process itself (not xdist workers)
    stdout: str
    stderr: str

    def tail(self, n: int = 3000) -> str:
        return f"--- stdout (tail) ---\n{self.stdout[-n:]}\n--- stderr (tail) ---\n{self.stderr[-n:]}"


def run_pytest(project: Path, args: Sequence[str], *, label: str = "", env: dict[str, str] | None = None,
               ok: Sequence[int] = (0,)) -> Run:
    """Run ``python -m pytest`` in ``project``, timed, and read the child's peak RSS.
    A return code outside ``ok`` is a BenchFailure (the run failed outright)."""
    cmd = [sys.executable, "-m", "pytest", "-c", str(project / "pytest.ini"), f"--rootdir={project}",
           "-p", "no:cacheprovider", "-q", *args]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=project, stdout=out, stderr=err, env=env or child_env())
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode("utf-8", "replace")
        stderr = err.read().decode("utf-8", "replace")
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    run = Run(label or " ".join(args), list(args), proc.returncode, wall, usage.ru_maxrss * scale, stdout, stderr)
    if run.rc not in ok:
        raise BenchFailure(f"run {run.label!r} exited {run.rc} (expected {list(ok)})\n"
                           f"command: {' '.join(cmd)}\n{run.tail()}")
    return run


def startup_time(project: Path, args: Sequence[str], repeat: int = 3, env: dict[str, str] | None = None) -> float:
    """Best of ``repeat`` ``pytest --collect-only`` runs: process start-up, imports, collection."""
    return min(run_pytest(project, ["--collect-only", *args], label="collect-only", env=env).wall
               for _ in range(repeat))


# ------------------------------------------------------------------ run records
def read_record(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise BenchFailure(f"no readable run record at {path}: {e}") from None


def outcomes(record: dict[str, Any]) -> Counter:
    return Counter(c["outcome"] for c in record.get("cases", []))


def usage_counts(record: dict[str, Any]) -> Counter:
    """Per-case usage summed: model_calls, cache_hits, tokens."""
    total: Counter = Counter()
    for c in record.get("cases", []):
        for k, v in (c.get("usage") or {}).items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                total[k] += v
    return total


def expect_cases(record: dict[str, Any], label: str, n: int, passed: bool = False) -> Counter:
    """Check a record has ``n`` cases (all passed if ``passed``), else BenchFailure."""
    got = outcomes(record)
    total = sum(got.values())
    if total != n or (passed and got.get("passed", 0) != n):
        want = f"{n} passed" if passed else f"{n} cases"
        raise BenchFailure(f"run {label!r}: record has {dict(got)}, expected {want}")
    if record.get("schema_errors"):
        raise BenchFailure(f"run {label!r}: record has schema errors {record['schema_errors'][:5]}")
    return got


# ------------------------------------------------------------------ output
def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for j, r in enumerate(cells):
        print("  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
        if j == 0:
            print("  " + "  ".join("-" * w for w in widths))


def mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def verdict(ok: bool) -> str:
    return "goal met" if ok else "goal missed"
