"""The safety dimension's rules one by one, as split out of ``safety_dimension``: a wrong dose is
named once (by the dose check), not again by the daily total; the daily total still names a
day over the ceiling."""

from __future__ import annotations

from write_corpus import CASES, answer, check

from pytest_groundeval.scorers.write import score_write

CASE = "allopurinol-three-tablets"


def _dose(resource):
    return resource["dosage"][0]["doseAndRate"][0]["doseQuantity"]


def test_a_wrong_dose_is_not_blamed_twice():
    """Dose off by a little (still under the ceiling): the dose check fails; the daily total
    does not add "implied daily != documented", the dose check already says why."""
    resource = answer(CASE)
    _dose(resource)["value"] = _dose(resource)["value"] + 1
    score = score_write(resource, CASES[CASE])
    assert not check(score, "safety", "dosage[0].doseAndRate[0]").passed
    total = check(score, "safety", "daily_total")
    assert total.passed and "<= ceiling" in total.reason, total.reason


def test_a_right_dose_on_a_wrong_day_is_named_by_the_total():
    """Right dose, two dosages each at the documented frequency: every dose and timing check
    passes, and the daily total says the day is twice the documented one."""
    resource = answer(CASE)
    resource["dosage"].append(resource["dosage"][0])
    score = score_write(resource, CASES[CASE])
    total = check(score, "safety", "daily_total")
    assert not total.passed and "!= documented" in total.reason and "2 dosages taken together" in total.reason


def test_over_the_ceiling_is_named_by_the_total():
    resource = answer(CASE)
    _dose(resource)["value"] = 100000
    score = score_write(resource, CASES[CASE])
    total = check(score, "safety", "daily_total")
    assert not total.passed and "> ceiling" in total.reason, total.reason
