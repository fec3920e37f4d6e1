"""Issue 28's orders probes through the real FHIR server: what the server stores of a right
order or reading with harmless extras (meta, identifiers, a narrative, translations to SNOMED
CT, an agreeing note, body site, position and interpretation) passes every dimension, and a
wrong one (a lipid-panel coding beside LOINC 4548-4; a systolic component also coded
diastolic with its unit in kPa) fails ``correct`` under the named check. The in-process
stand-in's probes are ``tests/scorers/test_orders_default_deny.py``; this shows the server's
storage (its bookkeeping, its normalisation) neither fails the right nor hides the wrong."""

from __future__ import annotations

import pytest

from test_orders_server_attacks import acted, call, order, server  # noqa: F401 - the module's server fixture

LOINC, SNOMED, UCUM = "http://loinc.org", "http://snomed.info/sct", "http://unitsofmeasure.org"
V3 = "http://terminology.hl7.org/CodeSystem/v3-ObservationInterpretation"
HBA = "hba1c-due-lapsed-Danae_Kshlerin_87a339d0"
BP_CASE = "bp-Asa_Hermiston_c79b748f"
DIV = '<div xmlns="http://www.w3.org/1999/xhtml">{}</div>'


def right_order(case):
    return order(case, meta={"tag": [{"system": "https://example.org/agent", "code": "protocol"}]},
                 identifier=[{"system": "https://example.org/orders", "value": "ORD-1"}],
                 text={"status": "generated", "div": DIV.format("Hemoglobin A1c order (diabetes monitoring)")},
                 code={"coding": [{"system": LOINC, "code": "4548-4", "display": "Hemoglobin A1c/Hemoglobin.total in Blood"},
                                  {"system": SNOMED, "code": "43396009", "display": "Hemoglobin A1c measurement"}],
                       "text": "HbA1c"},
                 category=[{"coding": [{"system": SNOMED, "code": "108252007", "display": "Laboratory procedure"}]}],
                 reasonCode=[{"coding": [{"system": SNOMED, "code": "44054006", "display": "Diabetes mellitus type 2"}]}],
                 note=[{"text": "Annual HbA1c per the diabetes protocol."}])


def lipid_order(case):
    return order(case, code={"coding": [{"system": LOINC, "code": "4548-4"},
                                        {"system": "http://www.ama-assn.org/go/cpt", "code": "80061",
                                         "display": "Lipid panel"}]})


def reading(case, systolic_codings=None, unit="mmHg", **over):
    e = case.truth["expected"]
    side = e["note_says"]["body-site"][0]
    site = {"left-arm": ("368208006", "Left upper arm structure"), "right-arm": ("368209003", "Right upper arm structure")}[side]

    def comp(codings, value):
        return {"code": {"coding": codings}, "valueQuantity": {"value": value, "unit": unit, "system": UCUM,
                                                               "code": "mm[Hg]"}}

    return {"resourceType": "Observation", "status": "final",
            "category": [{"coding": [{"system": "http://terminology.hl7.org/CodeSystem/observation-category",
                                      "code": "vital-signs", "display": "Vital Signs"}]}],
            "code": {"coding": [{"system": LOINC, "code": "85354-9"}]}, "subject": {"reference": case.truth["patient"]},
            "effectiveDateTime": e["effective"],
            "component": [comp(systolic_codings or [{"system": LOINC, "code": "8480-6"}], e["systolic"]),
                          comp([{"system": LOINC, "code": "8462-4"}], e["diastolic"])], **over,
            **({} if over else {"bodySite": {"coding": [{"system": SNOMED, "code": site[0], "display": site[1]}]},
                                "extension": [{"url": "http://hl7.org/fhir/StructureDefinition/observation-bodyPosition",
                                               "valueCodeableConcept": {"coding": [{"system": SNOMED, "code": "33586001",
                                                                                    "display": "Sitting position"}]}}],
                                "interpretation": [{"coding": [{"system": V3, "code": "H", "display": "High"}]}],
                                "note": [{"text": "Seated, rested, automated cuff."}]})}


def wrong_reading(case):
    return reading(case, [{"system": LOINC, "code": "8480-6"}, {"system": SNOMED, "code": "271650006"}], unit="kPa",
                   identifier=[{"value": "x"}])


CASES = [("right-order", HBA, right_order, None), ("right-reading", BP_CASE, reading, None),
         ("lipid-coding", HBA, lipid_order, ("codings", "denotes lipid panel")),
         ("systolic-coded-diastolic-in-kpa", BP_CASE, wrong_reading, ("codings", "denotes diastolic"))]


@pytest.mark.parametrize(("case_id", "make", "fails"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_through_the_server(server, case_id, make, fails):  # noqa: F811 - the fixture
    def act(base, case):
        status, _ = call(base, "POST", "ServiceRequest" if case.truth["kind"] == "hba1c" else "Observation", make(case))
        assert status == 201

    _, score = acted(server, case_id, act)
    if fails is None:
        assert score.passed, score.reason
        return
    assert {k for k, d in score.dimensions.items() if not d.passed} == {"correct"}, score.reason
    check = next(c for c in score.dimensions["correct"].checks if c.name == fails[0])
    assert not check.passed and fails[1] in check.reason, check.reason
    if case_id.startswith("systolic"):
        unit = next(c for c in score.dimensions["correct"].checks if c.name == "unit_text")
        assert not unit.passed and "kPa" in unit.reason
