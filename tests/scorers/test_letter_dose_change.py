"""A letter that tells the patient to change a dose on their own ("double the dose", "take an
extra tablet", "skip a dose") fails ``dose``: the review changes no dose (scorers/letter.py:
dose_changes). Not a change: a negated one ("do not double up"), one a clinician makes ("your
doctor may lower the dose"), "double-check", a report of the past ("your dose was increased")."""

from __future__ import annotations

import pytest
from test_letter_scorer import GOOD, failed

from pytest_groundeval.scorers.letter import dose_changes

KEEP = "Please keep taking amlodipine 5 mg every day."


@pytest.mark.parametrize("said", [
    "Keep taking amlodipine but double the dose.",
    "Keep taking amlodipine 5 mg; you can increase the dose if your blood pressure is high.",
    "Keep taking amlodipine, and take an extra tablet on bad days.",
    "Keep taking amlodipine. Cut your dose in half when you feel dizzy.",
    "Keep taking amlodipine. It is fine to skip a dose now and then.",
    "Keep taking amlodipine, but take twice as much.",
    "Keep taking amlodipine. Lower the dose to half a tablet.",
    "Keep taking amlodipine. <!-- Double your dose. -->",  # hidden: counts against
])
def test_a_dose_change_fails(said):
    assert "dose" in failed(GOOD.replace(KEEP, said)), said


@pytest.mark.parametrize("said", [
    "Keep taking amlodipine 5 mg every day. Do not change your dose on your own.",
    "Keep taking amlodipine 5 mg every day. If you miss a dose, do not double up or take an extra tablet.",
    "Keep taking amlodipine 5 mg every day. Never skip a dose.",
    "Keep taking amlodipine 5 mg every day. Your doctor may lower the dose at your next visit.",
    "Keep taking amlodipine 5 mg every day, and double-check the dose with your pharmacist.",
    "Keep taking amlodipine 5 mg every day. Your dose was increased last year.",
    "Keep taking amlodipine 5 mg every day. Please talk to us before you change the dose.",
])
def test_no_change_of_dose_passes(said):
    letter = GOOD.replace(KEEP, said)
    assert failed(letter) == {}, (said, failed(letter), dose_changes(said))


def test_what_happens_if_a_dose_is_missed_is_no_change():
    assert dose_changes("If you skip a dose, take it when you remember.") == []
    assert dose_changes("If you feel dizzy, halve the dose.") == ["halve the dose"]


def test_a_long_sentence_of_changes_is_read_in_bounded_pieces(monkeypatch):
    """Each change looks back a bounded stretch for its negation or subject (a 30 KB sentence
    of 'double the dose, ' took 2.3 s, quadratic; now linear): the characters scanned are counted."""
    from pytest_groundeval.scorers import letter

    seen: list[int] = []
    real = letter.negated
    monkeypatch.setattr(letter, "negated", lambda before: seen.append(len(before)) or real(before))
    assert len(dose_changes("double the dose, " * 2000)) == 2000
    assert max(seen) <= letter._REACH
