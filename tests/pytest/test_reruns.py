"""Reruns can't replace a result (issue 16, item 1): pytest-rerunfailures and pytest-retry,
the real plugins, in fresh processes (pytest-retry cannot run twice in one process).

The agent under test is wrong on its first call per patient (it leaves the last medication
out) and right afterwards; every call is appended to a log file shared by every process, with
the usage it reports. Whatever the plugins are asked to do, the record, junitxml, pytest's own
counts and the exit status all show the first try's failures, and the agent is called once per
case."""

from __future__ import annotations

import json
import re
import shutil
import xml.etree.ElementTree as ET

import pytest
from conftest import REFS, ROOT, SMALL_SET, SYNTHEA, ZERO, read_record

from pytest_groundeval.store.files import load_stored
from pytest_groundeval.store.merge import merge
from pytest_groundeval.store.record import validate_record

AGENT = '''
import json, os
from pytest_groundeval.tasks.extraction import active_medications

def _read(prompt):
    bundle = json.JSONDecoder().raw_decode(prompt.split("Bundle:\\n", 1)[1])[0]
    pid = next(e["resource"]["id"] for e in bundle["entry"] if e["resource"]["resourceType"] == "Patient")
    return pid, active_medications(bundle, "prompt")

def _calls(pid):
    log = os.environ["CALL_LOG"]
    if not os.path.exists(log):
        return 0
    with open(log) as fh:
        return sum(json.loads(line)["patient"] == pid for line in fh)

def _log(pid, usage):
    with open(os.environ["CALL_LOG"], "a") as fh:
        fh.write(json.dumps({"patient": pid, "usage": usage, "pid": os.getpid()}) + "\\n")

class FailFirst:
    """Wrong on its first call per patient (the last medication left out), right afterwards."""
    name = "fail-first"
    def run(self, prompt):
        pid, truth = _read(prompt)
        first = _calls(pid) == 0
        usage = {"input_tokens": 1000 + len(truth), "output_tokens": 7 if first else 11}
        _log(pid, usage)
        answer = truth[:-1] if first else truth
        return {"text": json.dumps({"active_medications": answer}), "usage": usage}

class CrashFirst:
    """Its worker dies on its first call for CRASH_ON's patient; right answers otherwise."""
    name = "crash-first"
    def run(self, prompt):
        pid, truth = _read(prompt)
        usage = {"input_tokens": 1000 + len(truth), "output_tokens": 5}
        first = _calls(pid) == 0
        _log(pid, usage)
        if first and os.environ["CRASH_ON"] in pid:
            os._exit(1)
        return {"text": json.dumps({"active_medications": truth}), "usage": usage}
'''

# strips groundeval's opt-out and marks every item flaky again: a plugin that reruns anyway
BYPASS = '''
import pytest

@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items):
    for item in items:
        item.own_markers[:] = [m for m in item.own_markers if m.name != "flaky"]
        item.add_marker(pytest.mark.flaky(reruns=1, retries=1), append=False)
'''

#: first try: every case fails but the one with no active medication (an empty list is right)
FIRST_TRY_FAILED = len(SMALL_SET) - 1


@pytest.fixture
def project(evalproject, monkeypatch):
    """The 4-case extraction project with both rerun plugins auto-loading (nothing disabled)."""
    evalproject.makepyfile(fail_first=AGENT)
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    monkeypatch.setenv("CALL_LOG", str(evalproject.path / "calls.jsonl"))
    return evalproject


def _calls(p: pytest.Pytester) -> list[dict]:
    log = p.path / "calls.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def _run(p: pytest.Pytester, *args: str) -> pytest.RunResult:
    return p.runpytest_subprocess("--data-dir", "data", "--run-record", "record.json", "-p", "no:cacheprovider",
                                  "-p", "no:randomly", "--junitxml", "junit.xml", "-rA", *args)


def _junit(p: pytest.Pytester, name: str = "junit.xml") -> dict[str, int]:
    suite = ET.parse(p.path / name).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    cases = suite.findall("testcase")
    return {"tests": int(suite.get("tests")), "failures": int(suite.get("failures")),
            "errors": int(suite.get("errors")), "testcases": len(cases),
            "failed_cases": sum(c.find("failure") is not None for c in cases)}


def _junit_outcomes(p: pytest.Pytester) -> dict[str, str]:
    """groundeval.outcome of each testcase, by case id (junitxml's properties)."""
    suite = ET.parse(p.path / "junit.xml").getroot()
    out = {}
    for case in suite.iter("testcase"):
        if case.get("name") is None:
            continue
        props = {e.get("name"): e.get("value") for e in case.iter("property")}
        assert list(props).count("groundeval.outcome") <= 1
        out[props["groundeval.case_id"]] = props["groundeval.outcome"]
    return out


def _counts(result: pytest.RunResult) -> dict[str, int]:
    return result.parseoutcomes()


def _assert_first_try_stands(p: pytest.Pytester, result: pytest.RunResult, reran: int = 0) -> dict:
    """Record, junitxml, pytest's counts and the exit status all show the first try; one agent
    call per case, each call's usage in the record; ``reran`` items re-run by the plugin."""
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()[-3000:]
    rec = read_record(p)
    assert validate_record(rec) == []
    cases = {c["case_id"]: c for c in rec["cases"]}
    assert sorted(cases) == sorted(SMALL_SET)
    assert {cid: c["outcome"] for cid, c in cases.items()} == {
        cid: "passed" if cid == ZERO else "failed" for cid in SMALL_SET}
    assert all(c["attempts"] == 1 for c in cases.values())
    s = rec["summary"]["extraction"]
    assert (s["n_passed"], s["n_failed"], s["exact_match"]) == (1, FIRST_TRY_FAILED, 0.25)
    calls = _calls(p)
    assert sorted(c["patient"] for c in calls) == sorted(map(_patient, SMALL_SET))  # one call per case
    assert all(c["usage"]["output_tokens"] == 7 for c in calls)  # every call was a first try
    assert rec["usage"]["input_tokens"] == sum(c["usage"]["input_tokens"] for c in calls)
    assert rec["usage"]["output_tokens"] == sum(c["usage"]["output_tokens"] for c in calls)
    assert not rec.get("reruns")
    counts = _counts(result)
    assert (counts.get("failed"), counts.get("passed")) == (FIRST_TRY_FAILED, 1), counts
    assert counts.get("rerun", 0) + counts.get("retried", 0) == reran, counts
    junit = _junit(p)
    assert (junit["tests"], junit["failures"], junit["failed_cases"]) == (len(SMALL_SET), FIRST_TRY_FAILED,
                                                                           FIRST_TRY_FAILED), junit
    assert _junit_outcomes(p) == {cid: c["outcome"] for cid, c in cases.items()}
    return rec


def _patient(case_id: str) -> str:
    """The Patient resource id of a committed bundle."""
    bundle = json.loads((SYNTHEA / f"{case_id}.json").read_text())
    return next(e["resource"]["id"] for e in bundle["entry"] if e["resource"]["resourceType"] == "Patient")


PLUGIN_ARGS = {"rerunfailures": ("--reruns", "1"), "retry": ("--retries", "1")}
NOTICE = {"rerunfailures": "*groundeval: eval cases are not re-run by pytest-rerunfailures*--reruns 1*"
                           "first result stands*--repeat N*--agent-retries*",
          "retry": "*groundeval: eval cases are not re-run by *pytest-retry*--retries 1*first result stands*"}


@pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["serial", "xdist"])
@pytest.mark.parametrize("plugin", sorted(PLUGIN_ARGS))
def test_a_rerun_plugin_cannot_turn_a_first_try_failure_into_a_pass(project, plugin, workers):
    result = _run(project, "--agent=fail_first:FailFirst", *PLUGIN_ARGS[plugin], *workers)
    _assert_first_try_stands(project, result)
    result.stdout.fnmatch_lines([NOTICE[plugin]])


@pytest.mark.parametrize("where", ["addopts", "ini"])
@pytest.mark.parametrize("plugin", sorted(PLUGIN_ARGS))
def test_reruns_set_in_the_ini_file_are_refused_too(project, plugin, where):
    flag, n = PLUGIN_ARGS[plugin]
    line = f"addopts = {flag} {n}" if where == "addopts" else f"{flag.lstrip('-')} = {n}"
    project.makeini(f"[pytest]\n{line}\n")
    result = _run(project, "--agent=fail_first:FailFirst", *(("-n", "2") if where == "addopts" else ()))
    _assert_first_try_stands(project, result)
    result.stdout.fnmatch_lines([NOTICE[plugin]])


def test_force_reruns_and_append_mode_and_the_test_s_own_flaky_marker_are_refused(project):
    project.makepyfile(test_evals='''
import pytest

@pytest.mark.flaky(reruns=3, retries=3)
@pytest.mark.extraction
def test_extraction(case, agent, scorer, evaluate):
    evaluate(case, agent, scorer)
''')
    result = _run(project, "--agent=fail_first:FailFirst", "--force-reruns", "2", "--reruns", "2",
                  "--reruns-mode", "append", "--retries", "2")
    _assert_first_try_stands(project, result)
    result.stdout.fnmatch_lines(["*not re-run by pytest-rerunfailures / pytest-retry*--force-reruns 2*"])


def test_the_test_s_own_flaky_marker_alone_is_refused(project):
    project.makepyfile(test_evals='''
import pytest

@pytest.mark.flaky(reruns=2, retries=2)
@pytest.mark.extraction
def test_extraction(case, agent, scorer, evaluate):
    evaluate(case, agent, scorer)
''')
    result = _run(project, "--agent=fail_first:FailFirst")
    _assert_first_try_stands(project, result)
    assert "not re-run by" not in result.stdout.str()  # no rerun setting to speak of


SHOW_MARKS = '''
def pytest_collection_finish(session):
    for item in session.items:
        mark = item.get_closest_marker("flaky")
        print("MARK", item.name, None if mark is None else sorted(mark.kwargs.items()))
'''


@pytest.mark.parametrize("args", [(), ("--reruns", "1")], ids=["no-rerun-setting", "reruns"])
def test_eval_items_are_marked_only_where_a_plugin_would_rerun_them(evalproject, args):
    """No rerun setting and no flaky marker: the items are left as they are (a flaky-marked item
    takes pytest-rerunfailures' own protocol); with one, each eval item has the opt-out first."""
    evalproject.makeconftest(SHOW_MARKS)
    evalproject.makepyfile(test_plain="def test_plain():\n    pass\n")
    result = evalproject.runpytest("--data-dir", "data", "--collect-only", "-s", "-p", "no:cacheprovider", *args)
    marks = [line.split(" ", 2)[1:] for line in result.stdout.lines if line.startswith("MARK ")]
    assert len(marks) == len(SMALL_SET) + 1
    exempt = str(sorted({"reruns": 0, "retries": 0, "condition": False}.items()))
    for name, mark in marks:
        expected = exempt if args and name.startswith("test_extraction[") else "None"
        assert mark == expected, (name, mark)


def test_without_a_rerun_plugin_nothing_is_marked_or_said(project):
    result = _run(project, "--agent=fail_first:FailFirst", "-p", "no:rerunfailures", "-p", "no:pytest-retry")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert "re-run" not in result.stdout.str()
    assert len(_calls(project)) == len(SMALL_SET)


def test_a_plain_test_beside_the_evals_is_still_rerun(project):
    """Only eval items are exempt: the plugins keep working on the project's own tests."""
    project.makepyfile(test_plain='''
import os
def test_flaky_plain(tmp_path_factory):
    marker = os.path.join(os.environ["CALL_LOG"] + ".plain")
    if not os.path.exists(marker):
        open(marker, "w").close()
        raise AssertionError("first try")
''')
    result = _run(project, "--agent=fail_first:FailFirst", "--reruns", "1")
    counts = _counts(result)
    assert (counts.get("failed"), counts.get("passed"), counts.get("rerun")) == (FIRST_TRY_FAILED, 2, 1), counts


# ---------------------------------------------------------------- a plugin that reruns anyway
@pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["serial", "xdist"])
@pytest.mark.parametrize("plugin", sorted(PLUGIN_ARGS))
def test_an_item_rerun_anyway_reports_its_first_result_and_calls_no_agent(project, plugin, workers):
    """A conftest strips groundeval's marker and marks every item flaky: the real plugin re-runs
    the item in the same process. evaluate() reports the first result again, without a call
    (also with calls prefetched ahead: --concurrency 4)."""
    project.makeconftest(BYPASS)
    other = "no:pytest-retry" if plugin == "rerunfailures" else "no:rerunfailures"  # both read any flaky marker
    result = _run(project, "--agent=fail_first:FailFirst", *PLUGIN_ARGS[plugin], "--concurrency", "4", "-p", other,
                  *workers)
    rec = _assert_first_try_stands(project, result, reran=FIRST_TRY_FAILED)  # the plugin did re-run them
    assert rec["options"]["concurrency"] == (4 if not workers else 2)
    result.stdout.fnmatch_lines([f"*groundeval: {FIRST_TRY_FAILED} cases ran again*first result*"
                                 "0 later executions*"])


@pytest.mark.parametrize("how", [("--force-reruns", "1"), ("--reruns", "1", "--reruns-mode", "append")],
                         ids=["force-reruns", "append-mode"])
def test_a_crashed_worker_s_case_rescheduled_by_rerunfailures_keeps_its_crash(project, monkeypatch, how):
    """pytest-rerunfailures reschedules the item of a crashed xdist worker (what the marker
    cannot stop under --force-reruns or --reruns-mode append): the case keeps its first result,
    the crash; the second execution is in the record's reruns with its usage; the report that
    would have passed says failed; junitxml, pytest's counts and the exit status agree."""
    monkeypatch.setenv("CRASH_ON", _patient(REFS))
    # a worker's crash: the agent in the worker (--agent-in-process)
    result = _run(project, "--agent=fail_first:CrashFirst", "--agent-in-process", "-n", "2", "--groundeval-shard",
                  "1/1", *how)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()[-3000:]
    rec = read_record(project)
    assert validate_record(rec) == []
    cases = {c["case_id"]: c for c in rec["cases"]}
    assert sorted(cases) == sorted(SMALL_SET)
    assert cases[REFS]["outcome"] == "error" and cases[REFS]["error"]["kind"] == "crash"
    assert all(c["outcome"] == "passed" for cid, c in cases.items() if cid != REFS)
    assert rec["summary"]["extraction"]["n_errors"] == 1 and rec["summary"]["extraction"]["n_passed"] == 3
    # the execution after the crash: kept apart, with its usage
    assert [(r["case_id"], r["outcome"]) for r in rec["reruns"]] == [(REFS, "passed")]
    calls = _calls(project)
    crashed = _patient(REFS)
    assert sorted(c["patient"] for c in calls) == sorted([crashed, *map(_patient, SMALL_SET)])  # no hidden call
    # every call that answered has its usage in the record (the crashed one died with its process)
    answered = sum(c["usage"]["input_tokens"] for c in calls) - next(
        c["usage"]["input_tokens"] for c in calls if c["patient"] == crashed)
    assert rec["usage"]["input_tokens"] == answered == sum(
        c["usage"]["input_tokens"] for c in [*cases.values(), *rec["reruns"]] if c.get("usage"))
    counts = _counts(result)
    assert (counts.get("errors"), counts.get("passed"), counts.get("rerun")) == (1, 3, 1), counts
    junit = _junit(project)
    # (pytest-rerunfailures leaves an empty <testcase/> for the rescheduled crash report)
    # the crash is an errored case: junitxml's <error> (pytest/junit.py), pytest's own count "errors" (issue 30 item 4; it was "failed")
    assert (junit["tests"], junit["failures"], junit["errors"], junit["failed_cases"]) == (4, 0, 1, 0), junit
    assert _junit_outcomes(project) == {cid: c["outcome"] for cid, c in cases.items()}
    result.stdout.fnmatch_lines(["*groundeval: 1 case ran again*1 later execution *"])
    # a crash cuts the run short, so the journal stays: the later execution is a rerun line,
    # which readers (--resume, compare) leave out: the case's result there is the crash too
    assert rec["completeness"]["cut_short"]
    journal = project.path / "record.jsonl"
    kinds = [json.loads(line)["kind"] for line in journal.read_text().splitlines()]
    assert (kinds.count("case"), kinds.count("rerun")) == (len(SMALL_SET), 1)
    assert load_stored(journal).cases[("extraction", REFS)].error.kind == "crash"
    # groundeval merge keeps the shard's reruns and their usage
    merged = merge([project.path / "record.json"])[0].model_dump(mode="json")
    assert merged["reruns"] == rec["reruns"] and merged["usage"]["input_tokens"] == rec["usage"]["input_tokens"]


# ---------------------------------------------------------------- the committed suite
@pytest.mark.parametrize("plugin", sorted(PLUGIN_ARGS))
def test_pytest_evals_extraction_with_a_rerun_plugin_shows_the_first_try(pytester, monkeypatch, plugin):
    """The issue's runs: `pytest evals -m extraction --reruns 1` / `--retries 1` with an agent
    that is right only on its second call per prompt."""
    pytester.makepyfile(fail_first=AGENT)
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    monkeypatch.setenv("CALL_LOG", str(pytester.path / "calls.jsonl"))
    result = pytester.runpytest_subprocess(
        str(ROOT / "evals"), "-m", "extraction", "--rootdir", str(pytester.path), "-p", "no:cacheprovider",
        "-p", "no:randomly", "--agent=fail_first:FailFirst", "--run-record", str(pytester.path / "record.json"),
        "--junitxml", str(pytester.path / "junit.xml"), *PLUGIN_ARGS[plugin])
    n = len(list(SYNTHEA.glob("*.json")))
    rec = read_record(pytester)
    cases = rec["cases"]
    calls = _calls(pytester)
    first_try_passed = sum(c["outcome"] == "passed" for c in cases)
    assert len(cases) == len(calls) == n  # one call per case, none hidden
    assert all(c["attempts"] == 1 for c in cases)
    assert 0 < first_try_passed < n
    assert all(c["outcome"] == "passed" for c in cases if not c["ground_truth"])  # only the empty lists
    assert rec["summary"]["extraction"]["exact_match"] == round(first_try_passed / n, 6) or \
        abs(rec["summary"]["extraction"]["exact_match"] - first_try_passed / n) < 1e-9
    assert rec["usage"]["output_tokens"] == 7 * n
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    counts = _counts(result)
    assert (counts.get("failed"), counts.get("passed")) == (n - first_try_passed, first_try_passed), counts
    assert not counts.get("rerun") and not counts.get("retried")
    junit = _junit(pytester)
    assert (junit["tests"], junit["failures"]) == (n, n - first_try_passed), junit
    assert re.search(r"not re-run by pytest-(rerunfailures|retry)", result.stdout.str())


# ---------------------------------------------------------------- pytest-repeat cannot multiply a case
REPEAT_NOTICE = ("*groundeval: eval cases are not repeated by pytest-repeat (--count 3): each case runs once and has "
                 "one result; --repeat N runs each case N times and reports pass^k*")


@pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_pytest_repeat_count_runs_each_case_once_and_says_so(project, workers):
    """pytest-repeat's ``--count 3`` would make 3 items of each case (ids ``<case>-1-3`` ...): the
    record held one result per case and called the run cut short ("8 selected case(s) have no
    result"), and nothing was repeated. Each case is one item, run once: the first try stands,
    the record is complete, one line points at --repeat."""
    result = _run(project, "--agent=fail_first:FailFirst", "--count", "3", *workers)
    rec = _assert_first_try_stands(project, result)
    assert not rec["completeness"]["cut_short"] and rec["completeness"]["selected"] == len(SMALL_SET)
    assert not any(re.search(r"-\d+-3\]", line) for line in result.stdout.lines), result.stdout.str()[-2000:]
    result.stdout.fnmatch_lines([REPEAT_NOTICE])


def test_a_repeat_marker_on_an_eval_test_is_said_and_a_plain_test_is_still_repeated(project):
    """The test's own ``repeat(3)`` marker: one item per case and a warning naming the test;
    pytest-repeat keeps repeating the project's own tests."""
    project.makepyfile(test_evals='''
import pytest

@pytest.mark.repeat(3)
@pytest.mark.extraction
def test_extraction(case, agent, scorer, evaluate):
    evaluate(case, agent, scorer)
''', test_plain='''
def test_plain():
    pass
''')
    result = _run(project, "--agent=fail_first:FailFirst", "--count", "2")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()[-3000:]
    rec = read_record(project)
    assert sorted(c["case_id"] for c in rec["cases"]) == sorted(SMALL_SET)
    assert not rec["completeness"]["cut_short"]
    assert len(_calls(project)) == len(SMALL_SET)
    counts = _counts(result)
    assert (counts.get("failed"), counts.get("passed")) == (FIRST_TRY_FAILED, 1 + 2), counts  # test_plain twice
    result.stdout.fnmatch_lines(["*test_evals.py::test_extraction: the test's repeat(3) marker does not repeat eval "
                                 "cases*--repeat N*"])


def test_without_pytest_repeat_strict_markers_still_collects_the_evals(project):
    """Eval tests get the ``repeat`` marker only where pytest-repeat registers it: without it,
    ``--strict-markers`` would refuse an unknown marker and nothing would be collected."""
    result = _run(project, "--agent=fail_first:FailFirst", "-p", "no:repeat", "--strict-markers")
    _assert_first_try_stands(project, result)
    assert "not repeated by" not in result.stdout.str()
