"""A stopped MedicationRequest whose added note or status reason says the drug goes on
("Patient to carry on with this medication as before", "keep taking it", "remains on it")
fails ``correct`` (``text_agrees_with_status``); words that agree with the stop, and the same
verbs negated or about something else, pass (issue 28, orders: the "goes on" words are
``sig.GOES_ON``, shared with the write scorer's status claims)."""

from __future__ import annotations

import pytest

from test_orders_scorer import STOP
from test_orders_text import RULE, _score, _stop

GOES_ON = [
    "Patient to carry on with this medication as before.",
    "Carry on taking it.",
    "Keep taking this medication.",
    "Patient remains on this medication.",
    "Still taking it daily.",
    "Continue this medication.",
    "Do not stop this medication.",
    "Currently on it; continue as before.",
    "Continue.",
    "Patient takes this medication every day.",
    "Patient has been taking it without problems.",
]


@pytest.mark.parametrize("said", GOES_ON)
@pytest.mark.parametrize("where", ["note", "statusReason"])
def test_a_stop_whose_words_say_it_goes_on_fails_correct(where, said):
    over = {"note": [{"text": said}]} if where == "note" else {"statusReason": {"text": said}}
    score = _score(STOP, _stop(**over))
    assert {k for k, d in score.dimensions.items() if not d.passed} == {"correct"}, score.reason
    assert RULE in score.reason, score.reason


@pytest.mark.parametrize("over", [
    {"note": [{"text": "Stopped per the clinic note; do not carry on with this medication."}]},
    {"statusReason": {"text": "No longer needed: the patient should not keep taking it."}},
    {"note": [{"text": "Stopped. Carry on with the other medications as before."}]},  # other drugs go on
    {"statusReason": {"text": "Discontinued because of a persistent cough"}},
    {"note": [{"text": "Stopped; the patient took it for two years. Patient takes the other medications as before."}]},
])
def test_words_that_agree_with_the_stop_pass(over):
    score = _score(STOP, _stop(**over))
    assert score.passed, score.reason
