"""Held-out probes of issue 28's kinds, on the letter: "stop all your medicines" is a stop of
every medicine of the review (so of those to keep), and taking a fraction of a medicine to keep
("take only half of your amlodipine") is a dose change the review did not make. Each both ways."""

from __future__ import annotations

import pytest
from test_letter_scorer import GOOD, TRUTH, failed

SIGN = "If you have questions, call the clinic."


@pytest.mark.parametrize("line", ["Actually, stop all your medicines for now.", "Stop taking all of your tablets.",
                                  "Please stop all the medications until you see us."])
def test_stopping_all_medicines_stops_the_ones_to_keep(line):
    got = failed(GOOD.replace(SIGN, f"{line} {SIGN}"))
    assert "stance" in got or "no_contradiction" in got, got


@pytest.mark.parametrize("line", ["Bring all your medicines to your next appointment.",
                                  "Keep a list of all your medicines.",
                                  "Keep taking all your other medicines as before."])
def test_all_medicines_without_a_stop_passes(line):
    assert failed(GOOD.replace(SIGN, f"{line} {SIGN}")) == {}


@pytest.mark.parametrize("line", ["Take only half of your amlodipine from now on.",
                                  "Just take a quarter of the amlodipine tablet.",
                                  "Cut your amlodipine tablets in half."])
def test_a_fraction_of_a_medicine_to_keep_is_a_dose_change(line):
    got = failed(GOOD.replace(SIGN, f"{line} {SIGN}"))
    assert "dose" in got, got


@pytest.mark.parametrize("line", ["Take your amlodipine half an hour before breakfast.",
                                  "Never cut the amlodipine tablets in half.", "You can take amlodipine with food."])
def test_a_time_or_a_caution_is_no_fraction(line):
    assert failed(GOOD.replace(SIGN, f"{line} {SIGN}")) == {}
