"""Past-tense reports of a stop against the instruction to stop (scorers/letter.py). "Stop
taking", "we have stopped", "has been stopped", "we stopped" tell the patient the drug is
stopped now (the instruction); "was stopped" / "had been stopped" / "stopped last year" tell
them what happened once: a patient still taking the drug is not told to stop, so it earns no
``stance``, but said of a drug that must continue it still counts against it. "You stopped" /
"you may have stopped" / "if you have stopped" report the patient's own doing: no instruction
either way. Both directions."""

from __future__ import annotations

import pytest
from test_letter_scorer import GOOD, failed

STOP = "Stop taking galantamine: your record shows it was stopped."
UNREPORTED = "Simvastatin is on your list, but you did not mention it, so please check with your doctor."


# the stopped drug the patient still takes: a history of the stop is not the instruction to stop
@pytest.mark.parametrize("said", [
    "Your record shows galantamine was stopped.",
    "Galantamine was stopped last year.",
    "Galantamine had been stopped before your visit.",
    "Your galantamine was discontinued in 2019.",
    "Your doctor stopped galantamine two years ago.",
    "Your doctor stopped galantamine.",
    "The hospital stopped your galantamine.",
    "You have stopped galantamine.",  # not true: the patient still takes it
])
def test_a_report_of_a_past_stop_earns_no_stance(said):
    assert "stance" in failed(GOOD.replace(STOP, said)), said


@pytest.mark.parametrize("said", [
    "Stop taking galantamine.",
    "We have stopped galantamine, so please do not take it any more.",
    "We have stopped your galantamine.",
    "We stopped galantamine today.",
    "Galantamine has been stopped.",
    "Your doctor has stopped galantamine.",
    "Galantamine is now stopped.",
    "Galantamine was stopped today, at this visit.",
    "Galantamine was stopped last year, so please stop taking it.",
    "Galantamine: stopped.",
])
def test_an_instruction_or_a_decision_earns_stop(said):
    assert failed(GOOD.replace(STOP, said)) == {}, (said, failed(GOOD.replace(STOP, said)))


# a drug that must continue: told it was stopped counts against it, however the stop is told
@pytest.mark.parametrize("said", [
    "Amlodipine was stopped last year.",
    "Amlodipine has been stopped.",
    "We stopped amlodipine.",
    "Your amlodipine was discontinued.",
])
def test_a_stop_reported_of_a_drug_that_must_continue_counts_against(said):
    bad = failed(GOOD.replace("every day.", f"every day. {said}"))
    assert "no_contradiction" in bad, said


# the patient's own doing: the unreported drug the patient may have stopped
@pytest.mark.parametrize("said", [
    "Simvastatin is on your list, but you did not mention it. You may have stopped it. Please ask your doctor about it.",
    "Simvastatin is on your list. Please check it with your doctor, even if you have stopped it.",
    "Simvastatin is on your list. If you have stopped simvastatin, tell your doctor. Please ask your doctor about it.",
    "Simvastatin is on your list, but you have stopped it, so please check with your doctor.",
    "You stopped simvastatin some time ago; please check with your doctor whether to restart it.",
])
def test_what_the_patient_stopped_is_no_instruction(said):
    assert failed(GOOD.replace(UNREPORTED, said)) == {}, (said, failed(GOOD.replace(UNREPORTED, said)))


def test_a_report_of_the_patient_is_no_instruction_to_keep_it_either():
    """'You stopped it' does not rescue a stop told to a drug that must continue."""
    bad = failed(GOOD.replace(UNREPORTED, "You stopped simvastatin, so stop taking it and check with your doctor."))
    assert "no_contradiction" in bad


@pytest.mark.parametrize("said", [
    "Make sure you have stopped amlodipine by Monday.",
    "Please ensure you have stopped amlodipine.",
    "Be sure you've stopped amlodipine before the scan.",
])
def test_making_sure_the_patient_stopped_is_an_instruction(said):
    assert "no_contradiction" in failed(GOOD.replace("every day.", f"every day. {said}")), said


@pytest.mark.parametrize("said", [
    "Simvastatin is on your list, but you said you do not take it. Please check with your doctor about it.",
    "Simvastatin is on your list, but you don't take it, so please check with your doctor.",
    "Simvastatin is on your list, but you have not been taking it; please ask your doctor about it.",
])
def test_what_the_patient_does_not_take_is_a_report(said):
    assert failed(GOOD.replace(UNREPORTED, said)) == {}, (said, failed(GOOD.replace(UNREPORTED, said)))


def test_making_sure_the_patient_does_not_take_it_is_an_instruction():
    assert "no_contradiction" in failed(GOOD.replace("every day.", "every day. Make sure you do not take amlodipine."))
    assert failed(GOOD.replace(STOP, "Please make sure you don't take galantamine any more.")) == {}


def test_a_report_under_a_heading_takes_the_heading_s_instruction():
    letter = ("Keep taking:\n- Amlodipine 5 mg\n\nStop taking:\n- Galantamine 4 mg\n\n"
              "Please check these with your doctor:\n- Simvastatin 20 mg: you told us you stopped it.\n"
              "- Naproxen 220 mg: you said you do not take it every day.\n\nCall us with any questions.")
    assert failed(letter) == {}, failed(letter)
