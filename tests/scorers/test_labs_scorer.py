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
    obs("e3", "33914-3", "2019-01-15" + T, 55.4, unit="mL/min/{1.73_m2}")), {"kind": "change"}, TODAY)
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
    ("an empty value is no value", A1C_TRUTH, {**RIGHT, "value": ""}, {"value"}),
    ("an empty unit is no unit", A1C_TRUTH, {**RIGHT, "unit": " "}, {"unit"}),
    ("an empty flag is no flag", A1C_TRUTH, {**RIGHT, "flag": ""}, {"flag"}),
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


# ---------------------------------------------------------------- the adversarial audit (helper labs)
def _text(**over):
    """RIGHT as JSON text, with raw members spliced in (a duplicate key is no dict)."""
    body = json.dumps(RIGHT)[1:-1]
    return "{" + ", ".join([body] + [f'"{k}": {v}' for k, v in over.items()]) + "}"


DUPLICATES = [
    ("a second value", '{"value": 9.9, "value": 6.8, "unit": "%", "effective": "2019-02-01", "flag": true}'),
    ("a second flag", '{"value": 6.8, "unit": "%", "effective": "2019-02-01", "flag": false, "flag": true}'),
    ("a second date", '{"value": 6.8, "unit": "%", "effective": "2019-06-01", "effective": "2019-02-01", '
                      '"flag": true}'),
    ("a second unit", '{"value": 6.8, "unit": "mmol/mol", "unit": "%", "effective": "2019-02-01", "flag": true}'),
    ("no result, then not", '{"no_result": true, "no_result": false, "value": 6.8, "unit": "%", '
                            '"effective": "2019-02-01", "flag": true}'),
    ("a duplicate in a fenced block", 'Either:\n```json\n{"value": 7.4, "value": 6.8, "unit": "%", '
                                      '"effective": "2019-02-01", "flag": true}\n```'),
]


@pytest.mark.parametrize("name,text", DUPLICATES, ids=[d[0] for d in DUPLICATES])
def test_a_key_given_twice_is_two_answers_not_the_last_one(name, text):
    """JSON keeps the last of a duplicated key; a reader sees two answers. Refused, never scored."""
    with pytest.raises(ParseError, match="more than once"):
        parse_answer(text)


@pytest.mark.parametrize("obj", [
    {**RIGHT, "VALUE": 9.9}, {**RIGHT, "Value": 9.9}, {**RIGHT, "flag ": False}, {**RIGHT, "Effective": "2019-06-01"},
    {"no_result": True, "No_Result": False}, {**RIGHT, "baseline-value": 5.9}, {**RIGHT, "Unit": "mmol/mol"},
    {"Value": 6.8, "Unit": "%", "Effective": "2019-02-01", "Flag": True},
])
def test_an_answer_key_in_another_spelling_is_refused_not_ignored(obj):
    """Beside the key, another spelling of it is a second answer; alone, it is not the key."""
    with pytest.raises(ParseError, match="written as shown"):
        answer(obj)


def test_a_second_value_in_the_prose_is_a_hedge_not_ignored():
    # the one JSON object has no duplicate key, but the prose states a second value: it was
    # ignored (and passed) before issue 28; the object is still read, the hedge fails ``value``
    pred = parse_answer('value: 7.4 or value: 6.8 -> ' + json.dumps(RIGHT))
    score = score_labs(pred, A1C_TRUTH)
    assert pred["value"] == 6.8 and not score.passed and not score.dimensions["value"].passed
    assert "'7.4'" in score.dimensions["value"].reason and score.dimensions["date"].passed


# numbers and units built to crash the reader: each must be a scored failure, never an exception
OVERFLOWS = [
    ("an integer too big for a float", '{"value": 1' + "0" * 400 + ', "unit": "%", "effective": "2019-02-01"}'),
    ("a baseline too big for a float", '{"value": 6.8, "baseline_value": -1' + "0" * 400 + ', "unit": "%"}'),
    ("an integer past the digit limit", '{"value": 1' + "0" * 5000 + ', "unit": "%", "effective": "2019-02-01"}'),
    ("NaN", _text(value="NaN")),
    ("Infinity", _text(value="Infinity")),
    ("-Infinity", _text(value="-Infinity")),
    ("a string past a float", _text(value='"1e999"')),
]


@pytest.mark.parametrize("name,text", OVERFLOWS, ids=[o[0] for o in OVERFLOWS])
def test_numbers_a_float_cannot_hold_are_parse_errors(name, text):
    with pytest.raises(ParseError):
        parse_answer(text)


def test_an_answer_built_to_hang_or_crash_the_json_scan_is_a_parse_error():
    """Each is a scored failure, not an error (which would drop the case from every dimension's
    rate) nor a scan of minutes (a megabyte of "{" before the answer: each failed try to start an
    object there costs the text's length)."""
    right = json.dumps(RIGHT)
    for text in ("{" * 1_000_000 + right, '{"' * 500_000 + right, '{"a": ' * 3000 + "1" + "}" * 3000):
        with pytest.raises(ParseError):
            parse_answer(text)
    assert parse_answer("{" * 99 + right)["value"] == 6.8  # stray braces before the answer, within bounds


@pytest.mark.parametrize("unit", ["10*999999999", "10^-999999999", "m999999999", "(" * 5000 + "%" + ")" * 5000,
                                  "kg" + ".kg" * 5000 + "/kg" * 5000, "%" + ".1" * 3000])
def test_a_unit_built_to_crash_the_reader_is_a_failed_unit(unit):
    score = score_labs(answer({**RIGHT, "unit": unit}), A1C_TRUTH)
    assert not score.passed and not score.dimensions["unit"].passed, score.reason
    assert score.dimensions["value"].passed and score.dimensions["date"].passed


def test_a_unit_longer_than_any_unit_is_not_read():
    """The reader's work is bounded: a code past MAX_UCUM_LENGTH is refused, even one that
    spells the record's unit (``%`` times 1, a hundred times over)."""
    assert same_unit("%" + ".1" * 50, "%")[0]
    ok, why = same_unit("%" + ".1" * 150, "%")
    assert not ok and "longer than any unit" in why


# an answer may only give the numbers and dates its question asks for: another is a second answer
UNASKED = [
    ("a blood pressure with a value too", BP, {**BP_RIGHT, "value": 120}, {"value"}),
    ("a latest question with a baseline", GLUCOSE, {**G_RIGHT, "baseline_value": 80}, {"value"}),
    ("a threshold with the earlier value as a baseline", A1C_TRUTH, {**RIGHT, "baseline_value": 5.9}, {"value"}),
    ("a latest question with a baseline date", GLUCOSE, {**G_RIGHT, "baseline_effective": "2018-01-10"}, {"date"}),
    ("a change question with a systolic", EGFR, {**E_RIGHT, "systolic": 55}, {"value"}),
    ("a hba1c with a diastolic", A1C_TRUTH, {**RIGHT, "diastolic": 7.4}, {"value"}),
]


@pytest.mark.parametrize("name,truth,given,failing", UNASKED, ids=[u[0] for u in UNASKED])
def test_a_number_or_date_the_question_does_not_ask_is_a_second_answer(name, truth, given, failing):
    score = score_labs(answer(given), truth)
    failed = {d for d, dim in score.dimensions.items() if not dim.passed}
    assert not score.passed and failed == failing, (name, score.reason)
    assert "does not ask" in score.reason


@pytest.mark.parametrize("name,truth,given", [
    ("a null for an unasked number", BP, {**BP_RIGHT, "value": None, "baseline_value": None}),
    ("a null baseline date", GLUCOSE, {**G_RIGHT, "baseline_effective": None}),
    ("a flag on a latest question is no number", GLUCOSE, {**G_RIGHT, "flag": True}),
    ("a one-object JSON list", A1C_TRUTH, [RIGHT]),
    ("no result with empty fields", ONLY_LATER, {"no_result": True, "value": "", "unit": " ", "effective": "",
                                                 "flag": "", "baseline_value": None}),
])
def test_what_is_not_a_second_answer_still_passes(name, truth, given):
    score = score_labs(answer(given), truth)
    assert score.passed, (name, score.reason)


# units in other spellings: the UCUM code, case-sensitive; a display spelling is not it
@pytest.mark.parametrize("truth,given,ok", [
    (POTASSIUM, {**K_RIGHT, "unit": "µmol/L"}, False),  # not UCUM (u is micro), and a thousandth anyway
    (POTASSIUM, {**K_RIGHT, "unit": "MMOL/L"}, False),  # UCUM's case-insensitive form is not the code asked
    (POTASSIUM, {**K_RIGHT, "unit": "Mmol/L"}, False),  # megamole
    (POTASSIUM, {**K_RIGHT, "unit": "mmol/L "}, True),  # surrounding spaces are trimmed
    (POTASSIUM, {**K_RIGHT, "unit": "mmol/L{serum}"}, True),  # an annotation is no other unit
    (POTASSIUM, {**K_RIGHT, "unit": "mmol/(L)"}, True),
    (POTASSIUM, {**K_RIGHT, "unit": "mmol / L"}, False),
    (POTASSIUM, {**K_RIGHT, "unit": "mmol⁄L"}, False),  # a fraction slash, not "/"
    (A1C_TRUTH, {**RIGHT, "unit": "10*-2"}, True),
    (A1C_TRUTH, {**RIGHT, "unit": "{%}"}, False),  # an annotation alone is the unity, not a hundredth
    (A1C_TRUTH, {**RIGHT, "unit": "％"}, False),  # a full-width percent sign
    (A1C_TRUTH, {**RIGHT, "unit": "mmol/mol", "value": 6.8}, False),  # % value, IFCC unit
    (GLUCOSE, {**G_RIGHT, "unit": "mg/dL", "value": 5.6}, False),  # mmol/L's number in mg/dL
    (GLUCOSE, {**G_RIGHT, "unit": "mmol/L", "value": 100}, False),  # the right number, the wrong unit
    (BP, {**BP_RIGHT, "unit": "mm[Hg]"}, True),
    (BP, {**BP_RIGHT, "unit": "mm[hg]"}, False),
    (BP, {**BP_RIGHT, "unit": "kPa", "systolic": 19.0, "diastolic": 11.3}, False),
])
def test_units_in_odd_spellings(truth, given, ok):
    assert score_labs(answer(given), truth).passed is ok


FLAGS = ["H", "L", "N", "high", "HIGH", "abnormal", "yes", 1, 0, [True], {"value": True}]


@pytest.mark.parametrize("flag", FLAGS, ids=[repr(f) for f in FLAGS])
def test_a_flag_is_true_or_false_not_an_interpretation_code(flag):
    with pytest.raises(ParseError, match="flag"):
        answer({**RIGHT, "flag": flag})


DATES = ["2019-02-01Z", "20190201", "2019/02/01", "01/02/2019", "2019-02-01 08:30", "2019-W05-5", "2019-032",
         "1 Feb 2019", 20190201, ["2019-02-01", "2019-06-01"], "2019-02-01/2019-06-01", "2019-02-30"]


@pytest.mark.parametrize("when", DATES, ids=[repr(d) for d in DATES])
def test_a_date_that_is_not_iso_or_is_two_dates_is_refused(when):
    with pytest.raises(ParseError, match="effective"):
        answer({**RIGHT, "effective": when})


@pytest.mark.parametrize("when,ok", [
    ("2019-02-01T08:30:00Z", True), ("2019-02-01T08:30:00.999+00:00", True),
    ("2019-01-31T23:30:00-09:00", True),  # the same instant, written on the previous day
    ("2019-02-01T08:30:00", True),  # no offset: the wall time as the record writes it
    ("2019-02-01T08:30:00+01:00", False), ("2019-02-01T00:00:00Z", False),
    ("2019-02-02", False), ("2019-01-31", False),
])
def test_dates_and_time_zones(when, ok):
    assert score_labs(answer({**RIGHT, "effective": when}), A1C_TRUTH).passed is ok
