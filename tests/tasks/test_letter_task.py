"""The letter task (tasks/letter.py): its cases are the reconciliation cases (loaded by that
task: same content hash, same truth items), the prompt carries the review outcome and the
note but not the record's other medications, the template baseline passes every checkable
item on every committed case, an empty answer is a parse failure, and the report's view puts
the review beside the drugs the letter names."""

from __future__ import annotations

import pytest
from conftest import FIXTURES

from pytest_groundeval.model import AgentOutput, ParseError
from pytest_groundeval.tasks import registry
from pytest_groundeval.tasks.letter import LetterTask
from pytest_groundeval.tasks.reconciliation import ReconciliationTask

CASES = FIXTURES / "reconciliation"


@pytest.fixture(scope="module")
def task():
    return LetterTask(CASES)


def test_registered_with_declared_metrics():
    assert registry()["letter"] is LetterTask
    names = {s.name for s in LetterTask.specs}
    assert {"checks_passed", "reading_grade", "judge_score", "unscored_rate", "judge_kappa", "judge_alpha"} <= names


def test_cases_are_the_reconciliation_cases(task):
    rec = ReconciliationTask(CASES)
    refs = task.discover()
    assert [r.case_id for r in refs] == [r.case_id for r in rec.discover()]
    case, other = task.load(refs[0]), rec.load(rec.discover()[0])
    assert case.content_hash == other.content_hash and case.truth["items"] == other.truth
    for item in case.truth["items"]:
        assert item["display"] in case.prompt
    record_only = [r for r in case.truth["record"] if r["code"] not in {t["code"] for t in case.truth["items"]}]
    assert all(r["display"] not in case.prompt for r in record_only)
    assert "bundle_json" not in case.inputs  # the letter writer sees the outcome and the note only


def test_the_template_baseline_passes_every_checkable_item(task):
    for ref in task.discover():
        case = task.load(ref)
        score = task.score(task.parse(task.baseline(case.inputs)), case)
        assert score.passed, (ref.case_id, score.reason)
        assert score.jury is not None and all(i.unscored == "no --judge-model" for i in score.jury.items)
        assert "judge_score" not in score.metrics  # unscored: neither a pass nor a fail


def test_empty_answer_is_a_parse_failure(task):
    with pytest.raises(ParseError):
        task.parse(AgentOutput(text="  \n"))
    assert task.parse(AgentOutput(text="```\nDear patient,\nhello\n```")) == "Dear patient,\nhello"


def test_view_puts_the_review_beside_the_letter(task):
    case = task.load(task.discover()[0])
    letter = task.baseline(case.inputs).text
    view = LetterTask.view({"ground_truth": case.truth, "predicted": letter})
    assert {i.code for i in view.truth} == {t["code"] for t in case.truth["items"]}
    said = {i.code: i.verdict for i in view.predicted}
    for t in case.truth["items"]:
        want = {"matched": "continue", "stopped-but-taking": "stop"}.get(t["verdict"], "check")
        assert want in said[t["code"]].split("/"), (t, said)
    assert LetterTask.view({"ground_truth": None}) is None


def test_the_template_names_a_drug_as_a_patient_knows_it():
    """An ingredient word that is an adjective keeps its noun ("Ferrous 325 mg" named no drug a
    patient knows); a salt after a noun is left out; the letter still passes its checks."""
    from pytest_groundeval.tasks.letter import plain_name

    assert plain_name("ferrous sulfate 325 MG Oral Tablet") == "Ferrous sulfate 325 mg"
    assert plain_name("Alendronic acid 10 MG Oral Tablet") == "Alendronic acid 10 mg"
    assert plain_name("Naproxen sodium 220 MG Oral Tablet") == "Naproxen 220 mg"
