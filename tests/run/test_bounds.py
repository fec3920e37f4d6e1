"""Bounded output (issue 16 item 3): what a case may store of its agent's output is capped
(``pytest_groundeval/run/bounds.py``): depth, size, item count, steps. A deeply nested or huge
answer is an ``agent`` error of its own case, never an INTERNALERROR that loses the run; a
cut transcript keeps its answer scored but is not grounded; the record says what was cut."""

from __future__ import annotations

import json

import pytest
from conftest import REFS, SMALL_SET, STOPPED_ACTIVE, SYNTHEA, ZERO, read_record
from test_grounding import BUILD, RESOURCE, Log, write_case  # noqa: F401  (a fixture)

from pytest_groundeval.scorers.grounding import NOT_APPLICABLE
from pytest_groundeval.run.toolcalls import ToolLog

from pytest_groundeval.run.bounds import (MAX_DEPTH, MAX_ITEMS, MAX_STEP, MAX_STEPS, MAX_STRUCTURED, MAX_TEXT, TAG,
                                      bound, bound_output, too_deep)
from pytest_groundeval.model import AgentOutput, CaseResult
from pytest_groundeval.store.record import case_json, validate_record
from pytest_groundeval.run.runner import Called, _take_output, finish_case, reuse, run_case, score_case
from pytest_groundeval.scorers.base import Score
from pytest_groundeval.tasks.extraction import ExtractionTask

CLARISSA = SMALL_SET[3]


def nest(levels: int, leaf=None) -> object:
    """``levels`` containers deep: {"x": [{"x": [... leaf ...]}]} (each dict and each list is a level)."""
    value = leaf
    for i in range(levels):
        value = [value] if i % 2 == 0 else {"x": value}
    return value


def depth_of(value) -> int:
    d = 0
    while isinstance(value, (list, dict)):
        value = value[0] if isinstance(value, list) else value["x"]
        d += 1
    return d


class Named:
    name = "named"
    model = None


# ---------------------------------------------------------------- the caps, each both ways
def test_depth_up_to_the_cap_is_kept_whole_one_level_more_is_cut():
    kept, cuts = bound(nest(MAX_DEPTH, "leaf"), MAX_STRUCTURED, "s")
    assert cuts == [] and kept == nest(MAX_DEPTH, "leaf")
    kept, cuts = bound(nest(MAX_DEPTH + 1, "leaf"), MAX_STRUCTURED, "s")
    assert len(cuts) == 1 and f"nested deeper than {MAX_DEPTH} levels" in cuts[0]
    assert depth_of(kept) == MAX_DEPTH  # the container at the cap is replaced by the marker text
    inner = kept
    for _ in range(MAX_DEPTH):
        inner = inner[0] if isinstance(inner, list) else inner["x"]
    assert isinstance(inner, str) and inner.startswith(TAG)
    assert too_deep(nest(MAX_DEPTH + 1)) and not too_deep(nest(MAX_DEPTH))


def test_items_up_to_the_cap_are_kept_one_more_is_cut_and_counted():
    kept, cuts = bound(list(range(MAX_ITEMS)), MAX_STRUCTURED, "s")
    assert cuts == [] and kept == list(range(MAX_ITEMS))
    kept, cuts = bound(list(range(MAX_ITEMS + 1)), MAX_STRUCTURED, "s")
    assert kept[:MAX_ITEMS] == list(range(MAX_ITEMS)) and kept[-1] == f"{TAG}: 1 more items]"
    assert cuts == [f"s: {MAX_ITEMS + 1} items, kept {MAX_ITEMS} (more than {MAX_ITEMS} items)"]
    kept, cuts = bound({str(i): i for i in range(MAX_ITEMS + 5)}, MAX_STRUCTURED, "s")
    assert len(kept) == MAX_ITEMS + 1 and kept["groundeval_truncated"] == f"{TAG}: 5 more keys]" and len(cuts) == 1


def test_size_is_cut_where_the_budget_ends_and_integers_json_cannot_hold_become_text():
    kept, cuts = bound({"a": "y" * 100}, 1000, "s")
    assert kept == {"a": "y" * 100} and cuts == []
    kept, cuts = bound({"a": "y" * 5000}, 1000, "s")
    assert kept["a"].startswith("y" * 900) and TAG in kept["a"] and len(kept["a"]) < 1100
    assert cuts and cuts[0].startswith("s.a: 5000 characters")
    kept, cuts = bound({"n": 2 ** 64}, 1000, "s")
    assert kept == {"n": str(2 ** 64)} and "outside 64 bits" in cuts[0]
    assert bound({"n": 2 ** 62}, 1000, "s") == ({"n": 2 ** 62}, [])


def test_an_answer_text_up_to_the_cap_is_kept_whole_one_character_more_is_cut():
    whole = bound_output(AgentOutput(text="x" * MAX_TEXT))
    assert whole.cuts == [] and not whole.answer_cut and len(whole.output.text) == MAX_TEXT
    cut = bound_output(AgentOutput(text="x" * (MAX_TEXT + 1)))
    assert cut.answer_cut and cut.output.text == "x" * MAX_TEXT + f"{TAG}: 1 more characters]"
    assert cut.cuts == [f"raw_output: {MAX_TEXT + 1} characters, kept {MAX_TEXT}"]


def test_transcript_steps_and_step_size_up_to_the_caps_are_kept_beyond_them_cut():
    steps = [{"type": "tool", "tool": "t", "result": {"n": i}} for i in range(MAX_STEPS)]
    whole = bound_output(AgentOutput(text="{}", transcript=steps))
    assert whole.cuts == [] and whole.output.transcript == steps and not whole.transcript_cut
    more = bound_output(AgentOutput(text="{}", transcript=steps + [{"type": "ai", "content": "more"}]))
    assert more.transcript_cut and not more.answer_cut and more.output.transcript[:MAX_STEPS] == steps
    last = more.output.transcript[-1]
    assert len(more.output.transcript) == MAX_STEPS + 1 and last["type"] == "groundeval"
    assert last["truncated"].startswith(f"{TAG}: 1 more steps dropped")
    fits = {"type": "tool", "tool": "t", "result": "r" * (MAX_STEP - 200)}
    assert bound_output(AgentOutput(text="{}", transcript=[fits])).cuts == []
    big = bound_output(AgentOutput(text="{}", transcript=[{"type": "tool", "tool": "t", "result": "r" * MAX_STEP}]))
    assert big.transcript_cut and big.cuts[0].startswith("transcript[0].result:")
    assert len(big.output.transcript[0]["result"]) < MAX_STEP + 100 and TAG in big.output.transcript[0]["result"]


def test_usage_beyond_its_caps_is_dropped_with_a_warning_and_the_answer_kept(write_case):  # noqa: F811
    task, case = write_case
    called = Called(ref=case.ref, case=case)
    _take_output(called, AgentOutput(text="{}", usage={"input_tokens": 3, "deep": nest(300)}), Named(), None)
    assert called.error is None and called.fields["usage"] is None
    assert "usage dropped" in called.fields["warnings"][0] and "beyond groundeval's bounds" in called.fields["warnings"][0]
    ok = Called(ref=case.ref, case=case)
    _take_output(ok, AgentOutput(text="{}", usage={"input_tokens": 3, "output_tokens": 4}), Named(), None)
    assert ok.fields["usage"].input_tokens == 3 and not ok.fields.get("warnings")


# ---------------------------------------------------------------- the runner: not scored, not grounded
def _finished(task, case, output) -> CaseResult:
    called = Called(ref=case.ref, case=case, fields={"content_hash": case.content_hash})
    _take_output(called, output, Named(), None)
    result = finish_case(task, called)
    case_json(result)  # the record can hold it (this raised "Maximum serialization depth exceeded")
    return result


def test_a_cut_answer_is_an_agent_error_kept_as_cut_and_never_rescored(write_case):  # noqa: F811
    task, case = write_case
    deep = _finished(task, case, AgentOutput(text=json.dumps(RESOURCE), structured={**RESOURCE, "x": nest(300)}))
    assert deep.outcome == "error" and deep.error.kind == "agent" and deep.score is None
    assert "output bounds" in deep.error.message and f"nested deeper than {MAX_DEPTH} levels" in deep.error.message
    assert deep.truncated and deep.truncated[0].startswith("structured_output")
    # the same resource within the bounds is scored (equivalent answer, nothing cut)
    fine = _finished(task, case, AgentOutput(text=json.dumps(RESOURCE), structured=dict(RESOURCE)))
    assert fine.outcome in ("passed", "failed") and fine.score is not None and fine.truncated == []
    again = reuse(task, case.ref, deep, "run-1", rescore=True)
    assert again.outcome == "error" and again.score is None and again.rescored_from == "run-1"


def test_an_answer_nested_past_the_cap_in_its_text_is_an_agent_error(write_case):  # noqa: F811
    task, case = write_case
    text = json.dumps({**RESOURCE, "note": nest(300, "deep")})
    assert len(text) < MAX_TEXT  # small: only its depth is beyond the bounds
    result = _finished(task, case, AgentOutput(text=text))
    assert result.outcome == "error" and result.error.kind == "agent" and "nested deeper than" in result.error.message
    shallow = _finished(task, case, AgentOutput(text=json.dumps({**RESOURCE, "note": nest(10, "deep")})))
    assert shallow.score is not None


def _observed(n_padding: int) -> ToolLog:
    """A harness log: ``n_padding`` distinct lookups, then lookup, build, validate."""
    log = ToolLog()
    log.offer(["lookup_medication_code", BUILD, "validate_medication_statement"])
    for i in range(n_padding):
        log.end(log.begin("lookup_medication_code", {"query": f"pad {i}"}, None), {"matches": []}, "ok")
    for e in Log().lookup().build().validate().answer():
        log.end(log.begin(e["tool"], e["args"], None), e["result"], e["status"])
    return log


def test_a_cut_transcript_keeps_the_answer_scored_but_is_not_grounded(write_case):  # noqa: F811
    """The observed log past MAX_STEPS calls is cut: the answer is scored, the case not grounded
    (check ``complete``), also when re-scored; within the bounds it is grounded."""
    task, case = write_case
    output = AgentOutput(text=json.dumps(RESOURCE), structured=RESOURCE)

    def finished(n_padding: int, **kw) -> CaseResult:
        called = Called(ref=case.ref, case=case, fields={"content_hash": case.content_hash},
                        observed=_observed(n_padding))
        _take_output(called, output, Named(), None)
        result = finish_case(task, called, lambda p, c: Score(passed=True), **kw)
        case_json(result)
        return result

    whole = finished(0)
    assert whole.score.dimensions["grounded"].passed and whole.truncated == []
    cut = finished(MAX_STEPS)
    assert cut.score is not None and cut.outcome == "passed" and len(cut.transcript) == MAX_STEPS
    assert cut.truncated[0].startswith("transcript:")
    dim = cut.score.dimensions["grounded"]
    assert not dim.passed and dim.checks[0].name == "complete" and "cut to groundeval's bounds" in dim.reason
    assert finished(0, require_grounded=True).outcome == "passed"
    strict = finished(MAX_STEPS, require_grounded=True)
    assert strict.outcome == "failed" and "ungrounded (--require-grounded)" in strict.score.reason
    again = reuse(task, case.ref, cut, "run-1", rescore=True)  # the stored log is the cut one
    assert not again.score.dimensions["grounded"].passed and again.truncated == cut.truncated
    # the agent's own transcript, cut or not, is never evidence: its cut is named agent_reported
    padded = [{"type": "ai", "content": "thinking", "tool_calls": []}] * (MAX_STEPS + 1)
    reported = _finished(task, case, AgentOutput(text=json.dumps(RESOURCE), structured=RESOURCE, transcript=padded))
    assert reported.truncated[0].startswith("agent_reported") and reported.transcript is None
    assert reported.score.details["grounded"] == NOT_APPLICABLE


def test_a_fifty_megabyte_extraction_answer_is_an_agent_error_and_its_record_small():
    task = ExtractionTask(SYNTHEA)
    ref = next(r for r in task.discover() if r.case_id == CLARISSA)

    class Huge:
        name = "huge"

        def run(self, prompt):
            return '{"active_medications": []}' + " " * 50_000_000

    result = run_case(task, ref, Huge())
    assert result.outcome == "error" and result.error.kind == "agent"
    _, _, blob = case_json(result)
    assert len(blob) < MAX_TEXT + 100_000


# ---------------------------------------------------------------- whole sessions
AGENT = '''
import json
from pytest_groundeval.tasks.extraction import active_medications

ROLES = __ROLES__  # patient id -> what this agent does to that case

def nest(levels):
    value = "bottom"
    for i in range(levels):
        value = [value] if i % 2 == 0 else {"x": value}
    return value

class Unbounded:
    name = "unbounded"
    def run(self, prompt):
        bundle = json.JSONDecoder().raw_decode(prompt.split("Bundle:\\n", 1)[1])[0]
        pid = next(e["resource"]["id"] for e in bundle["entry"] if e["resource"]["resourceType"] == "Patient")
        answer = json.dumps({"active_medications": active_medications(bundle, "prompt")})
        role = ROLES.get(pid)
        if role == "nested-answer":
            return {"text": answer, "structured": nest(300)}
        if role == "nested-transcript":
            return {"text": answer, "transcript": [{"type": "tool", "tool": "read", "result": nest(300)},
                                                   {"type": "ai", "content": answer, "tool_calls": []}]}
        if role == "huge":
            return answer + " " * 50_000_000
        return answer
'''
ROLES = {ZERO: "nested-answer", REFS: "nested-transcript", CLARISSA: "huge"}


def _patient_id(stem: str) -> str:
    bundle = json.loads((SYNTHEA / f"{stem}.json").read_text())
    return next(e["resource"]["id"] for e in bundle["entry"] if e["resource"]["resourceType"] == "Patient")


@pytest.mark.parametrize("extra", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_nested_and_huge_output_are_case_errors_and_every_other_case_runs(evalproject, extra):
    roles = {_patient_id(stem): role for stem, role in ROLES.items()}
    evalproject.makepyfile(unbounded=AGENT.replace("__ROLES__", json.dumps(roles)))
    result = evalproject.runpytest_subprocess(
        "--data-dir", "data", "--run-record", "record.json", "-p", "no:cacheprovider", "--agent=unbounded:Unbounded",
        "--groundeval-html", "report.html", "--junitxml", "junit.xml", *extra, timeout=300)
    text = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in text and "no active workers" not in text
    assert result.ret == pytest.ExitCode.TESTS_FAILED, text[-3000:]  # eval failures, never 3
    result.assert_outcomes(passed=2, errors=2)  # two agent errors: pytest errors (issue 30 item 4)
    rec = read_record(evalproject)
    assert validate_record(rec) == []
    cases = {c["case_id"]: c for c in rec["cases"]}
    assert sorted(cases) == sorted(SMALL_SET) and rec["completeness"]["recorded"] == 4
    assert not rec["completeness"]["cut_short"]

    nested = cases[ZERO]  # 300 levels in the structured answer: its own agent error
    assert nested["outcome"] == "error" and nested["error"]["kind"] == "agent"
    assert f"nested deeper than {MAX_DEPTH} levels" in nested["error"]["message"]
    assert nested["truncated"][0].startswith("structured_output")
    assert depth_of(nested["structured_output"]) <= MAX_DEPTH

    transcript = cases[REFS]  # 300 levels in a tool result it reports: the answer scored, never evidence
    assert transcript["outcome"] == "passed" and transcript["score"]["metrics"]["f1"] == 1.0
    assert transcript["truncated"][0].startswith("agent_reported[0].result")
    assert TAG in json.dumps(transcript["agent_reported"]) and transcript["agent_reported"][1]["type"] == "ai"
    assert "grounded" not in transcript["score"]["dimensions"]
    assert transcript["score"]["details"]["grounded"] == NOT_APPLICABLE

    huge = cases[CLARISSA]  # 50 MB: an agent error, the first MiB kept and marked
    assert huge["outcome"] == "error" and huge["error"]["kind"] == "agent" and "output bounds" in huge["error"]["message"]
    [cut] = huge["truncated"]
    assert cut.startswith("raw_output: 500") and cut.endswith(f"characters, kept {MAX_TEXT}")
    assert len(huge["raw_output"]) < MAX_TEXT + 200 and huge["raw_output"].endswith("more characters]")

    plain = cases[STOPPED_ACTIVE]
    assert plain["outcome"] == "passed" and plain["truncated"] == []
    summary = rec["summary"]["extraction"]
    assert (summary["n_cases"], summary["n_passed"], summary["n_errors"]) == (4, 2, 2)

    # bounded: nothing near the 50 MB answer is written anywhere
    for name in ("record.json", "report.html", "junit.xml"):
        size = (evalproject.path / name).stat().st_size
        assert size < 3 * MAX_TEXT, (name, size)
    assert "output bounds" in (evalproject.path / "report.html").read_text()

    if not extra:  # re-scored from that record: the cut answers stay errors, the cut transcript ungrounded
        again = evalproject.runpytest_subprocess(
            "--data-dir", "data", "--run-record", "rescored.json", "-p", "no:cacheprovider",
            "--agent=unbounded:Unbounded", "--rescore", "record.json", timeout=300)
        assert again.ret == pytest.ExitCode.TESTS_FAILED
        redone = {c["case_id"]: c for c in read_record(evalproject, "rescored.json")["cases"]}
        assert redone[ZERO]["outcome"] == redone[CLARISSA]["outcome"] == "error"
        assert "grounded" not in redone[REFS]["score"]["dimensions"] and redone[REFS]["truncated"]

