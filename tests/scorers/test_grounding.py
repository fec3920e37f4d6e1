"""The ``grounded`` dimension (grounding.py): rules on hand-built transcripts, the runner's
wiring (not applicable for single-call agents, out of the rate), and the write suite end to
end through the scripted LangGraph agent of test_write_suite, grounded and not."""

from __future__ import annotations

import json

import pytest
from test_write_suite import AGENT_MODULE, EVAL_FILE, N_CASES, WRITE_CASES

from pytest_groundeval.scorers.grounding import NOT_APPLICABLE, grounded
from pytest_groundeval.model import AgentOutput, CaseResult, ScoreRecord
from pytest_groundeval.store.record import validate_record
from pytest_groundeval.run.runner import score_case
from pytest_groundeval.scorers.aggregate import counts
from pytest_groundeval.scorers.base import Score
from pytest_groundeval.tasks.extraction import ExtractionTask
from pytest_groundeval.tasks.reconciliation import ReconciliationTask
from pytest_groundeval.tasks.write import WriteTask, strengths

CODE, DISPLAY = "310965", "Ibuprofen 200 MG Oral Tablet"
RESOURCE = {"resourceType": "MedicationStatement", "status": "active", "subject": {"reference": "Patient/p1"},
            "medicationCodeableConcept": {"coding": [{"system": "http://www.nlm.nih.gov/research/umls/rxnorm",
                                                      "code": CODE, "display": DISPLAY}]}}
VALUES = {"code": [CODE], "display": [DISPLAY], "strength": ["200 MG"]}
VALIDATE = "validate_medication_statement"
BUILD = "build_medication_statement"


class Log:
    """An observed log in toolcalls.py's form, built call by call: each call starts and ends
    on the log's clock before the next starts, one LangGraph step apart (``together()``:
    the next calls share one step, as calls a model issued in one message do)."""

    def __init__(self) -> None:
        self.entries: list[dict] = []
        self.tick, self.step, self.same = 0, 0, False

    def call(self, name: str, args: dict, result, status: str = "ok") -> "Log":
        if not self.same:
            self.step += 2  # a model step, then the tools step
        self.tick += 1
        entry = {"seq": len(self.entries) + 1, "tool": name, "args": args, "result": result, "status": status,
                 "step": self.step, "started": self.tick, "ended": None}
        self.tick += 1
        entry["ended"] = None if status == "unfinished" else self.tick
        self.entries.append(entry)
        return self

    def together(self) -> "Log":
        self.step += 2
        self.same = True
        return self

    def lookup(self, query: str = "ibuprofen 200 mg tablet", status: str = "ok") -> "Log":
        return self.call("lookup_medication_code", {"query": query},
                         {"query": query, "matches": [{"code": CODE, "display": DISPLAY, "score": 1.0}]}, status)

    def build(self) -> "Log":
        return self.call(BUILD, {"rxnorm_code": CODE, "display": DISPLAY}, {"resource": RESOURCE})

    def validate(self, valid: bool = True) -> "Log":
        return self.call(VALIDATE, {"resource": RESOURCE},
                         {"valid": valid, "issues": [] if valid else ["status: required"]})

    def answer(self) -> list[dict]:
        return self.entries


def check(result, name):
    return next(c for c in result.checks if c.name == name)


def write_grounded(observed, **kw):
    return grounded(observed, VALUES, offered=[BUILD], must_validate=VALIDATE, answer_tool=BUILD,
                    matchers=WriteTask.grounding_matchers, **kw)


# ---------------------------------------------------------------- the rules
def test_the_right_code_without_a_lookup_is_ungrounded_though_correct():
    r = write_grounded(Log().build().validate().answer())
    assert r.applicable and not r.passed
    assert r.ungrounded == {"code": [CODE], "display": [DISPLAY], "strength": ["200 MG"]}
    assert CODE in check(r, "values").reason and check(r, "validated").passed
    # the build tool's result echoes the code the agent passed it: never evidence
    assert CODE in json.dumps(Log().build().entries)


def test_looked_up_and_copied_is_grounded():
    r = write_grounded(Log().lookup().build().validate().answer())
    assert r.applicable and r.passed and r.ungrounded == {}
    assert [c.name for c in r.checks] == ["called", "values", "validated", "repeats"]
    assert all(c.reason for c in r.checks)


def test_a_tool_using_agent_that_calls_no_tool_is_not_grounded():
    r = grounded([], {"code": [CODE]}, offered=["lookup_medication_code"])
    assert r.applicable and not r.passed
    assert not check(r, "called").passed and "called none" in r.reason and "lookup_medication_code" in r.reason
    assert r.ungrounded == {"code": [CODE]}
    empty = grounded([], {}, offered=["list_medication_requests"])  # nothing answered, nothing called: still not
    assert empty.applicable and not empty.passed and not check(empty, "called").passed
    one = grounded(Log().lookup().answer(), {}, offered=["lookup_medication_code"])
    assert one.passed and check(one, "called").passed


def test_an_error_result_is_never_evidence():
    error = Log().call("read_resource", {"reference": f"Medication/{CODE}"},
                       {"error": f"reference 'Medication/{CODE}' not found in this patient's record"}, "error")
    r = grounded(error.answer(), {"code": [CODE]})
    assert not r.passed and r.ungrounded == {"code": [CODE]} and "only an error result" in r.reason
    for status in ("raised", "unfinished"):
        assert grounded(Log().lookup(status=status).answer(), {"code": [CODE]}).ungrounded == {"code": [CODE]}
    # the same content from a successful result grounds it
    ok = Log().call("read_resource", {"reference": "Medication/abc"},
                    {"reference": "Medication/abc", "resource": {"code": {"coding": [{"code": CODE}]}}})
    assert grounded(ok.answer(), {"code": [CODE]}).passed


def test_built_from_memory_then_looked_up_is_ungrounded():
    late = write_grounded(Log().build().lookup().validate().answer())
    assert not late.passed and late.ungrounded == {"code": [CODE], "display": [DISPLAY], "strength": ["200 MG"]}
    assert f"first used in {BUILD} (call #1)" in late.reason and "looked up only afterwards" in late.reason
    # validating a hand-written resource first is a use too
    first = write_grounded(Log().validate().lookup().build().validate().answer())
    assert not first.passed and first.ungrounded["code"] == [CODE] and f"{VALIDATE} (call #1)" in first.reason
    assert write_grounded(Log().lookup().build().validate().answer()).passed


def test_calls_issued_together_cannot_use_each_others_results():
    together = write_grounded(Log().together().lookup().build().validate().answer())
    assert not together.passed and together.ungrounded["code"] == [CODE]
    # by the log's clock alone (no framework step): a result that ended after the use started
    overlap = [dict(e, step=None) for e in Log().lookup().build().validate().answer()]
    overlap[0]["ended"] = overlap[1]["started"] + 1
    assert write_grounded(overlap).ungrounded["code"] == [CODE]
    apart = [dict(e, step=None) for e in Log().lookup().build().validate().answer()]
    assert write_grounded(apart).passed


NOTE = {"note": "Taking Ibuprofen 200mg tablets, two at night for back pain.", "subject": "Patient/p1"}


def _entries(n: int) -> list[dict]:
    """The right entry among ``n`` listed."""
    return [{"code": CODE, "display": DISPLAY, "score": 1.0}] + [
        {"code": str(900000 + i), "display": f"Drug{i} {i} MG Oral Tablet", "score": 0.5} for i in range(n - 1)]


def _lookup(query: str, n: int = 1) -> Log:
    return Log().call("lookup_medication_code", {"query": query, "limit": n}, {"query": query, "matches": _entries(n)})


def test_a_lookup_listing_more_than_five_entries_grounds_nothing_and_is_named():
    dump = _lookup("acetaminophen albuterol ibuprofen lisinopril metformin tablet", 121)
    r = write_grounded(dump.build().validate().answer(), inputs=NOTE)
    assert not r.passed and r.ungrounded == {"code": [CODE], "display": [DISPLAY], "strength": ["200 MG"]}
    reason = check(r, "values").reason
    assert ("only in a lookup that is no evidence: lookup_medication_code call #1 (query 'acetaminophen albuterol"
            in reason and "listed 121 entries (more than 5): an over-broad query grounds nothing" in reason)
    assert not write_grounded(_lookup("ibuprofen", 6).build().validate().answer(), inputs=NOTE).passed
    assert write_grounded(_lookup("ibuprofen", 5).build().validate().answer(), inputs=NOTE).passed  # a few: specific
    # the size alone decides when the input is not known (a scorer's own test)
    assert not write_grounded(dump.build().validate().answer()).passed


@pytest.mark.parametrize("query", ["ibuprofen 200 mg oral tablet", "IBUPROFEN", "Ibuprofen 200MG tabs",
                                   "200 mg tablet"])
def test_a_specific_lookup_whose_query_shares_a_word_with_the_note_grounds(query):
    assert write_grounded(_lookup(query).build().validate().answer(), inputs=NOTE).passed


def test_a_lookup_unrelated_to_the_note_grounds_nothing():
    r = write_grounded(_lookup("naproxen").build().validate().answer(), inputs=NOTE)
    assert not r.passed and "shares no word with the case's input" in check(r, "values").reason
    # a dose form the note also says names no product: padding a query with it makes it no more related
    assert not write_grounded(_lookup("naproxen tablets").build().validate().answer(), inputs=NOTE).passed
    # a brand in the note, the generic name and its strength in the query: the strength is a shared word
    brand = {"note": "ADHD: Ritalin 20 mg twice a day.", "subject": "Patient/p1"}
    assert grounded(_lookup("methylphenidate 20 mg").answer(), {"code": [CODE]}, inputs=brand).passed
    assert not grounded(_lookup("methylphenidate").answer(), {"code": [CODE]}, inputs=brand).passed
    # the record the agent was given (a JSON text) holds words too
    record = {"bundle_json": json.dumps({"entry": [{"resource": {"code": {"text": "Naproxen sodium 220 MG"}}}]})}
    assert grounded(_lookup("naproxen").answer(), {"code": [CODE]}, inputs=record).passed


def test_without_an_answer_tool_every_earlier_result_counts_for_the_final_answer():
    listed = Log().call("list_medication_requests", {"status": "active"},
                        {"status": "active", "count": 1, "medication_requests": [{"code": CODE, "display": DISPLAY}]})
    assert grounded(listed.answer(), {"code": [CODE]}, offered=["list_medication_requests"]).passed
    assert grounded(listed.answer(), {"code": ["999999"]}).ungrounded == {"code": ["999999"]}


def test_echoed_arguments_are_not_evidence_and_codes_match_whole_tokens():
    echo = Log().call("lookup_medication_code", {"query": f"rxnorm {CODE}"},
                      {"query": f"rxnorm {CODE}", "matches": []})
    r = grounded(echo.answer(), {"code": [CODE]})
    assert r.ungrounded == {"code": [CODE]}
    part = Log().call("lookup_medication_code", {"query": "x"}, {"matches": [{"code": "1049", "display": "x"}]})
    assert grounded(part.answer(), {"code": ["10"]}).ungrounded == {"code": ["10"]}
    assert grounded(part.answer(), {"code": ["1049"]}).passed


def test_dose_strength_is_grounded_by_the_strength_written_in_a_result():
    assert strengths(DISPLAY) == ["200 MG"]
    assert strengths("Amoxicillin 250 MG/5ML Oral Suspension") == ["250 MG/5ML"]
    assert strengths("amoxicillin 250 MG / 5 ML oral suspension") == ["250 MG/5ML"]
    assert strengths("Insulin Glargine 100 UNT/ML Injectable Solution") == ["100 UNT/ML"]
    found = Log().lookup()
    match = WriteTask.grounding_matchers
    assert grounded(found.answer(), {"strength": ["200 MG"]}, matchers=match).passed
    assert grounded(found.answer(), {"strength": ["400 MG"]}, matchers=match).ungrounded == {"strength": ["400 MG"]}
    # the strength matcher reads strengths, not text: "250 MG/5ML" is grounded by "250 MG / 5 ML"
    spaced = Log().call("lookup_medication_code", {"query": "amoxicillin suspension"},
                        {"matches": [{"code": "1", "display": "Amoxicillin 250 MG / 5 ML Oral Suspension"}]}, "ok")
    assert grounded(spaced.answer(), {"strength": ["250 MG/5ML"]}, matchers=match).passed
    assert not grounded(spaced.answer(), {"strength": ["250 MG/5ML"]}).passed  # as plain text it is not there


def test_write_that_skips_validation_fails_the_validated_check():
    r = write_grounded(Log().lookup().build().answer())
    assert not r.passed and r.ungrounded == {}
    assert not check(r, "validated").passed and "never called validate_medication_statement" in r.reason


def test_a_failed_validation_not_validated_again_fails():
    r = write_grounded(Log().lookup().build().validate(valid=False).answer())
    assert not check(r, "validated").passed
    assert "did not report the resource valid" in r.reason and "status: required" in r.reason
    broken = Log().lookup().build().call(VALIDATE, {"resource": "x"}, {"error": "invalid tool arguments"}, "error")
    assert not check(write_grounded(broken.answer()), "validated").passed


def test_fixed_and_validated_again_passes():
    r = write_grounded(Log().lookup().build().validate(valid=False).build().validate().answer())
    assert r.passed and "1 failed validation" in check(r, "validated").reason


def test_rebuilt_after_the_last_validation_fails():
    r = write_grounded(Log().lookup().build().validate().build().answer())
    assert not check(r, "validated").passed and "again after the last" in r.reason


def test_the_same_call_five_times_fails_three_times_passes():
    five, three = Log(), Log()
    for _ in range(5):
        five.lookup()
    for _ in range(3):
        three.lookup()
    r5 = write_grounded(five.build().validate().answer())
    assert not r5.passed and not check(r5, "repeats").passed and "called 5 times" in r5.reason
    assert write_grounded(three.build().validate().answer()).passed
    assert write_grounded(three.build().validate().answer(), max_repeats=2).passed is False


def test_an_agent_given_no_harness_tools_is_not_applicable():
    r = grounded(None, VALUES, must_validate=VALIDATE)
    assert not r.applicable and not r.passed and r.reason == NOT_APPLICABLE and r.checks == []
    assert "never evidence" in NOT_APPLICABLE and "harness_tools" in NOT_APPLICABLE


# ---------------------------------------------------------------- the tasks and the runner
def test_tasks_name_their_values_and_the_threshold_resolves():
    task = WriteTask(WRITE_CASES)
    assert task.grounding_values(RESOURCE) == VALUES and task.validate_tool == VALIDATE
    items = [{"code": "1", "display": "a", "verdict": "matched"}, {"code": "2", "display": None, "verdict": "unrecorded"}]
    assert ReconciliationTask.grounding_values(None, items) == {"code": ["1", "2"]}
    assert ExtractionTask.grounding_values(None, items) == {"code": ["1", "2"]}
    for cls in (WriteTask, ReconciliationTask, ExtractionTask):
        assert cls.resolve_metric("grounded") == "grounded"


@pytest.fixture
def write_case():
    task = WriteTask(WRITE_CASES)  # the case the log's lookup ("ibuprofen 200 mg tablet") is about
    return task, task.load(next(r for r in task.discover() if r.case_id == "ibuprofen-two-tablets"))


def test_runner_adds_the_dimension_beside_the_scorers_and_leaves_pass_alone(write_case):
    task, case = write_case
    output = AgentOutput(text=json.dumps(RESOURCE), structured=RESOURCE)
    memory = Log().build().validate().answer()
    plain = score_case(task, case, output, lambda p, c: Score(passed=True), observed=memory, offered=[BUILD])
    assert plain["outcome"] == "passed"
    dim = plain["score"].dimensions["grounded"]
    assert not dim.passed and CODE in dim.reason and plain["score"].metrics["grounded"] == 0.0
    assert plain["score"].details["ungrounded"]["code"] == [CODE]
    strict = score_case(task, case, output, lambda p, c: Score(passed=True),
                        require_grounded=True, observed=memory, offered=[BUILD])
    assert strict["outcome"] == "failed" and strict["score"].reason.startswith("ungrounded (--require-grounded)")
    honest = score_case(task, case, output, lambda p, c: Score(passed=True), require_grounded=True,
                        observed=Log().lookup().build().validate().answer(), offered=[BUILD])
    assert honest["outcome"] == "passed" and honest["score"].metrics["grounded"] == 1.0


def test_a_self_reported_transcript_is_never_evidence(write_case):
    """The agent's own transcript (a lookup that never happened) is not read: not applicable,
    and under --require-grounded the case fails saying why; a scorer's pass stays otherwise."""
    task, case = write_case
    output = AgentOutput(text=json.dumps(RESOURCE), transcript=Log().lookup().build().validate().answer())
    single = score_case(task, case, output, lambda p, c: Score(passed=True))
    assert single["outcome"] == "passed"
    assert "grounded" not in single["score"].dimensions and "grounded" not in single["score"].metrics
    assert single["score"].details["grounded"] == NOT_APPLICABLE
    strict = score_case(task, case, output, lambda p, c: Score(passed=True), require_grounded=True)
    assert strict["outcome"] == "failed"
    assert strict["score"].reason == f"not grounded (--require-grounded): {NOT_APPLICABLE}"
    failed = score_case(task, case, output, lambda p, c: Score(passed=False, reason="coding: wrong"),
                        require_grounded=True)
    assert failed["score"].reason == "coding: wrong"  # a scorer's own failure keeps its reason


def test_a_record_written_before_observation_reads_its_transcript_as_agent_reported():
    old = {"case_id": "a", "task": "write", "outcome": "passed", "score": {"passed": True},
           "transcript": [{"type": "ai", "content": "", "tool_calls": []}]}
    r = CaseResult.model_validate(old)
    assert r.transcript is None and [s.model_dump() for s in r.agent_reported] == old["transcript"]
    new = CaseResult.model_validate({**old, "transcript": Log().lookup().answer(), "tools_offered": ["x"]})
    assert new.transcript[0].tool == "lookup_medication_code" and new.agent_reported is None


def _result(case_id, grounded_value=None):
    metrics = {"pass": 1.0} if grounded_value is None else {"pass": 1.0, "grounded": grounded_value}
    return CaseResult(case_id=case_id, task="write", outcome="passed",
                      score=ScoreRecord(passed=True, metrics=metrics))


def test_not_applicable_cases_are_out_of_the_rate():
    _, summary = counts([_result("a", 1.0), _result("b"), _result("c"), _result("d", 0.0), _result("e", 1.0)])
    assert summary["grounded"] == pytest.approx(2 / 3) and summary["grounded_n"] == 3
    assert summary["grounded_ci95"] is not None
    _, single = counts([_result("a"), _result("b")])
    assert "grounded" not in single and "grounded_n" not in single


# ---------------------------------------------------------------- the real LangGraph agent, scripted
def _lg():
    pytest.importorskip("langchain.agents")
    import test_langgraph_agent as lg

    return lg


def _write_run(script, require=False, case_id="ibuprofen-two-tablets"):
    from pytest_groundeval.agents.langgraph_agent import LangGraphAgent
    from pytest_groundeval.run.runner import run_case

    task = WriteTask(WRITE_CASES)
    ref = next(r for r in task.discover() if r.case_id == case_id)
    return run_case(task, ref, LangGraphAgent(model=_lg().ScriptedChatModel(script=script)), require_grounded=require)


def _memory_resource(lg):
    from pytest_groundeval.fhir import hc_tools

    return hc_tools.build_medication_statement(**lg.build_args(lg.load_case()))["resource"]


def test_langgraph_honest_write_is_grounded_under_require_grounded():
    lg = _lg()
    r = _write_run(lg.correct_script(lg.load_case()), require=True)
    assert r.outcome == "passed" and r.score.metrics["grounded"] == 1.0, r.reason
    assert [c.tool for c in r.transcript] == lg.TOOLS and r.tools_offered == lg.TOOLS
    assert [e.type for e in r.agent_reported].count("tool") == 3  # its own account, kept apart


def test_langgraph_agent_that_calls_no_tool_fails_under_require_grounded():
    lg = _lg()
    script = [lg.say(json.dumps(_memory_resource(lg)))]  # the right resource, from memory
    plain = _write_run(script)
    assert plain.outcome == "passed" and plain.score.metrics["grounded"] == 0.0  # correct, not grounded
    assert plain.transcript == [] and plain.tools_offered == lg.TOOLS
    dim = plain.score.dimensions["grounded"]
    assert [c.name for c in dim.checks if not c.passed] == ["called", "values", "validated"]
    strict = _write_run(script, require=True)
    assert strict.outcome == "failed" and strict.reason.startswith("ungrounded (--require-grounded)")
    assert "called none" in strict.reason


def test_langgraph_build_from_memory_then_lookup_is_ungrounded():
    lg = _lg()
    case = lg.load_case()
    script = [lg.call("build_medication_statement", lg.build_args(case)),
              lg.call("lookup_medication_code", {"query": "ibuprofen 200 mg oral tablet"}),
              lambda m: lg.call("validate_medication_statement",
                                {"resource": lg.last_result(m, "build_medication_statement")["resource"]}),
              lambda m: lg.say(json.dumps(lg.last_result(m, "build_medication_statement")["resource"]))]
    r = _write_run(script, require=True)
    assert [c.tool for c in r.transcript] == ["build_medication_statement", "lookup_medication_code",
                                              "validate_medication_statement"]
    assert r.outcome == "failed" and r.score.details["ungrounded"]["code"] == [CODE]
    assert "looked up only afterwards" in r.reason


def test_langgraph_lookup_and_build_in_one_message_is_ungrounded():
    lg = _lg()
    case = lg.load_case()
    both = lg.AIMessage(content="", tool_calls=[
        {"name": "lookup_medication_code", "args": {"query": "ibuprofen 200 mg oral tablet"}, "id": "c1"},
        {"name": "build_medication_statement", "args": lg.build_args(case), "id": "c2"}])
    script = [both,
              lambda m: lg.call("validate_medication_statement",
                                {"resource": lg.last_result(m, "build_medication_statement")["resource"]}),
              lambda m: lg.say(json.dumps(lg.last_result(m, "build_medication_statement")["resource"]))]
    r = _write_run(script, require=True)
    steps = {c.tool: c.step for c in r.transcript}
    assert steps["lookup_medication_code"] == steps["build_medication_statement"] is not None
    assert r.outcome == "failed" and r.score.details["ungrounded"]["code"] == [CODE]


def test_langgraph_code_seen_only_in_an_error_value_is_ungrounded():
    """The code passed where the tool's schema wants a string: LangChain's validation error
    (ToolMessage status "error") quotes it back; that is no evidence."""
    lg = _lg()
    case = lg.load_case()
    script = [lg.call("lookup_medication_code", {"query": int(CODE)}),
              lg.call("build_medication_statement", lg.build_args(case)),
              lambda m: lg.call("validate_medication_statement",
                                {"resource": lg.last_result(m, "build_medication_statement")["resource"]}),
              lambda m: lg.say(json.dumps(lg.last_result(m, "build_medication_statement")["resource"]))]
    r = _write_run(script, require=True)
    first = r.transcript[0]
    assert first.status == "error" and CODE in json.dumps(first.result)  # the error does carry the code
    assert r.outcome == "failed" and "only an error result" in r.reason


def test_langgraph_extraction_grounded_on_error_text_fails_and_on_the_record_passes():
    """``read_resource("Medication/<code>")`` answers "... not found": that grounds nothing."""
    from conftest import REFS, SYNTHEA

    from pytest_groundeval.agents.langgraph_agent import LangGraphAgent
    from pytest_groundeval.run.runner import run_case

    lg = _lg()
    task = ExtractionTask(SYNTHEA)
    ref = next(r for r in task.discover() if r.case_id == REFS)
    truth = task.load(ref).truth
    assert truth
    answer = lg.say(json.dumps({"active_medications": [{"code": t["code"], "display": t["display"]} for t in truth]}))
    probes = [lg.call("read_resource", {"reference": f"Medication/{t['code']}"}) for t in truth]
    errors = run_case(task, ref, LangGraphAgent(model=lg.ScriptedChatModel(script=[*probes, answer])),
                      require_grounded=True)
    assert [c.status for c in errors.transcript] == ["error"] * len(truth)
    assert all(t["code"] in json.dumps(c.result) for t, c in zip(truth, errors.transcript))
    assert errors.outcome == "failed" and errors.reason.startswith("ungrounded (--require-grounded)")
    assert sorted(errors.score.details["ungrounded"]["code"]) == sorted(t["code"] for t in truth)
    listed = run_case(task, ref, LangGraphAgent(model=lg.ScriptedChatModel(
        script=[lg.call("list_medication_requests", {"status": "active"}), answer])), require_grounded=True)
    assert listed.outcome == "passed" and listed.score.metrics["grounded"] == 1.0, listed.reason


class _SelfReporting:
    """A module:Class agent that answers right and reports a lookup that never happened."""

    name = "self-reporting"

    def run(self, prompt):
        fake = Log().lookup().build().validate().answer()
        return {"text": json.dumps(_memory_resource(_lg())), "transcript": fake}


class _HarnessToolUser:
    """A module:Class agent that takes its tools from the harness and calls one itself."""

    name = "harness-tool-user"

    def run_case(self, task, prompt, inputs):
        from pytest_groundeval.run.toolcalls import harness_tools

        tools = {t.name: t for t in harness_tools(task, inputs)}
        match = tools["lookup_medication_code"].invoke({"query": "ibuprofen 200 mg oral tablet"})["matches"][0]
        lg = _lg()
        resource = tools["build_medication_statement"].invoke(
            lg.build_args(lg.load_case(), rxnorm_code=match["code"], display=match["display"]))["resource"]
        tools["validate_medication_statement"].invoke({"resource": resource})
        return json.dumps(resource)


def test_a_custom_agents_self_reported_transcript_is_kept_apart_and_never_evidence():
    from pytest_groundeval.run.runner import run_case

    task = WriteTask(WRITE_CASES)
    ref = next(r for r in task.discover() if r.case_id == "ibuprofen-two-tablets")
    plain = run_case(task, ref, _SelfReporting())
    assert plain.outcome == "passed" and plain.transcript is None and plain.tools_offered is None
    assert plain.agent_reported[0]["tool"] == "lookup_medication_code"  # kept as given (an agent's own format), shown
    assert "grounded" not in plain.score.metrics and plain.score.details["grounded"] == NOT_APPLICABLE
    strict = run_case(task, ref, _SelfReporting(), require_grounded=True)
    assert strict.outcome == "failed" and strict.reason == f"not grounded (--require-grounded): {NOT_APPLICABLE}"
    # the same answer through the harness's tools is observed and grounded
    used = run_case(task, ref, _HarnessToolUser(), require_grounded=True)
    assert used.outcome == "passed" and used.score.metrics["grounded"] == 1.0, used.reason
    assert [c.tool for c in used.transcript] == ["lookup_medication_code", "build_medication_statement",
                                                 "validate_medication_statement"]
    assert all(c.step is None for c in used.transcript)  # no framework step: the log's clock orders them


# ---------------------------------------------------------------- the write suite end to end
SKIP_LOOKUP = [  # the scripted model answering the right code without looking it up
    ('if "lookup_medication_code" not in done:',
     'if "lookup_medication_code" not in done and not os.environ.get("SKIP_LOOKUP"):'),
    ('top = _last(messages, "lookup_medication_code")["matches"][0]',
     'top = ({"code": exp["rxnorm_code"], "display": exp["display"]} if os.environ.get("SKIP_LOOKUP") '
     'else _last(messages, "lookup_medication_code")["matches"][0])'),
]


def _module() -> str:
    text = AGENT_MODULE
    for old, new in SKIP_LOOKUP:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


@pytest.fixture
def writeproject(pytester, monkeypatch):
    pytester.makepyfile(test_write_evals=EVAL_FILE, scripted_langgraph=_module())
    monkeypatch.setenv("CASES_DIR", str(WRITE_CASES))
    monkeypatch.delenv("SKIP_LOOKUP", raising=False)
    return pytester


def _run(p, *args):
    result = p.runpytest("--write-cases", str(WRITE_CASES), "--agent=scripted_langgraph:ScriptedLangGraph",
                         "--run-record", "record.json", "-p", "no:cacheprovider", *args)
    rec = json.loads((p.path / "record.json").read_text())
    assert validate_record(rec) == []
    return result, rec


def test_the_scripted_langgraph_agent_is_grounded_on_every_write_case(writeproject):
    result, rec = _run(writeproject, "--threshold", "write.grounded=1.0")
    result.assert_outcomes(passed=N_CASES)
    s = rec["summary"]["write"]
    assert s["grounded"] == 1.0 and s["grounded_n"] == N_CASES and s["pass"] == 1.0
    assert any(t["metric"] == "write.grounded" or t["key"] == "grounded" for t in rec["gate"]["thresholds"])
    assert rec["gate"]["passed"]
    assert rec["options"]["require_grounded"] is False
    result.stdout.fnmatch_lines(["*grounded*1.000*95% CI*"])  # beside the other figures
    for c in rec["cases"]:
        dim = c["score"]["dimensions"]["grounded"]
        assert dim["passed"] and c["score"]["metrics"]["grounded"] == 1.0, (c["case_id"], dim)
        assert [ch["name"] for ch in dim["checks"]] == ["called", "values", "validated", "repeats"]
        assert [t["seq"] for t in c["transcript"]] == [1, 2, 3] and all(t["status"] == "ok" for t in c["transcript"])


def test_an_agent_that_never_looks_up_passes_but_is_ungrounded_and_fails_when_required(writeproject, monkeypatch):
    monkeypatch.setenv("SKIP_LOOKUP", "1")
    result, rec = _run(writeproject)
    result.assert_outcomes(passed=N_CASES)  # correct: the scorer passes every case
    (writeproject.path / "plain.json").write_text((writeproject.path / "record.json").read_text())
    s = rec["summary"]["write"]
    assert s["pass"] == 1.0 and s["grounded"] == 0.0 and s["grounded_n"] == N_CASES
    for c in rec["cases"]:
        dim = c["score"]["dimensions"]["grounded"]
        assert not dim["passed"] and c["ground_truth"]["expected"]["rxnorm_code"] in dim["reason"]
        assert c["ground_truth"]["expected"]["rxnorm_code"] in c["score"]["details"]["ungrounded"]["code"]
    gated, _ = _run(writeproject, "--threshold", "write.grounded=0.9")
    assert gated.ret == pytest.ExitCode.TESTS_FAILED
    strict, rec = _run(writeproject, "--require-grounded")
    strict.assert_outcomes(failed=N_CASES)
    assert all(c["outcome"] == "failed" and c["score"]["reason"].startswith("ungrounded (--require-grounded)")
               for c in rec["cases"])
    rescored, rec = _run(writeproject, "--rescore", "plain.json", "--require-grounded")  # the stored transcript
    rescored.assert_outcomes(failed=N_CASES)
    assert all(c["rescored_from"] and not c["score"]["dimensions"]["grounded"]["passed"] for c in rec["cases"])
    plain = {c["case_id"]: c for c in json.loads((writeproject.path / "plain.json").read_text())["cases"]}
    for c in rec["cases"]:  # the observed log and the agent's own account survive the rescore, apart
        old = plain[c["case_id"]]
        assert c["transcript"] == old["transcript"] and c["agent_reported"] == old["agent_reported"]
        assert c["tools_offered"] == old["tools_offered"] and all("seq" in t for t in c["transcript"])
        assert all("seq" not in t for t in c["agent_reported"])
    resumed, rec = _run(writeproject, "--resume", "plain.json")  # nothing to run again: kept as stored
    resumed.assert_outcomes(passed=N_CASES)
    for c in rec["cases"]:
        old = plain[c["case_id"]]
        assert c["resumed_from"] and c["transcript"] == old["transcript"] and c["agent_reported"] == old["agent_reported"]


def test_refused_connections_are_said_in_the_called_check_and_all_refused_is_not_grounded():
    """Refused MCP connections (model.RefusedConnection) are named in the ``called`` check,
    passing or not; a client whose every call was refused made none that ran: not grounded."""
    from pytest_groundeval.model import RefusedConnection
    from pytest_groundeval.scorers.grounding import grounded as judge

    refused = [RefusedConnection(pid=4242, command="python detached.py", reason="not the case's agent command")]
    none_ran = judge([], {}, offered=["fhir_search"], refused=refused)
    assert not none_ran.passed and "refused (not the case's agent command: pid 4242 'python detached.py')" \
        in none_ran.reason, none_ran.reason
    ok = {"seq": 1, "tool": "fhir_search", "args": {}, "result": {"x": 1}, "status": "ok", "started": 1, "ended": 2}
    some_ran = judge([ok], {}, offered=["fhir_search"], refused=[r.model_dump() for r in refused])
    called = next(c for c in some_ran.checks if c.name == "called")
    assert some_ran.passed and called.passed and "1 connection(s) to its tools were refused" in called.reason
