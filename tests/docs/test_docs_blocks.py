"""Every ```bash / ```sh / ```console / ```python block in ``docs/`` and ``README.md`` is run, or
says why not.

A block is covered one of four ways:

* run here (:data:`RUNNERS`): its text runs as written in ``bash`` (``uv run X`` runs ``X`` from
  this environment), in a folder holding what the block names (a real run's records, the
  docs' own agent and MCP client); each ``uv run pytest evals`` runs on a small selection of
  the bundled cases, appended to the command (:data:`SELECTION`). What it made is then checked
  (records, pages, exit statuses);
* a mirror (:data:`MIRRORS`): every command of it is, comment aside, a command of a block run
  here (the README repeats the pages' commands);
* another test runs it: the line before it is ``<!-- KEY: tests/PATH.py ... -->`` and that test
  file reads the block by ``<!-- KEY``;
* ``<!-- not-run: REASON -->`` on the line before it, with a reason.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

ROOT = Path(__file__).resolve().parents[2]
LANGS = ("bash", "sh", "console", "python")
# the bundled cases every `uv run pytest evals` here runs on: two write cases the baseline fails
# (review.md reviews one) and one patient's extraction, reconciliation and letter cases
SELECTION = ["-k", "zyrtec-two-5mg-tablets or ibuprofen-two-tablets or Arla_Lang"]
# what a block's stand-in model answers (the docs' agent calls `call_my_model(prompt)`)
FAKE_MODEL = 'def call_my_model(prompt):\n    return \'{"active_medications": []}\'\n\n\n'


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    lang: str
    text: str
    marker: str  # the non-blank line before the fence ("" when it is not an HTML comment)

    @property
    def first(self) -> str:
        return self.text.split("\n", 1)[0]

    def commands(self) -> list[str]:
        """Its commands, comments dropped and continued lines joined."""
        joined = re.sub(r"\\\n\s*", "", self.text)
        return [" ".join(c.split()) for line in joined.split("\n")
                if (c := re.sub(r"\s+#.*$", "", line).strip()) and not c.startswith("#")]


def blocks(path: Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").split("\n")
    out, i = [], 0
    while i < len(lines):
        m = re.match(r"^```(\w+)\s*$", lines[i])
        if m:
            j = lines.index("```", i + 1)
            if m.group(1) in LANGS:
                prev = next((lines[k].strip() for k in range(i - 1, -1, -1) if lines[k].strip()), "")
                out.append(Block(path.relative_to(ROOT).as_posix(), i + 1, m.group(1), "\n".join(lines[i + 1:j]) + "\n",
                                 prev if prev.startswith("<!--") else ""))
            i = j
        i += 1
    return out


def all_blocks() -> list[Block]:
    return [b for p in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))] for b in blocks(p)]


def find(page: str, first: str) -> Block:
    found = [b for b in blocks(ROOT / page) if b.first.startswith(first)]
    assert len(found) == 1, f"{page}: {len(found)} blocks start with {first!r}"
    return found[0]


# ---------------------------------------------------------------- running a block as written

def _env(tmp: Path, selection: list[str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "VIRTUAL_ENV", "GROUNDEVAL_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["DOCS_SELECTION"] = json.dumps(selection)
    env["DOCS_EXITS"] = str(tmp / ".exits")
    return env


# `uv run X` runs X from this environment; `uv run pytest` gets the selection appended and its
# exit status noted (1, failed cases, goes on: the block's next command still runs)
SHIM = r'''
uv() {
  [ "$1" = run ] || { echo "uv $* is not run by the docs tests" >&2; return 97; }
  shift
  if [ "$1" = pytest ]; then
    shift
    local sel status=0
    mapfile -t sel < <(python -c 'import json, os; print("\n".join(json.loads(os.environ["DOCS_SELECTION"])))')
    python -m pytest "$@" "${sel[@]}" -p no:cacheprovider || status=$?
    echo "pytest $status" >> "$DOCS_EXITS"
    [ "$status" -le 1 ] || return "$status"
  else
    "$@"
  fi
}
'''


def run_block(block: Block, cwd: Path, *, selection: list[str] = SELECTION, subs: dict[str, str] | None = None,
              ) -> subprocess.CompletedProcess:
    script = block.text
    for old, new in (subs or {}).items():
        script = script.replace(old, new)
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", SHIM + script], cwd=cwd, env=_env(cwd, selection),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{block.page}:{block.line}\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    return proc


def records(folder: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]


def _workspace(tmp: Path) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "evals").symlink_to(ROOT / "evals")
    return tmp


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """The getting-started block, run as written (on the selection): the record the results
    pages' blocks read. Beside it, a run of the same cases cut short by ``-x``: a record and the
    journal it keeps (compare reads journals)."""
    here = _workspace(tmp_path_factory.mktemp("start"))
    run_block(find("docs/get-started/index.md", "uv run pytest evals"), here)
    (main,) = sorted((here / ".groundeval" / "runs").glob("*.json"))
    rec = json.loads(main.read_text())
    assert {c["task"] for c in rec["cases"]} == {"write", "extraction", "reconciliation", "letter"}
    assert rec["completeness"]["cut_short"] is False and rec["agent"] == "baseline"
    cut = here / "cut" / "run.json"
    proc = subprocess.run([sys.executable, "-m", "pytest", "evals", "-m", "write", *SELECTION, "-x", "-p", "no:cacheprovider",
                           "--run-record", str(cut)], cwd=here, env=_env(here, []), capture_output=True, text=True)
    assert proc.returncode == 1 and cut.with_suffix(".jsonl").is_file(), proc.stdout[-2000:]
    return {"main": main, "cut": cut, "journal": cut.with_suffix(".jsonl")}


def _copy(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(src, dest)


def _run_id(runs: dict[str, Path]) -> str:
    return runs["main"].stem


def _agent_module(dest: Path) -> None:
    """The docs' own agent (its block names its file), over a stand-in model."""
    dest.write_text(FAKE_MODEL + find("docs/your-agent/index.md", "# my_agents.py").text)


# ---------------------------------------------------------------- one runner per block

def run_get_started(tmp: Path, runs: dict[str, Path]) -> None:
    assert json.loads(runs["main"].read_text())["summary"]["write"]["n_cases"] == 2  # the fixture ran this block


def run_own_agent(tmp: Path, runs: dict[str, Path]) -> None:
    here = _workspace(tmp)
    _agent_module(here / "my_agents.py")
    run_block(find("docs/your-agent/index.md", "uv run pytest evals --agent=my_agents:MyAgent"), here)
    (rec,) = records(here / ".groundeval" / "runs")
    assert rec["agent"].startswith("my-agent") and rec["cases"]
    assert {c["outcome"] for c in rec["cases"]} <= {"passed", "failed"}  # scored, none an error


def run_mcp_client(tmp: Path, runs: dict[str, Path]) -> None:
    here = _workspace(tmp)
    (here / "my_client.py").write_text(find("docs/your-agent/mcp.md", "import asyncio").text)
    run_block(find("docs/your-agent/mcp.md", 'uv run pytest evals -m extraction --agent "mcp:'), here)
    (rec,) = records(here / ".groundeval" / "runs")
    assert rec["cases"] and {c["outcome"] for c in rec["cases"]} == {"passed"}
    assert all(c["score"]["metrics"]["grounded"] == 1.0 for c in rec["cases"])


def run_own_project(tmp: Path, runs: dict[str, Path]) -> None:
    """The "use it in your own project" page's suite, config and cases file, then its command."""
    page = "docs/cases/index.md"
    here = tmp / "my-evals"
    (here / "evals").mkdir(parents=True)
    (here / "evals" / "test_my_evals.py").write_text(find(page, "# evals/test_my_evals.py").text)
    toml = next(b for b in re.findall(r"```toml\n(.*?)```", (ROOT / page).read_text(), re.S) if "ini_options" in b)
    (here / "pyproject.toml").write_text(toml)
    cases = (ROOT / page).read_text().split("**A cases file**", 1)[1]
    _copy_text(here / "my_cases" / "write.json", re.search(r"```json\n(.*?)```", cases, re.S).group(1))
    (here / "my_cases" / "reconcile").mkdir()
    _copy(next((ROOT / "fixtures" / "synthea").glob("*.json")), here / "my_bundles" / "patient.json")
    _agent_module(here / "my_agents.py")
    run_block(find(page, "uv run pytest evals --agent=my_agents:MyAgent"), here, selection=[])
    (rec,) = records(here / ".groundeval" / "runs")
    assert [(c["task"], c["case_id"]) for c in rec["cases"]] == [("write", "ibuprofen-two-tablets")]
    # the page's threshold (write.safety=1.0) gates the run: its stand-in model's answer is no statement
    assert rec["gate"]["passed"] is False and [t["metric"] for t in rec["gate"]["thresholds"]] == ["write.safety"]
    assert (here / ".exits").read_text().split() == ["pytest", "1"]


def _copy_text(dest: Path, text: str) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(text)


def run_compare(tmp: Path, runs: dict[str, Path]) -> None:
    for dest in (".groundeval/runs/BASE.json", ".groundeval/runs/NEW.json", "main/run.json", "run.json"):
        _copy(runs["main"], tmp / dest)
    _copy(runs["cut"], tmp / "BASE.json")
    _copy(runs["journal"], tmp / "NEW.jsonl")
    proc = run_block(find("docs/results/compare.md", "uv run groundeval compare"), tmp)
    assert "paired" in proc.stdout and (tmp / "c.md").read_text().count("|") > 10


def run_export(tmp: Path, runs: dict[str, Path]) -> None:
    _copy(runs["main"], tmp / ".groundeval" / "runs" / runs["main"].name)
    _copy(runs["cut"], tmp / ".groundeval" / "runs" / "cut.json")
    run_block(find("docs/results/export.md", "uv run groundeval export"), tmp, subs={"<run_id>": _run_id(runs)})
    csv_rows = (tmp / "cases.csv").read_text().strip().split("\n")
    jsonl_rows = (tmp / "cases.jsonl").read_text().strip().split("\n")
    assert csv_rows[0].startswith("run_id,") and len(jsonl_rows) > len(csv_rows) - 1 > 0


def run_history(tmp: Path, runs: dict[str, Path]) -> None:
    _copy(runs["main"], tmp / ".groundeval" / "runs" / runs["main"].name)
    _copy(runs["cut"], tmp / ".groundeval" / "runs" / "cut.json")
    _copy(runs["main"], tmp / "a.json")
    _copy(runs["cut"], tmp / "b.json")
    proc = run_block(find("docs/results/history.md", "uv run groundeval report .groundeval/runs/"), tmp)
    ids = [_run_id(runs), json.loads(runs["cut"].read_text())["run_id"]]
    assert all(i in (tmp / "index.html").read_text() and i in proc.stdout for i in ids)


def run_html(tmp: Path, runs: dict[str, Path]) -> None:
    here = _workspace(tmp)
    _copy(runs["main"], here / ".groundeval" / "runs" / runs["main"].name)
    _copy(runs["main"], here / "base.json")
    _copy(runs["main"], here / "new.json")
    run_block(find("docs/results/html.md", "uv run pytest evals --groundeval-html"), here,
              subs={"<run_id>": _run_id(runs)})
    for page in ("report.html", "diff.html"):
        assert "<html" in (here / page).read_text()


def run_review(tmp: Path, runs: dict[str, Path]) -> None:
    _copy(runs["main"], tmp / ".groundeval" / "runs" / runs["main"].name)
    run_block(find("docs/results/review.md", "uv run groundeval review"), tmp, subs={"<run_id>": _run_id(runs)})
    reviews = [json.loads(x) for x in (tmp / ".groundeval" / "runs" / f"{_run_id(runs)}.reviews.jsonl").read_text().split("\n") if x]
    assert [r.get("dimension") for r in reviews] == [None, "safety"]


RUNNERS: dict[tuple[str, str], Callable[[Path, dict[str, Path]], None]] = {
    ("docs/get-started/index.md", "uv run pytest evals"): run_get_started,
    ("docs/your-agent/index.md", "# my_agents.py"): run_own_agent,
    ("docs/your-agent/index.md", "uv run pytest evals --agent=my_agents:MyAgent"): run_own_agent,
    ("docs/your-agent/mcp.md", 'uv run pytest evals -m extraction --agent "mcp:'): run_mcp_client,
    ("docs/cases/index.md", "# evals/test_my_evals.py"): run_own_project,
    ("docs/cases/index.md", "uv run pytest evals --agent=my_agents:MyAgent"): run_own_project,
    ("docs/results/compare.md", "uv run groundeval compare"): run_compare,
    ("docs/results/export.md", "uv run groundeval export"): run_export,
    ("docs/results/history.md", "uv run groundeval report .groundeval/runs/"): run_history,
    ("docs/results/html.md", "uv run pytest evals --groundeval-html"): run_html,
    ("docs/results/review.md", "uv run groundeval review"): run_review,
}
# blocks whose every command is a command of a block run here
MIRRORS = {
    ("README.md", "uv run pytest evals      # every bundled suite"),
    ("README.md", "uv run pytest evals --agent=my_agents:MyAgent"),
}


def _covered_by_runner(block: Block) -> bool:
    return any(block.page == page and block.first.startswith(first) for page, first in RUNNERS)


def _ran_commands() -> set[str]:
    return {c for (page, first) in RUNNERS for c in find(page, first).commands()}


def why_uncovered(block: Block) -> str | None:
    """None when the block is covered; else what is missing."""
    if _covered_by_runner(block):
        return None
    if any(block.page == page and block.first.startswith(first) for page, first in MIRRORS):
        missing = [c for c in block.commands() if c not in _ran_commands()]
        return f"mirrors commands no block runs: {missing}" if missing else None
    if m := re.match(r"<!-- not-run:(.*)-->$", block.marker):
        return None if m.group(1).strip() else "a not-run marker without a reason"
    if m := re.match(r"<!-- ([\w-]+): (tests/\S+\.py) ", block.marker):
        test = ROOT / m.group(2)
        if test.is_file() and f"<!-- {m.group(1)}" in test.read_text(encoding="utf-8"):
            return None
        return f"{m.group(2)} does not read the block by '<!-- {m.group(1)}'"
    return "neither run by a test nor marked <!-- not-run: reason -->"


def test_every_block_is_run_or_says_why_not():
    found = all_blocks()
    assert len(found) > 20
    assert [f"{b.page}:{b.line}: {why}" for b in found if (why := why_uncovered(b))] == []


def test_each_runner_and_mirror_names_one_block():
    for page, first in [*RUNNERS, *MIRRORS]:
        find(page, first)


@pytest.mark.parametrize("runner", sorted(set(RUNNERS.values()), key=lambda f: f.__name__),
                         ids=lambda f: f.__name__.removeprefix("run_"))
def test_the_block_runs_as_written(runner, runs, tmp_path):
    runner(tmp_path, runs)


def test_the_coverage_rules_refuse_an_unmarked_or_reasonless_block(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "p.md").write_text(
        "x\n\n```bash\nrm -rf /\n```\n<!-- not-run:  -->\n```python\nprint(1)\n```\n"
        "<!-- not-run: needs a key -->\n```sh\nls\n```\n```json\n{}\n```\n"
        "<!-- thing: tests/t.py runs it -->\n```bash\nls\n```\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "t.py").write_text("# reads nothing\n")
    why = [why_uncovered(b) for b in blocks(tmp_path / "docs" / "p.md")]
    assert why == ["neither run by a test nor marked <!-- not-run: reason -->", "a not-run marker without a reason",
                   None, "tests/t.py does not read the block by '<!-- thing'"]
