"""A drug named only to be left out of an instruction ("Keep taking everything except
galantamine", "Keep taking amlodipine but not galantamine", "... instead of galantamine") gets
the opposite of that instruction, not the instruction (scorers/letter.py). Both directions: the
stopped drug exempted from "stop everything" is told to keep taking it (it passed as a stop), and
the right letter in this form passes (it failed no_contradiction)."""

from __future__ import annotations

import pytest
from test_letter_scorer import GOOD, TRUTH, failed

from pytest_groundeval.scorers.letter import read_letter

STOP = "Stop taking galantamine: your record shows it was stopped."
KEEP = "Please keep taking amlodipine 5 mg every day."


@pytest.mark.parametrize("text, amlodipine, galantamine", [
    ("Keep taking amlodipine but not galantamine.", {"continue"}, {"stop"}),
    ("Keep taking amlodipine, not galantamine.", {"continue"}, {"stop"}),
    ("Continue amlodipine (not galantamine).", {"continue"}, {"stop"}),
    ("Keep taking everything except galantamine.", set(), {"stop"}),
    # "all your medicines" names every medicine of the review (the held-out "stop all your
    # medicines" probe): amlodipine is kept by it, galantamine excepted
    ("Keep taking all your medicines except for galantamine.", {"continue"}, {"stop"}),
    ("Keep taking amlodipine instead of galantamine.", {"continue"}, {"stop"}),
    ("Stop all your old medicines apart from amlodipine.", {"continue"}, set()),
    ("Stop galantamine rather than amlodipine.", {"continue"}, {"stop"}),
    ("Keep taking amlodipine and stop galantamine.", {"continue"}, {"stop"}),  # no exclusion: as before
    ("Do not take galantamine or amlodipine any more.", {"stop"}, {"stop"}),
])
def test_an_excluded_drug_gets_the_opposite(text, amlodipine, galantamine):
    r = read_letter(text, TRUTH)
    assert (r.stances("197361"), r.stances("310436")) == (amlodipine, galantamine), text


def test_stopping_everything_but_the_stopped_drug_fails():
    bought = GOOD.replace(STOP, "Stop taking all your medicines except galantamine.").replace(KEEP, KEEP)
    bad = failed(bought)
    assert "stance" in bad and "no_contradiction" in bad


@pytest.mark.parametrize("said", [
    "Keep taking amlodipine 5 mg every day, but not galantamine.",
    "Keep taking amlodipine 5 mg every day instead of galantamine.",
])
def test_keeping_one_and_not_the_other_passes(said):
    letter = GOOD.replace(KEEP + "\n" + STOP, said)
    assert failed(letter) == {}, failed(letter)


@pytest.mark.parametrize("text, amlodipine, galantamine", [
    ("Keep taking amlodipine, not to mention galantamine.", {"continue"}, {"continue"}),
    ("Keep taking not only amlodipine but also galantamine.", {"continue"}, {"continue"}),
    ("Keep taking amlodipine, and not forgetting galantamine.", {"continue"}, {"continue"}),
])
def test_not_only_and_not_to_mention_exclude_nothing(text, amlodipine, galantamine):
    r = read_letter(text, TRUTH)
    assert (r.stances("197361"), r.stances("310436")) == (amlodipine, galantamine), text


# a question asks; it does not tell: its cues earn no stance (but count against, as a condition's)
@pytest.mark.parametrize("said", [
    "Should you stop galantamine? No.",
    "Do you need to stop galantamine? Not at all.",
])
def test_a_question_earns_no_stance(said):
    assert "stance" in failed(GOOD.replace(STOP, said)), said


@pytest.mark.parametrize("said", [
    "Should you stop galantamine? Yes, please stop taking it.",
    "Can you still take galantamine? No. Please stop taking it.",  # the answer "No" flips the question
    "Should you keep taking galantamine?\nNo: please stop it now.",
    "Stop taking galantamine. Why? Your record shows it was stopped.",
])
def test_a_question_and_its_answer_pass(said):
    assert failed(GOOD.replace(STOP, said)) == {}, (said, failed(GOOD.replace(STOP, said)))


def test_a_question_still_counts_against():
    assert "no_contradiction" in failed(GOOD.replace(STOP, STOP + " Could you keep taking galantamine?"))
    assert "no_contradiction" in failed(GOOD.replace(STOP, STOP + " Can you still take galantamine? Yes."))
    assert "no_contradiction" in failed(GOOD.replace("every day.", "every day. Should you stop amlodipine? Yes."))
    assert "no_contradiction" not in failed(GOOD.replace("every day.", "every day. Should you stop amlodipine? No."))
