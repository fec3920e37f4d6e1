"""pytest's words match groundeval's (issue 30 item 4, ``pytest/outcomes.py``): an errored case
is a pytest error (``E``, "errors", junitxml ``<error>``), a case not run a skip with its reason
(``<skipped>``), a failed case a failure; serially and under xdist; the exit status as before."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections import Counter

import pytest
from conftest import SMALL_SET, read_record
from test_deadline_budget import PRICED_AGENT, _budget_project, _run_budget

RAISING = '''
class Raising:
    name = "raising"
    def run(self, prompt):
        raise RuntimeError("the agent's own bug")
'''


def _junit(path) -> Counter:
    suite = ET.parse(path).getroot().find("testsuite")
    return Counter(next((ch.tag for ch in case if ch.tag != "properties"), "passed") for case in suite.iter("testcase"))


def _record_words(rec: dict) -> Counter:
    return Counter("not run" if c["outcome"] == "error" and c["error"]["not_run"]
                   else c["outcome"] for c in rec["cases"])


@pytest.mark.parametrize("xdist", [False, True], ids=["serial", "n2"])
def test_an_agent_that_raises_is_errors_and_the_cases_after_the_stop_are_skips(evalproject, xdist):
    evalproject.makepyfile(raising=RAISING)
    args = ("--data-dir", "data", "--run-record", "record.json", "-p", "no:cacheprovider", "--agent=raising:Raising",
            "--max-consecutive-errors", "1", "--junitxml", "junit.xml", "-rs")
    result = evalproject.runpytest_subprocess(*args, "-n", "2") if xdist else evalproject.runpytest(*args)
    rec = read_record(evalproject)
    words = _record_words(rec)
    assert words["error"] >= 1 and words["error"] + words["not run"] == len(SMALL_SET), words
    if not xdist:
        assert words == {"error": 1, "not run": len(SMALL_SET) - 1}
    # pytest's counts are the record's: errors, and skips for the cases not run
    said = {k: v for k, v in result.parseoutcomes().items() if k != "warnings"}
    assert said == {"errors": words["error"], **({"skipped": words["not run"]} if words["not run"] else {})}, said
    out = result.stdout.str()
    assert "failed" not in result.outlines[-1]
    # groundeval's summary says the same words
    line = f"extraction: {len(SMALL_SET)} cases, 0 passed, 0 failed, {words['error']} error"
    assert any(ln.startswith(line) for ln in result.outlines), out
    if words["not run"]:
        assert f", {words['not run']} not run" in out
        # the skips say why (-rs: pytest folds the same reason into one line)
        result.stdout.fnmatch_lines(["SKIPPED * not run: stopped after 1 consecutive identical agent error*"])
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    # junitxml says the same: <error> for the errored, <skipped> for the not run
    assert _junit(evalproject.path / "junit.xml") == Counter({"error": words["error"], "skipped": words["not run"]})


def test_a_run_with_only_passes_and_cases_not_run_still_fails_without_a_gate(pytester):
    """--max-cost reached: pytest sees passes and skips, but a case not run counts as an error
    in the record's rates, so the session's exit status is 1, as before."""
    _budget_project(pytester, n=5)
    result = _run_budget(pytester, "--agent=priced:Priced", "--max-cost", "1", "--concurrency", "1",
                         "--junitxml", "junit.xml")
    rec = json.loads((pytester.path / "record.json").read_text())
    words = _record_words(rec)
    assert words == {"passed": 2, "not run": 3}, words
    assert {k: v for k, v in result.parseoutcomes().items() if k != "warnings"} == {"passed": 2, "skipped": 3}
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["NOT RUN 3 extraction cases: --max-cost 1 USD reached*",
                                 "*extraction: 5 cases, 2 passed, 0 failed, 0 errors, 3 not run*"])
    assert _junit(pytester.path / "junit.xml") == Counter({"passed": 2, "skipped": 3})


def test_a_failed_case_stays_a_failure_and_a_test_s_own_assertion_is_kept(evalproject):
    """A scored failure is a pytest failure; a passed case whose test then fails on its own
    assertion keeps pytest's report (the case's result says nothing of the test's own check)."""
    evalproject.makepyfile(test_own='''
import pytest

@pytest.mark.extraction
def test_own(case, agent, scorer, evaluate):
    result = evaluate(case, agent, scorer)
    assert result.outcome == "nope"
''')
    result = evalproject.runpytest("--data-dir", "data", "--run-record", "record.json", "-p", "no:cacheprovider",
                                   "test_own.py", "--tb=short")
    result.assert_outcomes(failed=len(SMALL_SET))
    assert "assert 'passed' == 'nope'" in result.stdout.str()
    result = evalproject.runpytest("--data-dir", "data", "--run-record", "record.json", "-p", "no:cacheprovider",
                                   "test_evals.py", "--agent=agents_under_test:Hallucinating")
    result.assert_outcomes(failed=len(SMALL_SET))


@pytest.mark.parametrize("listing", ["--collect-only", "--fixtures", "--fixtures-per-test"])
def test_a_session_that_only_lists_writes_no_record(evalproject, listing):
    """``pytest evals --fixtures`` collects the eval items and runs none: no record, no
    journal, no "cut short" summary (a listing is not a run that stopped)."""
    result = evalproject.runpytest("--data-dir", "data", "--agent=agents_under_test:Correct", listing,
                                   "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.OK
    out = result.stdout.str()
    assert "cut short" not in out and "groundeval summary" not in out, out
    assert not (evalproject.path / ".groundeval" / "runs").exists()
