"""FHIR JSON types and the contained-resource invariants (issue 15 item 3), on the committed
write cases.

The R4B models coerce ``"5"`` to the decimal 5 and ``"false"`` to False, so structural
validation passes what FHIR JSON forbids. The schema dimension's ``json_types`` check reads
every element's type from the fhir.resources R4B model annotations
(``pytest_groundeval/scorers/jsontypes.py``): each string-number trick fails it, naming the
element; the same value as a JSON number / boolean passes. ``r4_invariants`` holds dom-2..5:
a contained resource nothing refers to (dom-3) fails.

Run: ``uv run pytest tests/scorers/test_write_json_types.py -p no:groundeval -q``
"""

from __future__ import annotations

import pytest
from write_corpus import CASES, answer, assert_fails, assert_passes, check

from pytest_groundeval.scorers.jsontypes import json_type_issues
from pytest_groundeval.scorers.write import score_write


def _set(resource, path, value):
    node = resource
    parts = path.split(".")
    for part in parts[:-1]:
        node = node[int(part)] if part.isdigit() else node[part]
    last = parts[-1]
    node[int(last) if last.isdigit() else last] = value
    return resource


# (case, element path, tampered value, the issue's words, other dimensions the trick also fails)
TRICKS = [
    ("aspirin-active-daily", "dosage.0.doseAndRate.0.doseQuantity.value", "81",
     "dosage[0].doseAndRate[0].doseQuantity.value: a string ('81'), but FHIR decimal must be a JSON number", set()),
    ("ibuprofen-two-tablets", "dosage.0.timing.repeat.frequency", "3",
     "dosage[0].timing.repeat.frequency: a string ('3'), but FHIR positiveInt must be a JSON integer", set()),
    ("ibuprofen-two-tablets", "dosage.0.timing.repeat.period", "1",
     "dosage[0].timing.repeat.period: a string ('1'), but FHIR decimal must be a JSON number", set()),
    ("aspirin-active-daily", "dosage.0.timing.repeat.frequency", 1.0,
     "dosage[0].timing.repeat.frequency: a number (1.0), but FHIR positiveInt must be a JSON integer", set()),
    # "false" is not a boolean: constraints cannot read the as-needed flag either
    ("aspirin-active-daily", "dosage.0.asNeededBoolean", "false",
     "dosage[0].asNeededBoolean: a string ('false'), but FHIR boolean must be true or false", {"constraints"}),
    ("acetaminophen-prn-range", "dosage.0.asNeededBoolean", "true",
     "dosage[0].asNeededBoolean: a string ('true'), but FHIR boolean must be true or false", {"constraints"}),
    # a code as a number is not the expected code (a string) either
    ("aspirin-active-daily", "medicationCodeableConcept.coding.0.code", 243670,
     "medicationCodeableConcept.coding.0.code".replace(".0.", "[0].") + ": a number (243670), but FHIR code must be "
     "a JSON string", {"coding"}),
]


@pytest.mark.parametrize("case_id,path,value,why,also", TRICKS, ids=[f"{t[0]}-{t[1]}" for t in TRICKS])
def test_string_number_tricks_fail_schema(case_id, path, value, why, also):
    r = _set(answer(case_id), path, value)
    assert_fails(r, case_id, "schema", "json_types", why, dims={"schema"} | also)


def test_every_trick_is_named_at_once():
    r = answer("ibuprofen-two-tablets")
    _set(r, "dosage.0.doseAndRate.0.doseQuantity.value", "400")
    _set(r, "dosage.0.timing.repeat.frequency", "3")
    issues = json_type_issues(r)
    assert [i.split(":")[0] for i in issues] == ["dosage[0].timing.repeat.frequency",
                                                 "dosage[0].doseAndRate[0].doseQuantity.value"]


@pytest.mark.parametrize("where,value,why", [
    # the walk follows the model into every data type: a contained resource, an extension value,
    # a primitive's extension, a repeating element written as one value and the reverse
    ("contained", [{"resourceType": "Medication", "id": "m", "ingredient": [
        {"itemCodeableConcept": {"text": "aspirin"}, "isActive": "true"}]}],
     "contained[0].ingredient[0].isActive: a string ('true'), but FHIR boolean must be true or false"),
    ("extension", [{"url": "http://example.org/x", "valueInteger": "2"}],
     "extension[0].valueInteger: a string ('2'), but FHIR integer must be a JSON integer"),
    ("_status", {"extension": [{"url": "http://example.org/y", "valueBoolean": "no"}]},
     "_status.extension[0].valueBoolean: a string ('no'), but FHIR boolean must be true or false"),
    ("note", {"text": "from the interview"}, "note: an object ({'text': 'from the interview'}), but it repeats"),
    ("effectiveDateTime", 20260512, "effectiveDateTime: a number (20260512), but FHIR dateTime must be a JSON string"),
])
def test_the_type_walk_covers_every_element(where, value, why):
    r = answer("aspirin-active-daily")
    r[where] = value
    assert any(why in i for i in json_type_issues(r)), json_type_issues(r)
    assert not check(score_write(r, CASES["aspirin-active-daily"]), "schema", "json_types").passed


@pytest.mark.parametrize("case_id", ["aspirin-active-daily", "memantine-oral-solution-ml", "albuterol-puffs-prn-range"])
def test_the_same_values_as_json_numbers_and_booleans_pass(case_id):
    r = answer(case_id)
    dose = r["dosage"][0]["doseAndRate"][0]
    q = dose.get("doseQuantity") or dose["doseRange"]["low"]
    q["value"] = float(q["value"])  # a decimal may be written 81 or 81.0
    r["dosage"][0]["timing"]["repeat"]["period"] = float(r["dosage"][0]["timing"]["repeat"]["period"])
    assert_passes(r, case_id)


def test_a_fhir_resources_model_passes_the_type_check():
    from fhir.resources.R4B.medicationstatement import MedicationStatement

    model = MedicationStatement.model_validate(answer("ibuprofen-two-tablets"))
    assert score_write(model, CASES["ibuprofen-two-tablets"]).passed


# ---------------------------------------------------------------- contained resources (dom-2..5)

def _contained_unreferenced(case_id):
    r = answer(case_id)
    r["contained"] = [{"resourceType": "Medication", "id": "med", "code": dict(r["medicationCodeableConcept"])}]
    return r


def test_contained_resource_nothing_refers_to_fails_dom3():
    r = _contained_unreferenced("aspirin-active-daily")
    assert_fails(r, "aspirin-active-daily", "schema", "r4_invariants",
                 "contained[0] (Medication 'med') is not referenced from the resource as '#med' (dom-3)")


def test_contained_resource_without_id_fails_dom3():
    r = _contained_unreferenced("aspirin-active-daily")
    del r["contained"][0]["id"]
    assert_fails(r, "aspirin-active-daily", "schema", "r4_invariants", "has no id")


def test_contained_resource_referenced_passes():
    r = _contained_unreferenced("aspirin-active-daily")
    r["medicationReference"] = {"reference": "#med"}
    del r["medicationCodeableConcept"]
    assert_passes(r, "aspirin-active-daily")


def test_contained_resource_referenced_from_another_element_meets_dom3_but_is_unverified():
    # dom-3 holds (the informant is referenced), but the write task reads no contained Patient
    # and no informant but the patient: default deny fails them (issue 28), and only that
    r = answer("aspirin-active-daily")
    r["contained"] = [{"resourceType": "Patient", "id": "informant", "name": [{"text": "daughter"}]}]
    r["informationSource"] = {"reference": "#informant"}
    score = score_write(r, CASES["aspirin-active-daily"])
    assert check(score, "schema", "r4_invariants").passed
    assert_fails(r, "aspirin-active-daily", "schema", "verified_elements", "unverified element: contained[0]",
                 dims={"schema", "constraints"})
    assert "'#informant' != 'Patient/pat-001'" in check(score, "constraints", "information_source").reason


def test_nested_contained_and_versioned_contained_fail():
    r = answer("aspirin-active-daily")
    r["contained"] = [{"resourceType": "Patient", "id": "p", "meta": {"versionId": "2"},
                       "contained": [{"resourceType": "Patient", "id": "q"}]}]
    r["informationSource"] = {"reference": "#p"}
    reason = check(score_write(r, CASES["aspirin-active-daily"]), "schema", "r4_invariants").reason
    assert "dom-2" in reason and "dom-4" in reason, reason


def test_a_resource_nested_deeper_than_python_recurses_fails_schema_without_raising():
    r = answer("aspirin-active-daily")
    ext = {"url": "http://example.org/x"}
    r["extension"], r["contained"] = [ext], [{"resourceType": "Patient", "id": "p", "extension": [ext]}]
    for _ in range(3000):
        ext["extension"] = [{"url": "http://example.org/x"}]
        ext = ext["extension"][0]
    score = score_write(r, CASES["aspirin-active-daily"])
    assert not score.dimensions["schema"].passed
    assert "nested too deeply" in check(score, "schema", "json_types").reason


@pytest.mark.parametrize("case_id", sorted(c for c in CASES if CASES[c]["expected"]["dosage"]))
def test_a_string_number_fails_schema_on_every_committed_case_with_a_regimen(case_id):
    r = answer(case_id)
    dose = r["dosage"][0]["doseAndRate"][0]
    q = dose.get("doseQuantity") or dose["doseRange"]["high"]
    q["value"] = str(q["value"])
    assert_fails(r, case_id, "schema", "json_types", "but FHIR decimal must be a JSON number")
