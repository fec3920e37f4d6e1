"""Extraction suite: one item per FHIR bundle in fixtures/synthea (or --data-dir)."""

import pytest


@pytest.mark.extraction
def test_extraction(case, agent, scorer, evaluate):
    evaluate(case, agent, scorer)
