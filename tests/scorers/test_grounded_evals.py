"""``grounded`` through ``pytest evals --require-grounded`` (issue 15 items 5 and 8): the agent
tricks on every task that has tools (write, extraction, reconciliation), each run as a real
pytest session over the committed suites in a subprocess.

The agents are the real LangGraph agent (a real graph, the real HealthChain tools, wrapped by
the harness) over a scripted chat model that answers every case right, as a test double
that knows the truth of its case. What changes is how it gets there:

* ``honest``: reads what it answers through the tools first (passes);
* ``nocall``: answers from memory, no tool call (fails);
* ``error``: makes calls whose error values quote the codes it then answers (fails);
* ``dump``: one lookup of every catalog word (the whole catalog comes back), then answers
  from memory (fails: a result listing more than 5 entries grounds nothing);
* a ``module:Class`` agent that answers right and returns its own transcript claiming the
  lookups (never evidence: not applicable, so it fails under --require-grounded).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import FIXTURES, REFS, ROOT, STOPPED_ACTIVE

pytest.importorskip("langchain.agents")

from pytest_groundeval.scorers.grounding import NOT_APPLICABLE  # noqa: E402
from pytest_groundeval.store.record import validate_record  # noqa: E402
from pytest_groundeval.tasks.reconciliation import ReconciliationTask  # noqa: E402

AGENTS = '''
import contextvars, json, os, sys, uuid
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pytest_groundeval.fhir import hc_tools
from pytest_groundeval.agents.langgraph_agent import LangGraphAgent

sys.path.insert(0, @TESTS@)  # the tests' one build_args helper
from write_args import build_args

MODE = os.environ.get("GROUNDED_MODE", "honest")
CASE = contextvars.ContextVar("case")
_SEEN = {}


def truth(task, inputs):
    """The right answer's facts for this case (a test double: found among the task's cases)."""
    if task.name == "extraction":
        listed = hc_tools.list_medication_requests(inputs["bundle_json"], "active")["medication_requests"]
        return [{"code": m["code"], "display": m["display"]} for m in listed]
    key = "note" if task.name == "write" else "patient_report"
    if inputs[key] not in _SEEN:
        for ref in task.discover():
            case = task.load(ref)
            _SEEN[case.inputs[key]] = case.truth
            if case.inputs[key] == inputs[key]:
                break
    return _SEEN[inputs[key]]


def answer(task_name, facts):
    if task_name == "write":
        return json.dumps(hc_tools.build_medication_statement(**build_args(facts))["resource"])
    key = "active_medications" if task_name == "extraction" else "medications"
    return json.dumps({key: facts})


def _call(*calls):
    return AIMessage(content="", tool_calls=[{"name": n, "args": a, "id": "call-" + uuid.uuid4().hex[:8]}
                                             for n, a in calls])


def _results(messages):
    return [(m.name, json.loads(m.content)) for m in messages if m.type == "tool"]


def _last(messages, tool):
    return [r for n, r in _results(messages) if n == tool][-1]


def _codes(facts):
    return [facts["expected"]["rxnorm_code"]] if isinstance(facts, dict) else [f["code"] for f in facts]


def script(task_name, facts, messages):
    """The next message: a tool call, or the final answer."""
    done = [n for n, _ in _results(messages)]
    if MODE == "nocall":
        return AIMessage(content=answer(task_name, facts))
    if MODE == "dump":  # one lookup of every catalog word (the whole catalog back), then from memory
        if not done and task_name != "extraction":  # extraction offers no lookup: it answers from memory
            words = sorted({w for e in hc_tools.get_catalog().by_code.values() for w in e["display"].split()})
            return _call(("lookup_medication_code", {"query": " ".join(words), "limit": 1000}))
        if task_name == "write" and "build_medication_statement" not in done:
            return _call(("build_medication_statement", build_args(facts)))
        if task_name == "write" and "validate_medication_statement" not in done:
            return _call(("validate_medication_statement", {"resource": _last(messages, "build_medication_statement")["resource"]}))
        return AIMessage(content=answer(task_name, facts))
    if MODE == "error":  # calls whose error values quote each code, then the answer
        if not done:
            if task_name == "write":  # a number where the schema wants a string: LangChain's validation error
                return _call(("lookup_medication_code", {"query": int(_codes(facts)[0])}))
            if task_name == "extraction":
                return _call(*[("read_resource", {"reference": "Medication/" + c}) for c in _codes(facts)])
            return _call(*[("list_medication_requests", {"status": c}) for c in _codes(facts)])
        if task_name == "write" and "build_medication_statement" not in done:
            return _call(("build_medication_statement", build_args(facts)))
        if task_name == "write" and "validate_medication_statement" not in done:
            return _call(("validate_medication_statement", {"resource": _last(messages, "build_medication_statement")["resource"]}))
        return AIMessage(content=answer(task_name, facts))
    # honest: what it answers, it read through the tools first
    if task_name == "write":
        exp = facts["expected"]
        if not done:
            return _call(("lookup_medication_code", {"query": exp["display"]}))
        if "build_medication_statement" not in done:
            top = _last(messages, "lookup_medication_code")["matches"][0]
            return _call(("build_medication_statement", dict(build_args(facts), rxnorm_code=top["code"],
                                                             display=top["display"])))
        if "validate_medication_statement" not in done:
            return _call(("validate_medication_statement", {"resource": _last(messages, "build_medication_statement")["resource"]}))
        return AIMessage(content=json.dumps(_last(messages, "build_medication_statement")["resource"]))
    if task_name == "extraction":
        if not done:
            return _call(("list_medication_requests", {"status": "active"}))
        listed = _last(messages, "list_medication_requests")["medication_requests"]
        return AIMessage(content=answer(task_name, [{"code": m["code"], "display": m["display"]} for m in listed]))
    if not done:
        return _call(("list_medication_requests", {}))
    recorded = {m["code"] for m in _last(messages, "list_medication_requests")["medication_requests"]}
    missing = [f for f in facts if f["code"] not in recorded]
    if missing and "lookup_medication_code" not in done:
        return _call(*[("lookup_medication_code", {"query": f["display"]}) for f in missing])
    return AIMessage(content=answer(task_name, facts))


class Model(BaseChatModel):
    @property
    def _llm_type(self):
        return "scripted"

    def bind_tools(self, tools, **kwargs):
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        task_name, facts = CASE.get()
        return ChatResult(generations=[ChatGeneration(message=script(task_name, facts, messages))])


class Scripted(LangGraphAgent):
    def __init__(self):
        super().__init__(model=Model())

    def run_case(self, task, prompt, inputs):
        token = CASE.set((task.name, truth(task, inputs)))
        try:
            return super().run_case(task, prompt, inputs)
        finally:
            CASE.reset(token)


class SelfReported:
    """Answers right and returns its own transcript of lookups that never happened."""
    name = "self-reported"

    def run(self, prompt):  # the agent protocol; the harness calls run_case, which it has
        raise NotImplementedError

    def run_case(self, task, prompt, inputs):
        facts = truth(task, inputs)
        fake = [{"tool": "lookup_medication_code", "args": {"query": c}, "result": {"matches": [{"code": c}]}}
                for c in _codes(facts)]
        return {"text": answer(task.name, facts), "transcript": fake}
'''.replace("@TESTS@", repr(str(Path(__file__).resolve().parents[1])))


def _recon_ids() -> list[str]:
    """Two reconciliation cases, one of which has a medication the record lacks (a lookup)."""
    task = ReconciliationTask(FIXTURES / "reconciliation")
    refs = task.discover()
    unrecorded = next(r for r in refs if any(t["verdict"] == "unrecorded" for t in task.load(r).truth))
    return [refs[0].case_id, unrecorded.case_id]


WRITE_IDS = ["ibuprofen-two-tablets", "zyrtec-two-5mg-tablets"]
EXTRACTION_IDS = [REFS, STOPPED_ACTIVE]


@pytest.fixture(scope="module")
def selection() -> list[str]:
    return WRITE_IDS + EXTRACTION_IDS + _recon_ids()


def _evals(pytester, monkeypatch, selection, agent, mode="honest", *args):
    pytester.makepyfile(grounded_agents=AGENTS)
    monkeypatch.setenv("GROUNDED_MODE", mode)
    record = pytester.path / f"{mode}.json"
    result = pytester.runpytest_subprocess(
        # the three tool-using tasks of this test (the letter task reuses reconciliation's case ids)
        # (--agent-in-process: these test doubles find their answers among the task's own cases)
        str(ROOT / "evals"), f"--agent=grounded_agents:{agent}", "--agent-in-process", "-k", " or ".join(selection),
        "-m", "extraction or write or reconciliation",
        "--write-cases", str(FIXTURES / "write_cases"), "--data-dir", str(FIXTURES / "synthea"),
        "--reconciliation-cases", str(FIXTURES / "reconciliation"), "--run-record", str(record),
        "-p", "no:cacheprovider", "-p", "no:randomly", "--rootdir", str(pytester.path), *args)
    rec = json.loads(record.read_text())
    assert validate_record(rec) == []
    assert sorted(c["case_id"] for c in rec["cases"]) == sorted(selection), result.stdout.str()[-3000:]
    assert {c["task"] for c in rec["cases"]} == {"write", "extraction", "reconciliation"}
    return result, rec


def test_the_honest_tool_using_agent_passes_under_require_grounded(pytester, monkeypatch, selection):
    result, rec = _evals(pytester, monkeypatch, selection, "Scripted", "honest", "--require-grounded")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()[-3000:]
    for c in rec["cases"]:
        assert c["outcome"] == "passed" and c["score"]["metrics"]["grounded"] == 1.0, (c["case_id"], c["score"])
        assert c["transcript"] and all(t["status"] == "ok" for t in c["transcript"])
        assert c["tools_offered"] and c["agent_reported"]
    for task in ("write", "extraction", "reconciliation"):
        assert rec["summary"][task]["grounded"] == 1.0 and rec["summary"][task]["grounded_n"] == 2
    assert any(t["tool"] == "lookup_medication_code" for c in rec["cases"] if c["task"] == "reconciliation"
               for t in c["transcript"])  # the record lacked one: it looked that one up


def test_an_agent_that_calls_no_tool_is_right_but_fails_under_require_grounded(pytester, monkeypatch, selection):
    plain, rec = _evals(pytester, monkeypatch, selection, "Scripted", "nocall")
    assert plain.ret == pytest.ExitCode.OK  # every answer is right: the scorers pass them
    assert all(c["outcome"] == "passed" and c["score"]["metrics"]["grounded"] == 0.0 for c in rec["cases"])
    strict, rec = _evals(pytester, monkeypatch, selection, "Scripted", "nocall", "--require-grounded")
    assert strict.ret == pytest.ExitCode.TESTS_FAILED
    for c in rec["cases"]:
        assert c["outcome"] == "failed" and c["transcript"] == [] and c["tools_offered"], c["case_id"]
        assert c["score"]["reason"].startswith("ungrounded (--require-grounded)") and "called none" in c["score"]["reason"]


def test_codes_seen_only_in_tool_errors_fail_under_require_grounded(pytester, monkeypatch, selection):
    result, rec = _evals(pytester, monkeypatch, selection, "Scripted", "error", "--require-grounded")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    for c in rec["cases"]:
        errors = [t for t in c["transcript"] if t["status"] == "error"]
        codes = c["score"]["details"]["ungrounded"]["code"]
        assert errors and codes, c["case_id"]
        assert all(any(code in json.dumps(t["result"]) for t in errors) for code in codes)  # the errors quote them
        assert c["outcome"] == "failed" and "only an error result" in c["score"]["reason"], c["score"]["reason"]


def test_a_self_reported_transcript_is_never_evidence_through_pytest_evals(pytester, monkeypatch, selection):
    result, rec = _evals(pytester, monkeypatch, selection, "SelfReported", "honest", "--require-grounded",
                         "--threshold", "write.grounded=1.0")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    for c in rec["cases"]:
        assert c["outcome"] == "failed" and c["transcript"] is None and c["tools_offered"] is None
        assert c["agent_reported"][0]["tool"] == "lookup_medication_code"  # kept, never read
        assert c["score"]["reason"] == f"not grounded (--require-grounded): {NOT_APPLICABLE}"
    result.stdout.fnmatch_lines(["*MISSED write.grounded = - < threshold 1.0 (2 write cases ran, "
                                 "0 applicable to grounded: grounded applies only to an agent the harness gave tools*"])
    assert "no write case ran" not in result.stdout.str()


def test_one_lookup_of_the_whole_catalog_grounds_nothing(pytester, monkeypatch, selection):
    """Issue 28 item 4: one lookup of every catalog word returns every entry, and every code an
    answer from memory holds is "in a result": a result listing more than 5 entries is no evidence."""
    result, rec = _evals(pytester, monkeypatch, selection, "Scripted", "dump", "--require-grounded")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    for c in rec["cases"]:
        assert c["outcome"] == "failed" and c["score"]["metrics"]["grounded"] == 0.0, c["case_id"]
        if c["task"] in ("write", "reconciliation"):  # their codes are in the catalog, so in the dump
            dump = c["transcript"][0]
            assert dump["tool"] == "lookup_medication_code" and len(dump["result"]["matches"]) > 100
            reason = c["score"]["reason"]
            assert "only in a lookup that is no evidence: lookup_medication_code call #1 (query '(dienogest" in reason
            assert "listed 121 entries (more than 5): an over-broad query grounds nothing" in reason
