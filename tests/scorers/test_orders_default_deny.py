"""Issue 28's orders probes: a written ServiceRequest or Observation passes ``correct`` only
when every element is verified against the truth, inert, or free text whose claims agree
(scorers/orders.py: the declared schemas, ``codings``, ``claims``, ``unit_text``). Each wrong
probe fails ``correct`` under the named check with its reason; each right one (harmless
extras, a translation to another code system, an agreeing display, note or interpretation)
passes every dimension. Acted out on a committed case's seeded state (the in-process FHIR
stand-in)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from orders_fake_fhir import FakeFhir
from pytest_groundeval.fhir.codes import LOINC, SNOMED, UCUM
from pytest_groundeval.scorers.orders import bp_interpretation, coding_issue, score_orders
from test_orders_scorer import BP, HBA, load, order, reading

CPT = "http://www.ama-assn.org/go/cpt"
V3 = "http://terminology.hl7.org/CodeSystem/v3-ObservationInterpretation"
POSITION = "http://hl7.org/fhir/StructureDefinition/observation-bodyPosition"
DIV = '<div xmlns="http://www.w3.org/1999/xhtml">{}</div>'
A1C = {"system": LOINC, "code": "4548-4", "display": "Hemoglobin A1c/Hemoglobin.total in Blood"}


def a1c(*extra: dict[str, Any], text: str | None = None) -> dict[str, Any]:
    return {"coding": [A1C, *extra], **({"text": text} if text is not None else {})}


def concept(system: str, code: str, display: str | None = None, text: str | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {"coding": [{"system": system, "code": code, **({"display": display} if display else {})}]}
    return {**c, "text": text} if text else c


def with_values(truth: dict[str, Any], systolic: int, diastolic: int) -> dict[str, Any]:
    t = copy.deepcopy(truth)
    t["expected"].update(systolic=systolic, diastolic=diastolic)
    return t


def bp(t: dict[str, Any], *, comp: dict[int, dict[str, Any]] | None = None, **over: Any) -> dict[str, Any]:
    r = reading(t, **over)
    for i, extra in (comp or {}).items():
        r["component"][i].update(copy.deepcopy(extra))
    return r


def score(case_id: str, resource: Any, values: tuple[int, int] | None = None):
    case = load(case_id)
    truth = with_values(case.truth, *values) if values else case.truth
    fake = FakeFhir(case.inputs["bundle"])
    fake.fhir_create(resource(truth) if callable(resource) else resource)
    return score_orders(fake.activity(), truth)


def diabetes_ref(t: dict[str, Any]) -> str:
    return t["expected"]["reason_refs"][0]


# ---------------------------------------------------------------- wrong: (id, case, resource, check, reason)
WRONG: list[tuple[str, str, Any, str, str]] = [
    # an HbA1c order that says, codes or is for something else
    ("code-text-lipid", HBA, lambda t: order(t, code=a1c(text="Lipid panel")), "claims", "'Lipid panel'"),
    ("display-lipid", HBA, lambda t: order(t, code={"coding": [{**A1C, "display": "Lipid panel"}]}), "codings",
     "does not name hemoglobin A1c"),
    ("snomed-lipid-beside", HBA, lambda t: order(t, code=a1c({"system": SNOMED, "code": "16254007"})), "codings",
     "denotes lipid panel"),
    ("cpt-lipid-beside", HBA, lambda t: order(t, code=a1c({"system": CPT, "code": "80061", "display": "Lipid panel"})),
     "codings", "denotes lipid panel"),
    ("note-lipid", HBA, lambda t: order(t, note=[{"text": "Fasting lipid panel today."}]), "claims", "lipid"),
    ("specimen-urine", HBA, lambda t: order(t, specimen=[{"display": "Urine"}]), "claims", "'Urine'"),
    ("specimen-reference", HBA, lambda t: order(t, specimen=[{"reference": "Specimen/s1"}]), "verified_elements",
     "unverified element: specimen[0].reference"),
    ("reason-hypertension", HBA, lambda t: order(t, reasonCode=[concept(SNOMED, "38341003", "Hypertension")]),
     "codings", "denotes hypertension"),
    ("reason-text-hypertension", HBA, lambda t: order(t, reasonCode=[{"text": "Hypertension follow-up"}]), "claims",
     "hypertension"),
    ("reason-reference-other", HBA, lambda t: order(t, reasonReference=[{"reference": "Condition/not-diabetes"}]),
     "codings", "none of the patient's diabetes conditions"),
    ("category-vital-signs", HBA, lambda t: order(t, category=[concept(
        "http://terminology.hl7.org/CodeSystem/observation-category", "vital-signs")]), "codings",
     "denotes vital signs"),
    ("performer", HBA, lambda t: order(t, performer=[{"display": "Quest"}]), "verified_elements",
     "unverified element: performer[0].display"),
    ("body-site-on-order", HBA, lambda t: order(t, bodySite=[{"text": "left arm"}]), "verified_elements",
     "unverified element: bodySite[0].text"),
    # a coding in a system the task does not know: a display, or a code that contradicts
    ("unknown-system-display", HBA, lambda t: order(t, code=a1c({"system": "urn:oid:1.2.3", "code": "X1",
                                                                  "display": "Hemoglobin A1c"})),
     "codings", "cannot be verified"),
    ("unknown-system-lipid-code", HBA, lambda t: order(t, code=a1c({"system": "urn:oid:1.2.3", "code": "80061"})),
     "codings", "lipid panel's"),
    ("unknown-system-lipid-words", HBA, lambda t: order(t, code=a1c({"system": "urn:oid:1.2.3",
                                                                      "code": "LIPID-PANEL"})),
     "codings", "lipid panel's"),
    # a blood pressure that says, codes or is measured otherwise than the note
    ("systolic-coded-diastolic", BP, lambda t: bp(t, comp={0: {"code": {"coding": [
        {"system": LOINC, "code": "8480-6"}, {"system": SNOMED, "code": "271650006", "display": "Diastolic"}]}}}),
     "codings", "denotes diastolic blood pressure"),
    ("systolic-display-diastolic", BP, lambda t: bp(t, comp={0: {"code": {"coding": [
        {"system": LOINC, "code": "8480-6", "display": "Diastolic blood pressure"}]}}}), "codings",
     "does not name systolic"),
    ("unit-kpa", BP, lambda t: bp(t, comp={0: {"valueQuantity": {"value": t["expected"]["systolic"], "unit": "kPa",
                                                                 "system": UCUM, "code": "mm[Hg]"}}}),
     "unit_text", "'kPa' is kPa"),
    ("wrong-arm-coded", BP, lambda t: bp(t, bodySite=concept(SNOMED, "368209003", "Right upper arm structure")),
     "codings", "denotes right arm"),
    ("wrong-arm-text", BP, lambda t: bp(t, bodySite={"text": "Right arm"}), "claims", "'Right arm'"),
    ("standing-after-exercise", BP, lambda t: bp(t, note=[{"text": "Taken standing after exercise."}]), "claims",
     "'standing'"),
    ("after-exercise", BP, lambda t: bp(t, note=[{"text": "Reading taken after exercise."}]), "claims",
     "after exercise"),
    ("position-standing", BP, lambda t: bp(t, extension=[{"url": POSITION, "valueCodeableConcept": concept(
        SNOMED, "10904000", "Orthostatic body position")}]), "codings", "denotes standing"),
    ("method-manual", BP, lambda t: bp(t, method={"text": "Manual auscultation"}), "claims", "manual"),
    ("note-other-reading", BP, lambda t: bp(t, note=[{"text": "BP 120/80 mmHg."}]), "claims", "'120/80'"),
    ("interpretation-normal-on-high", BP, lambda t: bp(t, interpretation=[concept(V3, "N", "Normal")]), "codings",
     "denotes normal"),
    ("reference-range", BP, lambda t: bp(t, referenceRange=[{"text": "normal"}]), "verified_elements",
     "unverified element: referenceRange[0].text"),
    ("device", BP, lambda t: bp(t, device={"display": "cuff"}), "verified_elements", "unverified element: device"),
    ("unknown-extension", BP, lambda t: bp(t, extension=[{"url": "https://example.org/x", "valueString": "ok"}]),
     "verified_elements", "https://example.org/x"),
    # the same kinds of trick, other words: another test, spelling games, another language
    ("code-text-glucose", HBA, lambda t: order(t, code=a1c(text="Fasting glucose")), "claims", "'glucose'"),
    ("code-text-digits", HBA, lambda t: order(t, code=a1c(text="L1pid panel")), "claims", "lipid panel"),
    ("note-spaced", HBA, lambda t: order(t, note=[{"text": "L I P I D panel"}]), "claims", "lipid panel"),
    ("specimen-serum", HBA, lambda t: order(t, specimen=[{"display": "Serum"}]), "claims", "'Serum'"),
    ("site-french", BP, lambda t: bp(t, bodySite={"text": "Bras droit"}), "claims", "'Bras droit'"),
    ("site-wrist", BP, lambda t: bp(t, bodySite={"text": "Left wrist"}), "claims", "'Left wrist'"),
    ("supine-digits", BP, lambda t: bp(t, note=[{"text": "Taken sup1ne."}]), "claims", "lying"),
    ("after-a-walk", BP, lambda t: bp(t, note=[{"text": "Taken after a brisk walk."}]), "claims", "after exercise"),
    ("upright", BP, lambda t: bp(t, note=[{"text": "Patient upright."}]), "claims", "'upright'"),
    ("note-pulse", BP, lambda t: bp(t, note=[{"text": "Pulse 72."}]), "claims", "heart rate"),
    ("issued-before-reading", BP, lambda t: bp(t, issued="2001-01-01T00:00:00Z"), "issued", "not an instant"),
]

# 124/89 (high: stage 1), as the issue's probe
ON_124_89: list[tuple[str, Any, str, str]] = [
    ("critical-high-coded", lambda t: bp(t, interpretation=[concept(V3, "HH", "Critical high")]), "codings",
     "denotes critical high"),
    ("critical-high-text", lambda t: bp(t, interpretation=[{"text": "Critical high"}]), "claims", "critical high"),
    ("normal-text", lambda t: bp(t, note=[{"text": "Normal reading."}]), "claims", "'Normal'"),
]


@pytest.mark.parametrize(("case_id", "resource", "check", "reason"), [w[1:] for w in WRONG],
                         ids=[w[0] for w in WRONG])
def test_wrong_fails_the_named_check(case_id, resource, check, reason):
    s = score(case_id, resource)
    failed = {k for k, d in s.dimensions.items() if not d.passed}
    assert failed == {"correct"}, s.reason
    checks = {c.name: c for c in s.dimensions["correct"].checks}
    assert not checks[check].passed and reason.casefold() in checks[check].reason.casefold(), checks[check].reason


@pytest.mark.parametrize(("resource", "check", "reason"), [w[1:] for w in ON_124_89], ids=[w[0] for w in ON_124_89])
def test_wrong_interpretation_on_124_89(resource, check, reason):
    s = score(BP, resource, values=(124, 89))
    checks = {c.name: c for c in s.dimensions["correct"].checks}
    assert not s.dimensions["correct"].passed
    assert not checks[check].passed and reason.casefold() in checks[check].reason.casefold(), checks[check].reason


# ---------------------------------------------------------------- right: must pass every dimension
def _narrated(t):
    return order(t, id="a1c-1", meta={"profile": ["http://hl7.org/fhir/StructureDefinition/ServiceRequest"],
                                      "tag": [{"system": "https://example.org/agent", "code": "protocol"}]},
                 identifier=[{"system": "https://example.org/orders", "value": "ORD-1"}],
                 text={"status": "generated", "div": DIV.format("Hemoglobin A1c order for diabetes monitoring")})


RIGHT: list[tuple[str, str, Any]] = [
    ("meta-id-identifier-narrative", HBA, _narrated),
    ("snomed-translation-with-display", HBA, lambda t: order(t, code=a1c(
        {"system": SNOMED, "code": "43396009", "display": "Hemoglobin A1c measurement (procedure)"}, text="HbA1c"))),
    ("cpt-translation", HBA, lambda t: order(t, code=a1c({"system": CPT, "code": "83036"}))),
    ("agreeing-note", HBA, lambda t: order(t, note=[{"text": "Annual HbA1c for type 2 diabetes; none in the last "
                                                             "12 months."}],
                                           patientInstruction="A blood test; no fasting needed.")),
    ("laboratory-category", HBA, lambda t: order(t, category=[concept(SNOMED, "108252007", "Laboratory procedure")])),
    ("diabetes-reason", HBA, lambda t: order(t, reasonCode=[concept(SNOMED, "44054006", "Diabetes mellitus type 2 "
                                                                                       "(disorder)")],
                                             reasonReference=[{"reference": diabetes_ref(t)}])),
    ("blood-specimen-display", HBA, lambda t: order(t, specimen=[{"display": "Whole blood"}])),
    ("unknown-system-unknown-code", HBA, lambda t: order(t, code=a1c({"system": "urn:oid:1.2.3", "code": "LAB123"}))),
    ("negated-other-test", HBA, lambda t: order(t, note=[{"text": "HbA1c only, not a lipid panel."}])),
    ("french-display", HBA, lambda t: order(t, code={"coding": [{**A1C, "display": "Hémoglobine glyquée"}]})),
    ("negated-position", BP, lambda t: bp(t, note=[{"text": "Seated, not standing; not on the right arm."}])),
    ("bp-snomed-translations", BP, lambda t: bp(t, code={"coding": [
        {"system": LOINC, "code": "85354-9", "display": "Blood pressure panel with all children optional"},
        {"system": SNOMED, "code": "75367002", "display": "Blood pressure (observable entity)"}],
        "text": "Blood pressure systolic & diastolic"}, comp={0: {"code": {"coding": [
            {"system": LOINC, "code": "8480-6", "display": "Systolic blood pressure"},
            {"system": SNOMED, "code": "271649006", "display": "Systolic blood pressure (observable entity)"}]}}})),
    ("bp-units-spelled", BP, lambda t: bp(t, comp={
        0: {"valueQuantity": {"value": t["expected"]["systolic"], "unit": "mm Hg", "system": UCUM, "code": "mm[Hg]"}},
        1: {"valueQuantity": {"value": t["expected"]["diastolic"], "unit": "millimeters of mercury", "system": UCUM,
                              "code": "mm[Hg]"}}})),
    ("bp-site-position-method-note", BP, lambda t: bp(
        t, bodySite=concept(SNOMED, "368208006", "Left upper arm structure", "Left arm"),
        method={"text": "Automated cuff"},
        extension=[{"url": POSITION, "valueCodeableConcept": concept(SNOMED, "33586001", "Sitting position")}],
        note=[{"text": "Seated, left arm, automated cuff, rested 5 minutes: 164/67 mmHg."}])),
    ("bp-interpretation-agrees", BP, lambda t: bp(
        t, interpretation=[concept(V3, "H", "High")],
        comp={0: {"interpretation": [concept(V3, "H", "High")]}, 1: {"interpretation": [concept(V3, "N", "Normal")]}})),
    ("bp-meta-identifier-narrative-issued", BP, lambda t: bp(
        t, meta={"profile": ["http://hl7.org/fhir/StructureDefinition/bp"]},
        identifier=[{"system": "https://example.org/obs", "value": "BP-1"}], issued="2030-01-01T00:00:00Z",
        text={"status": "generated", "div": DIV.format("Blood pressure 164/67 mmHg, left arm, sitting")})),
]


@pytest.mark.parametrize(("case_id", "resource"), [r[1:] for r in RIGHT], ids=[r[0] for r in RIGHT])
def test_right_passes(case_id, resource):
    s = score(case_id, resource)
    assert s.passed, s.reason


def test_high_on_124_89_passes():
    """The issue's reading with the interpretation its values support (stage 1: high)."""
    s = score(BP, lambda t: bp(t, interpretation=[concept(V3, "H", "High")], note=[{"text": "Elevated."}]),
              values=(124, 89))
    assert s.passed, s.reason


def test_hypertensive_on_a_normal_reading_fails():
    right = score(BP, lambda t: bp(t, note=[{"text": "Normal reading: 110/70."}]), values=(110, 70))
    assert right.passed, right.reason
    wrong = score(BP, lambda t: bp(t, note=[{"text": "Hypertensive reading."}]), values=(110, 70))
    check = next(c for c in wrong.dimensions["correct"].checks if c.name == "claims")
    assert not check.passed and "'hypertensive'" in check.reason


@pytest.mark.parametrize(("values", "panel"), [((110, 70), "normal"), ((124, 78), "high"), ((124, 89), "high"),
                                               ((150, 55), "high"), ((185, 90), "critical-high"),
                                               ((100, 125), "critical-high"), ((85, 55), "low")])
def test_bp_interpretation(values, panel):
    assert bp_interpretation(*values)["panel"] == panel


def test_unknown_system_rule_both_ways():
    allowed = frozenset({"hba1c"})
    assert coding_issue({"system": "urn:x", "code": "Q-17"}, allowed, "c") is None
    assert coding_issue({"code": "Q-17"}, allowed, "c") is None  # no system at all: unknown, not contradicting
    assert "cannot be verified" in coding_issue({"system": "urn:x", "code": "Q-17", "display": "HbA1c"}, allowed, "c")
    assert "lipid panel's" in coding_issue({"system": "urn:x", "code": "16254007"}, allowed, "c")
    # a known system with a code the map does not hold: cannot be verified either
    assert "no code the concept map knows" in coding_issue({"system": SNOMED, "code": "999"}, allowed, "c")


def test_a_date_in_a_note_is_no_reading():
    s = score(BP, lambda t: bp(t, note=[{"text": "Seen 07/17/2020, reading 164/67."}]))
    assert s.passed, s.reason


# ---------------------------------------------------------------- a stop: only the status, a reason in words
def _stop(**over):
    from test_orders_scorer import STOP, target_mr

    case = load(STOP)
    fake = FakeFhir(case.inputs["bundle"])
    fake.fhir_update({**target_mr(fake, case.truth), "status": "stopped", **over})
    return score_orders(fake.activity(), case.truth)


def test_a_coded_status_reason_is_unverified():
    s = _stop(statusReason={"coding": [{"system": SNOMED, "code": "62014003", "display": "Adverse reaction"}]})
    assert {k for k, d in s.dimensions.items() if not d.passed} == {"correct"}, s.reason
    assert "unverified element: statusReason.coding[0].code" in s.dimensions["correct"].reason


def test_a_status_reason_in_words_and_an_added_note_pass():
    s = _stop(statusReason={"text": "Stopped: rash"}, note=[{"text": "Stopped per clinic note.", "time": "2021-01-01"}])
    assert s.passed, s.reason


@pytest.mark.parametrize("case_id", sorted(c for c in __import__("test_orders_scorer")._CASES
                                           if c.startswith("bp-") and not c.startswith("bp-repeat")))
def test_the_nursing_note_copied_in_passes(case_id):
    """The case's own note, verbatim, as the reading's note and narrative (what a model does)."""
    case = load(case_id)
    note = case.inputs["note"]
    s = score(case_id, lambda t: bp(t, note=[{"text": note}], text={"status": "generated", "div": DIV.format(note)}))
    assert s.passed, s.reason
