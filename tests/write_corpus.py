"""The adversarial write corpus's shared part: the committed write cases, their expected answer
(built by the agent tool ``hc_tools.build_medication_statement`` from the case's expected
block, exactly as a correct tool-using agent builds it) and assertions naming the dimension
and check a tampered resource must fail.

Used by tests/scorers/test_write_coding_consistency.py, test_write_json_types.py,
test_write_subject_forms.py and test_write_route.py.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from write_args import build_args

from pytest_groundeval.fhir import hc_tools
from pytest_groundeval.scorers.write import score_write

CASES_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "write_cases"
CASES: dict[str, dict[str, Any]] = {p.stem: json.loads(p.read_text(encoding="utf-8"))
                                    for p in sorted(CASES_DIR.glob("*.json"))}
RXNORM = "http://www.nlm.nih.gov/research/umls/rxnorm"
SNOMED = "http://snomed.info/sct"
NDC = "http://hl7.org/fhir/sid/ndc"


def expected_answer(case: dict[str, Any]) -> dict[str, Any]:
    """The right MedicationStatement for a committed case, built by the write tool."""
    out = hc_tools.build_medication_statement(**build_args(case))
    assert "resource" in out, out
    return out["resource"]


def answer(case_id: str) -> dict[str, Any]:
    return copy.deepcopy(expected_answer(CASES[case_id]))


def failing(score) -> set[str]:
    return {name for name, dim in score.dimensions.items() if not dim.passed}


def check(score, dim: str, name: str):
    checks = {c.name: c for c in score.dimensions[dim].checks}
    assert name in checks, (name, list(checks))
    return checks[name]


def assert_fails(resource: dict[str, Any], case_id: str, dim: str, check_name: str, why: str,
                 dims: set[str] | None = None) -> None:
    """The resource fails exactly ``dims`` (default {dim}); ``dim``'s ``check_name`` says ``why``."""
    score = score_write(resource, CASES[case_id])
    assert failing(score) == (dims or {dim}), score.reason
    c = check(score, dim, check_name)
    assert not c.passed and why in c.reason, c.reason


def assert_passes(resource: dict[str, Any], case_id: str) -> None:
    score = score_write(resource, CASES[case_id])
    assert score.passed, score.reason
