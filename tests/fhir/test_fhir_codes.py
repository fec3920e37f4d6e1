"""fhir/codes.py is the one copy of the code systems and status value sets: no other module
of the package, and no data script, spells one out."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_groundeval.fhir import codes

REPO = Path(__file__).resolve().parents[2]
SYSTEMS = [codes.RXNORM, codes.UCUM, codes.SNOMED, codes.NDC, codes.GTS, codes.V3_ROUTE, codes.FHIR_VERSION_TAG]


def _sources():
    return [p for p in sorted((REPO / "pytest_groundeval").rglob("*.py")) + sorted((REPO / "scripts").glob("*.py"))
            if p != REPO / "pytest_groundeval" / "fhir" / "codes.py"]


@pytest.mark.parametrize("uri", SYSTEMS)
def test_no_literal_copy_of_a_code_system(uri):
    copies = [str(p.relative_to(REPO)) for p in _sources() if uri in p.read_text(encoding="utf-8")]
    assert copies == [], f"{uri} spelled out outside fhir/codes.py"


def test_no_literal_copy_of_a_status_value_set():
    """A status tuple (as its first three codes, quoted) appears only in codes.py."""
    needles = ['"active", "completed", "entered-in-error"', '"active", "on-hold", "cancelled"',
               '("stopped", "completed")']
    copies = [(str(p.relative_to(REPO)), n) for p in _sources() for n in needles if n in p.read_text(encoding="utf-8")]
    assert copies == []


def test_statuses_match_the_fhir_models():
    """The value sets are R4B's, as fhir.resources' models declare them."""
    from fhir.resources.R4B.medicationrequest import MedicationRequest
    from fhir.resources.R4B.medicationstatement import MedicationStatement

    def enum(model):
        return tuple(model.model_fields["status"].json_schema_extra["enum_values"])

    assert codes.MEDICATION_STATEMENT_STATUSES == enum(MedicationStatement)
    assert set(codes.MEDICATION_REQUEST_STATUSES) == set(enum(MedicationRequest))
    assert set(codes.REQUEST_ACTIVE + codes.REQUEST_ENDED) <= set(codes.MEDICATION_REQUEST_STATUSES)


def test_scripts_take_the_package_copy():
    for script in ("make_fixtures.py", "make_terminology.py", "make_reconciliation_cases.py"):
        assert "from pytest_groundeval.fhir.codes import" in (REPO / "scripts" / script).read_text(encoding="utf-8")
