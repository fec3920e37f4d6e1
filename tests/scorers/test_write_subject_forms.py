"""Fair rules (issue 15 item 4): the case's patient in any literal reference form is the right
subject; any other patient, type or form is not. On the committed write cases.

Run: ``uv run pytest tests/scorers/test_write_subject_forms.py -p no:groundeval -q``
"""

from __future__ import annotations

import copy

import pytest
from write_corpus import CASES, answer, assert_fails, assert_passes, check

from pytest_groundeval.scorers.write import score_write

CASE = "aspirin-active-daily"  # subject Patient/pat-001
UUID = "0c89b627-646b-40ff-a620-c8509a10912c"


def _subject(case_id, subject):
    r = answer(case_id)
    r["subject"] = subject
    return r


@pytest.mark.parametrize("subject", [
    {"reference": "Patient/pat-001"},
    {"reference": "https://fhir.example.org/r4/Patient/pat-001"},  # absolute, the unfair fail
    {"reference": "http://localhost:8080/fhir/Patient/pat-001"},
    {"reference": "Patient/pat-001/_history/3"},  # version-specific: the same patient
    {"reference": "https://fhir.example.org/Patient/pat-001/_history/3"},
    {"reference": "Patient/pat-001", "type": "Patient", "display": "the patient"},
])
def test_same_patient_in_any_reference_form_passes(subject):
    assert_passes(_subject(CASE, subject), CASE)


def test_absolute_reference_says_which_form_it_read():
    score = score_write(_subject(CASE, {"reference": "https://fhir.example.org/r4/Patient/pat-001"}), CASES[CASE])
    assert "absolute reference" in check(score, "constraints", "subject").reason


def _uuid_case():
    case = copy.deepcopy(CASES[CASE])
    case["subject"] = f"Patient/{UUID}"  # a Synthea patient id is a UUID
    return case


@pytest.mark.parametrize("ref", [f"urn:uuid:{UUID}", f"urn:uuid:{UUID.upper()}", f"Patient/{UUID}",
                                 f"https://fhir.example.org/Patient/{UUID}"])
def test_urn_uuid_of_the_cases_patient_passes(ref):
    case = _uuid_case()
    r = answer(CASE)
    r["subject"] = {"reference": ref}
    score = score_write(r, case)
    assert score.passed, score.reason


def test_urn_uuid_of_another_patient_fails():
    case = _uuid_case()
    r = answer(CASE)
    r["subject"] = {"reference": "urn:uuid:11111111-2222-3333-4444-555555555555"}
    score = score_write(r, case)
    assert not check(score, "constraints", "subject").passed
    assert {n for n, d in score.dimensions.items() if not d.passed} == {"constraints"}


@pytest.mark.parametrize("subject,why", [
    ({"reference": "Patient/pat-999"}, "not the case's patient"),
    ({"reference": "https://fhir.example.org/Patient/pat-0011"}, "not the case's patient"),
    ({"reference": "Group/pat-001"}, "not the case's patient"),
    ({"reference": "https://fhir.example.org/Group/pat-001"}, "not the case's patient"),
    ({"reference": "urn:uuid:pat-001"}, "not the case's patient"),  # pat-001 is not a UUID
    ({"reference": "pat-001"}, "not the case's patient"),  # a bare id is no literal reference
    ({"reference": "#pat-001"}, "not the case's patient"),
    ({"reference": "Patient?identifier=pat-001"}, "not the case's patient"),
    ({"reference": "Patient/pat-001 "}, "not the case's patient"),
    ({"reference": "Patient/pat-001", "type": "Group"}, "subject.type 'Group' is not Patient"),
])
def test_another_patient_type_or_form_fails(subject, why):
    assert_fails(_subject(CASE, subject), CASE, "constraints", "subject", why)


def test_identifier_only_subject_fails_constraints():
    r = _subject(CASE, {"identifier": {"system": "urn:example", "value": "pat-001"}})
    assert_fails(r, CASE, "constraints", "subject", "no subject.reference")


@pytest.mark.parametrize("case_id", sorted(CASES))
def test_every_committed_case_passes_with_an_absolute_subject(case_id):
    subject = CASES[case_id]["subject"]
    assert_passes(_subject(case_id, {"reference": f"https://ehr.example.org/fhir/{subject}"}), case_id)


def test_a_reference_longer_than_any_url_is_read_quickly_and_fails():
    ref = "https://h/" + "a/" * 200_000 + "Patient/pat-001"
    assert_fails(_subject(CASE, {"reference": ref}), CASE, "constraints", "subject", "not the case's patient",
                 dims={"constraints"})
