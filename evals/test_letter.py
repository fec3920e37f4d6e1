"""Medication-change letter suite: one item per reconciliation case (or --letter-cases)."""

import pytest


@pytest.mark.letter
def test_letter(case, agent, scorer, evaluate):
    evaluate(case, agent, scorer)
