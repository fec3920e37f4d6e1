"""The core's promises: typed results with one meaning per outcome and error kind, a
generated record schema, tasks that nothing outside their own modules names, settings
parsed once, and a reporter that exists only on the controller."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path

import pytest
from conftest import FIXTURES, SMALL_SET, SYNTHEA, read_record
from pydantic import ValidationError

from pytest_groundeval.model import CaseRef, CaseResult, schema_text
from pytest_groundeval.store.record import SCHEMA_PATH, validate_record
from pytest_groundeval.run.runner import run_case
from pytest_groundeval.tasks import registry
from pytest_groundeval.tasks.write import WriteTask

PKG = Path(__file__).resolve().parents[1] / "pytest_groundeval"


# ---------------------------------------------------------------- the record schema
def test_committed_record_schema_is_the_generated_one():
    assert SCHEMA_PATH.read_text() == schema_text(), (
        "record.schema.json is stale: regenerate it with "
        "`uv run python -m pytest_groundeval.model > pytest_groundeval/record.schema.json`")


def test_the_generated_schema_rejects_what_the_models_reject():
    ok = {"case_id": "c", "task": "t", "outcome": "error", "error": {"kind": "agent", "message": "boom"}}
    record = {"schema_version": "2.0", "run_id": "r", "started_at": "s", "finished_at": "f", "git_sha": None,
              "agent": "a", "model": None, "requested": {"agent": "a", "model": None}, "options": {},
              "versions": {}, "summary": {}, "cases": [ok],
              "completeness": {"selected": 1, "deselected": 0, "recorded": 1, "subset": False, "selection": {},
                               "cut_short": False, "reason": None},
              "usage": {"input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0, "cases_priced": 0,
                        "cases_unpriced": 0, "prices_as_of": "x"}}
    assert validate_record(record) == []
    bad = json.loads(json.dumps(record))
    bad["cases"][0]["error"]["kind"] = "parse"  # not an error kind: a parse failure is a scored failure
    assert any("parse" in p for p in validate_record(bad))
    bad["cases"][0]["error"]["kind"] = "agent"
    bad["cases"][0]["error_kind"] = "agent"  # no untyped extras
    assert validate_record(bad)


# ---------------------------------------------------------------- one meaning per outcome
SCORE = {"passed": False, "metrics": {"f1": 0.0}, "reason": "missed [1]"}


@pytest.mark.parametrize("fields, why", [
    ({"outcome": "failed"}, "a failed case has a score"),
    ({"outcome": "passed", "score": SCORE}, "outcome passed contradicts its score"),
    ({"outcome": "error"}, "an errored case has an error"),
    ({"outcome": "error", "error": {"kind": "agent", "message": "x"}, "score": SCORE}, "no score"),
    ({"outcome": "error", "error": {"kind": "parse", "message": "x"}}, "kind"),
    ({"outcome": "skipped"}, "skip reason"),
    ({"outcome": "failed", "score": SCORE, "error": {"kind": "agent", "message": "x"}}, "no error"),
])
def test_contradictory_results_cannot_be_built(fields, why):
    with pytest.raises(ValidationError, match=why):
        CaseResult(case_id="c", task="t", **fields)


def test_consistent_results_are_accepted_and_know_whether_they_are_finished():
    failed = CaseResult(case_id="c", task="t", outcome="failed", score=SCORE)
    assert failed.finished and failed.reason == "missed [1]" and failed.metric("f1") == 0.0
    for kind, finished in (("case", True), ("internal", True), ("agent", False), ("timeout", False),
                           ("budget", False)):
        r = CaseResult(case_id="c", task="t", outcome="error", error={"kind": kind, "message": "m"})
        assert r.finished is finished and r.metric("f1") == 0.0 and r.error_kind == kind


# ---------------------------------------------------------------- error kinds, from the runner
def _write_case(tmp_path: Path, name: str, mutate) -> CaseRef:
    data = json.loads((FIXTURES / "write_cases" / f"{name}.json").read_text())
    mutate(data)
    folder = tmp_path / "cases"
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps(data))
    return CaseRef(task="write", case_id=name, path=folder / f"{name}.json")


class Counting:
    name = "counting"

    def __init__(self, answer="{}", usage=None):
        self.calls, self.answer, self.usage = 0, answer, usage

    def run(self, prompt):
        self.calls += 1
        return {"text": self.answer, "usage": self.usage} if self.usage is not None else self.answer


def test_a_malformed_write_case_is_a_case_error_and_the_agent_is_never_called(tmp_path):
    def bad_unit(d):
        d["expected"]["max_daily_dose"]["unit"] = "mL"  # a ceiling must be a mass

    ref = _write_case(tmp_path, "ibuprofen-two-tablets", bad_unit)
    agent = Counting()
    result = run_case(WriteTask(ref.path.parent), ref, agent)
    assert result.outcome == "error" and result.error.kind == "case" and result.error.traceback is None
    assert "ibuprofen-two-tablets.json" in result.error.message and "max_daily_dose" in result.error.message
    assert agent.calls == 0

    def wrong_type(d):
        d["expected"]["dosage"]["dose"] = "400 mg"  # a string where an object belongs

    ref = _write_case(tmp_path, "ibuprofen-two-tablets", wrong_type)
    result = run_case(WriteTask(ref.path.parent), ref, agent)
    assert result.error.kind == "case" and "expected block" in result.error.message and agent.calls == 0


def test_a_bug_in_a_task_is_internal_with_the_traceback(tmp_path):
    class Buggy(WriteTask):
        def score(self, prediction, case):
            raise KeyError("oops")

    task = Buggy(FIXTURES / "write_cases")
    ref = next(r for r in task.discover() if r.case_id == "ibuprofen-two-tablets")
    result = run_case(task, ref, Counting('{"resourceType": "MedicationStatement"}'))
    assert result.outcome == "error" and result.error.kind == "internal"
    assert "KeyError" in result.error.message and "raise KeyError" in result.error.traceback


def test_usage_that_is_not_token_counts_is_dropped_with_a_warning_and_the_answer_scored(tmp_path):
    task = WriteTask(FIXTURES / "write_cases")
    ref = next(r for r in task.discover() if r.case_id == "ibuprofen-two-tablets")
    result = run_case(task, ref, Counting("{}", usage={"input_tokens": "n/a"}))
    assert result.outcome == "failed" and result.score is not None  # "{}" is scored, as without usage
    assert result.usage is None and result.cost_usd is None
    (warning,) = result.warnings
    assert warning.startswith("usage dropped") and "not token counts" in warning and "'n/a'" in warning
    plain = run_case(task, ref, Counting("{}"))
    assert plain.warnings == [] and plain.score == result.score


def test_a_parse_failure_is_a_scored_failure_with_every_metric_zero():
    from pytest_groundeval.model import per_case_counts

    for name, cls in registry().items():
        task = cls(Path("."))
        score = task.unparsed(_dummy_case(name), "no JSON object found in the output")
        assert score.passed is False and score.reason == "parse error: no JSON object found in the output"
        numbers = {k: v for k, v in score.metrics.items() if k not in per_case_counts(cls.specs)}
        assert numbers and all(v == 0 for v in numbers.values()), (name, numbers)


def _dummy_case(task):
    from pytest_groundeval.model import Case

    return Case(ref=CaseRef(task=task, case_id="c", path=Path("c.json")), prompt="", inputs={},
                truth=[{"code": "1", "display": "x", "verdict": "matched"}], content_hash="h")


# ---------------------------------------------------------------- nothing outside a task names it
CORE = ["pytest", "run", "store", "integrations/langsmith", "reporting/gate.py", "reporting/terminal.py",
        "model.py", "tasks/datasets.py", "tasks/jsontext.py", "fhir/medications.py", "agents"]


def task_references(text: str, names: dict[str, str]) -> list[str]:
    """Lines of ``text`` that name a task: its name as a string literal, as a metric prefix
    (``name.f1``), a module path (``tasks.name``), its class, its option (``--name-``) or as
    ``name task/case/suite``; ``names`` maps task name → class name."""
    found = []
    for name, cls in names.items():
        n = re.escape(name)
        pattern = re.compile(
            rf"""["']{n}["']|\b{n}\.[a-z_]|\b(?:tasks|scorers)[./]{n}\b|\b{re.escape(cls)}\b|--{n}-"""
            rf"""|\b{n}[ _-](?:tasks?|cases?|suites?|scorer|baseline|prompt)\b""", re.IGNORECASE)
        found += [f"{name}: {line.strip()}" for line in text.splitlines() if pattern.search(line)]
    return found


def test_the_detector_catches_task_names():
    names = {"write": "WriteTask", "extraction": "ExtractionTask"}
    for bad in ('system = X if task == "write" else Y', "COUNT = {'extraction': 1}", "e.g. extraction.f1=0.95",
                "from .tasks.write import WriteTask", "the write task's prompt", "--write-cases"):
        assert task_references(bad, names), bad
    for fine in ("fh.write(line)", "Write to a temp file", 'mode in ("read", "readwrite")', "write_json_atomic(p)"):
        assert not task_references(fine, names), fine


# the model-call cache has a mode called "write" (``--model-cache write``): a homonym
HOMONYMS = {
    'run/cache.py: write: MODES = ("off", "read", "write", "readwrite", "strict")',
    'run/cache.py: write: if self.mode in ("write", "readwrite"):',
    'store/__init__.py: write: __all__ = ["Journal", "StoreError", "read", "read_record", "write"]',
    'pytest/options.py: write: CACHE_MODES = ("off", "read", "write", "readwrite", "strict")',
}


def test_no_core_module_names_a_task():
    names = {name: cls.__name__ for name, cls in registry().items()}
    assert {"extraction", "write", "reconciliation"} <= set(names)
    files = [p for entry in CORE for p in ([PKG / entry] if entry.endswith(".py") else sorted((PKG / entry).glob("*.py")))]
    assert len(files) > len(CORE)
    hits = {f"{p.relative_to(PKG)}: {hit}" for p in files for hit in task_references(p.read_text(), names)}
    assert hits - HOMONYMS == set()
    assert HOMONYMS <= hits  # the exceptions are still real (else drop them)


# ---------------------------------------------------------------- settings, controller and workers
def test_settings_are_frozen(pytester):
    from pytest_groundeval.pytest.settings import Settings

    config = pytester.parseconfigure("--agent=baseline")
    settings = Settings.from_config(config, registry())
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.max_cost = 1.0  # type: ignore[misc]
    assert settings.agent.name == "baseline" and settings.mode == "run"


PROBE = '''
import json, os

def pytest_configure(config):
    pass

def pytest_sessionfinish(session):
    config = session.config
    names = [n for n in ("groundeval-evaluator", "groundeval-reporter") if config.pluginmanager.get_plugin(n)]
    worker = getattr(config, "workerinput", {}).get("workerid", "controller")
    with open(os.path.join(os.environ["PROBE_DIR"], worker + ".json"), "w") as fh:
        json.dump(names, fh)
'''


def test_the_reporter_lives_only_on_the_controller(evalproject, monkeypatch):
    evalproject.makeconftest(PROBE)
    probe = evalproject.mkdir("probe")
    monkeypatch.setenv("PROBE_DIR", str(probe))
    # read at sessionfinish: a worker's sessionfinish runs before it tells the controller it
    # finished (xdist sends "workerfinished" after it), so every file is written when the
    # controller exits; a worker's pytest_unconfigure may still be running then (the race
    # that made this test fail on a loaded machine)
    result = evalproject.runpytest_subprocess("--data-dir", "data", "--run-record", "record.json",
                                              "-p", "no:cacheprovider", "-n", "2")
    result.assert_outcomes(passed=len(SMALL_SET))
    seen = {p.stem: json.loads(p.read_text()) for p in probe.glob("*.json")}
    assert seen["controller"] == ["groundeval-evaluator", "groundeval-reporter"]
    workers = {k: v for k, v in seen.items() if k.startswith("gw")}
    assert len(workers) == 2 and all(v == ["groundeval-evaluator"] for v in workers.values())
    assert len(read_record(evalproject)["cases"]) == len(SMALL_SET)


def test_a_plain_test_session_writes_no_record(pytester):
    pytester.makepyfile(test_plain="def test_one():\n    assert True\n")
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)
    assert not (pytester.path / ".groundeval" / "runs").exists() and not (pytester.path / "runs").exists()
    assert SYNTHEA.is_dir()


# ---------------------------------------------------------------- linear failure reporting
PLAIN_FAILING = "def test_plain_fails():\n    assert 1 == 2\n"


def test_eval_failures_are_listed_once_in_pytest_s_short_summary(evalproject, monkeypatch):
    """Each failed case is one line, said once: pytest's short test summary (its reason as the
    message: whole on CI or under -vv, cut to a terminal's width otherwise), no FAILURES
    section, no second list (issue 30 item 4; it was listed twice)."""
    monkeypatch.setenv("CI", "true")
    args = ("--data-dir", "data", "--run-record", "record.json", "-p", "no:cacheprovider",
            "--agent=agents_under_test:Hallucinating")
    result = evalproject.runpytest(*args)
    result.assert_outcomes(failed=len(SMALL_SET))
    out = result.stdout.str()
    assert "= FAILURES =" not in out and "groundeval failures" not in out
    assert out.count("hallucinated ['198440']") == len(SMALL_SET), out
    lines = [ln for ln in result.outlines if ln.startswith("FAILED test_evals.py::")]
    assert len(lines) == len(SMALL_SET) and all(ln.endswith("hallucinated ['198440']") for ln in lines)
    # -q: the same one line per failure, and the summary without its table of figures
    quiet = evalproject.runpytest(*args, "-q")
    assert [ln for ln in quiet.outlines if "hallucinated" in ln] == lines
    assert any(ln.startswith("extraction: 4 cases, 0 passed, 4 failed, 0 errors; ") for ln in quiet.outlines), quiet.outlines
    assert not any(ln.startswith("  micro_precision") for ln in quiet.outlines)
    # asked for tracebacks: pytest's own section, as always
    result = evalproject.runpytest(*args, "--tb=short")
    assert "= FAILURES =" in result.stdout.str() and "groundeval failures" not in result.stdout.str()
    # a failing plain test in the same session: pytest's section stays, for its traceback
    evalproject.makepyfile(test_plain=PLAIN_FAILING)
    result = evalproject.runpytest(*args)
    out = result.stdout.str()
    assert "= FAILURES =" in out and "assert 1 == 2" in out and "groundeval failures" not in out


# ---------------------------------------------------------------- the prefetcher and instant agents
def test_the_prefetcher_stops_launching_for_an_instant_agent_and_keeps_going_for_a_slow_one():
    import time

    from pytest_groundeval.run.concurrency import Prefetcher

    def run(seconds):
        calls = []

        def call(key):
            calls.append(key)
            time.sleep(seconds)
            return seconds

        pf = Prefetcher(call, 4, latency=lambda v: v)
        keys = list(range(40))
        for i in keys:
            pf.advance(keys[i:i + pf.lookahead])
            assert pf.take(i) == seconds
            if pf.idle and not hasattr(pf, "closed_when_idle"):
                pf.closed_when_idle = pf.pool.closed  # (before stop(), which closes it anyway)
        pf.stop()
        return pf, calls

    fast, calls = run(0.0)
    assert fast.instant and sorted(calls) == list(range(40))  # every case still ran, once
    # once instant and every launched call consumed, the rest ran inline, and the pool's
    # threads ended (they are not left waiting for work that cannot come)
    assert fast.closed_when_idle is True
    for thread in fast.pool._threads:
        thread.join()
    slow, calls = run(0.003)
    assert not slow.instant and sorted(calls) == list(range(40))
    assert not hasattr(slow, "closed_when_idle")  # never idle: its calls kept running ahead


# ---------------------------------------------------------------- the per-call timeout
def test_a_timeout_on_the_main_thread_cannot_be_swallowed_by_the_agent():
    import time

    from pytest_groundeval.run.calls import CallTimeout, _with_timeout

    def swallowing():
        try:
            time.sleep(120)
        except Exception:  # an agent that catches everything and answers anyway
            return "late answer"
        return "answer"

    started = time.monotonic()
    with pytest.raises(CallTimeout, match="no answer within 0.1 s"):
        _with_timeout(swallowing, 0.1)
    # not held until the agent's sleep ended (120 s): the cut took 0.1 s as measured at load 10
    # on 2 cores; 60 s is a bound no load reaches and the sleep still exceeds
    assert time.monotonic() - started < 60.0
    assert _with_timeout(lambda: "fast", 30.0) == "fast"  # a call that answers never races the timeout


def test_when_sigalrm_is_taken_the_timeout_runs_on_a_thread(monkeypatch):
    import signal
    import threading
    import time

    from pytest_groundeval.run.calls import CallTimeout, _with_timeout

    seen = []
    previous = signal.signal(signal.SIGALRM, lambda *a: None)  # e.g. pytest-timeout's signal method
    try:
        with pytest.raises(CallTimeout):
            _with_timeout(lambda: (seen.append(threading.current_thread().name), time.sleep(1)), 0.1)
        assert seen == ["groundeval-call"]
        assert signal.getsignal(signal.SIGALRM) is not signal.SIG_DFL  # left as it was
    finally:
        signal.signal(signal.SIGALRM, previous)


def test_the_cache_modes_the_option_offers_are_the_cache_s():
    from pytest_groundeval.run import cache
    from pytest_groundeval.pytest import options

    assert options.CACHE_MODES == cache.MODES


# ---------------------------------------------------------------- tests/ mirrors the layout
def test_the_tests_folders_mirror_the_package_and_module_names_are_unique():
    """Each folder under tests/ is a package of pytest_groundeval (or scripts/, or docs/: the
    docs site's tests), and no two
    test modules share a name (they import each other by it: tests/conftest.py)."""
    tests = Path(__file__).resolve().parent
    packages = {p.name for p in PKG.iterdir() if p.is_dir() and any(p.glob("*.py"))} | {"scripts", "docs"}
    folders = {p.name for p in tests.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))}
    assert folders and folders <= packages, f"tests/ folders that mirror no package: {sorted(folders - packages)}"
    names = [p.name for p in tests.rglob("test_*.py")]
    assert len(names) == len(set(names)), sorted(n for n in set(names) if names.count(n) > 1)
