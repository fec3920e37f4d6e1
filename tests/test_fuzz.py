"""Fuzzing (hypothesis) of the answer parsers and the scorers: whatever an agent sends, a
parser either returns a prediction or raises ParseError, a scorer returns a Score, and a
MedicationStatement that does not validate never passes."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_groundeval.fhir.hc_tools import validate_medication_statement
from pytest_groundeval.model import AgentOutput, ParseError
from pytest_groundeval.scorers.reconciliation import score_reconciliation
from pytest_groundeval.scorers.write import score_write
from pytest_groundeval.tasks.extraction import parse_answer as parse_extraction
from pytest_groundeval.tasks.reconciliation import parse_answer as parse_reconciliation
from pytest_groundeval.tasks.write import WriteTask
from pytest_groundeval.tasks.write_baseline import run_baseline_write

ROOT = Path(__file__).resolve().parents[1]
CASE = json.loads((ROOT / "fixtures" / "write_cases" / "ibuprofen-two-tablets.json").read_text())
GOOD = run_baseline_write(CASE["note"], CASE["subject"])["resource"]
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)
texts = st.text(max_size=300) | json_values.map(lambda v: json.dumps(v, default=str)) | st.builds(
    lambda v, pre, post: pre + "```json\n" + json.dumps({"active_medications": v, "medications": v}, default=str)
    + "\n```" + post, json_values, st.text(max_size=30), st.text(max_size=30))


def _parses_or_parse_error(parse, text):
    try:
        return parse(text)
    except ParseError:
        return None


@FUZZ
@given(texts)
def test_the_extraction_parser_returns_a_prediction_or_a_parse_error(text):
    out = _parses_or_parse_error(parse_extraction, text)
    if out is not None:
        assert all(isinstance(i["code"], str) and i["code"] for i in out)


@FUZZ
@given(texts)
def test_the_reconciliation_parser_and_scorer_never_raise(text):
    out = _parses_or_parse_error(parse_reconciliation, text)
    if out is not None:
        truth = [{"code": "197361", "display": "Amlodipine 5 MG Oral Tablet", "verdict": "matched"}]
        score = score_reconciliation(out, truth)
        assert score.passed == (sorted((p["code"], p["verdict"]) for p in out) == [("197361", "matched")])


def _mutate(resource, path, value):
    """Set (or delete, for value None) the item at a path of keys / indexes, where it exists."""
    node = resource
    for key in path[:-1]:
        if isinstance(node, dict) and key in node:
            node = node[key]
        elif isinstance(node, list) and isinstance(key, int) and 0 <= key < len(node):
            node = node[key]
        else:
            return resource
    last = path[-1]
    if isinstance(node, dict):
        if value is None:
            node.pop(last, None)
        else:
            node[last] = value
    elif isinstance(node, list) and isinstance(last, int) and 0 <= last < len(node):
        node[last] = value
    return resource


paths = st.lists(st.sampled_from(["dosage", "doseAndRate", "doseQuantity", "value", "unit", "code", "system",
                                  "timing", "repeat", "frequency", "period", "status", "subject", "reference",
                                  "medicationCodeableConcept", "coding", "display", "asNeededBoolean",
                                  "modifierExtension", "text", 0, 1]), min_size=1, max_size=6)


@FUZZ
@given(st.lists(st.tuples(paths, json_values), min_size=1, max_size=4))
def test_a_mutated_statement_passes_only_if_it_validates(mutations):
    resource = copy.deepcopy(GOOD)
    for path, value in mutations:
        resource = _mutate(resource, path, value)
    score = score_write(resource, CASE)  # never raises, whatever the agent wrote
    if score.passed:
        assert validate_medication_statement(resource)["valid"], resource
    task = WriteTask(ROOT / "fixtures" / "write_cases")
    text = json.dumps(resource, default=str)
    assert task.parse(AgentOutput(text=text)) == json.loads(text)


def test_the_unmutated_baseline_statement_passes():
    assert score_write(copy.deepcopy(GOOD), CASE).passed
