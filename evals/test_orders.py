"""Orders suite: one item per case in fixtures/orders (or --orders-cases); the agent acts on a
FHIR server seeded per case, and the server's state is scored."""

import pytest


@pytest.mark.orders
def test_orders(case, agent, scorer, evaluate):
    evaluate(case, agent, scorer)
