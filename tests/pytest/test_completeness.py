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
        bundle = json.JSONDecoder().raw_decode(prompt.split("Bundle:\\n", 1)[1])[0]
        if not active_medications(bundle, "prompt"):
            os._exit(1)
        return json.dumps({"active_medications": active_medications(bundle, "prompt")})
'''


@pytest.fixture
def logged(evalproject, monkeypatch):
    monkeypatch.setenv("AGENT_LOG", str(evalproject.path / "agent.log"))
    return evalproject


def _run(p: pytest.Pytester, *args: str) -> pytest.RunResult:
    return p.runpytest_subprocess("--data-dir", "data", "--run-record", "record.json", "-p", "no:cacheprovider", *args)


def test_a_crashed_worker_s_case_is_an_error_of_kind_crash_and_the_gate_fails(evalproject):
    evalproject.makepyfile(crashing=CRASHING)
    # a worker's crash: the agent in the worker (--agent-in-process; in the agent host a crash is
    # its case's alone: tests/agents/test_agent_host.py)
    result = _run(evalproject, "-n", "2", "--agent=crashing:CrashOnZero", "--agent-in-process",
                  "--threshold", "extraction.f1=0.0")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    rec = read_record(evalproject)
    cases = {c["case_id"]: c for c in rec["cases"]}
    assert sorted(cases) == sorted(SMALL_SET)  # every selected case, once
    assert cases[ZERO]["outcome"] == "error" and cases[ZERO]["error"]["kind"] == "crash"
    assert "crashed" in cases[ZERO]["error"]["message"]
    assert all(c["outcome"] == "passed" for cid, c in cases.items() if cid != ZERO)
    comp = rec["completeness"]
    assert comp["cut_short"] and "a worker crashed (1 case)" in comp["reason"]
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
    result.stdout.fnmatch_lines(["*groundeval: a subset of the cases (1 of 4 collected cases selected): -k 'Felicitas'"])


def test_a_full_run_is_complete(evalproject):
    _run(evalproject, "--agent=agents_under_test:Correct").assert_outcomes(passed=len(SMALL_SET))
    comp = read_record(evalproject)["completeness"]
    assert comp == {"selected": len(SMALL_SET), "deselected": 0, "recorded": len(SMALL_SET), "subset": False,
                    "selection": comp["selection"], "cut_short": False, "reason": None, "shard": None}
    assert json.dumps(comp["selection"])


# ---------------------------------------------------------------- attribution
INJECTED = '''
import json, pytest
from pytest_groundeval.tasks.extraction import active_medications

class House:
    name = "house-agent"
    model = "house-model-7"
    def run(self, prompt):
        bundle = json.JSONDecoder().raw_decode(prompt.split("Bundle:\\n", 1)[1])[0]
        return json.dumps({"active_medications": active_medications(bundle, "prompt")})

@pytest.fixture(scope="session")
def agent():
    return House()
'''


def test_an_agent_injected_by_a_conftest_is_recorded_as_itself(evalproject):
    evalproject.makeconftest(INJECTED)
    _run(evalproject).assert_outcomes(passed=len(SMALL_SET))
    rec = read_record(evalproject)
    assert rec["agent"] == "house-agent (conftest:House)" and rec["model"] == "house-model-7"
    assert rec["requested"] == {"agent": "baseline", "model": None}  # what --agent said, kept apart


@pytest.mark.parametrize("args, message", [
    (("--model", "claude-opus-4-8"), "--agent=baseline takes no model"),
    (("--agent=agents_under_test:Correct", "--model", "x"), "takes no model"),
    (("--model-base-url", "http://127.0.0.1:9/v1"), "--model-base-url is for --agent=langgraph"),
])
def test_options_an_agent_would_ignore_are_usage_errors(evalproject, args, message):
    result = _run(evalproject, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR and message in result.stderr.str()


def test_rescore_keeps_the_stored_agent_and_model(evalproject):
    evalproject.makeconftest(INJECTED)
    _run(evalproject).assert_outcomes(passed=len(SMALL_SET))
    (evalproject.path / "conftest.py").unlink()
    result = evalproject.runpytest_subprocess("--data-dir", "data", "-p", "no:cacheprovider", "--rescore",
                                              "record.json", "--run-record", "rescored.json")
    result.assert_outcomes(passed=len(SMALL_SET))
    rec = read_record(evalproject, "rescored.json")
    assert rec["agent"] == "house-agent (conftest:House)" and rec["model"] == "house-model-7"
    assert all(c["rescored_from"] for c in rec["cases"]) and rec["options"]["rescored_from"]


def test_a_complete_record_folds_its_journal_and_a_reused_path_starts_afresh(evalproject):
    _run(evalproject, "--agent=agents_under_test:Correct").assert_outcomes(passed=len(SMALL_SET))
    assert not (evalproject.path / "record.jsonl").exists()  # complete: the record holds it all
    assert len(read_record(evalproject)["cases"]) == len(SMALL_SET)
    # the zero-medication case passes (nothing to omit), the next fails, -x stops the run
    _run(evalproject, "--agent=agents_under_test:Omitting", "-x").assert_outcomes(passed=1, failed=1)
    lines = [json.loads(x) for x in (evalproject.path / "record.jsonl").read_text().splitlines()]
    # cut short: kept; only this run's (and what each figure of its task is, before its first case)
    assert [x["kind"] for x in lines] == ["header", "specs", "case", "case"]
    assert lines[0]["requested"]["agent"] == "agents_under_test:Omitting"


# ---------------------------------------------------------------- fail fast, once
def test_identical_agent_errors_stop_the_calls_and_say_why(logged):
    import shutil

    for i in range(6):
        shutil.copy(logged.path / "data" / f"{ZERO}.json", logged.path / "data" / f"zz-{i}.json")
    result = _run(logged, "--agent=agents_under_test:BadRequest", "--max-consecutive-errors", "3")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    calls = [json.loads(x) for x in (logged.path / "agent.log").read_text().splitlines()]
    assert len(calls) == 3  # three identical 400s, then no more calls
    rec = read_record(logged)
    assert len(rec["cases"]) == len(SMALL_SET) + 6  # every case is in the record, once
    stopped = [c for c in rec["cases"] if c["error"]["message"].startswith("not run: stopped after 3")]
    assert len(stopped) == len(SMALL_SET) + 6 - 3 and all(c["error"]["kind"] == "agent" for c in stopped)
    assert rec["completeness"]["cut_short"] and "consecutive identical agent errors" in rec["completeness"]["reason"]


def test_a_dead_model_server_is_one_usage_error_at_start(evalproject):
    args = ("--agent=langgraph", "--model", "openai:some-model", "--model-base-url", "http://127.0.0.1:9/v1")
    result = _run(evalproject, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--model-base-url http://127.0.0.1:9/v1: nothing answers there" in result.stderr.str()
    assert "--no-preflight" in result.stderr.str()
    skipped = evalproject.runpytest_subprocess("--data-dir", "data", "-p", "no:cacheprovider", "--co", "-q",
                                               "--no-preflight", *args)
    assert skipped.ret == pytest.ExitCode.OK


def test_an_openai_model_with_neither_key_nor_server_is_one_usage_error_at_start(evalproject, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    result = _run(evalproject, "--agent=langgraph", "--model", "openai:gpt-x")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert err.count("needs OPENAI_API_KEY") == 1 and "--model-base-url" in err
    assert not (evalproject.path / "record.json").exists()
