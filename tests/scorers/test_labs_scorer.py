"""scorers/labs.py, table-driven: every rule fails on an answer built to break it, and an
equivalent correct answer passes. Truths are derived by the task (``derive_truth``) from small
records written here, so the shapes are the task's own."""

from __future__ import annotations

import json
from datetime import date

import pytest

from pytest_groundeval.model import ParseError
from pytest_groundeval.scorers.labs import UcumError, parse_ucum, same_unit, score_labs, unparsed
from pytest_groundeval.tasks.labs import derive_truth, parse_answer

PID = "p1"


def obs(oid, code, when, value=None, unit="%", status="final", components=None, subject=PID):
    r = {"resourceType": "Observation", "id": oid, "status": status,
         "code": {"coding": [{"system": "http://loinc.org", "code": code}]},
         "subject": {"reference": f"Patient/{subject}"}, "effectiveDateTime": when}
    if components:
        r["component"] = [{"code": {"coding": [{"system": "http://loinc.org", "code": c}]},
                           "valueQuantity": {"value": v, "unit": "mm[Hg]", "system": "http://unitsofmeasure.org",
                                             "code": "mm[Hg]"}} for c, v in components]
    else:
        r["valueQuantity"] = {"value": value, "unit": unit, "system": "http://unitsofmeasure.org", "code": unit}
    return r


def bundle(*observations):
    return {"resourceType": "Bundle", "type": "transaction",
            "entry": [{"resource": r} for r in ({"resourceType": "Patient", "id": PID}, *observations)]}


T = "T08:30:00+00:00"
HBA1C = bundle(obs("a1", "4548-4", "2018-01-10" + T, 5.9), obs("a2", "4548-4", "2019-02-01" + T, 6.83),
               obs("a3", "4548-4", "2019-06-01" + T, 7.4),  # after today
               obs("x1", "4548-4", "2019-02-20" + T, 9.9, status="entered-in-error"),
               obs("x2", "4548-4", "2019-02-21" + T, 9.8, subject="someone-else"),
               obs("x3", "2339-0", "2019-02-25" + T, 101.0, unit="mg/dL"))
TODAY = date(2019, 3, 1)
A1C_TRUTH = derive_truth(HBA1C, {"kind": "threshold", "criterion": "hba1c_ge_6.5"}, TODAY)
RIGHT = {"value": 6.8, "unit": "%", "effective": "2019-02-01", "flag": True}

POTASSIUM = derive_truth(bundle(obs("k1", "6298-4", "2019-01-05" + T, 5.43, unit="mmol/L")),
                         {"kind": "threshold", "criterion": "potassium_outside_3.5_5.1"}, TODAY)
K_RIGHT = {"value": 5.4, "unit": "mmol/L", "effective": "2019-01-05", "flag": True}
GLUCOSE = derive_truth(bundle(obs("g1", "2339-0", "2019-01-05" + T, 100.4, unit="mg/dL")),
                       {"kind": "latest", "analyte": "glucose"}, TODAY)
G_RIGHT = {"value": 100, "unit": "mg/dL", "effective": "2019-01-05"}
BP = derive_truth(bundle(obs("b1", "55284-4", "2019-01-05" + T, components=[("8480-6", 142.3), ("8462-4", 85.1)])),
                  {"kind": "threshold", "criterion": "bp_ge_140_90"}, TODAY)
BP_RIGHT = {"systolic": 142, "diastolic": 85, "unit": "mm[Hg]", "effective": "2019-01-05", "flag": True}
EGFR = derive_truth(bundle(
    obs("e0", "33914-3", "2016-01-01" + T, 90.0, unit="mL/min/{1.73_m2}"),  # before the 2-year window
    obs("e1", "33914-3", "2017-05-01" + T, 80.2, unit="mL/min/{1.73_m2}"),
    obs("e2", "33914-3", "2018-03-01" + T, 70.0, unit="mL/min/{1.73_m2}"),
    obs("e3", "33914-3", "2019-01-15" + T, 55.4, unit="mL/min")), {"kind": "change"}, TODAY)
E_RIGHT = {"value": 55, "baseline_value": 80, "unit": "mL/min", "effective": "2019-01-15",
           "baseline_effective": "2017-05-01", "flag": True}
ONLY_LATER = derive_truth(bundle(obs("a9", "4548-4", "2019-06-01" + T, 7.4)),
                          {"kind": "threshold", "criterion": "hba1c_ge_6.5"}, TODAY)
STALE = derive_truth(HBA1C, {"kind": "latest", "analyte": "hba1c", "within_months": 1}, date(2019, 3, 5))
NONE = {"no_result": True}


def answer(obj):
    return parse_answer(json.dumps(obj))


def test_the_derived_truths_are_what_the_records_say():
    assert A1C_TRUTH["result"]["observation"] == "Observation/a2" and A1C_TRUTH["flag"] is True
    assert A1C_TRUTH["result"]["value"] == 6.83  # not the later 7.4, the voided 9.9 or another patient's 9.8
    assert EGFR["baseline"]["observation"] == "Observation/e1" and EGFR["result"]["observation"] == "Observation/e3"
    assert EGFR["flag"] is True and EGFR["decline_pct"] == pytest.approx(30.92, abs=0.01)
    assert ONLY_LATER["no_result"] and "dated after today" in ONLY_LATER["why"]
    assert STALE["no_result"] and "Observation/a2" in STALE["why"]


# (truth, answer, the dimension that must fail) -- one purpose-built wrong answer per rule
WRONG = [
    ("earliest value", A1C_TRUTH, {**RIGHT, "value": 5.9, "effective": "2018-01-10"}, {"value", "date"}),
    ("a result dated after today", A1C_TRUTH, {**RIGHT, "value": 7.4, "effective": "2019-06-01"}, {"value", "date"}),
    ("a voided result", A1C_TRUTH, {**RIGHT, "value": 9.9, "effective": "2019-02-20"}, {"value", "date"}),
    ("another patient's result", A1C_TRUTH, {**RIGHT, "value": 9.8, "effective": "2019-02-21"}, {"value", "date"}),
    ("one reading step off (below)", A1C_TRUTH, {**RIGHT, "value": 6.7}, {"value"}),
    ("one reading step off (above)", A1C_TRUTH, {**RIGHT, "value": 6.9}, {"value"}),
    ("the right value, the wrong date", A1C_TRUTH, {**RIGHT, "effective": "2019-02-02"}, {"date"}),
    ("a dateTime of another instant", A1C_TRUTH, {**RIGHT, "effective": "2019-02-01T09:30:00+00:00"}, {"date"}),
    ("HbA1c in IFCC units", A1C_TRUTH, {**RIGHT, "value": 51, "unit": "mmol/mol"}, {"value", "unit"}),
    ("a unit that is not UCUM", A1C_TRUTH, {**RIGHT, "unit": "percent"}, {"unit"}),
    ("no unit", A1C_TRUTH, {k: v for k, v in RIGHT.items() if k != "unit"}, {"unit"}),
    ("the wrong flag", A1C_TRUTH, {**RIGHT, "flag": False}, {"flag"}),
    ("no flag", A1C_TRUTH, {k: v for k, v in RIGHT.items() if k != "flag"}, {"flag"}),
    ("abstaining when there is a result", A1C_TRUTH, NONE, {"abstention", "value", "unit", "date", "flag"}),
    ("answering the later result when none is known", ONLY_LATER,
     {"value": 7.4, "unit": "%", "effective": "2019-06-01", "flag": True}, {"abstention"}),
    ("answering a result outside the window", STALE, {"value": 6.8, "unit": "%", "effective": "2019-02-01"},
     {"abstention"}),
    ("mEq/L is not UCUM (meq/L is)", POTASSIUM, {**K_RIGHT, "unit": "mEq/L"}, {"unit"}),
    ("a decilitre is not a litre", POTASSIUM, {**K_RIGHT, "unit": "mmol/dL"}, {"unit"}),
    ("glucose converted to mmol/L", GLUCOSE, {**G_RIGHT, "value": 5.57, "unit": "mmol/L"}, {"value", "unit"}),
    ("mmHg is not UCUM", BP, {**BP_RIGHT, "unit": "mmHg"}, {"unit"}),
    ("systolic and diastolic swapped", BP, {**BP_RIGHT, "systolic": 85, "diastolic": 142}, {"value"}),
    ("one number for a blood pressure", BP, {k: v for k, v in {**BP_RIGHT, "value": 142}.items()
                                             if k not in ("systolic", "diastolic")}, {"value"}),
    ("a baseline from before the window", EGFR, {**E_RIGHT, "baseline_value": 90, "baseline_effective": "2016-01-01"},
     {"value", "date"}),
    ("the middle result as the baseline", EGFR, {**E_RIGHT, "baseline_value": 70, "baseline_effective": "2018-03-01",
                                                  "flag": False}, {"value", "date", "flag"}),
    ("a change question answered without its baseline", EGFR,
     {k: v for k, v in E_RIGHT.items() if not k.startswith("baseline")}, {"value", "date"}),
]

# (truth, an answer that is right in another form)
EQUIVALENT = [
    ("the record's own value", A1C_TRUTH, {**RIGHT, "value": 6.83}),
    ("a numeric string", A1C_TRUTH, {**RIGHT, "value": " 6.83 "}),
    ("within half a step", A1C_TRUTH, {**RIGHT, "value": 6.87}),
    ("the same instant in another offset", A1C_TRUTH, {**RIGHT, "effective": "2019-02-01T03:30:00-05:00"}),
    ("the effective dateTime as written", A1C_TRUTH, {**RIGHT, "effective": "2019-02-01T08:30:00+00:00"}),
    ("a flag as a string", A1C_TRUTH, {**RIGHT, "flag": "true"}),
    ("extra keys are ignored", A1C_TRUTH, {**RIGHT, "explanation": "latest before today"}),
    ("mmol/l is mmol/L", POTASSIUM, {**K_RIGHT, "unit": "mmol/l"}),
    ("meq/L is mmol/L in UCUM", POTASSIUM, {**K_RIGHT, "unit": "meq/L"}),
    ("mg/dl is mg/dL", GLUCOSE, {**G_RIGHT, "unit": "mg/dl", "value": 100.4}),
    ("the blood pressure rounded", BP, BP_RIGHT),
    ("the blood pressure as recorded", BP, {**BP_RIGHT, "systolic": 142.3, "diastolic": "85.1"}),
    ("eGFR's annotation is no other unit", EGFR, {**E_RIGHT, "unit": "mL/min/{1.73_m2}"}),
    ("eGFR to the step", EGFR, E_RIGHT),
    ("no result, said", ONLY_LATER, NONE),
    ("no result in the window, said", STALE, {"no_result": "true"}),
]


@pytest.mark.parametrize("name,truth,given,failing", WRONG, ids=[w[0] for w in WRONG])
def test_a_wrong_answer_fails_the_dimension_it_breaks(name, truth, given, failing):
    score = score_labs(answer(given), truth)
    failed = {d for d, dim in score.dimensions.items() if not dim.passed}
    assert not score.passed and failed == failing, (name, score.reason)
    assert all(score.metrics[d] == 0.0 for d in failing) and score.metrics["pass"] == 0.0
    assert all(score.dimensions[d].reason for d in failing)


@pytest.mark.parametrize("name,truth,given", EQUIVALENT, ids=[e[0] for e in EQUIVALENT])
def test_an_equivalent_right_answer_passes(name, truth, given):
    score = score_labs(answer(given), truth)
    assert score.passed, (name, score.reason)
    assert set(score.metrics) >= {"pass", "abstention", f"{truth['kind']}_pass"}
    assert all(v == 1.0 for v in score.metrics.values())


def test_each_dimension_applies_only_where_the_question_asks_it():
    assert set(score_labs(answer(G_RIGHT), GLUCOSE).dimensions) == {"abstention", "value", "unit", "date"}
    assert set(score_labs(answer(RIGHT), A1C_TRUTH).dimensions) == {"abstention", "value", "unit", "date", "flag"}
    none = score_labs(answer(NONE), ONLY_LATER)
    assert set(none.dimensions) == {"abstention"} and none.metrics["no_result_pass"] == 1.0
    assert "no_result_pass" not in score_labs(answer(RIGHT), A1C_TRUTH).metrics


HEDGES = [
    ("two values", {**RIGHT, "value": [6.8, 7.4]}),
    ("a range in a string", {**RIGHT, "value": "6.8-7.4"}),
    ("a value with its unit in it", {**RIGHT, "value": "6.8 %"}),
    ("no result and a value", {"no_result": True, "value": 6.8}),
    ("no result and a flag", {"no_result": True, "flag": False}),
    ("a flag that is neither", {**RIGHT, "flag": "maybe"}),
    ("a date that is not ISO", {**RIGHT, "effective": "Feb 1, 2019"}),
    ("a month, not a date", {**RIGHT, "effective": "2019-02"}),
    ("a boolean value", {**RIGHT, "value": True}),
    ("nothing at all", {"comment": "I could not tell"}),
    ("not a number", {**RIGHT, "value": "NaN"}),
]


@pytest.mark.parametrize("name,given", HEDGES, ids=[h[0] for h in HEDGES])
def test_hedges_and_malformed_answers_are_parse_errors(name, given):
    with pytest.raises(ParseError):
        answer(given)


def test_two_json_objects_are_refused():
    with pytest.raises(ParseError):
        parse_answer(json.dumps(RIGHT) + " or " + json.dumps({**RIGHT, "value": 7.4}))


def test_an_unparsed_answer_scores_zero_in_every_dimension_it_was_asked():
    score = unparsed(A1C_TRUTH, "no JSON object found in the output")
    assert not score.passed and score.metrics == {d: 0.0 for d in ("abstention", "value", "unit", "date", "flag",
                                                                   "pass", "threshold_pass")}
    assert unparsed(ONLY_LATER, "x").metrics == {"abstention": 0.0, "pass": 0.0, "threshold_pass": 0.0,
                                                 "no_result_pass": 0.0}


@pytest.mark.parametrize("a,b", [("mmol/L", "mmol/l"), ("mL/min", "mL/min/{1.73_m2}"), ("meq/L", "mmol/L"),
                                 ("kg/m2", "kg.m-2"), ("10*3/uL", "10*9/L"), ("mg/dL", "10.mg/L"),
                                 ("mm[Hg]", "mm[Hg]{sitting}"), ("%", "10*-2"), ("g/dL", "g/(dL)")])
def test_ucum_equivalents(a, b):
    assert same_unit(a, b)[0] and same_unit(b, a)[0]


@pytest.mark.parametrize("a,b", [("mg/dL", "mmol/L"), ("mg/dL", "g/L"), ("%", "mmol/mol"), ("mL/min", "L/min"),
                                 ("kg", "g"), ("mm[Hg]", "kPa"), ("10*3/uL", "10*6/uL")])
def test_ucum_different_units(a, b):
    assert not same_unit(a, b)[0]


@pytest.mark.parametrize("code", ["mmHg", "mEq/L", "mL/min/1.73m2", "MG/DL", "mg /dL", "percent", "mg/", "(mg",
                                  "", "mg/{dL"])
def test_not_ucum(code):
    with pytest.raises(UcumError):
        parse_ucum(code)
