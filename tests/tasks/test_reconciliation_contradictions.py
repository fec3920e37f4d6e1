"""Issue 28 (reconciliation): an item whose answer contradicts itself earns nothing, with the
rules extraction uses (``scorers/extraction.py``, shared, not copied). Before, each wrong answer
here passed: a right code under another drug's name ("Plavix"), every item listed twice, once
"(stopped)", prose saying a listed active medication was stopped, and prose giving an item
another verdict ("Though Simvastatin 20 MG Oral Tablet could also be "matched"."). Answers as
models write them (other letter case, a brand of the same product, a summary that repeats
each item's own verdict, "stopped" said of an item the answer calls stopped-but-taking, a
remark that the patient stopped taking an unreported one) pass."""

from __future__ import annotations

import json

import pytest

from pytest_groundeval.model import ParseError
from pytest_groundeval.scorers.reconciliation import score_reconciliation
from pytest_groundeval.tasks.reconciliation import parse_answer

SIMVA = {"code": "312961", "display": "Simvastatin 20 MG Oral Tablet", "verdict": "matched"}
AMLO = {"code": "197361", "display": "Amlodipine 5 MG Oral Tablet", "verdict": "unreported"}
DIGOXIN = {"code": "197604", "display": "Digoxin 0.125 MG Oral Tablet", "verdict": "stopped-but-taking"}
NITRO = {"code": "705129", "display": "Nitroglycerin 0.4 MG/ACTUAT Mucosal Spray", "verdict": "unrecorded"}
TRUTH = [SIMVA, AMLO, DIGOXIN, NITRO]


def answer(items=TRUTH, after=""):
    return json.dumps({"medications": items}) + after


def scored(text):
    return score_reconciliation(parse_answer(text), TRUTH)


# ---- a display must denote its code
@pytest.mark.parametrize("display,why", [("Plavix", "names plavix"), ("Simvastatin 40 MG Oral Tablet", "states 40 mg"),
                                         ("cholesterol pill", "unverifiable"), ("Zocor / Lipitor", "names lipitor")])
def test_a_right_code_under_a_display_not_its_own_fails_the_item(display, why):
    s = scored(answer([{**SIMVA, "display": display}, AMLO, DIGOXIN, NITRO]))
    assert not s.passed and s.metrics["matched_tp"] == 0 and s.metrics["matched_fn"] == 1
    assert why in s.details["faults"]["312961"] and "no credit for 312961" in s.reason


@pytest.mark.parametrize("display", ["simvastatin 20 mg oral tablet", "SIMVASTATIN 20 MG ORAL TABLET", "Zocor",
                                     "simvastatin", "Simvastatin 20mg tab", None])
def test_a_display_naming_the_same_product_passes(display):
    assert scored(answer([{**SIMVA, "display": display}, AMLO, DIGOXIN, NITRO])).passed


# ---- an item listed twice, once "(stopped)"
def test_an_item_listed_again_as_stopped_fails():
    items = [SIMVA, {**SIMVA, "display": SIMVA["display"] + " (stopped)"}, AMLO, DIGOXIN, NITRO]
    s = scored(answer(items))
    assert not s.passed and s.metrics["matched_tp"] == 0 and "312961" in s.details["faults"]


@pytest.mark.parametrize("item", [AMLO, NITRO])
def test_a_stopped_display_on_an_item_said_to_be_taken_or_active_fails(item):
    s = scored(answer([{**t, "display": t["display"] + " (discontinued)"} if t is item else t for t in TRUTH]))
    assert not s.passed and item["code"] in s.details["faults"]


def test_stopped_said_in_the_display_of_a_stopped_but_taking_item_passes():
    assert scored(answer([SIMVA, AMLO, {**DIGOXIN, "display": DIGOXIN["display"] + " (stopped)"}, NITRO])).passed


# ---- prose saying a listed item taken or active was stopped
@pytest.mark.parametrize("prose", [
    "\n\nNote: Simvastatin 20 MG Oral Tablet was stopped last month.",
    "\n\nNote: Amlodipine 5 MG Oral Tablet was stopped last month.",
    "\nThe nitroglycerin spray was discontinued.",
    "\nAmlodipine's order is no longer active.",
    "\nDigoxin is stopped-but-taking and simvastatin was stopped too.",
])
def test_prose_saying_an_item_taken_or_active_was_stopped_is_a_hedge(prose):
    with pytest.raises(ParseError, match="which the answer lists as active"):
        parse_answer(answer(after=prose))


@pytest.mark.parametrize("prose", [
    "\n\nDigoxin 0.125 MG Oral Tablet was stopped in the record, yet the patient still takes it.",
    "\nThe patient stopped taking amlodipine, though the order is open.",
    "\nAtorvastatin was discontinued earlier, so it is not listed.",
    "\nSimvastatin is matched and digoxin was stopped in the record.",
])
def test_prose_on_a_stopped_order_or_the_patients_taking_passes(prose):
    assert scored(answer(after=prose)).passed


# ---- prose giving an item another verdict
@pytest.mark.parametrize("prose", [
    "\n\nThough Simvastatin 20 MG Oral Tablet could also be \"matched\".".replace("matched", "unreported"),
    "\n\nThough Amlodipine 5 MG Oral Tablet could also be \"matched\".",
    "\nNitroglycerin might rather be stopped-but-taking.",
    "\nAlternatively unrecorded: digoxin.",
    "\nRxNorm 312961 may be unrecorded.",
    "\nSimvastatin: matched, or possibly unreported.",
    "\nThe nitroglycerin could be stopped but still taking.",
])
def test_prose_giving_an_item_another_verdict_is_a_hedge(prose):
    with pytest.raises(ParseError, match="which the answer calls"):
        parse_answer(answer(after=prose))


@pytest.mark.parametrize("prose", [
    "\n\n" + " ".join(f"{t['display']} (RxNorm {t['code']}) is {t['verdict']}." for t in TRUTH),
    "\nSimvastatin is matched, while amlodipine is unreported.",
    "\nSummary: 1 matched (simvastatin, 312961), 1 unreported (amlodipine, 197361) and 1 stopped but taking "
    "(digoxin).",
    "\nNothing here is unrecorded except the nitroglycerin spray.",
    "\nDigoxin was stopped in the record but the patient is still taking it: stopped but still taking.",
])
def test_prose_repeating_each_items_own_verdict_passes(prose):
    assert scored(answer(after=prose)).passed
