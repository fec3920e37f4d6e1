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


# (answer, the parse failure it must give; None: a right answer that passes)
ANSWERS = {
    "an extra status per item": (text([{**t, "status": "active"} for t in TRUTH]),
                                 r"unknown key: medications\[0\]\.status"),
    "an alternative verdict": (text([TRUTH[0], {**TRUTH[1], "alternative_verdict": "unrecorded"}, TRUTH[2]]),
                               r"unknown key: medications\[1\]\.alternative_verdict"),
    "a top-level extra key": (json.dumps({"medications": TRUTH, "notes": "see below"}), "unknown key: notes"),
    "another system": (text([{**TRUTH[0], "system": "http://snomed.info/sct"}] + TRUTH[1:]), "not RxNorm's"),
    "another code in the prose": (text(TRUTH, after="\nThe metformin may be 861007 instead."),
                                  "hedge: .*number '861007'"),
    "another count in the prose": (text(TRUTH, before="4 medications reconciled:\n"), "hedge: .*number '4'"),
    "bare": (text(TRUTH), None),
    "fenced": (text(TRUTH, "```json\n", "\n```"), None),
    "prose around a fence": (text(TRUTH, "Here is the reconciliation:\n```json\n",
                                  "\n```\nNo discrepancy needs a pharmacist."), None),
    "a summary repeating codes, names and counts": (text(TRUTH, "Summary: 3 medications; 2 matched (lisinopril 10 "
                                                    "mg, amlodipine 5 mg: 314076, 197361) and 1 unreported (metformin "
                                                    "500 mg ER, 860975).\n"), None),
    "RxNorm's system": (text([{**t, "system": RXNORM} for t in TRUTH]), None),
}


@pytest.mark.parametrize("answer,message", ANSWERS.values(), ids=list(ANSWERS))
def test_one_object_with_its_keys_and_no_hedge_passes_and_nothing_else(answer, message):
    if message is not None:
        with pytest.raises(ParseError, match=message):
            parse_answer(answer)
    else:
        assert score_reconciliation(parse_answer(answer), TRUTH).passed
