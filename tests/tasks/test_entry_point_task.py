"""A task from another package, found through the ``groundeval.tasks`` entry point.

The package is made on the fly and installed the way an installer lays it out (the module
plus a ``*.dist-info`` with ``entry_points.txt``) in a folder on ``sys.path`` of a fresh
pytest process; groundeval's own code does not change."""

from __future__ import annotations

import json
import textwrap

import pytest
from conftest import read_record

TASK_MODULE = '''
"""A tiny task: repeat the word you are given."""
import json
from pathlib import Path

from pytest_groundeval.model import AgentOutput, Case, CaseError, CaseRef, ParseError, metric
from pytest_groundeval.scorers.aggregate import summarize_rates
from pytest_groundeval.scorers.base import Score
from pytest_groundeval.tasks.datasets import content_hash
from pytest_groundeval.tasks.base import CaseSource, Task


class EchoTask(Task):
    name = "echo"
    description = "repeat one word"
    source = CaseSource(flag="--echo-cases", ini="groundeval_echo_cases", default="echo_cases.json",
                        key="echo_cases", help="a JSON list of words")
    specs = (metric("pass", "rate"),)  # its one figure: a pass rate (Wilson interval)

    def discover(self):
        words = json.loads(self.path.read_text())
        return [CaseRef(task=self.name, case_id=w, path=self.path, index=i) for i, w in enumerate(words)]

    def load(self, ref):
        raw = ref.path.read_bytes()
        word = json.loads(raw)[ref.index]
        if not word.isalpha():
            raise CaseError(f"{ref.path.name}[{ref.index}]: {word!r} is not a word")
        return Case(ref=ref, prompt=f"Repeat exactly: {word}", inputs={"word": word}, truth=word,
                    content_hash=content_hash(raw))

    def parse(self, output):
        text = output.text.strip()
        if not text:
            raise ParseError("empty answer")
        return text

    def score(self, prediction, case):
        ok = prediction == case.truth
        return Score(passed=ok, metrics={"pass": 1.0 if ok else 0.0}, reason="same word" if ok else f"said {prediction!r}")

    def unparsed(self, case, reason):
        return Score(passed=False, metrics={"pass": 0.0}, reason=f"parse error: {reason}")

    def summarize(self, results):
        return summarize_rates(results, self.metrics)

    def baseline(self, inputs):
        return AgentOutput(text=inputs["word"])
'''

AGENTS = '''
class Shouting:
    name = "shouting"
    def run(self, prompt):
        return prompt.rsplit(" ", 1)[1].upper()
'''

EVAL = '''
import pytest

@pytest.mark.echo
def test_echo(case, agent, scorer, evaluate):
    evaluate(case, agent, scorer)
'''


@pytest.fixture
def echoproject(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    site = pytester.mkdir("site")
    (site / "echotask").mkdir()
    (site / "echotask" / "__init__.py").write_text(TASK_MODULE)
    info = site / "echotask-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: echotask\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[groundeval.tasks]\necho = echotask:EchoTask\n")
    (info / "RECORD").write_text(textwrap.dedent("""\
        echotask/__init__.py,,
        echotask-0.1.dist-info/METADATA,,
        echotask-0.1.dist-info/entry_points.txt,,
        echotask-0.1.dist-info/RECORD,,
    """))
    pytester.makepyfile(test_echo=EVAL, echo_agents=AGENTS)
    (pytester.path / "echo_cases.json").write_text(json.dumps(["alpha", "beta", "gamma"]))
    monkeypatch.setenv("PYTHONPATH", str(site))
    return pytester


def test_an_installed_task_runs_with_the_baseline_and_the_gate(echoproject):
    result = echoproject.runpytest_subprocess("-p", "no:cacheprovider", "--run-record", "record.json",
                                              "--threshold", "echo.pass=1.0", "-v")
    result.assert_outcomes(passed=3)
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*test_echo.py::test_echo[[]alpha[]] PASSED*", "echo: 3 cases, 3 passed*",
                                 "groundeval gate: PASSED (1/1 thresholds met)"])
    rec = read_record(echoproject)
    assert [c["case_id"] for c in rec["cases"]] == ["alpha", "beta", "gamma"]
    assert {c["task"] for c in rec["cases"]} == {"echo"} and rec["summary"]["echo"]["pass"] == 1.0
    assert rec["options"]["echo"]["echo_cases"].endswith("echo_cases.json")
    assert rec["gate"]["passed"] is True


def test_an_installed_task_fails_a_wrong_agent_and_declares_its_options(echoproject):
    result = echoproject.runpytest_subprocess("-p", "no:cacheprovider", "--run-record", "record.json",
                                              "--agent=echo_agents:Shouting", "--threshold", "echo.pass=0.5")
    result.assert_outcomes(failed=3)
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*groundeval gate: MISSED echo.pass = 0.000 < threshold 0.5*"])
    assert all(c["score"]["reason"] == f"said {c['case_id'].upper()!r}" for c in read_record(echoproject)["cases"])
    helptext = echoproject.runpytest_subprocess("--help")
    helptext.stdout.fnmatch_lines(["*--echo-cases=PATH*a JSON list of words*"])
    markers = echoproject.runpytest_subprocess("--markers")
    markers.stdout.fnmatch_lines(["@pytest.mark.echo: groundeval echo eval cases (repeat one word)"])
    unknown = echoproject.runpytest_subprocess("--threshold", "echo.f1=0.5")
    assert unknown.ret == pytest.ExitCode.USAGE_ERROR
    unknown.stderr.fnmatch_lines(["*unknown metric 'f1' for echo; known: pass*"])


def test_a_broken_entry_point_is_one_clear_usage_error(echoproject):
    info = echoproject.path / "site" / "echotask-0.1.dist-info" / "entry_points.txt"
    info.write_text("[groundeval.tasks]\necho = echotask:NoSuchTask\n")
    result = echoproject.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*task 'echotask:NoSuchTask' (entry point 'echo' of echotask) cannot be loaded*"])
