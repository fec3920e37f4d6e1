"""Medication reconciliation suite: one item per case in fixtures/reconciliation (or --reconciliation-cases)."""

import pytest


@pytest.mark.reconciliation
def test_reconciliation(case, agent, scorer, evaluate):
    evaluate(case, agent, scorer)
