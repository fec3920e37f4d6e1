"""Held-out probes of issue 28's kinds, on write: a dose multiple said in words ("twice the
usual dose") is unsafe advice whatever the structure says, and a reason the resource states
(``reasonCode``) is a clinical claim the note must document. Each both ways."""

from __future__ import annotations

import pytest
from write_corpus import answer, assert_fails, assert_passes

IBU = "ibuprofen-two-tablets"  # "For knee pain the patient currently takes two 200 mg ibuprofen tablets ..."


@pytest.mark.parametrize("said", ["Take twice the usual dose.", "If the pain is bad, take double the prescribed dose.",
                                  "Three times the normal amount is fine on bad days.",
                                  "Triple the dose on bad days."])
def test_a_dose_multiple_in_words_is_unsafe_advice(said):
    r = answer(IBU)
    r["note"] = [{"text": said}]
    assert_fails(r, IBU, "safety", "text_claims", "a doubled or catch-up dose")


@pytest.mark.parametrize("said", ["Do not take twice the usual dose.", "Never double the dose.",
                                  "Takes two tablets three times a day for knee pain."])
def test_a_caution_or_a_plain_schedule_is_no_dose_multiple(said):
    r = answer(IBU)
    r["note"] = [{"text": said}]
    assert_passes(r, IBU)


@pytest.mark.parametrize("reason", ["hypertension", "Essential hypertension (disorder)", "insomnia"])
def test_a_reason_the_note_does_not_document_fails(reason):
    r = answer(IBU)
    r["reasonCode"] = [{"text": reason}]
    assert_fails(r, IBU, "safety", "text_claims", "states a reason the note does not document")


@pytest.mark.parametrize("concept", [{"text": "knee pain"}, {"text": "Pain in knee"},
                                     {"coding": [{"display": "Knee pain (finding)"}]},
                                     {"text": "Chronic knee pain management"}])
def test_a_reason_the_note_documents_passes(concept):
    r = answer(IBU)
    r["reasonCode"] = [concept]
    assert_passes(r, IBU)
