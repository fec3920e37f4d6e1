"""Lab-result interpretation suite: one item per case in fixtures/labs (or --labs-cases)."""

import pytest


@pytest.mark.labs
def test_labs(case, agent, scorer, evaluate):
    evaluate(case, agent, scorer)
