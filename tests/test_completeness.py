"""Every selected case appears once, and a record says whether it is complete: a worker
crash, -x, a budget stop or an interrupt cut a run short (and fail a gate); a subset the user
chose (-k, -m, node ids) is allowed and shown."""

from __future__ import annotations

import json

import pytest
from conftest import SMALL_SET, ZERO, read_record

CRASHING = '''
import json, os
from pytest_groundeval.tasks.extraction import active_medications

class CrashOnZero:
    """Right answers, but the process dies (no exception, no report) on one patient."""
    name = "crash-on-zero"
    def run(self, prompt):
        bundle = json.loads(prompt.split("Bundle:\\n", 1)[1])
        if not active_medications(bundle, "prompt"):
            os._exit(1)
        return json.dumps({"active_medications": active_medications(bundle, "prompt")})
'''


def _run(p: pytest.Pytester, *args: str) -> pytest.RunResult:
    return p.runpytest_subprocess("--data-dir", "data", "--run-record", "record.json", "-p", "no:cacheprovider", *args)


def test_a_crashed_worker_s_case_is_an_error_of_kind_crash_and_the_gate_fails(evalproject):
    evalproject.makepyfile(crashing=CRASHING)
    result = _run(evalproject, "-n", "2", "--agent=crashing:CrashOnZero", "--threshold", "extraction.f1=0.0")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    rec = read_record(evalproject)
    cases = {c["case_id"]: c for c in rec["cases"]}
    assert sorted(cases) == sorted(SMALL_SET)  # every selected case, once
    assert cases[ZERO]["outcome"] == "error" and cases[ZERO]["error"]["kind"] == "crash"
    assert "crashed" in cases[ZERO]["error"]["message"]
    assert all(c["outcome"] == "passed" for cid, c in cases.items() if cid != ZERO)
    comp = rec["completeness"]
    assert comp["cut_short"] and "a worker crashed (1 case(s))" in comp["reason"]
    assert comp["selected"] == comp["recorded"] == len(SMALL_SET)
    # the metric threshold is met (0.0), but the gate fails: the run was cut short
    assert rec["gate"]["thresholds"][0]["passed"] and rec["gate"]["passed"] is False
    assert "cut short" in rec["gate"]["reason"]
    result.stdout.fnmatch_lines(["*groundeval: the run was cut short: a worker crashed*"])


def test_exitfirst_cuts_the_run_short_and_the_gate_fails(evalproject):
    result = _run(evalproject, "-x", "--agent=agents_under_test:Omitting", "--threshold", "extraction.f1=0.0")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    rec = read_record(evalproject)
    comp = rec["completeness"]
    assert comp["selected"] == len(SMALL_SET) and comp["recorded"] < len(SMALL_SET)
    assert comp["cut_short"] and "-x / --maxfail" in comp["reason"] and "have no result" in comp["reason"]
    assert rec["gate"]["passed"] is False


def test_a_chosen_subset_is_shown_and_may_pass_the_gate(evalproject):
    result = _run(evalproject, "-k", "Felicitas", "--agent=agents_under_test:Correct",
                  "--threshold", "extraction.f1=1.0")
    assert result.ret == pytest.ExitCode.OK
    comp = read_record(evalproject)["completeness"]
    assert comp["subset"] and not comp["cut_short"] and comp["selection"]["keyword"] == "Felicitas"
    assert comp["selected"] == comp["recorded"] == 1 and comp["deselected"] == len(SMALL_SET) - 1
    result.stdout.fnmatch_lines(["*groundeval: a subset of the cases (1 of 4 collected)*Felicitas*"])


def test_a_full_run_is_complete(evalproject):
    _run(evalproject, "--agent=agents_under_test:Correct").assert_outcomes(passed=len(SMALL_SET))
    comp = read_record(evalproject)["completeness"]
    assert comp == {"selected": len(SMALL_SET), "deselected": 0, "recorded": len(SMALL_SET), "subset": False,
                    "selection": comp["selection"], "cut_short": False, "reason": None}
    assert json.dumps(comp["selection"])
