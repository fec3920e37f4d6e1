"""``groundeval run`` (issue 30 item 6): the seed's command, mapped onto the pytest run of the
bundled suites; and bare ``groundeval`` says what to run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_groundeval.cli import build_parser, main
from pytest_groundeval.pytest.command import GUIDE, pytest_args, suites_dir

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _args(*argv: str) -> list[str]:
    return pytest_args(build_parser().parse_args(["run", *argv]))


def test_the_options_map_onto_pytest_s(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = _args("--task", "write", "--limit", "2", "--agent", "baseline", "--data-dir", "cases", "--out-dir", "out",
                 "--", "-q", "-n", "2")
    assert args == [str(suites_dir()), "--rootdir", str(tmp_path), "-m", "write", "--agent=baseline",
                    "--groundeval-limit", "2", "--write-cases", str(tmp_path / "cases"),
                    "--groundeval-runs-dir", str(tmp_path / "out"), "-q", "-n", "2"]
    # the seed's --model was a Claude model id: without --agent it is claude's
    assert _args("--model", "claude-sonnet-4-5")[3:] == ["--agent=claude", "--model", "claude-sonnet-4-5"]
    # several tasks: --data-dir is laid out as the bundled data
    both = _args("--task", "extraction", "--task", "write", "--data-dir", "d")
    assert both[3:5] == ["-m", "extraction or write"]
    assert both[5:] == ["--data-dir", str(tmp_path / "d" / "synthea"), "--write-cases", str(tmp_path / "d" / "write_cases")]
    assert _args() == [str(suites_dir()), "--rootdir", str(tmp_path)]  # every bundled suite, the default agent


def test_a_bad_value_is_a_usage_error(capsys):
    assert main(["run", "--task", "writ"]) == 2
    assert "invalid choice: 'writ'" in capsys.readouterr().err
    assert main(["run", "--limit", "0"]) == 2


def test_bare_groundeval_says_what_to_run(capsys):
    assert main([]) == 2
    err = capsys.readouterr().err
    assert err.strip() == GUIDE.strip() and "groundeval run --task write" in err and "pytest evals" in err


def _record(folder: Path) -> dict:
    [path] = list(folder.glob("*.json"))
    return json.loads(path.read_text())


def _shape(rec: dict) -> dict:
    """What a record holds, not what differs between two runs of it (ids, times, paths)."""
    return {"keys": sorted(rec), "cases": [(c["task"], c["case_id"], c["outcome"]) for c in rec["cases"]],
            "summary": {t: sorted(s) for t, s in rec["summary"].items()},
            "completeness": {k: rec["completeness"][k] for k in ("selected", "deselected", "recorded", "subset",
                                                                 "cut_short")},
            "agent": rec["agent"], "gate": rec["gate"]}


def test_groundeval_run_writes_the_record_the_pytest_command_writes(tmp_path):
    env = {**os.environ, "PYTEST_ADDOPTS": "-p no:cacheprovider -p no:langsmith_plugin -p no:anyio"}
    env.pop("LANGSMITH_API_KEY", None)
    run = subprocess.run([str(BIN / "groundeval"), "run", "--task", "write", "--limit", "2", "--agent", "baseline",
                          "--out-dir", "out"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert run.stderr.startswith(f"groundeval run: pytest {suites_dir()} --rootdir {tmp_path} -m write")
    assert "write: 2 cases, 2 passed, 0 failed, 0 errors" in run.stdout  # the same summary
    assert "run record: out/" in run.stdout and "HTML report: out/" in run.stdout
    ours = _record(tmp_path / "out")
    direct = subprocess.run([str(BIN / "pytest"), str(suites_dir()), "--rootdir", str(tmp_path), "-m", "write",
                             "--agent=baseline", "--groundeval-limit", "2", "--groundeval-runs-dir", "direct"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert direct.returncode == 0, direct.stdout[-2000:]
    theirs = _record(tmp_path / "direct")
    assert _shape(ours) == _shape(theirs)
    assert len(ours["cases"]) == 2 and ours["completeness"]["subset"] and ours["completeness"]["selection"]["limit"] == 2
    assert not (tmp_path / ".groundeval" / "runs").exists()  # --out-dir decided


def test_limit_keeps_the_first_cases_of_each_task_under_xdist_too(evalproject):
    result = evalproject.runpytest_subprocess("--data-dir", "data", "--run-record", "record.json", "-p",
                                              "no:cacheprovider", "--groundeval-limit", "2", "-n", "2")
    assert result.parseoutcomes()["passed"] == 2  # (xdist's controller does not count the deselected)
    rec = json.loads((evalproject.path / "record.json").read_text())
    assert len(rec["cases"]) == 2 and rec["completeness"]["deselected"] == 2
    assert result.ret == pytest.ExitCode.OK
