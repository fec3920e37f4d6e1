"""No paid work lost or paid twice, and a resumed journal trusted only as far as it re-derives:
the record's folder and journal are made before the first call (a folder that cannot be
written: refused, no call); ``--resume`` holds the lock of the journal it resumes; a journal a
resume already finished into a complete record is refused; ``--resume X.json`` after a kill
finds ``X.jsonl``; a journal line whose answer contradicts its outcome is refused.
Real pytest processes on four real bundles; every agent call is counted in a file."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import AGENTS, EVAL_FILE, SMALL_SET, SYNTHEA

FAST = ("-p", "no:cacheprovider", "-p", "no:langsmith_plugin", "-p", "no:anyio", "-p", "no:randomly")
COUNTED = AGENTS + '''
import os

class Counted(Correct):
    name = "counted"
    def run(self, prompt):
        with open(os.environ["CALLS_FILE"], "a") as f:
            f.write("call\\n")
        if os.environ.get("FAIL_ON") and os.environ["FAIL_ON"] in prompt:  # one wrong answer, on purpose
            return json.dumps({"active_medications": [{"code": "198440", "display": "Acetaminophen"}]})
        return super().run(prompt)
'''


def _pytest(project: Path, *args: str, fail_on: str = "") -> subprocess.CompletedProcess:
    env = {**os.environ, "CALLS_FILE": str(project / "calls.txt"), "FAIL_ON": fail_on}
    return subprocess.run([sys.executable, "-m", "pytest", *FAST, "test_evals.py", "--data-dir", "data",
                           "--agent", "agents_here:Counted", *args], cwd=project, capture_output=True, text=True,
                          timeout=600, env=env)


def _calls(project: Path) -> int:
    path = project / "calls.txt"
    n = len(path.read_text().splitlines()) if path.exists() else 0
    path.unlink(missing_ok=True)
    return n


@pytest.fixture
def project(tmp_path):
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_evals.py").write_text(EVAL_FILE)
    (tmp_path / "agents_here.py").write_text(COUNTED)
    (tmp_path / "data").mkdir()
    for stem in SMALL_SET:
        shutil.copy(SYNTHEA / f"{stem}.json", tmp_path / "data" / f"{stem}.json")
    return tmp_path


def _cut_short(project: Path, name: str = "run.json") -> Path:
    """A run stopped after its first case (-x on a case that fails): its journal is kept."""
    journal = project / Path(name).with_suffix(".jsonl")
    first = sorted(SMALL_SET)[0].split("_")[0]
    proc = _pytest(project, "--run-record", name, "-x", fail_on=first)
    assert journal.exists(), proc.stdout[-2000:]
    _calls(project)
    return journal


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_record_folder_that_cannot_be_written_is_refused_before_any_call(project):
    (project / "ro").mkdir()
    (project / "ro").chmod(0o500)
    try:
        proc = _pytest(project, "--run-record", "ro/run.json")
    finally:
        (project / "ro").chmod(0o700)
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "nothing was run (no agent call)" in proc.stderr and "ro/run.jsonl" in proc.stderr
    assert _calls(project) == 0


def test_a_record_folder_that_is_a_file_is_refused_before_any_call(project):
    """(As root, a read-only folder is writable: a file where the folder should be is not.)"""
    (project / "blocked").write_text("a file, not a folder")
    proc = _pytest(project, "--run-record", "blocked/run.json")
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "nothing was run (no agent call)" in proc.stderr
    assert _calls(project) == 0
    (project / "blocked").unlink()
    proc = _pytest(project, "--run-record", "blocked/run.json")
    assert proc.returncode == 0 and _calls(project) == 4


def test_the_journal_is_on_disk_before_the_first_call(project):
    """The agent reads the journal's header on its first call: it is already there."""
    (project / "agents_here.py").write_text(COUNTED + '''
class Peeking(Counted):
    def run(self, prompt):
        import pathlib
        journal = pathlib.Path(os.environ["CALLS_FILE"]).parent / "run.jsonl"
        assert journal.read_text().startswith('{"kind":"header"'), "no journal yet"
        return super().run(prompt)
''')
    env = {**os.environ, "CALLS_FILE": str(project / "calls.txt")}
    proc = subprocess.run([sys.executable, "-m", "pytest", *FAST, "test_evals.py", "--data-dir", "data",
                           "--agent", "agents_here:Peeking", "--run-record", "run.json"], cwd=project,
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:]


def test_resume_of_a_journal_another_run_is_resuming_is_refused(project):
    from pytest_groundeval.store.lock import acquire

    journal = _cut_short(project)
    held = acquire(journal)  # the other resume, holding it
    assert held is not None
    try:
        proc = _pytest(project, "--resume", str(journal), "--run-record", "second.json")
    finally:
        held.release()
    assert proc.returncode == 4 and "another groundeval run is resuming or writing it" in proc.stderr
    assert _calls(project) == 0
    proc = _pytest(project, "--resume", str(journal), "--run-record", "second.json")
    assert proc.returncode == 1 and _calls(project) == 3  # the three open cases, once (the stored failure stands)


def test_a_journal_already_finished_into_a_record_is_not_resumed_again(project):
    journal = _cut_short(project)
    proc = _pytest(project, "--resume", str(journal), "--run-record", "done.json")
    assert proc.returncode == 1 and _calls(project) == 3
    proc = _pytest(project, "--resume", str(journal), "--run-record", "again.json")
    assert proc.returncode == 4 and "pay for those cases twice" in proc.stderr
    assert str(project / "done.json") in proc.stderr and _calls(project) == 0


def test_resume_of_the_record_path_finds_its_journal(project):
    _cut_short(project)
    (project / "run.json").unlink()  # as after a kill: the journal, and no record
    proc = _pytest(project, "--resume", "run.json", "--run-record", "next.json")
    assert proc.returncode == 1 and "1 failed, 3 passed" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert _calls(project) == 3


def test_a_journal_line_whose_answer_contradicts_its_outcome_is_refused(project):
    (project / "agents_here.py").write_text(COUNTED + '''
class HalfWrong(Counted):
    def run(self, prompt):
        meds = _truth(prompt) + [{"code": "198440", "display": "Acetaminophen 500 MG Oral Tablet"}]
        with open(os.environ["CALLS_FILE"], "a") as f:
            f.write("call\\n")
        return json.dumps({"active_medications": meds})
''')
    env = {**os.environ, "CALLS_FILE": str(project / "calls.txt")}
    subprocess.run([sys.executable, "-m", "pytest", *FAST, "test_evals.py", "--data-dir", "data", "--agent",
                    "agents_here:HalfWrong", "--run-record", "run.json", "-k", "Alena861 or Clarissa466",
                    "--maxfail", "1"], cwd=project, capture_output=True, text=True, timeout=600, env=env)
    journal = project / "run.jsonl"
    lines = journal.read_text().splitlines()
    edited = []
    for i, line in enumerate(lines):
        obj = json.loads(line)
        if obj.get("kind") == "case" and obj["outcome"] == "failed":
            obj["outcome"] = "passed"
            obj["score"]["passed"] = True
            edited.append(obj["case_id"])
            lines[i] = json.dumps(obj)
    assert edited
    journal.write_text("\n".join(lines) + "\n")
    _calls(project)

    def resume(*extra):
        return subprocess.run([sys.executable, "-m", "pytest", *FAST, "test_evals.py", "--data-dir", "data",
                               "--agent", "agents_here:HalfWrong", "--resume", str(journal), "--run-record",
                               "next.json", "-k", "Alena861 or Clarissa466", *extra], cwd=project,
                              capture_output=True, text=True, timeout=600, env=env)

    proc = resume()
    assert proc.returncode == 4 and edited[0] in proc.stderr and "re-derived" in proc.stderr
    assert _calls(project) == 0
    proc = resume("--trust-stored")
    assert "--trust-stored" in proc.stdout + proc.stderr and proc.returncode in (0, 1)
