"""Task.view: each task says how the report shows its cases (the coded items of truth and
answer); the report (reporting/html.py) knows no task's shapes and reads them from the view."""

from __future__ import annotations

from pytest_groundeval.reporting import html
from pytest_groundeval.tasks.base import CaseView, CodedItem, Task
from pytest_groundeval.tasks.extraction import ExtractionTask
from pytest_groundeval.tasks.reconciliation import ReconciliationTask
from pytest_groundeval.tasks.write import WriteTask

RXNORM = "http://www.nlm.nih.gov/research/umls/rxnorm"
SNOMED = "http://snomed.info/sct"


def test_extraction_view_lists_both_sides_and_the_wrong_names():
    case = {"task": "extraction", "ground_truth": [{"code": "1", "display": "A"}, {"code": 2, "display": "B"}],
            "predicted": [{"code": "1", "display": "a"}, {"nocode": True}],
            "score": {"details": {"wrong_names": ["1", {"x": 1}]}}}
    view = ExtractionTask.view(case)
    assert view == CaseView((CodedItem("1", "A"), CodedItem("2", "B")), (CodedItem("1", "a"),), frozenset({"1"}))


def test_a_list_without_coded_items_is_not_a_side_an_empty_one_is():
    assert ExtractionTask.view({"ground_truth": [], "predicted": [{"x": 1}]}) == CaseView((), None)


def test_reconciliation_view_carries_verdicts():
    case = {"ground_truth": [{"code": "1", "display": "A", "verdict": "matched"}],
            "predicted": [{"code": "1", "display": "A", "verdict": "stopped-but-taking"}]}
    view = ReconciliationTask.view(case)
    assert view.truth[0].verdict == "matched" and view.predicted[0].verdict == "stopped-but-taking"


def test_write_view_is_the_expected_code_beside_the_resources_rxnorm_codings():
    case = {"ground_truth": {"expected": {"rxnorm_code": "197319", "display": "Allopurinol 100 MG Oral Tablet"}},
            "predicted": {"resourceType": "MedicationStatement", "medicationCodeableConcept": {"coding": [
                {"system": RXNORM, "code": "197319", "display": "Allopurinol 100 MG Oral Tablet"},
                {"system": SNOMED, "code": "25246002", "display": "Allopurinol"},
                {"code": "9", "display": "no system"}]}}}
    view = WriteTask.view(case)
    assert view.truth == (CodedItem("197319", "Allopurinol 100 MG Oral Tablet"),)
    assert [i.code for i in view.predicted] == ["197319", "9"]  # SNOMED is not an RxNorm coding
    assert WriteTask.view({**case, "predicted": {"resourceType": "MedicationStatement"}}).predicted == ()
    assert WriteTask.view({**case, "predicted": "not a resource"}).predicted is None
    assert WriteTask.view({"ground_truth": {"expected": {}}}).truth is None


def test_the_report_diffs_what_the_view_gives():
    case = {"task": "reconciliation", "outcome": "failed",
            "ground_truth": [{"code": "1", "display": "A", "verdict": "matched"}, {"code": "2", "display": "B", "verdict": "unreported"}],
            "predicted": [{"code": "1", "display": "A", "verdict": "unrecorded"}, {"code": "3", "display": "C", "verdict": "matched"}],
            "score": {"details": {"wrong_names": ["1"]}}}
    rows = {r["code"]: r for r in html.code_diff(case)}
    assert {c: r["status"] for c, r in rows.items()} == {"1": "wrong-verdict", "2": "missed", "3": "added"}
    assert rows["1"]["wrong_name"] and not rows["2"]["wrong_name"]


def test_a_task_without_a_view_gets_no_code_diff(monkeypatch):
    """The report shows no code table for a task whose class has no view (the base's None),
    whatever shape its truth has: the shapes are the task's, not the report's."""
    class Plain(ExtractionTask):
        name = "plain"
        view = Task.view

    monkeypatch.setattr(html, "_task_class", lambda name: Plain if name == "plain" else None)
    case = {"task": "plain", "ground_truth": [{"code": "1"}], "predicted": [{"code": "1"}], "outcome": "passed"}
    assert html.code_diff(case) is None
    assert html.code_diff({**case, "task": "not-installed"}) is None
