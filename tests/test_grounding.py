"""The ``grounded`` dimension (grounding.py): rules on hand-built transcripts, the runner's
wiring (not applicable for single-call agents, out of the rate), and the write suite end to
end through the scripted LangGraph agent of test_write_suite, grounded and not."""

from __future__ import annotations

import json

import pytest
from test_write_suite import AGENT_MODULE, EVAL_FILE, N_CASES, WRITE_CASES

from pytest_groundeval.grounding import NOT_APPLICABLE, grounded, strengths
from pytest_groundeval.model import AgentOutput, CaseResult, ScoreRecord
from pytest_groundeval.record import validate_record
from pytest_groundeval.runner import score_case
from pytest_groundeval.scorers.aggregate import counts
from pytest_groundeval.scorers.base import Score
from pytest_groundeval.tasks.extraction import ExtractionTask
from pytest_groundeval.tasks.reconciliation import ReconciliationTask
from pytest_groundeval.tasks.write import WriteTask

CODE, DISPLAY = "310965", "Ibuprofen 200 MG Oral Tablet"
RESOURCE = {"resourceType": "MedicationStatement", "status": "active", "subject": {"reference": "Patient/p1"},
            "medicationCodeableConcept": {"coding": [{"system": "http://www.nlm.nih.gov/research/umls/rxnorm",
                                                      "code": CODE, "display": DISPLAY}]}}
VALUES = {"code": [CODE], "display": [DISPLAY], "strength": ["200 MG"]}
VALIDATE = "validate_medication_statement"
BUILD = "build_medication_statement"


class Conversation:
    """A transcript in transcript_of's form, built call by call."""

    def __init__(self) -> None:
        self.entries: list[dict] = []

    def call(self, name: str, args: dict, result: dict) -> "Conversation":
        cid = f"call-{len(self.entries)}"
        self.entries.append({"type": "ai", "content": "", "tool_calls": [{"name": name, "args": args, "id": cid}]})
        self.entries.append({"type": "tool", "tool": name, "tool_call_id": cid, "result": result})
        return self

    def lookup(self, query: str = "ibuprofen 200 mg tablet") -> "Conversation":
        return self.call("lookup_medication_code", {"query": query},
                         {"query": query, "matches": [{"code": CODE, "display": DISPLAY, "score": 1.0}]})

    def build(self) -> "Conversation":
        return self.call(BUILD, {"rxnorm_code": CODE, "display": DISPLAY}, {"resource": RESOURCE})

    def validate(self, valid: bool = True) -> "Conversation":
        return self.call(VALIDATE, {"resource": RESOURCE},
                         {"valid": valid, "issues": [] if valid else ["status: required"]})

    def answer(self) -> list[dict]:
        return self.entries + [{"type": "ai", "content": json.dumps(RESOURCE), "tool_calls": []}]


def check(result, name):
    return next(c for c in result.checks if c.name == name)


def write_grounded(transcript, **kw):
    return grounded(transcript, VALUES, must_validate=VALIDATE, answer_tool=BUILD, **kw)


# ---------------------------------------------------------------- the rules
def test_the_right_code_without_a_lookup_is_ungrounded_though_correct():
    r = write_grounded(Conversation().build().validate().answer())
    assert r.applicable and not r.passed
    assert r.ungrounded == {"code": [CODE], "display": [DISPLAY], "strength": ["200 MG"]}
    assert CODE in check(r, "values").reason and check(r, "validated").passed
    # the build tool's result echoes the code the agent passed it: never evidence
    assert CODE in json.dumps(Conversation().build().entries)


def test_looked_up_and_copied_is_grounded():
    r = write_grounded(Conversation().lookup().build().validate().answer())
    assert r.applicable and r.passed and r.ungrounded == {}
    assert [c.name for c in r.checks] == ["values", "validated", "repeats"]
    assert all(c.reason for c in r.checks)


def test_echoed_arguments_are_not_evidence_and_codes_match_whole_tokens():
    echo = Conversation().call("lookup_medication_code", {"query": f"rxnorm {CODE}"},
                               {"query": f"rxnorm {CODE}", "matches": []})
    r = grounded(echo.answer(), {"code": [CODE]})
    assert r.ungrounded == {"code": [CODE]}
    part = Conversation().call("lookup_medication_code", {"query": "x"},
                               {"matches": [{"code": "1049", "display": "x"}]})
    assert grounded(part.answer(), {"code": ["10"]}).ungrounded == {"code": ["10"]}
    assert grounded(part.answer(), {"code": ["1049"]}).passed


def test_dose_strength_is_grounded_by_the_strength_written_in_a_result():
    assert strengths(DISPLAY) == ["200 MG"]
    assert strengths("Amoxicillin 250 MG/5ML Oral Suspension") == ["250 MG/5ML"]
    assert strengths("amoxicillin 250 MG / 5 ML oral suspension") == ["250 MG/5ML"]
    assert strengths("Insulin Glargine 100 UNT/ML Injectable Solution") == ["100 UNT/ML"]
    found = Conversation().lookup()
    assert grounded(found.answer(), {"strength": ["200 MG"]}).passed
    assert grounded(found.answer(), {"strength": ["400 MG"]}).ungrounded == {"strength": ["400 MG"]}


def test_write_that_skips_validation_fails_the_validated_check():
    r = write_grounded(Conversation().lookup().build().answer())
    assert not r.passed and r.ungrounded == {}
    assert not check(r, "validated").passed and "never called validate_medication_statement" in r.reason


def test_a_failed_validation_not_validated_again_fails():
    r = write_grounded(Conversation().lookup().build().validate(valid=False).answer())
    assert not check(r, "validated").passed
    assert "did not report the resource valid" in r.reason and "status: required" in r.reason


def test_fixed_and_validated_again_passes():
    r = write_grounded(Conversation().lookup().build().validate(valid=False).build().validate().answer())
    assert r.passed and "1 failed validation" in check(r, "validated").reason


def test_rebuilt_after_the_last_validation_fails():
    r = write_grounded(Conversation().lookup().build().validate().build().answer())
    assert not check(r, "validated").passed and "again after the last" in r.reason


def test_the_same_call_five_times_fails_three_times_passes():
    five, three = Conversation(), Conversation()
    for _ in range(5):
        five.lookup()
    for _ in range(3):
        three.lookup()
    r5 = write_grounded(five.build().validate().answer())
    assert not r5.passed and not check(r5, "repeats").passed and "called 5 times" in r5.reason
    assert write_grounded(three.build().validate().answer()).passed
    assert write_grounded(three.build().validate().answer(), max_repeats=2).passed is False


def test_no_tool_call_is_not_applicable():
    for transcript in (None, [], [{"type": "ai", "content": "{}", "tool_calls": []}],
                       [{"tool": "lookup_medication_code", "args": {}, "result": {}}]):  # a fixed pipeline's
        r = grounded(transcript, VALUES, must_validate=VALIDATE)
        assert not r.applicable and not r.passed and r.reason == NOT_APPLICABLE and r.checks == []


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
    task = WriteTask(WRITE_CASES)
    return task, task.load(task.discover()[0])


def test_runner_adds_the_dimension_beside_the_scorers_and_leaves_pass_alone(write_case):
    task, case = write_case
    output = AgentOutput(text=json.dumps(RESOURCE), structured=RESOURCE,
                         transcript=Conversation().build().validate().answer())
    plain = score_case(task, case, output, lambda p, c: Score(passed=True))
    assert plain["outcome"] == "passed"
    dim = plain["score"].dimensions["grounded"]
    assert not dim.passed and CODE in dim.reason and plain["score"].metrics["grounded"] == 0.0
    assert plain["score"].details["ungrounded"]["code"] == [CODE]
    strict = score_case(task, case, output, lambda p, c: Score(passed=True),
                        require_grounded=True)
    assert strict["outcome"] == "failed" and strict["score"].reason.startswith("ungrounded (--require-grounded)")
    single = score_case(task, case, AgentOutput(text=json.dumps(RESOURCE)))
    assert "grounded" not in single["score"].dimensions and "grounded" not in single["score"].metrics
    assert single["score"].details["grounded"] == NOT_APPLICABLE


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
        assert [ch["name"] for ch in dim["checks"]] == ["values", "validated", "repeats"]


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
