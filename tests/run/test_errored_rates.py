"""An errored case stays in the denominators of the rates over the applicable cases.

labs, orders and letter score some dimensions over the cases they apply to only (``among:
applicable``, with ``<name>_n``). An errored case has no score, so it used to be left out of
them: an agent that raised (or crashed its worker, or hung until pytest-timeout) on exactly the
cases it would fail kept their dimension rates, and a ``--threshold labs.value=...`` gate,
untouched (only ``pass`` counted it). Now the runner reads, from the case's truth, which of
those rates apply to it (``Task.applicable_rates``, ``CaseResult.applicable``) and the case
counts 0 in each, in the summary and in ``groundeval compare`` alike."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import ROOT

from pytest_groundeval.model import CaseResult, ErrorInfo
from pytest_groundeval.reporting.compare import compare, read_run
from pytest_groundeval.run.runner import load_case, not_run
from pytest_groundeval.tasks import registry

LABS = ROOT / "fixtures" / "labs"

EVAL = '''
import pytest

@pytest.mark.labs
def test_labs(case, agent, scorer, evaluate):
    evaluate(case, agent, scorer)
'''

# right on every question but the eGFR declines, where it raises instead of answering wrong
AGENT = '''
from pytest_groundeval.run.calls import PermanentAgentError
from pytest_groundeval.tasks.labs import baseline_answer

class DodgesDeclines:
    name = "dodges-declines"
    def run(self, prompt):
        raise AssertionError("run_case is called")
    def run_case(self, task, prompt, inputs):
        if inputs["question"]["kind"] == "change":
            raise PermanentAgentError("no answer for a decline")
        return baseline_answer(inputs)
'''


def _labs_project(pytester, **agents: str):
    """The committed labs suite copied into ``pytester``'s project, with the eval test and
    ``agents`` (module name -> source); returns the suite's folder."""
    pytester.makepyfile(test_labs_suite=EVAL, **agents)
    data = pytester.mkdir("labs")
    shutil.copytree(LABS / "bundles", data / "bundles")
    for p in sorted(LABS.glob("*.json")):
        shutil.copy(p, data / p.name)
    return data


def _labs_task():
    return registry()["labs"](LABS)


def test_an_errored_labs_case_counts_0_in_the_rates_its_truth_applies_to():
    task = _labs_task()
    refs = {r.case_id: r for r in task.discover()}
    change = next(r for cid, r in refs.items() if "_change_" in cid)
    no_result = next(r for cid, r in refs.items() if _expect(cid) == "no_result")
    case, _ = load_case(task, change)
    applies = task.applicable_rates(case)
    assert applies and "change_pass" in applies and "value" in applies and "no_result_pass" not in applies
    case, _ = load_case(task, no_result)
    assert "value" not in (task.applicable_rates(case) or []) and "no_result_pass" in task.applicable_rates(case)
    errored = not_run(change, error=ErrorInfo(kind="crash", message="its worker died"), task=task)
    assert errored.applicable == applies
    assert errored.applicable_value("change_pass") == 0.0 and errored.applicable_value("no_result_pass") is None
    assert not_run(change, error=ErrorInfo(kind="crash", message="x")).applicable is None  # no task: unknown
    with pytest.raises(ValueError, match="only an errored case"):
        CaseResult(case_id="x", task="labs", outcome="skipped", skip_reason="s", applicable=["value"])


def _expect(case_id: str) -> str:
    return json.loads((LABS / f"{case_id}.json").read_text())["expect"]


def test_an_agent_that_raises_on_the_cases_it_would_fail_keeps_them_in_every_rate(pytester):
    data = _labs_project(pytester, dodging=AGENT)
    common = ("-p", "no:randomly", "-p", "no:cacheprovider", "--labs-cases", str(data), "-q")
    result = pytester.runpytest_subprocess("--agent=dodging:DodgesDeclines", "--run-record", "dodging.json",
                                           "--threshold", "labs.value=0.95", *common)
    record = json.loads((pytester.path / "dodging.json").read_text())
    s = record["summary"]["labs"]
    changes = sum(1 for p in LABS.glob("*_change_*.json"))
    assert changes >= 10 and s["n_errors"] == changes
    assert s["change_pass_n"] == changes and s["change_pass"] == 0.0  # was: n 0, no figure to gate on
    expect = {p.stem: json.loads(p.read_text())["expect"] for p in LABS.glob("*.json")}
    for c in record["cases"]:
        if c["outcome"] == "error":  # the rates its truth applies to, the same as its score would carry
            assert "change_pass" in c["applicable"]
            assert ("value" in c["applicable"]) == (expect[c["case_id"]] == "result")
            assert ("no_result_pass" in c["applicable"]) == (expect[c["case_id"]] == "no_result")
    results = sum(1 for e in expect.values() if e == "result")
    dodged = sum(1 for cid, e in expect.items() if e == "result" and "_change_" in cid)
    assert 0 < dodged < changes
    assert s["value_n"] == results  # every result case, errored or answered
    assert s["value"] == pytest.approx((results - dodged) / results, abs=1e-6) and s["value"] < 0.95
    assert s["no_result_pass_n"] == sum(1 for e in expect.values() if e == "no_result")
    assert result.ret == 1  # the gate on value is missed, as for a wrong answer
    result.stdout.fnmatch_lines(["*groundeval gate: MISSED labs.value*"])
    # compare computes every figure from the cases as the summary does: the same numbers
    base = pytester.runpytest_subprocess("--agent=baseline", "--run-record", "baseline.json", *common)
    assert base.ret == 0
    report = compare(read_run(pytester.path / "baseline.json"), read_run(pytester.path / "dodging.json"))
    got = {m.metric: m for t in report.tasks if t.task == "labs" for m in t.metrics}
    for name in ("value", "change_pass", "unit", "date"):
        assert got[name].new == pytest.approx(s[name], abs=1e-6), name


CRASHER = '''
import os
from pytest_groundeval.tasks.labs import baseline_answer

class CrashesOnADecline:
    """Its xdist worker dies on the first eGFR decline it is given; right everywhere else."""
    name = "crashes-on-a-decline"
    def run(self, prompt):
        raise AssertionError("run_case is called")
    def run_case(self, task, prompt, inputs):
        if inputs["question"]["kind"] == "change" and not os.path.exists("crashed"):
            open("crashed", "w").close()
            os._exit(1)
        return baseline_answer(inputs)
'''


def test_a_crashed_worker_s_case_counts_0_in_the_rates_its_truth_applies_to(pytester):
    """The controller reads the crashed case's truth (the worker that held it is gone)."""
    data = _labs_project(pytester, crasher=CRASHER)
    result = pytester.runpytest_subprocess("--agent=crasher:CrashesOnADecline", "--run-record", "record.json",
                                           "-p", "no:randomly", "-p", "no:cacheprovider", "--labs-cases", str(data),
                                           "-n", "2", "-q")
    assert result.ret == 1, result.stdout.str()[-2000:]
    record = json.loads((pytester.path / "record.json").read_text())
    [crashed] = [c for c in record["cases"] if c["outcome"] == "error"]
    assert crashed["error"]["kind"] == "crash" and "change_pass" in crashed["applicable"]
    s = record["summary"]["labs"]
    changes = sum(1 for _ in LABS.glob("*_change_*.json"))
    assert s["change_pass_n"] == changes and s["change_pass"] == pytest.approx((changes - 1) / changes, abs=1e-6)


# ---------------------------------------------------------------- grounded
class _ToolUser:
    """Takes the harness's tools, then answers from a lookup (grounded) or fails (``fail_on``)."""
    name = "tool-user"

    def __init__(self, fail_on: str | None = None) -> None:
        self.fail_on = fail_on

    def run(self, prompt):
        raise AssertionError("run_case is called")

    def run_case(self, task, prompt, inputs):
        from pytest_groundeval.run.toolcalls import harness_tools

        assert harness_tools(task, inputs)  # the case's tools, recorded by the harness
        if self.fail_on is not None and self.fail_on in prompt:
            raise RuntimeError("gave up after taking the tools")
        return json.dumps({"active_medications": []})


def test_an_errored_case_of_a_tool_using_agent_counts_0_in_grounded():
    """grounded is a rate over the cases whose agent the harness gave tools: an agent that
    fails on a case after taking them (a model whose tool loop breaks, a custom agent that
    gives up) stays in it as 0; one given no tools is not applicable, erroring or not."""
    from conftest import SMALL_SET, SYNTHEA

    from pytest_groundeval.run.runner import run_case
    from pytest_groundeval.scorers.aggregate import grounded_summary

    task = registry()["extraction"](SYNTHEA)
    refs = [r for r in task.discover() if r.case_id in SMALL_SET]
    victim = refs[0]
    results = [run_case(task, r, _ToolUser(fail_on=None)) for r in refs[1:]]
    assert all(r.transcript is not None for r in results)  # tools offered: grounded applies
    errored = run_case(task, victim, _ToolUser(fail_on=_patient_name(victim)))
    assert errored.outcome == "error" and errored.tools_offered and errored.applicable == ["grounded"]
    assert errored.applicable_value("grounded") == 0.0
    scored = grounded_summary(results)
    with_error = grounded_summary([*results, errored])
    assert with_error["grounded_n"] == scored["grounded_n"] + 1
    assert with_error["grounded"] < scored["grounded"] or scored["grounded"] == 0.0
    # an agent given no tools that errors: nothing applies
    class NoTools:
        name = "no-tools"

        def run(self, prompt):
            raise RuntimeError("down")

    plain = run_case(task, victim, NoTools())
    assert plain.outcome == "error" and plain.applicable is None and grounded_summary([plain]) == {}


def _patient_name(ref) -> str:
    from conftest import SYNTHEA

    bundle = json.loads((SYNTHEA / f"{ref.case_id}.json").read_text())
    patient = next(e["resource"] for e in bundle["entry"] if e["resource"]["resourceType"] == "Patient")
    return patient["id"]


def test_a_tool_using_agent_that_hangs_past_the_timeout_counts_0_in_grounded():
    """The harness stops waiting for an attempt that hangs (the call policy's timeout) while
    the attempt is still running: the tools it took are read from its log as it stands then,
    so hanging on the cases it would fail grounding does not take them out of the rate."""
    import threading

    from conftest import REFS, SYNTHEA

    from pytest_groundeval.run.calls import CallPolicy
    from pytest_groundeval.run.runner import run_case

    release = threading.Event()

    class Hangs:
        name = "hangs-with-tools"

        def run(self, prompt):
            raise AssertionError("run_case is called")

        def run_case(self, task, prompt, inputs):
            from pytest_groundeval.run.toolcalls import harness_tools

            assert harness_tools(task, inputs)
            release.wait()  # never set before the timeout: the attempt is abandoned mid-case
            return json.dumps({"active_medications": []})

    task = registry()["extraction"](SYNTHEA)
    ref = next(r for r in task.discover() if r.case_id == REFS)
    try:
        hung = run_case(task, ref, Hangs(), policy=CallPolicy(timeout=0.2, max_attempts=1, sleep=lambda s: None))
    finally:
        release.set()
    assert hung.outcome == "error" and hung.error.kind == "timeout"
    assert hung.tools_offered and hung.applicable == ["grounded"]


# ---------------------------------------------------------------- grounded: a crashed worker's case
def test_a_crashed_case_counts_0_in_grounded_when_the_agent_kind_takes_tools_or_was_given_them():
    """The controller cannot read a dead worker's log: the run's agent kind (AgentSpec.tool_using)
    says whether it takes a task's tools; a module:Class is known by the worker's ledger line."""
    from pytest_groundeval.agents.spec import AgentSpec
    from pytest_groundeval.tasks.letter import LetterTask

    assert [AgentSpec(n).tool_using for n in ("langgraph", "langgraph-mcp", "claude-agent", "mcp:python a.py")] \
        == [True] * 4
    assert [AgentSpec(n).tool_using for n in ("baseline", "claude", "chat")] == [False] * 3
    assert AgentSpec("mine:Agent").tool_using is None
    task = _labs_task()
    ref = next(r for r in task.discover() if "_change_" in r.case_id)
    crash = ErrorInfo(kind="crash", message="its worker died")
    spec_says = not_run(ref, error=crash, task=task, tool_using=True)
    assert spec_says.applicable[-1] == "grounded" and spec_says.applicable_value("grounded") == 0.0
    assert "change_pass" in spec_says.applicable and spec_says.tools_offered is None
    for unknown in (None, False):
        assert "grounded" not in not_run(ref, error=crash, task=task, tool_using=unknown).applicable
    ledger_says = not_run(ref, error=crash, task=task, tools_offered=["fhir_search", "fhir_read"])
    assert "grounded" in ledger_says.applicable and ledger_says.tools_offered == ["fhir_search", "fhir_read"]
    letter = LetterTask(ROOT / "fixtures" / "reconciliation")  # offers no tools: grounded never applies
    lref = letter.discover()[0]
    assert "grounded" not in (not_run(lref, error=crash, task=letter, tool_using=True).applicable or [])


def test_the_controller_gives_a_crashed_case_grounded_from_the_run_s_agent_spec(tmp_path):
    """pytest_handlecrashitem (the reporter in the xdist controller): a crash of a tool-using
    agent kind's case is recorded counting 0 in grounded; of a tool-less kind's, not."""
    from types import SimpleNamespace

    from pytest_groundeval.agents.spec import AgentSpec
    from pytest_groundeval.pytest.reporter import Reporter

    task = _labs_task()
    ref = next(r for r in task.discover() if "_change_" in r.case_id)
    for name, grounded in (("langgraph", True), ("baseline", False)):
        config = SimpleNamespace(stash=pytest.Stash(), rootpath=ROOT)  # (the crashed item's suite is named from it)
        local = SimpleNamespace(find_case=lambda case_id: [ref] if case_id == ref.case_id else [])
        settings = SimpleNamespace(agent=AgentSpec(name), run_record=tmp_path / f"{name}.json")
        reporter = Reporter(config, settings, {"labs": task}, None, local)
        nodeid = f"evals/test_labs.py::test_labs[{ref.case_id}]"
        report = pytest.TestReport(nodeid, ("evals/test_labs.py", 1, "test_labs"), {}, "failed",
                                   "worker 'gw0' crashed", "???")  # as xdist makes a crash report
        reporter.pytest_handlecrashitem(nodeid, report, None)
        result, _ = reporter._local[id(report)]
        assert result.error.kind == "crash" and ("grounded" in result.applicable) == grounded, name


CRASHES_WITH_TOOLS = '''
import os
from pytest_groundeval.run.toolcalls import harness_tools
from pytest_groundeval.tasks.labs import baseline_answer

class TakesToolsThenCrashes:
    """A module:Class agent (its kind says nothing of tools): its xdist worker dies on the first
    eGFR decline after taking the case's tools, on the second before taking them; elsewhere it
    answers from the tools' record."""
    name = "takes-tools-then-crashes"
    def run(self, prompt):
        raise AssertionError("run_case is called")
    def run_case(self, task, prompt, inputs):
        if inputs["question"]["kind"] == "change" and os.path.exists("crashed") and not os.path.exists("crashed2"):
            open("crashed2", "w").close()
            os._exit(1)  # before the tools: no ledger line says it took them
        tools = {t.name: t for t in harness_tools(task, inputs)}
        if inputs["question"]["kind"] == "change" and not os.path.exists("crashed"):
            open("crashed", "w").close()
            os._exit(1)
        tools["fhir_search"].invoke({"resource_type": "Observation",
                                     "params": {"patient": "Patient/" + inputs["patient_id"]}})
        return baseline_answer(inputs)
'''


def test_a_tool_using_agent_that_crashes_its_worker_keeps_the_case_in_grounded(pytester):
    """Under -n 2 a worker dies mid-case after the harness gave the agent tools (its ledger's
    ``offered`` line), another before (the agent took tools on the task's other cases): each
    crashed case counts 0 in grounded, as an errored case of a tool-using agent does; it cannot
    leave the rate by crashing on what it would fail."""
    data = _labs_project(pytester, crasher=CRASHES_WITH_TOOLS)
    result = pytester.runpytest_subprocess("--agent=crasher:TakesToolsThenCrashes", "--run-record", "record.json",
                                           "-p", "no:randomly", "-p", "no:cacheprovider", "--labs-cases", str(data),
                                           "-n", "2", "-q")
    assert result.ret == 1, result.stdout.str()[-2000:]
    record = json.loads((pytester.path / "record.json").read_text())
    crashed = [c for c in record["cases"] if c["outcome"] == "error"]
    assert len(crashed) == 2 and all(c["error"]["kind"] == "crash" for c in crashed), crashed
    assert all("grounded" in c["applicable"] and "change_pass" in c["applicable"] for c in crashed), crashed
    assert sorted(str(c["tools_offered"]) for c in crashed) == ["None", "['fhir_search', 'fhir_read']"]
    answered = [c for c in record["cases"] if c["outcome"] != "error"]
    assert all(c["score"]["metrics"].get("grounded") is not None for c in answered)
    s = record["summary"]["labs"]
    assert s["grounded_n"] == len(record["cases"])  # the crashed case is in the denominator
    in_rate = sum(c["score"]["metrics"]["grounded"] for c in answered)
    assert s["grounded"] == pytest.approx(in_rate / len(record["cases"]), abs=1e-6)


def test_the_evaluator_remembers_which_cases_were_given_tools_for_a_pytest_timeout_kill(tmp_path):
    """pytest-timeout ends a case from outside the runner (plugin._result_for, timeouts.py): the
    evaluator's observers note each case whose agent took tools (and the worker's ledger too)."""
    from conftest import REFS, SYNTHEA

    from pytest_groundeval.agents.spec import AgentSpec
    from pytest_groundeval.pytest.evaluator import Evaluator
    from pytest_groundeval.pytest.settings import Settings
    from pytest_groundeval.run.calls import CallPolicy
    from pytest_groundeval.run.runner import call_case

    task = registry()["extraction"](SYNTHEA)
    ref = next(r for r in task.discover() if r.case_id == REFS)
    settings = Settings(agent=AgentSpec("mine:Agent"), policy=CallPolicy(), concurrency=1, max_cost=None, resume=None,
                        rescore=None, run_record=None, runs_dir=tmp_path, rootdir=tmp_path, thresholds=(),
                        task_paths={}, is_worker=False, worker_count=0)
    evaluator = Evaluator(settings, {"extraction": task}, None)
    assert evaluator.tools_offered(ref) is None
    call_case(task, ref, _ToolUser(), observers=evaluator.observers)
    assert evaluator.tools_offered(ref) == ["list_medication_requests", "read_resource"]
    lines = []
    evaluator.observe(ledger=type("Ledger", (), {"on_agent_thread": lambda self, r: None,
                                                 "on_tools_offered": lambda self, r, t: lines.append((r.key, t))})())
    other = next(r for r in task.discover() if r.case_id != REFS)
    call_case(task, other, _ToolUser(), observers=evaluator.observers)
    assert evaluator.tools_offered(other) and lines == [(other.key, evaluator.tools_offered(other))]
    plain = not_run(ref, error=ErrorInfo(kind="timeout", message="pytest-timeout"), task=task,
                    tool_using=settings.agent.tool_using, tools_offered=evaluator.tools_offered(ref))
    assert plain.applicable == ["grounded"]
