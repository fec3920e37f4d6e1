"""Issue 28, item 5: an eGFR decline is read only within one series. Synthea writes LOINC
33914-3 in ``mL/min`` ("Glomerular filtration rate/1.73 sq M.predicted") and in
``mL/min/{1.73_m2}`` ("Estimated Glomerular Filtration Rate"), weeks apart; UCUM calls the two
units one (an annotation has no effect), so the truth used to call a "48 % decline" (144.3 ->
74.7) where neither series declines. The earliest and the latest result of the window must be
of one series (the same unit as written, test name and method); otherwise no decline is
computable and the right answer is "no result", with the reason in the truth."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import pytest

from pytest_groundeval.model import CaseError
from pytest_groundeval.scorers.labs import score_labs
from pytest_groundeval.tasks.datasets import discover_case_records
from pytest_groundeval.tasks.labs import LabsTask, baseline_answer, build_prompt, derive_truth, parse_answer

TODAY = date(2019, 3, 1)
CHANGE = {"kind": "change"}
ESTIMATED = ("mL/min/{1.73_m2}", "Estimated Glomerular Filtration Rate")
PREDICTED = ("mL/min", "Glomerular filtration rate/1.73 sq M.predicted")
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "labs"


def egfr(oid, when, value, series=ESTIMATED, method=None):
    unit, name = series
    r = {"resourceType": "Observation", "id": oid, "status": "final", "subject": {"reference": "Patient/p"},
         "code": {"coding": [{"system": "http://loinc.org", "code": "33914-3", "display": name}], "text": name},
         "effectiveDateTime": when,
         "valueQuantity": {"value": value, "unit": unit, "system": "http://unitsofmeasure.org", "code": unit}}
    if method:
        r["method"] = {"text": method}
    return r


def record(*observations):
    return {"resourceType": "Bundle", "entry": [{"resource": {"resourceType": "Patient", "id": "p"}}]
            + [{"resource": o} for o in observations]}


MIXED = {
    "Synthea's two units (144.3 -> 74.7)": record(egfr("a", "2018-01-10", 144.3), egfr("b", "2018-02-20", 74.7,
                                                                                        PREDICTED)),
    "the other way round": record(egfr("a", "2018-01-10", 74.7, PREDICTED), egfr("b", "2018-02-20", 40.0)),
    "the same unit, another test name": record(egfr("a", "2018-01-10", 144.3),
                                               egfr("b", "2018-02-20", 74.7, ("mL/min/{1.73_m2}", "eGFR CKD-EPI"))),
    "the same unit and name, another method": record(egfr("a", "2018-01-10", 144.3, method="MDRD"),
                                                     egfr("b", "2018-02-20", 74.7, method="CKD-EPI 2021")),
    "a baseline without a unit": record({**egfr("a", "2018-01-10", 90.0), "valueQuantity": {"value": 90.0}},
                                        egfr("b", "2018-02-20", 40.0)),
}


@pytest.mark.parametrize("bundle", MIXED.values(), ids=list(MIXED))
def test_a_decline_across_two_series_is_no_decline_computable(bundle):
    truth = derive_truth(bundle, CHANGE, TODAY)
    assert truth["no_result"] and truth["flag"] is None and truth["result"] is None
    assert truth["why"].startswith("no decline computable") and "within one series" in truth["why"]
    # the artefact's answer (a decline across the two series) fails; saying none passes
    artefact = {"value": 75, "baseline_value": 144, "unit": "mL/min", "effective": "2018-02-20",
                "baseline_effective": "2018-01-10", "flag": True}
    assert not score_labs(parse_answer(json.dumps(artefact)), truth).passed
    assert score_labs(parse_answer('{"no_result": true}'), truth).passed
    inputs = {"bundle": bundle, "question": CHANGE, "today": TODAY.isoformat(), "patient_id": "p"}
    assert json.loads(baseline_answer(inputs)) == {"no_result": True}


def test_a_decline_within_one_series_is_computed_past_the_other_series():
    """The earliest and latest are of one series; the other series between them is not read."""
    bundle = record(egfr("a", "2018-01-10", 100.0), egfr("b", "2018-02-20", 30.0, PREDICTED),
                    egfr("c", "2019-01-10", 70.0))
    truth = derive_truth(bundle, CHANGE, TODAY)
    assert not truth["no_result"] and truth["flag"] is True and truth["decline_pct"] == 30.0
    assert truth["baseline"]["series"] == truth["result"]["series"]
    right = {"value": 70, "baseline_value": 100, "unit": "mL/min/{1.73_m2}", "effective": "2019-01-10",
             "baseline_effective": "2018-01-10", "flag": True}
    assert score_labs(parse_answer(json.dumps(right)), truth).passed
    assert not score_labs(parse_answer('{"no_result": true}'), truth).passed
    inputs = {"bundle": bundle, "question": CHANGE, "today": TODAY.isoformat(), "patient_id": "p"}
    assert score_labs(parse_answer(baseline_answer(inputs)), truth).passed


def test_a_same_series_decline_in_the_predicted_unit_is_computed():
    truth = derive_truth(record(egfr("a", "2018-01-10", 80.0, PREDICTED), egfr("b", "2019-01-10", 78.0, PREDICTED)),
                         CHANGE, TODAY)
    assert not truth["no_result"] and truth["flag"] is False


def test_within_one_series_a_decline_near_25_percent_is_still_refused():
    with pytest.raises(CaseError, match="within reading precision"):
        derive_truth(record(egfr("a", "2018-01-10", 80.0), egfr("b", "2019-01-10", 60.2)), CHANGE, TODAY)


def test_the_prompt_says_a_decline_is_read_within_one_series():
    text = build_prompt(CHANGE, TODAY, "p")
    assert "within one series" in text and "mL/min and mL/min/{1.73_m2} are two series" in text


@pytest.mark.parametrize("case_id", ["Devin_Bailey_17dc1d1b_change_egfr_decline",
                                     "Elsy_Hermiston_1855d3e9_change_egfr_decline"])
def test_the_committed_mixed_series_cases_are_no_result(case_id):
    """Two committed cases are Synthea's mixed series: no decline, and the generator says so."""
    task = LabsTask.__new__(LabsTask)
    ref = next(r for r in discover_case_records(FIXTURES, "labs") if r.case_id == case_id)
    case = task.load(ref)
    assert case.truth["no_result"] and case.truth["why"].startswith("no decline computable")
    assert json.loads((FIXTURES / f"{case_id}.json").read_text())["expect"] == "no_result"
    assert score_labs(parse_answer(task.baseline(case.inputs).text), case.truth).passed
