"""Issue 28, item 1 (labs): an answer is one JSON object with only the answer's keys, and the
text around it may repeat what the object states and nothing else. A second value, another
date or the opposite flag in the prose is a hedge and fails the dimension it contradicts; an
unknown key (``alternative_value``) fails the parse with ``unknown key: <k>``. Answers as models
write them (a fence, prose before and after that repeats the answer's own values, the question's
own vocabulary and dates) still pass. Before issue 28 every "wrong" text here passed."""

from __future__ import annotations

import json

import pytest

from pytest_groundeval.model import ParseError
from pytest_groundeval.scorers.labs import score_labs
from pytest_groundeval.tasks.labs import parse_answer

from test_labs_scorer import (A1C_TRUTH, BP, BP_RIGHT, EGFR, E_RIGHT, GLUCOSE, G_RIGHT, ONLY_LATER,
                                            RIGHT, STALE)

J = json.dumps(RIGHT)  # HbA1c 6.8 % on 2019-02-01, flag true (>= 6.5 %); today 2019-03-01
FENCED = f"```json\n{J}\n```"

# (name, truth, text, the dimension the hedge fails)
WRONG = [
    ("a second value after the JSON", A1C_TRUTH, J + "\nIt may also be read as 7.4 %.", "value"),
    ("a second value before the JSON", A1C_TRUTH, "Either 6.8 or 7.4 %:\n" + FENCED, "value"),
    ("the earlier result as an alternative", A1C_TRUTH, FENCED + "\n(The result of 5.9 % may be the one meant.)",
     "value"),
    ("the opposite flag as a word", A1C_TRUTH, FENCED + "\nflag: false if the lab rounds down.", "flag"),
    ("the opposite flag as an answer word", A1C_TRUTH, "No, it is not.\n" + FENCED, "flag"),
    ("another date", A1C_TRUTH, FENCED + "\nOr the one of 2019-06-01, if that counts.", "date"),
    ("another date written out", A1C_TRUTH, FENCED + "\nOr June 1, 2019.", "date"),
    ("a second blood pressure", BP, json.dumps(BP_RIGHT) + "\nA repeat reading gave 150/95.", "value"),
    ("a flag word on a latest question", GLUCOSE, json.dumps(G_RIGHT) + "\nHigh: true", "value"),
    ("an abstention with a value beside it", ONLY_LATER, '{"no_result": true}\nThe latest was 7.4 %.',
     "abstention"),
    ("an abstention with a date beside it", STALE, 'None in the window (the last was on 2019-02-01).\n'
     '{"no_result": true}', "abstention"),
    ("a change with another decline", EGFR, json.dumps(E_RIGHT) + "\nA decline of 20 %, or 31 %.", "value"),
]


@pytest.mark.parametrize("name,truth,text,dim", WRONG, ids=[w[0] for w in WRONG])
def test_a_hedge_in_the_prose_fails_the_dimension_it_contradicts(name, truth, text, dim):
    score = score_labs(parse_answer(text), truth)
    assert not score.passed and not score.dimensions[dim].passed, (name, score.reason)
    assert "which the answer does not" in score.dimensions[dim].reason


@pytest.mark.parametrize("obj", [
    {**RIGHT, "alternative_value": 7.4}, {**RIGHT, "explanation": "latest before today"},
    {**RIGHT, "status": "final"}, {"no_result": True, "reason": "none in the window"},
])
def test_an_unknown_key_fails_the_parse(obj):
    extra = next(k for k in obj if k not in RIGHT and k != "no_result")
    with pytest.raises(ParseError, match=f"unknown key: {extra}"):
        parse_answer(json.dumps(obj))


# (name, truth, text): right answers as models write them
RIGHT_TEXTS = [
    ("bare", A1C_TRUTH, J),
    ("in a json fence", A1C_TRUTH, FENCED),
    ("after 'Here is the answer:'", A1C_TRUTH, "Here is the answer:\n" + FENCED),
    ("prose repeating the values", A1C_TRUTH, "The latest HbA1c is 6.8 % (2019-02-01), at or above 6.5 %.\n" + J),
    ("the record's own value and dateTime", A1C_TRUTH,
     "Observation/a2 reads 6.83 % on 2019-02-01T08:30:00+00:00.\n" + FENCED),
    ("a trailing sentence without numbers", A1C_TRUTH, FENCED + "\nLet me know if you need anything else."),
    ("the question's vocabulary and today", A1C_TRUTH,
     "As of today (2019-03-01), the most recent hemoglobin A1c (LOINC 4548-4) for Patient/p1 is 6.8 %.\n" + J),
    ("yes, and the flag as a word", A1C_TRUTH, "Yes. The flag is true: 6.8 % >= 6.5 %.\n" + FENCED),
    ("a date written out", A1C_TRUTH, "Measured on February 1, 2019 (1 Feb 2019, 02/01/2019).\n" + J),
    ("a numbered list of steps", A1C_TRUTH, "1. Searched the Observations.\n2. Took the latest before today.\n" + J),
    ("blood pressure", BP, "142/85 mm[Hg] on 2019-01-05, at or above 140/90.\n" + json.dumps(BP_RIGHT)),
    ("a change with its decline", EGFR, "eGFR fell from 80 to 55 mL/min/{1.73_m2} (2017-05-01 to 2019-01-15): "
     "a 31 % decline (31.3 %), more than 25 % over 2 years (24 months).\n" + json.dumps(E_RIGHT)),
    ("a change computed from the record's values", EGFR, "Baseline 80.2 on 2017-05-01, latest 55.4 on 2019-01-15: "
     "a decline of 30.9 % (24.8 points).\n" + json.dumps(E_RIGHT)),
    ("an abstention said in words", ONLY_LATER, "There is no result as of today.\n```json\n{\"no_result\": true}\n```"),
    ("an abstention in a 12-month window", STALE, "No HbA1c in the 12 months up to 2019-03-05 (since 2019-02-05).\n"
     '{"no_result": true}'),
]


@pytest.mark.parametrize("name,truth,text", RIGHT_TEXTS, ids=[r[0] for r in RIGHT_TEXTS])
def test_a_right_answer_as_models_write_it_passes(name, truth, text):
    pred = parse_answer(text)
    score = score_labs(pred, truth)
    assert score.passed, (name, score.reason, pred["hedges"])
