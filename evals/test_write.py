"""Write-and-validate suite: one item per case in fixtures/write_cases (or --write-cases)."""

import pytest


@pytest.mark.write
def test_write(case, agent, scorer, evaluate):
    evaluate(case, agent, scorer)
