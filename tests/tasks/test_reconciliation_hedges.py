"""Issue 28, item 1 (reconciliation): one JSON object with only the answer's keys and no hedge
in the text around it. An extra key (``"status"``, ``"alternative_verdict"``) used to be
ignored, and a code or a count in the prose was never read; each is now a parse failure naming
it. Answers as models write them (a fence, a summary that repeats the answer's codes, names and
counts per verdict, RxNorm's ``system``) still pass."""

from __future__ import annotations

import json

import pytest

from pytest_groundeval.fhir.codes import RXNORM
from pytest_groundeval.model import ParseError
from pytest_groundeval.scorers.reconciliation import score_reconciliation
from pytest_groundeval.tasks.reconciliation import parse_answer

TRUTH = [{"code": "314076", "display": "lisinopril 10 MG Oral Tablet", "verdict": "matched"},
         {"code": "197361", "display": "amlodipine 5 MG Oral Tablet", "verdict": "matched"},
         {"code": "860975", "display": "24 HR metformin hydrochloride 500 MG Extended Release Oral Tablet",
          "verdict": "unreported"}]


def text(items, before="", after=""):
    return before + json.dumps({"medications": items}) + after


@pytest.mark.parametrize("answer,message", [
    (text([{**t, "status": "active"} for t in TRUTH]), r"unknown key: medications\[0\]\.status"),
    (text([TRUTH[0], {**TRUTH[1], "alternative_verdict": "unrecorded"}, TRUTH[2]]),
     r"unknown key: medications\[1\]\.alternative_verdict"),
    (json.dumps({"medications": TRUTH, "notes": "see below"}), "unknown key: notes"),
    (text([{**TRUTH[0], "system": "http://snomed.info/sct"}] + TRUTH[1:]), "not RxNorm's"),
    (text(TRUTH, after="\nThe metformin may be 861007 instead."), "hedge: .*number '861007'"),
    (text(TRUTH, before="4 medications reconciled:\n"), "hedge: .*number '4'"),
])
def test_an_unknown_key_or_a_hedge_in_the_prose_is_a_parse_error(answer, message):
    with pytest.raises(ParseError, match=message):
        parse_answer(answer)


@pytest.mark.parametrize("answer", [
    text(TRUTH),
    text(TRUTH, "```json\n", "\n```"),
    text(TRUTH, "Here is the reconciliation:\n```json\n", "\n```\nNo discrepancy needs a pharmacist."),
    text(TRUTH, "Summary: 3 medications; 2 matched (lisinopril 10 mg, amlodipine 5 mg: 314076, 197361) and 1 "
                "unreported (metformin 500 mg ER, 860975).\n"),
    text([{**t, "system": RXNORM} for t in TRUTH]),
], ids=["bare", "fenced", "prose around a fence", "a summary repeating codes, names and counts", "RxNorm's system"])
def test_a_right_answer_as_models_write_it_passes(answer):
    s = score_reconciliation(parse_answer(answer), TRUTH)
    assert s.passed, s.reason
