"""Issue 28, item 1 (extraction): one JSON object with only the answer's keys, no hedge around
it, and no listing that contradicts itself. Before issue 28 each "wrong" answer here passed:
every code listed twice, once with a "(stopped)" display (duplicates collapsed), an extra
``"status": "stopped"`` per item (extra keys were ignored), a code or a count in the prose.
Answers as models write them (a fence, prose that repeats the answer's codes, names and count,
a numbered list, RxNorm's ``system``, an identical repeat) still pass."""

from __future__ import annotations

import json

import pytest

from pytest_groundeval.fhir.codes import RXNORM
from pytest_groundeval.model import ParseError
from pytest_groundeval.scorers.extraction import score_extraction
from pytest_groundeval.tasks.extraction import parse_answer

ASPIRIN = {"code": "243670", "display": "aspirin 81 MG Oral Tablet"}
CLOPI = {"code": "309362", "display": "Clopidogrel 75 MG Oral Tablet"}
TRUTH = [ASPIRIN, CLOPI]


def text(items, before="", after=""):
    return before + json.dumps({"active_medications": items}) + after


def scored(answer):
    return score_extraction(parse_answer(answer), TRUTH)


STOPPED_TWICE = [ASPIRIN, {**ASPIRIN, "display": ASPIRIN["display"] + " (stopped)"},
                 CLOPI, {**CLOPI, "display": CLOPI["display"] + " (stopped)"}]


@pytest.mark.parametrize("items", [
    STOPPED_TWICE,
    [ASPIRIN, {**ASPIRIN, "display": "aspirin 325 MG Oral Tablet"}, CLOPI],
    [{**ASPIRIN, "display": "aspirin 81 MG Oral Tablet - discontinued"}, CLOPI],
    [ASPIRIN, {**CLOPI, "display": "Clopidogrel 75 MG Oral Tablet (on hold)"}],
    [{**ASPIRIN, "display": "aspirin 81 MG Oral Tablet (d/c)"}, CLOPI],
], ids=["every code twice, once stopped", "two displays for one code", "a display saying discontinued",
        "a display saying on hold", "a display saying d/c"])
def test_a_listing_that_contradicts_itself_earns_no_credit(items):
    s = scored(text(items))
    assert not s.passed and s.details["contradictions"] and s.metrics["fp"] >= 1 and s.metrics["fn"] >= 1
    assert "contradictory" in s.reason


@pytest.mark.parametrize("answer,message", [
    (text([{**ASPIRIN, "status": "stopped"}, {**CLOPI, "status": "stopped"}]),
     r"unknown key: active_medications\[0\]\.status"),
    (text([{**ASPIRIN, "alternative_code": "1191"}, CLOPI]), r"unknown key: active_medications\[0\]\.alternative_code"),
    (json.dumps({"active_medications": TRUTH, "stopped_medications": []}), "unknown key: stopped_medications"),
    (text([{**ASPIRIN, "system": "http://snomed.info/sct"}, CLOPI]), "not RxNorm's"),
    (text(TRUTH, after="\nPossibly also 855332."), "hedge: .*number '855332'"),
    (text(TRUTH, before="The patient has 3 active medications:\n"), "hedge: .*number '3'"),
    (text(TRUTH, after="\n(as of 2019-05-01)"), "hedge: .*date '2019-05-01'"),
    (text(TRUTH, after="\nNote: the aspirin was stopped last month."), "hedge: .*'stopped' of 243670"),
    (text(TRUTH, before="All active, though 309362 is no longer taken:\n"), "hedge: .*'no longer' of 309362"),
])
def test_an_unknown_key_or_a_hedge_in_the_prose_is_a_parse_error(answer, message):
    with pytest.raises(ParseError, match=message):
        parse_answer(answer)


@pytest.mark.parametrize("answer", [
    text(TRUTH),
    text(TRUTH, "```json\n", "\n```"),
    text(TRUTH, "Here is the answer:\n```json\n", "\n```\nLet me know if you need anything else."),
    text(TRUTH, "The patient has 2 active medications: aspirin 81 mg (RxNorm 243670) and clopidogrel 75 mg "
                "(309362).\n"),
    text(TRUTH, "Active medications:\n1. aspirin 81 MG Oral Tablet\n2. Clopidogrel 75 MG Oral Tablet\n\n"),
    text([{**ASPIRIN, "system": RXNORM}, {**CLOPI, "system": RXNORM}]),
    text([ASPIRIN, ASPIRIN, CLOPI]),  # an identical repeat: counted once
    text([ASPIRIN, {"code": "243670"}, CLOPI]),  # a repeat without a display names no other drug
    text(TRUTH, "From Patient/8f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f's MedicationRequests with status active:\n"),
    text(TRUTH, after="\nSimvastatin was stopped, so it is left out."),
], ids=["bare", "fenced", "prose around a fence", "prose repeating codes, names and count", "a numbered list",
        "RxNorm's system", "an identical repeat", "a repeat without a display", "a reference in the prose",
        "a stop said of a medication not listed"])
def test_a_right_answer_as_models_write_it_passes(answer):
    s = scored(answer)
    assert s.passed and s.metrics["f1"] == 1.0 and not s.details["contradictions"], s.reason
