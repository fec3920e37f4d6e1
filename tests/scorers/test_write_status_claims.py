"""A free text that says the drug is taken now ("Patient takes this medication every day",
"continues", "carry on with it") on a statement whose status is not active fails
``constraints`` (``text_claims``); an instruction ("Take 1 tablet daily"), a past ("was
taking"), a negation ("no longer takes") and the same words on an active statement pass
(issue 28, write: ``sig.status_claims``)."""

from __future__ import annotations

import pytest

from test_write_other_drugs import FREE_TEXTS, _put
from write_corpus import assert_fails, assert_passes

NOW = [
    "Patient takes this medication every day.",
    "She is taking it as prescribed.",
    "Patient to carry on with this medication as before.",
    "Keeps taking it daily.",
    "Still on it.",
    "Currently on this medication.",
    "Do not stop this medication.",
    "Continue as before.",
    "Patient is on this medication.",
    "Has been taking it for years.",
    "Resumed last week.",
]


@pytest.mark.parametrize("where", FREE_TEXTS)
@pytest.mark.parametrize("case_id", ["lisinopril-stopped-cough", "amoxicillin-completed-course",
                                     "clopidogrel-on-hold-surgery", "losartan-intended-next-week"])
def test_taken_now_on_a_statement_not_active_fails(where, case_id):
    said = "The patient takes this medication."
    assert_fails(_put(case_id, where, said), case_id, "constraints", "text_claims", "but the status is")


@pytest.mark.parametrize("said", NOW)
def test_each_way_of_saying_taken_now_fails_on_a_stopped_statement(said):
    assert_fails(_put("lisinopril-stopped-cough", "note", said), "lisinopril-stopped-cough", "constraints",
                 "text_claims", "(active) but the status is 'stopped'")


@pytest.mark.parametrize("case_id,where,said", [
    ("lisinopril-stopped-cough", "note", "Patient no longer takes lisinopril because of a dry cough."),
    ("lisinopril-stopped-cough", "note", "Was taking 10 mg once daily; stopped last month."),
    ("lisinopril-stopped-cough", "dosage.text", "Take 1 tablet by mouth once daily"),  # the regimen as it was
    ("clopidogrel-on-hold-surgery", "note", "Still on hold until after the knee replacement."),
    ("clopidogrel-on-hold-surgery", "note", "Has been on hold since the pre-op visit."),
    ("metformin-ir-held-contrast", "note", "On hold since the contrast CT; restart in 48 hours if creatinine is stable."),
    ("ibuprofen-denied", "note", "Patient does not take ibuprofen."),
    ("lisinopril-stopped-cough", "note", "Stopped for cough; continue if the cough settles and BP rises."),
    ("lisinopril-stopped-cough", "note", "Stopped. Patient to stop by the clinic next week."),
    ("aspirin-active-daily", "note", "Patient takes this medication every day."),
    ("aspirin-active-daily", "text.div", "Continues aspirin 81 mg daily; carry on as before."),
])
def test_natural_status_words_pass(case_id, where, said):
    assert_passes(_put(case_id, where, said), case_id)
