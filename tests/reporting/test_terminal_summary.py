"""The terminal summary (report.py ``terminal_lines``): figures with their intervals (none over
one case), tokens and cost, errors by kind, completeness; and, through pytest, the paths."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import SMALL_SET, ZERO, read_record

from pytest_groundeval.model import CaseResult, Completeness, RunRecord, RunUsage, ShardRecord
from pytest_groundeval.reporting.terminal import terminal_lines
from pytest_groundeval.tasks.write import WriteTask

WRITE = WriteTask(Path("."))
DIMS = WRITE.metrics  # schema, coding, constraints, safety, pass


def passed(i: int) -> CaseResult:
    return CaseResult(case_id=f"w{i:02d}", task="write", outcome="passed",
                      score={"passed": True, "metrics": {m: 1.0 for m in DIMS}})


def errored(i: int, kind: str) -> CaseResult:
    return CaseResult(case_id=f"e{i:02d}", task="write", outcome="error", error={"kind": kind, "message": "x"})


def usage(**over) -> RunUsage:
    u = {"input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0, "cases_priced": 0, "cases_unpriced": 0,
         "prices_as_of": "2025-01-01"}
    return RunUsage(**{**u, **over})


def completeness(recorded: int, **over) -> Completeness:
    c = {"selected": recorded, "deselected": 0, "recorded": recorded, "subset": False, "selection": {},
         "cut_short": False}
    return Completeness(**{**c, **over})


def record(cases: list[CaseResult], **over) -> RunRecord:
    fields = {"run_id": "r", "started_at": "t0", "finished_at": "t1", "git_sha": None, "agent": "baseline",
              "model": None, "requested": {"agent": "baseline", "model": None}, "options": {}, "versions": {},
              "summary": {"write": WRITE.summary(cases)}, "cases": cases,
              "completeness": completeness(len(cases)), "usage": usage()}
    return RunRecord(**{**fields, **over})


def metric_line(lines: list[str], metric: str) -> str:
    return next(line for line in lines if line.split()[:1] == [metric])


# ---------------------------------------------------------------- intervals
def test_48_of_48_shows_the_wilson_interval_not_certainty():
    lines = terminal_lines(record([passed(i) for i in range(48)]))
    for m in DIMS:
        assert metric_line(lines, m).endswith("1.000  95% CI [0.926, 1.000]"), lines


def test_one_case_shows_no_interval():
    rec = record([passed(0)])
    assert rec.summary["write"].ci95("pass") is None
    lines = terminal_lines(rec)
    assert "write: 1 case, 1 passed, 0 failed, 0 errors" in lines
    assert metric_line(lines, "pass").split() == ["pass", "1.000"]
    assert not any("CI" in line for line in lines), lines


def test_one_case_run_prints_no_interval_through_pytest(evalproject):
    result = _run(evalproject, "-k", ZERO.split("_")[0])
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    result.stdout.fnmatch_lines(["extraction: 1 case, 1 passed, 0 failed, 0 errors", "  macro_f1 *1.000",
                                 "  exact_match *1.000"])
    assert "95% CI" not in out and "[1.000, 1.000]" not in out and "[0.000, 0.000]" not in out


# ---------------------------------------------------------------- tokens and cost
def test_tokens_and_cost():
    rec = record([passed(0), passed(1)], usage=usage(input_tokens=12345, output_tokens=678, cost_usd=0.01234,
                                                     cases_priced=2))
    assert "tokens: 12,345 in, 678 out; cost $0.0123" in terminal_lines(rec)


def test_cost_unknown_when_a_case_is_unpriced():
    rec = record([passed(0), passed(1), passed(2)],
                 usage=usage(input_tokens=300, output_tokens=30, cost_usd=0.002, cases_priced=1, cases_unpriced=2))
    lines = terminal_lines(rec)
    assert "tokens: 300 in, 30 out; cost unknown: 2 cases unpriced ($0.0020 for the 1 priced)" in lines
    assert not any("cost $" in line for line in lines)


def test_no_usage_is_zero_tokens_and_zero_cost():
    assert "tokens: 0 in, 0 out; cost $0.0000" in terminal_lines(record([passed(0)]))


# ---------------------------------------------------------------- errors by kind
def test_errors_by_kind_most_first():
    cases = [passed(0), errored(1, "agent"), errored(2, "timeout"), errored(3, "timeout")]
    lines = terminal_lines(record(cases))
    assert "errors: 2 timeout, 1 agent" in lines
    assert "write: 4 cases, 1 passed, 0 failed, 3 errors" in lines


def test_no_errors_no_errors_line():
    assert not any(line.startswith("errors:") for line in terminal_lines(record([passed(0)])))


# ---------------------------------------------------------------- completeness
@pytest.mark.parametrize("comp, want", [
    ({}, "completeness: 3/3 selected cases recorded, complete"),
    ({"selected": 3, "deselected": 5, "subset": True},
     "completeness: 3/3 selected cases recorded (a subset, 5 deselected)"),
    ({"selected": 7, "cut_short": True, "reason": "-x"}, "completeness: 3/7 selected cases recorded (cut short)"),
    ({"selected": None}, "completeness: 3 cases recorded (selected count unknown)"),
    ({"selected": 3, "deselected": 4, "subset": True,
      "shard": ShardRecord(index=2, count=3, selection_size=7, selection_sha256="x")},
     "completeness: shard 2/3, 3/3 selected cases recorded (a subset, 4 deselected)"),
])
def test_completeness(comp, want):
    rec = record([passed(i) for i in range(3)], completeness=completeness(3, **comp))
    assert want in terminal_lines(rec)


def test_lines_in_order():
    cases = [passed(0), errored(1, "crash")]
    lines = terminal_lines(record(cases))
    order = [next(i for i, line in enumerate(lines) if line.startswith(p))
             for p in ("agent:", "write:", "  pass", "tokens:", "errors:", "completeness:")]
    assert order == sorted(order), lines


# ---------------------------------------------------------------- through pytest
def _run(p: pytest.Pytester, *args: str) -> pytest.RunResult:
    return p.runpytest("--data-dir", "data", "--run-record", "record.json", "-p", "no:cacheprovider", *args)


def test_summary_through_pytest_shows_usage_and_completeness(evalproject):
    result = _run(evalproject)
    result.assert_outcomes(passed=len(SMALL_SET))
    n = len(SMALL_SET)
    result.stdout.fnmatch_lines(["*groundeval summary*", f"extraction: {n} cases, {n} passed, 0 failed, 0 errors",
                                 "  exact_match *1.000  95% CI [[]0.510, 1.000[]]",  # Wilson, 4 of 4
                                 "tokens: 0 in, 0 out; cost $0.0000",
                                 f"completeness: {n}/{n} selected cases recorded, complete",
                                 "run record: *record.json"])
    lines = result.stdout.lines
    assert sum(line.startswith("completeness:") for line in lines) == 1
    assert sum(line.startswith("tokens:") for line in lines) == 1
    assert not any(line.startswith("errors:") for line in lines)


def test_the_html_report_path_is_printed_once(evalproject):
    result = _run(evalproject, "--groundeval-html", "report.html")
    result.assert_outcomes(passed=len(SMALL_SET))
    result.stdout.fnmatch_lines(["completeness: *", "run record: *record.json", "HTML report: *report.html"])
    assert sum(line.startswith("HTML report:") for line in result.stdout.lines) == 1
    assert (evalproject.path / "report.html").is_file()


# ---------------------------------------------------------------- what a user reads first (issue 21 item 8)
BROKEN = '''
class Broken:
    name = "broken"

    def run(self, prompt):
        settings = {}
        return str(settings["temperature"])  # the user's bug
'''


def _broken_line(p) -> int:
    return next(n for n, line in enumerate((p.path / "broken_agent.py").read_text().splitlines(), 1)
                if "the user's bug" in line)


# pytest's short test summary prints each failed test's message whole on CI ($CI set) or under
# -vv, else cut to the terminal's width: the error must be said once in every one of them
@pytest.mark.parametrize("how", ["terminal", "ci", "vv", "ci-xdist"])
def test_identical_agent_errors_are_one_line_naming_the_agent_s_file_and_line(evalproject, monkeypatch, how):
    evalproject.makepyfile(broken_agent=BROKEN)
    monkeypatch.delenv("BUILD_NUMBER", raising=False)
    if how.startswith("ci"):
        monkeypatch.setenv("CI", "true")
    else:
        monkeypatch.delenv("CI", raising=False)
    args = ("--data-dir", "data", "--run-record", "record.json", "-p", "no:cacheprovider", "--junitxml", "junit.xml",
            "--agent=broken_agent:Broken", *(("-vv",) if how == "vv" else ()))
    if how == "ci-xdist":
        result = evalproject.runpytest_subprocess(*args, "-n", "2")
    else:
        result = evalproject.runpytest(*args)
    where = f"broken_agent.py:{_broken_line(evalproject)} in run"
    out = result.stdout.str()
    lines = [ln for ln in result.outlines if ln.startswith(("ERROR ", "FAILED ")) and "test_evals.py::" not in ln]
    assert len(lines) == 1, lines  # every case failed the same way: one line, with the count
    assert lines[0].startswith(f"ERROR {len(SMALL_SET)} extraction cases: agent 'broken' failed after 1 attempt(s): "
                               "KeyError: 'temperature' (at ") and where in lines[0], lines[0]
    assert out.count("KeyError: 'temperature'") == 1, out
    # pytest lists each errored test once, as an error (its -rfE short summary), pointing at that line
    listed = [ln for ln in result.outlines if ln.startswith("ERROR test_evals.py::")]
    assert len(listed) == len(SMALL_SET), out
    assert not any(ln.startswith("FAILED test_evals.py::") for ln in result.outlines), out
    assert result.parseoutcomes() == {"errors": len(SMALL_SET)}, result.outlines[-1]  # pytest's words: errors
    if how != "terminal":  # the message whole (a terminal cuts it to its width)
        assert all(ln.endswith(f"errored as {len(SMALL_SET) - 1} other extraction cases did: one line under "
                               "'groundeval failures'") for ln in listed), listed
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    rec = read_record(evalproject)
    assert {c["outcome"] for c in rec["cases"]} == {"error"} and len(rec["cases"]) == len(SMALL_SET)
    assert all("KeyError: 'temperature'" in c["error"]["message"] for c in rec["cases"])  # the record keeps each case's
    # and so does junitxml (written as each report came in): each an <error> with the agent's message
    import xml.etree.ElementTree as ET

    cases = list(ET.parse(evalproject.path / "junit.xml").getroot().iter("testcase"))
    assert len(cases) == len(SMALL_SET)
    for case in cases:
        error = case.find("error")
        assert error is not None and case.find("failure") is None and error.get("type") == "groundeval.agent"
        assert "KeyError: 'temperature'" in error.get("message") and "groundeval failures" not in error.get("message")


def test_a_lone_error_and_each_failure_keep_their_own_message_in_pytest_s_summary(evalproject, monkeypatch):
    """Only a group is pointed at: one errored case, and every failure, keep their whole
    reason in pytest's short summary."""
    evalproject.makepyfile(broken_agent=BROKEN)
    monkeypatch.setenv("CI", "true")
    result = evalproject.runpytest("--data-dir", "data", "--run-record", "record.json", "-p", "no:cacheprovider",
                                   "--agent=broken_agent:Broken", "-k", "Felicitas")
    assert [ln for ln in result.outlines if ln.startswith("ERROR test_evals.py::")][0].endswith(
        f" - agent 'broken' failed after 1 attempt(s): KeyError: 'temperature' "
        f"(at {evalproject.path / 'broken_agent.py'}:{_broken_line(evalproject)} in run)")
    assert "groundeval failures" not in result.stdout.str()  # nothing to group: pytest's line is the one
    result = evalproject.runpytest("--data-dir", "data", "--run-record", "record.json", "-p", "no:cacheprovider",
                                   "--agent=agents_under_test:Omitting")
    listed = [ln for ln in result.outlines if ln.startswith("FAILED test_evals.py::")]
    assert len(listed) == len(SMALL_SET) - 1, result.outlines  # (the zero-medication patient passes)
    assert all(" - missed " in ln for ln in listed), listed  # the scorer's reason, once, as the message
    assert "groundeval failures" not in result.stdout.str()
    reasons = [c["score"]["reason"] for c in read_record(evalproject)["cases"] if c["outcome"] == "failed"]
    assert sum(result.stdout.str().count(r) for r in reasons) == len(reasons)  # each failure said once


def test_with_tb_long_an_agent_error_shows_the_agent_s_own_traceback(evalproject):
    evalproject.makepyfile(broken_agent=BROKEN)
    result = evalproject.runpytest("--data-dir", "data", "--run-record", "record.json", "-p", "no:cacheprovider",
                                   "--agent=broken_agent:Broken", "--tb=long", "-x")
    line = _broken_line(evalproject)
    result.stdout.fnmatch_lines([f'*File "*broken_agent.py", line {line}, in run', "*KeyError: 'temperature'"])


def test_a_subset_is_said_in_the_options_words_with_selected_of_collected(evalproject):
    result = evalproject.runpytest("--data-dir", "data", "--run-record", "record.json", "-p", "no:cacheprovider",
                                   "--agent=agents_under_test:Omitting", "-x", "-k", "not Felicitas")
    result.stdout.fnmatch_lines([f"groundeval: a subset of the cases ({len(SMALL_SET) - 1} of {len(SMALL_SET)} "
                                 "collected cases selected): -k 'not Felicitas'"])
    assert "{" not in next(ln for ln in result.outlines if ln.startswith("groundeval: a subset"))


def test_a_gate_failed_by_a_cut_short_run_gives_one_verdict():
    from pytest_groundeval.model import GateRecord, ThresholdCheck
    from pytest_groundeval.reporting.terminal import gate_lines

    rec = record([passed(i) for i in range(2)], completeness=completeness(2, selected=4, cut_short=True,
                                                                            reason="-x / --maxfail"))
    rec.gate = GateRecord(passed=False, reason="the run was cut short: -x / --maxfail", thresholds=[
        ThresholdCheck(metric="write.pass", key="pass", threshold=0.5, value=1.0, passed=True, applied=True)])
    assert gate_lines(rec) == ["groundeval gate: FAILED: the run was cut short: -x / --maxfail (1/1 thresholds met)"]


def test_the_agent_s_frame_is_its_own_not_groundeval_s_or_a_library_s():
    import sysconfig

    from pytest_groundeval.reporting import terminal
    from pytest_groundeval.reporting.terminal import agent_frame

    lib = Path(sysconfig.get_paths()["purelib"]) / "httpx" / "_client.py"
    ours = Path(terminal.__file__).resolve().parents[1] / "run" / "runner.py"
    tb = ("Traceback (most recent call last):\n"
          f'  File "{ours}", line 119, in call_agent\n    return agent.run(case.prompt)\n'
          '  File "/home/me/project/my_agent.py", line 42, in run\n    return self.client.post(url)\n'
          f'  File "{lib}", line 1000, in post\n    raise HTTPError\n'
          "httpx.HTTPError: boom\n")
    assert agent_frame(tb) == "/home/me/project/my_agent.py:42 in run"
    assert agent_frame(f'  File "{lib}", line 7, in post\n') == f"{lib}:7 in post"  # none of its own: the last
    assert agent_frame("no frames here") is None and agent_frame(None) is None


@pytest.mark.parametrize("extra", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_under_x_the_counts_are_selected_of_collected_and_the_gate_says_one_thing(evalproject, extra):
    """-x stops after the first failing case: completeness says recorded of the 4 selected
    (no subset: nothing was deselected), why in -x's words (xdist stops its workers with an
    interrupt, which is no Ctrl-C), and the gate one verdict after the threshold it missed."""
    result = evalproject.runpytest_subprocess(
        "--data-dir", "data", "--run-record", "record.json", "-p", "no:cacheprovider", "-x", *extra,
        "--agent=agents_under_test:Omitting", "--threshold", "extraction.f1=0.5",
        "--threshold", "extraction.exact_match=0.9")
    rec = read_record(evalproject)
    n = len(rec["cases"])
    assert 0 < n < len(SMALL_SET) and rec["completeness"]["selected"] == len(SMALL_SET)
    out = result.outlines
    assert f"completeness: {n}/{len(SMALL_SET)} selected cases recorded (cut short)" in out
    assert not any(ln.startswith("groundeval: a subset") for ln in out)
    assert "KeyboardInterrupt" not in rec["completeness"]["reason"] and "-x / --maxfail" in rec["completeness"]["reason"]
    gate = [ln for ln in out if ln.startswith("groundeval gate:")]
    assert gate[0].startswith("groundeval gate: MISSED extraction.exact_match = ")
    assert len(gate) == 2 and gate[1].startswith("groundeval gate: FAILED: the run was cut short: -x / --maxfail")
    assert gate[1].endswith("(1/2 thresholds met)") and "PASSED" not in result.stdout.str()
    # xdist ends a -x session as interrupted (exit 2), pytest as failed (1): never success
    assert result.ret == (pytest.ExitCode.INTERRUPTED if extra else pytest.ExitCode.TESTS_FAILED)


def test_counts_are_said_in_the_singular_for_one():
    """"1 case", never "1 cases" (issue 30 item 5), in every count line of the summary."""
    one = record([errored(0, "agent")], completeness=completeness(1, cut_short=True, reason="x"))
    lines = terminal_lines(one)
    assert "write: 1 case, 0 passed, 0 failed, 1 error" in lines
    assert "completeness: 1/1 selected case recorded (cut short)" in lines
    assert not [ln for ln in lines if re.search(r"\b1 (cases|errors)\b|\(s\)", ln)], lines
    two = terminal_lines(record([errored(0, "agent"), errored(1, "agent")]))
    assert "write: 2 cases, 0 passed, 0 failed, 2 errors" in two
