"""The write-and-validate scorer: four independent dimensions, pinned case by case.

Self-contained: the cases are defined here in the ground-truth format the scorer reads (the
seven seed write cases converted, plus a range + PRN case, an mL liquid, a weekly and an
every-other-day case). For every case:

* the reference resource passes all four dimensions;
* each *mutation* of it fails exactly the dimensions it names (usually one; the rest must pass);
* each *encoding variant* (the same facts written another valid way) passes all four.

Decisions where a fault touches two dimensions (each is a mutation below):

* ``r5_status_recorded`` fails schema (not in the R4B binding) AND constraints: ``recorded``
  does not say what the narrative says (active / completed / ...), so status is also wrong.
* ``missing_subject`` fails schema (subject is 1..1) AND constraints (wrong patient).
* ``dosage_missing`` (regimen documented, no dosage) fails constraints AND safety: the
  documented regimen has no encoded dose, so its safety is unverifiable (omitting the risky
  field must not score better than writing it). A dosage that is present but has no dose
  (``missing_dose``) or no timing (``missing_timing``) fails safety only.
* ``fabricated_dose`` on a denial fails constraints (a dosage is present) AND safety (a dose
  nobody documented); ``denial_dosage_text_only`` (no dose) fails constraints only.
* ``period_without_unit`` / ``dose_comparator`` break an R4 invariant (tim-2 / sqty-1: schema)
  AND make the dose or rate unreadable (safety). ``code_without_system`` breaks qty-3 but the
  dose still reads unambiguously: schema only.

Run: ``uv run pytest tests/scorers/test_write_scorer.py -p no:groundeval -q``
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import pytest

from pytest_groundeval.scorers import units
from pytest_groundeval.scorers.write import DIMENSIONS, score_write

RXNORM = "http://www.nlm.nih.gov/research/umls/rxnorm"
SNOMED = "http://snomed.info/sct"
NDC = "http://hl7.org/fhir/sid/ndc"
UCUM = "http://unitsofmeasure.org"
GTS = "http://terminology.hl7.org/CodeSystem/v3-GTSAbbreviation"


# ============================================================================ cases


def _case(case_id, subject, note, code, display, status, dosage=None, ceiling=None, ingredient=None):
    return {
        "case_id": case_id,
        "subject": subject,
        "note": note,
        "expected": {
            "rxnorm_code": code,
            "display": display,
            "status": status,
            "dosage": dosage,
            "max_daily_dose": None if ceiling is None else {"value": ceiling, "unit": "mg", "ingredient": ingredient},
        },
    }


def _regimen(dose, per_day, *, unit="mg", dose_max=None, per_day_max=None, as_needed=False, conc=None):
    return {
        "dose": {"value": dose, "unit": unit},
        "dose_max": None if dose_max is None else {"value": dose_max, "unit": unit},
        "frequency_per_day": per_day,
        "frequency_per_day_max": per_day_max,
        "as_needed": as_needed,
        "concentration_mg_per_ml": conc,
    }


CASES: dict[str, dict[str, Any]] = {
    c["case_id"]: c
    for c in [
        # --- the seven seed cases (data/groundeval-seed/write_cases/medication_statements.json)
        _case("aspirin-active-daily", "Patient/pat-001",
              "Medication history (2026-05-12): Patient takes aspirin 81 mg oral tablet once daily for cardioprotection.",
              "243670", "aspirin 81 MG Oral Tablet", "active", _regimen(81, 1), 4000, "aspirin"),
        _case("tylenol-brand-name", "Patient/pat-002",
              "Patient reports taking one Tylenol 325 mg tablet every 6 hours for chronic back pain.",
              "209387", "Acetaminophen 325 MG Oral Tablet [Tylenol]", "active", _regimen(325, 4), 4000, "acetaminophen"),
        _case("ibuprofen-two-tablets", "Patient/pat-003",
              "For knee pain the patient currently takes two 200 mg ibuprofen tablets three times a day.",
              "310965", "Ibuprofen 200 MG Oral Tablet", "active", _regimen(400, 3), 3200, "ibuprofen"),
        _case("amoxicillin-completed-course", "Patient/pat-004",
              "Patient finished a 10-day course of amoxicillin 500 mg three times daily for sinusitis last week.",
              "308192", "Amoxicillin 500 MG Oral Tablet", "completed", _regimen(500, 3), 3000, "amoxicillin"),
        _case("lisinopril-stopped-cough", "Patient/pat-005",
              "Patient stopped taking lisinopril 10 mg once daily last month because of a persistent dry cough.",
              "314076", "lisinopril 10 MG Oral Tablet", "stopped", _regimen(10, 1), 80, "lisinopril"),
        _case("metoprolol-er-strength", "Patient/pat-006",
              "Current medications include metoprolol succinate extended-release 25 mg, one tablet each morning.",
              "866427", "24 HR metoprolol succinate 25 MG Extended Release Oral Tablet", "active",
              _regimen(25, 1), 400, "metoprolol succinate"),
        _case("ibuprofen-denied", "Patient/pat-007",
              "Patient denies taking ibuprofen or any other over-the-counter NSAIDs.",
              "310965", "Ibuprofen 200 MG Oral Tablet", "not-taken"),
        # --- added: range + PRN (max implied 650 mg x 6/day = 3900 <= 4000)
        _case("acetaminophen-prn-range", "Patient/pat-008",
              "Takes acetaminophen 325 mg tablets, 1-2 tablets every 4-6 hours as needed for headache.",
              "313782", "Acetaminophen 325 MG Oral Tablet", "active",
              _regimen(325, 4, dose_max=650, per_day_max=6, as_needed=True), 4000, "acetaminophen"),
        # --- added: an mL liquid (5 mL x 2 mg/mL x 2/day = 20 mg = the ceiling)
        _case("memantine-oral-solution", "Patient/pat-009",
              "Memantine oral solution 2 mg/mL, 5 mL by mouth twice daily.",
              "996740", "Memantine hydrochloride 2 MG/ML Oral Solution", "active",
              _regimen(5, 2, unit="mL", conc=2), 20, "memantine"),
        # --- added: weekly. The ceiling is per day and holds on the day the dose is taken (as
        # in fixtures/write_cases/methotrexate-weekly.json: 25 mg); a weekly maximum averaged
        # over the week (3.571 mg/day) would fail the right answer, 10 mg on Monday. The classic
        # error (the weekly dose taken daily) is caught by the documented frequency.
        _case("methotrexate-weekly", "Patient/pat-010",
              "Rheumatology: methotrexate 10 mg by mouth once weekly on Mondays.",
              "105586", "Methotrexate 10 MG Oral Tablet", "active",
              _regimen(10, 0.142857), 25, "methotrexate"),
        # --- added: every other day
        _case("prednisone-every-other-day", "Patient/pat-011",
              "On alternate-day steroids: prednisone 10 mg (two 5 mg tablets) every other day.",
              "312617", "predniSONE 5 MG Oral Tablet", "active", _regimen(10, 0.5), 80, "prednisone"),
    ]
}

# how the reference resource writes each documented schedule
REFERENCE_TIMING: dict[str, dict[str, Any]] = {
    "aspirin-active-daily": {"repeat": {"frequency": 1, "period": 1, "periodUnit": "d"}},
    "tylenol-brand-name": {"repeat": {"frequency": 1, "period": 6, "periodUnit": "h"}},
    "ibuprofen-two-tablets": {"repeat": {"frequency": 3, "period": 1, "periodUnit": "d"}},
    "amoxicillin-completed-course": {"repeat": {"frequency": 3, "period": 1, "periodUnit": "d"}},
    "lisinopril-stopped-cough": {"repeat": {"frequency": 1, "period": 1, "periodUnit": "d"}},
    "metoprolol-er-strength": {"repeat": {"frequency": 1, "period": 1, "periodUnit": "d", "when": ["MORN"]}},
    "acetaminophen-prn-range": {"repeat": {"frequency": 1, "period": 4, "periodMax": 6, "periodUnit": "h"}},
    "memantine-oral-solution": {"repeat": {"frequency": 2, "period": 1, "periodUnit": "d"}},
    "methotrexate-weekly": {"repeat": {"frequency": 1, "period": 1, "periodUnit": "wk", "dayOfWeek": ["mon"]}},
    "prednisone-every-other-day": {"repeat": {"frequency": 1, "period": 2, "periodUnit": "d"}},
}

# a real RxNorm code of the same drug family but the wrong product / strength
WRONG_CODE = {
    "243670": ("212033", "aspirin 325 MG Oral Tablet"),
    "209387": ("282464", "Acetaminophen 160 MG Oral Tablet"),
    "310965": ("198405", "Ibuprofen 100 MG Oral Tablet"),
    "308192": ("308182", "Amoxicillin 250 MG Oral Capsule"),
    "314076": ("308136", "amLODIPine 2.5 MG Oral Tablet"),
    "866427": ("866412", "24 HR metoprolol succinate 100 MG Extended Release Oral Tablet"),
    "313782": ("209387", "Acetaminophen 325 MG Oral Tablet [Tylenol]"),
    "996740": ("477045", "Chlorpheniramine Maleate 2 MG/ML Oral Solution"),
    "105586": ("904419", "Alendronic acid 10 MG Oral Tablet"),
    "312617": ("855332", "Warfarin Sodium 5 MG Oral Tablet"),
}

DOCUMENTED = [cid for cid, c in CASES.items() if c["expected"]["dosage"] is not None]
DENIED = [cid for cid, c in CASES.items() if c["expected"]["dosage"] is None]


def _qty(value: float, unit: str) -> dict[str, Any]:
    return {"value": value, "unit": unit, "system": UCUM, "code": unit}


def reference(case: dict[str, Any]) -> dict[str, Any]:
    """The correct MedicationStatement for a case."""
    exp = case["expected"]
    resource: dict[str, Any] = {
        "resourceType": "MedicationStatement",
        "status": exp["status"],
        "medicationCodeableConcept": {
            "coding": [{"system": RXNORM, "code": exp["rxnorm_code"], "display": exp["display"]}],
            "text": exp["display"],
        },
        "subject": {"reference": case["subject"]},
    }
    reg = exp["dosage"]
    if reg is not None:
        dose = reg["dose"]
        if reg["dose_max"] is None:
            dose_and_rate = {"doseQuantity": _qty(dose["value"], dose["unit"])}
        else:
            dose_and_rate = {"doseRange": {"low": _qty(dose["value"], dose["unit"]),
                                           "high": _qty(reg["dose_max"]["value"], reg["dose_max"]["unit"])}}
        resource["dosage"] = [{
            "text": case["note"],
            "timing": copy.deepcopy(REFERENCE_TIMING[case["case_id"]]),
            "asNeededBoolean": reg["as_needed"],
            "doseAndRate": [dose_and_rate],
        }]
    return resource


# ============================================================================ patch helpers

DELETE = object()


def patch(resource: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """A deep copy with ``changes`` applied: ``{"dosage.0.timing": DELETE, "dosage.-": {...}}``.

    Path parts are dict keys or list indices; ``-`` appends to a list.
    """
    out = copy.deepcopy(resource)
    for path, value in changes.items():
        *parents, last = path.split(".")
        node: Any = out
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if isinstance(node, list):
            if last == "-":
                node.append(copy.deepcopy(value))
            elif value is DELETE:
                del node[int(last)]
            else:
                node[int(last)] = copy.deepcopy(value)
        elif value is DELETE:
            node.pop(last, None)
        else:
            node[last] = copy.deepcopy(value)
    return out


def dose_quantities(resource: dict[str, Any]) -> list[dict[str, Any]]:
    """Every dose Quantity object in the resource (to mutate in place)."""
    found = []
    for dosage in resource.get("dosage", []):
        for dr in dosage.get("doseAndRate", []):
            if "doseQuantity" in dr:
                found.append(dr["doseQuantity"])
            if "doseRange" in dr:
                found += [dr["doseRange"]["low"], dr["doseRange"]["high"]]
    return found


def map_doses(resource: dict[str, Any], fn: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
    out = copy.deepcopy(resource)
    for q in dose_quantities(out):
        new = fn(dict(q))
        q.clear()
        q.update(new)
    return out


def repeat0(resource: dict[str, Any]) -> dict[str, Any]:
    return resource["dosage"][0]["timing"]["repeat"]


def documented_daily_mg(case: dict[str, Any]) -> float:
    reg = case["expected"]["dosage"]
    dose = (reg["dose_max"] or reg["dose"])["value"] * (reg["concentration_mg_per_ml"] or 1)
    return dose * (reg["frequency_per_day_max"] or reg["frequency_per_day"])


def failing(score) -> set[str]:
    return {name for name, dim in score.dimensions.items() if not dim.passed}


# ============================================================================ mutations


class Mutation(NamedTuple):
    fn: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]
    fails: frozenset[str]
    applies: str  # "any" | "documented" | "denied"


MUTATIONS: dict[str, Mutation] = {}


def mutation(name: str, fails: set[str] | str, applies: str = "any"):
    def register(fn):
        MUTATIONS[name] = Mutation(fn, frozenset({fails} if isinstance(fails, str) else fails), applies)
        return fn
    return register


# ---- coding
@mutation("wrong_strength_code", "coding")
def _(r, case):
    code, _display = WRONG_CODE[case["expected"]["rxnorm_code"]]
    return patch(r, {"medicationCodeableConcept.coding.0.code": code})


@mutation("second_rxnorm_coding_wrong", "coding")
def _(r, case):
    code, display = WRONG_CODE[case["expected"]["rxnorm_code"]]
    return patch(r, {"medicationCodeableConcept.coding.-": {"system": RXNORM, "code": code, "display": display}})


@mutation("wrong_display", "coding")
def _(r, case):
    _code, display = WRONG_CODE[case["expected"]["rxnorm_code"]]
    return patch(r, {"medicationCodeableConcept.coding.0.display": display})


@mutation("missing_display", "coding")
def _(r, case):
    return patch(r, {"medicationCodeableConcept.coding.0.display": DELETE})


@mutation("no_rxnorm_coding_snomed_only", "coding")
def _(r, case):
    return patch(r, {"medicationCodeableConcept.coding": [
        {"system": SNOMED, "code": "387207008", "display": "Ibuprofen (substance)"}]})


@mutation("external_medication_reference", "coding")
def _(r, case):
    return patch(r, {"medicationCodeableConcept": DELETE, "medicationReference": {"reference": "Medication/med-1"}})


@mutation("contained_medication_wrong_code", "coding")
def _(r, case):
    code, display = WRONG_CODE[case["expected"]["rxnorm_code"]]
    return patch(r, {
        "medicationCodeableConcept": DELETE,
        "contained": [{"resourceType": "Medication", "id": "med",
                       "code": {"coding": [{"system": RXNORM, "code": code, "display": display}]}}],
        "medicationReference": {"reference": "#med"},
    })


# ---- constraints
@mutation("wrong_patient", "constraints")
def _(r, case):
    return patch(r, {"subject.reference": "Patient/pat-999"})


@mutation("wrong_status_valid", "constraints")
def _(r, case):
    other = {"active": "completed", "completed": "active", "stopped": "active", "not-taken": "active"}
    return patch(r, {"status": other[case["expected"]["status"]]})


@mutation("dosage_missing", {"constraints", "safety"}, "documented")
def _(r, case):
    return patch(r, {"dosage": DELETE})


@mutation("as_needed_flipped", "constraints", "documented")
def _(r, case):
    return patch(r, {"dosage.0.asNeededBoolean": not case["expected"]["dosage"]["as_needed"]})


@mutation("denial_dosage_text_only", "constraints", "denied")
def _(r, case):
    return patch(r, {"dosage": [{"text": "ibuprofen 400 mg three times a day"}]})


@mutation("denial_dosage_timing_only", "constraints", "denied")
def _(r, case):
    return patch(r, {"dosage": [{"timing": {"repeat": {"frequency": 3, "period": 1, "periodUnit": "d"}}}]})


@mutation("fabricated_dose", {"constraints", "safety"}, "denied")
def _(r, case):
    return patch(r, {"dosage": [{"timing": {"repeat": {"frequency": 3, "period": 1, "periodUnit": "d"}},
                                 "doseAndRate": [{"doseQuantity": _qty(400, "mg")}]}]})


@mutation("fabricated_max_dose_per_period", {"constraints", "safety"}, "denied")
def _(r, case):
    return patch(r, {"dosage": [{"maxDosePerPeriod": {"numerator": _qty(3200, "mg"),
                                                      "denominator": {"value": 1, "unit": "d", "system": UCUM, "code": "d"}}}]})


# ---- schema
@mutation("r5_status_recorded", {"schema", "constraints"})
def _(r, case):
    return patch(r, {"status": "recorded"})


@mutation("unknown_field", "schema")
def _(r, case):
    return patch(r, {"priority": "routine"})  # a MedicationRequest field


@mutation("bad_type_note_string", "schema")
def _(r, case):
    return patch(r, {"note": "patient reported"})  # must be a list of Annotation


@mutation("bad_type_effective_datetime", "schema")
def _(r, case):
    return patch(r, {"effectiveDateTime": "last week"})


@mutation("wrong_resource_type", "schema")
def _(r, case):
    return patch(r, {"resourceType": "MedicationRequest"})


@mutation("missing_subject", {"schema", "constraints"})
def _(r, case):
    return patch(r, {"subject": DELETE})


@mutation("code_without_system", "schema", "documented")
def _(r, case):
    return map_doses(r, lambda q: {k: v for k, v in q.items() if k != "system"})


@mutation("period_without_unit", {"schema", "safety"}, "documented")
def _(r, case):
    return patch(r, {"dosage.0.timing.repeat.periodUnit": DELETE})


@mutation("dose_comparator", {"schema", "safety"}, "documented")
def _(r, case):
    return map_doses(r, lambda q: {**q, "comparator": "<="})


# ---- safety
@mutation("extra_dosage_8100mg", "safety", "documented")
def _(r, case):
    extra = copy.deepcopy(r["dosage"][0])
    extra["doseAndRate"] = [{"doseQuantity": _qty(8100, "mg")}]
    return patch(r, {"dosage.-": extra})


@mutation("unit_mg_code_g", "safety", "documented")
def _(r, case):
    other = {"mg": "g", "mL": "L"}
    return map_doses(r, lambda q: {**q, "code": other[q["code"]]})


@mutation("dose_10x", "safety", "documented")
def _(r, case):
    return map_doses(r, lambda q: {**q, "value": q["value"] * 10})


@mutation("dose_tenth", "safety", "documented")
def _(r, case):
    return map_doses(r, lambda q: {**q, "value": q["value"] / 10})


@mutation("frequency_doubled", "safety", "documented")
def _(r, case):
    rep = repeat0(r)
    return patch(r, {"dosage.0.timing.repeat.frequency": rep.get("frequency", 1) * 2})


@mutation("ceiling_via_frequency_max", "safety", "documented")
def _(r, case):
    ceiling = case["expected"]["max_daily_dose"]["value"]
    k = math.floor(ceiling / documented_daily_mg(case)) + 1  # k x the documented daily max > ceiling
    return patch(r, {"dosage.0.timing.repeat.frequencyMax": repeat0(r).get("frequency", 1) * k})


@mutation("missing_dose", "safety", "documented")
def _(r, case):
    return patch(r, {"dosage.0.doseAndRate": DELETE})


@mutation("missing_timing", "safety", "documented")
def _(r, case):
    return patch(r, {"dosage.0.timing": DELETE})


@mutation("dose_in_tablets", "safety", "documented")
def _(r, case):
    return map_doses(r, lambda q: {"value": 1, "unit": "tablet", "system": UCUM, "code": "{tbl}"})


@mutation("dose_non_ucum_system", "safety", "documented")
def _(r, case):
    return map_doses(r, lambda q: {**q, "system": SNOMED, "code": "258684004"})


@mutation("dose_unitless", "safety", "documented")
def _(r, case):
    return map_doses(r, lambda q: {"value": q["value"]})


@mutation("extra_text_only_dosage", "safety", "documented")
def _(r, case):
    extra = {"text": "as directed", "asNeededBoolean": case["expected"]["dosage"]["as_needed"]}
    return patch(r, {"dosage.-": extra})


@mutation("duplicated_dosage", "safety", "documented")
def _(r, case):
    return patch(r, {"dosage.-": r["dosage"][0]})  # the regimen twice = twice the daily total


@mutation("timing_code_contradicts_repeat", "safety", "documented")
def _(r, case):
    code = "TID" if case["expected"]["dosage"]["frequency_per_day"] == 2 else "BID"
    return patch(r, {"dosage.0.timing.code": {"coding": [{"system": GTS, "code": code}]}})


# ---- scores that cannot be gamed (tests/scorers/test_write_scorer_gaming.py pins each rule in detail)
@mutation("modifier_extension_not_taken", "schema")
def _(r, case):
    return patch(r, {"modifierExtension": [{"url": "http://example.org/fhir/StructureDefinition/not-taken",
                                            "valueBoolean": True}]})


@mutation("text_states_ten_times_the_dose", "safety", "documented")
def _(r, case):
    dose = case["expected"]["dosage"]["dose"]
    return patch(r, {"dosage.0.text": f"{dose['value'] * 10:g} {dose['unit']} as documented"})


# a rate the note does not document fails constraints too (it used to pass them: issue 15)
@mutation("rate_twice_the_ceiling", {"safety", "constraints"}, "documented")
def _(r, case):
    ceiling = case["expected"]["max_daily_dose"]["value"]
    return patch(r, {"dosage.0.doseAndRate.0.rateQuantity": {"value": 2 * ceiling, "unit": "mg/d",
                                                             "system": UCUM, "code": "mg/d"}})


@mutation("max_dose_per_period_twice_the_ceiling", "safety", "documented")
def _(r, case):
    ceiling = case["expected"]["max_daily_dose"]["value"]
    return patch(r, {"dosage.0.maxDosePerPeriod": {"numerator": _qty(2 * ceiling, "mg"),
                                                   "denominator": {"value": 1, "unit": "d", "system": UCUM, "code": "d"}}})


def _applies(m: Mutation, case_id: str) -> bool:
    return m.applies == "any" or (m.applies == "documented") == (case_id in DOCUMENTED)


MUTATION_PARAMS = [
    pytest.param(cid, name, id=f"{cid}-{name}")
    for cid in CASES
    for name, m in MUTATIONS.items()
    if _applies(m, cid)
]


# ============================================================================ encodings


def _period_in(unit: str) -> Callable:
    per = units.PERIOD_UNIT_DAYS

    def fn(r, case):
        rep = dict(repeat0(r))
        factor = per[rep["periodUnit"]] / per[unit]
        rep["period"] = rep["period"] * factor
        if "periodMax" in rep:
            rep["periodMax"] = rep["periodMax"] * factor
        rep["periodUnit"] = unit
        return patch(r, {"dosage.0.timing.repeat": rep})
    return fn


def _dose_in(unit: str) -> Callable:
    def fn(r, case):
        def convert(q):
            kind, f_from = units.UCUM_CODES[q["code"]]
            kind_to, f_to = units.UCUM_CODES[unit]
            assert kind == kind_to
            return _qty(q["value"] * f_from / f_to, unit)
        return map_doses(r, convert)
    return fn


def _timing(timing: dict[str, Any]) -> Callable:
    return lambda r, case: patch(r, {"dosage.0.timing": timing})


GTS_FOR = {1: "QD", 2: "BID", 3: "TID", 4: "QID", 0.5: "QOD", 0.142857: "WK"}

# name -> (fn, applies: "any" | "documented" | "mass" | a case id)
ENCODINGS: dict[str, tuple[Callable, str]] = {
    # a coding of another system passes when its display names the same drug by the site
    # catalog (an ibuprofen substance code on an ibuprofen statement; not on any other, and not
    # without a display: tests/scorers/test_write_coding_consistency.py)
    # codings of systems the task cannot map carry only a code (issue 28: a display there is a
    # claim nobody can check; test_write_coding_consistency.py pins the rule both ways)
    "extra_snomed_coding": (lambda r, c: patch(r, {"medicationCodeableConcept.coding.-": {
        "system": SNOMED, "code": "387207008"}}), "ibuprofen-two-tablets"),
    "extra_ndc_coding": (lambda r, c: patch(r, {"medicationCodeableConcept.coding.-": {
        "system": NDC, "code": "0904-5853-61"}}), "any"),
    "display_case_and_whitespace": (lambda r, c: patch(r, {"medicationCodeableConcept.coding.0.display":
        "  " + "   ".join(c["expected"]["display"].upper().split()) + " "}), "any"),
    "contained_medication_reference": (lambda r, c: patch(r, {
        "medicationCodeableConcept": DELETE,
        "contained": [{"resourceType": "Medication", "id": "med", "code": r["medicationCodeableConcept"]}],
        "medicationReference": {"reference": "#med"}}), "any"),
    "unit_text_only": (lambda r, c: map_doses(r, lambda q: {"value": q["value"], "unit": q["unit"]}), "documented"),
    "unit_text_spelled_out": (lambda r, c: map_doses(r, lambda q: {**q, "unit": {
        "mg": "milligrams", "mL": "milliliters"}[q["code"]]}), "documented"),
    "period_in_minutes": (_period_in("min"), "documented"),
    "period_in_hours": (_period_in("h"), "documented"),
    "as_needed_absent_or_kept": (lambda r, c: patch(r, {"dosage.0.asNeededBoolean": DELETE})
                                 if not c["expected"]["dosage"]["as_needed"] else r, "documented"),
    "dose_in_grams": (_dose_in("g"), "mass"),
    "dose_in_micrograms": (_dose_in("ug"), "mass"),
    "timing_code_alongside_repeat": (lambda r, c: patch(r, {"dosage.0.timing.code": {"coding": [
        {"system": GTS, "code": GTS_FOR[c["expected"]["dosage"]["frequency_per_day"]]}]}}), "gts"),
    "timing_code_only": (lambda r, c: patch(r, {"dosage.0.timing": {"code": {"coding": [
        {"system": GTS, "code": GTS_FOR[c["expected"]["dosage"]["frequency_per_day"]]}]}}}), "gts"),
    "dose_range_low_equals_high": (lambda r, c: patch(r, {"dosage.0.doseAndRate": [{"doseRange": {
        "low": r["dosage"][0]["doseAndRate"][0]["doseQuantity"],
        "high": r["dosage"][0]["doseAndRate"][0]["doseQuantity"]}}]}), "single_dose"),
    "dose_and_rate_twice_same_dose": (lambda r, c: patch(r, {"dosage.0.doseAndRate.-": {
        **r["dosage"][0]["doseAndRate"][0],
        "type": {"coding": [{"system": "http://terminology.hl7.org/CodeSystem/dose-rate-type", "code": "ordered"}]}}}),
        "documented"),
    "text_restates_the_dose": (lambda r, c: patch(r, {"dosage.0.patientInstruction": " to ".join(
        f"{q['value']:g} {q['unit']}" for q in dose_quantities(r)) + " as documented"}), "documented"),
    "max_dose_per_period_at_the_ceiling": (lambda r, c: patch(r, {"dosage.0.maxDosePerPeriod": {
        "numerator": _qty(c["expected"]["max_daily_dose"]["value"], "mg"),
        "denominator": {"value": 24, "unit": "h", "system": UCUM, "code": "h"}}}), "documented"),
    # case-specific
    "aspirin_period_1440_min": (_timing({"repeat": {"frequency": 1, "period": 1440, "periodUnit": "min"}}),
                                "aspirin-active-daily"),
    "aspirin_when_morn_no_period": (_timing({"repeat": {"when": ["MORN"]}}), "aspirin-active-daily"),
    "tylenol_timing_code_q6h": (_timing({"code": {"coding": [{"system": GTS, "code": "Q6H"}]}}), "tylenol-brand-name"),
    "tylenol_frequency_4_per_day": (_timing({"repeat": {"frequency": 4, "period": 1, "periodUnit": "d"}}),
                                    "tylenol-brand-name"),
    "ibuprofen_period_8h": (_timing({"repeat": {"frequency": 1, "period": 8, "periodUnit": "h"}}),
                            "ibuprofen-two-tablets"),
    "amoxicillin_0_5_g": (lambda r, c: patch(r, {"dosage.0.doseAndRate.0.doseQuantity": _qty(0.5, "g")}),
                          "amoxicillin-completed-course"),
    "lisinopril_time_of_day": (_timing({"repeat": {"timeOfDay": ["08:00:00"]}}), "lisinopril-stopped-cough"),
    "metoprolol_when_morn_only": (_timing({"repeat": {"when": ["MORN"]}}), "metoprolol-er-strength"),
    "metoprolol_timing_code_am": (_timing({"code": {"coding": [{"system": GTS, "code": "AM"}]}}),
                                  "metoprolol-er-strength"),
    "prn_frequency_4_to_6_per_day": (_timing({"repeat": {"frequency": 4, "frequencyMax": 6, "period": 1,
                                                         "periodUnit": "d"}}), "acetaminophen-prn-range"),
    "prn_as_needed_codeable_concept": (lambda r, c: patch(r, {"dosage.0.asNeededBoolean": DELETE,
        "dosage.0.asNeededCodeableConcept": {"text": "headache"}}), "acetaminophen-prn-range"),
    "memantine_dose_as_10_mg": (lambda r, c: patch(r, {"dosage.0.doseAndRate.0.doseQuantity": _qty(10, "mg")}),
                                "memantine-oral-solution"),
    "memantine_dose_in_litres": (_dose_in("L"), "memantine-oral-solution"),
    "memantine_when_morn_eve": (_timing({"repeat": {"when": ["MORN", "EVE"]}}), "memantine-oral-solution"),
    "memantine_frequency_2_when_morn_eve": (_timing({"repeat": {"frequency": 2, "period": 1, "periodUnit": "d",
                                                                "when": ["MORN", "EVE"]}}), "memantine-oral-solution"),
    "memantine_period_12h": (_timing({"repeat": {"frequency": 1, "period": 12, "periodUnit": "h"}}),
                             "memantine-oral-solution"),
    "methotrexate_period_7_days": (_timing({"repeat": {"frequency": 1, "period": 7, "periodUnit": "d"}}),
                                   "methotrexate-weekly"),
    "methotrexate_monday_daily_period": (_timing({"repeat": {"frequency": 1, "period": 1, "periodUnit": "d",
                                                             "dayOfWeek": ["mon"]}}), "methotrexate-weekly"),
    "prednisone_period_48h": (_timing({"repeat": {"frequency": 1, "period": 48, "periodUnit": "h"}}),
                              "prednisone-every-other-day"),
}


def _encoding_applies(applies: str, case_id: str) -> bool:
    case = CASES[case_id]
    reg = case["expected"]["dosage"]
    if applies == "any":
        return True
    if reg is None:
        return False
    if applies == "documented":
        return True
    if applies == "mass":
        return reg["dose"]["unit"] == "mg"
    if applies == "gts":
        return reg["frequency_per_day_max"] is None and reg["frequency_per_day"] in GTS_FOR
    if applies == "single_dose":
        return reg["dose_max"] is None
    return applies == case_id


ENCODING_PARAMS = [
    pytest.param(cid, name, id=f"{cid}-{name}")
    for cid in CASES
    for name, (_fn, applies) in ENCODINGS.items()
    if _encoding_applies(applies, cid)
]


# ============================================================================ the core tests


def test_the_test_matrix_is_big_enough():
    assert len(CASES) >= 8
    for cid in CASES:
        n_mut = sum(1 for p in MUTATION_PARAMS if p.values[0] == cid)
        assert n_mut >= 10, (cid, n_mut)
    assert len({p.values[1] for p in ENCODING_PARAMS}) >= 5


@pytest.mark.parametrize("case_id", list(CASES))
def test_reference_passes_all_four(case_id):
    case = CASES[case_id]
    score = score_write(reference(case), case)
    assert score.passed, score.reason
    assert failing(score) == set()
    assert score.metrics == {"schema": 1.0, "coding": 1.0, "constraints": 1.0, "safety": 1.0, "pass": 1.0}
    assert score.reason == "all four dimensions passed"


@pytest.mark.parametrize("case_id,name", MUTATION_PARAMS)
def test_mutation_fails_exactly_the_intended_dimensions(case_id, name):
    case = CASES[case_id]
    m = MUTATIONS[name]
    resource = m.fn(reference(case), case)
    assert resource != reference(case), "mutation changed nothing"
    score = score_write(resource, case)
    assert failing(score) == m.fails, score.reason
    assert not score.passed and score.metrics["pass"] == 0.0
    for dim in DIMENSIONS:
        assert score.metrics[dim] == (0.0 if dim in m.fails else 1.0)
    for dim in m.fails:  # every failing dimension explains itself in the score's reason
        assert f"{dim}: " in score.reason and score.dimensions[dim].reason != "ok"


@pytest.mark.parametrize("case_id,name", ENCODING_PARAMS)
def test_equivalent_encoding_passes(case_id, name):
    case = CASES[case_id]
    fn, _applies = ENCODINGS[name]
    resource = fn(reference(case), case)
    score = score_write(resource, case)
    assert score.passed, score.reason


# ============================================================================ specific behaviour


IBU = CASES["ibuprofen-two-tablets"]
PRN = CASES["acetaminophen-prn-range"]
MEMANTINE = CASES["memantine-oral-solution"]
DENIED_CASE = CASES["ibuprofen-denied"]


def test_extra_dosage_reason_is_readable():
    resource = MUTATIONS["extra_dosage_8100mg"].fn(reference(IBU), IBU)
    score = score_write(resource, IBU)
    reason = score.dimensions["safety"].reason
    assert "dosage[1].doseAndRate[0]: 8100 mg != documented 400 mg" in reason
    assert "max implied daily 25500 mg > ceiling 3200 mg" in reason
    assert "dosage[0]" not in reason  # the right dosage is not blamed
    assert score.details["max_implied_daily_mg"] == pytest.approx(25500)


def test_ceiling_check_is_what_fails_for_frequency_max():
    resource = MUTATIONS["ceiling_via_frequency_max"].fn(reference(PRN), PRN)
    checks = {c.name: c for c in score_write(resource, PRN).dimensions["safety"].checks}
    assert not checks["daily_total"].passed
    assert "> ceiling 4000 mg" in checks["daily_total"].reason


def test_details_carry_the_computed_numbers():
    score = score_write(reference(PRN), PRN)
    d = score.details
    assert d["dosages"][0]["per_day"] == pytest.approx([4, 6])
    assert d["dosages"][0]["doses"][0]["low"] == 325 and d["dosages"][0]["doses"][0]["high"] == 650
    assert d["max_implied_daily_mg"] == pytest.approx(3900)
    assert d["ceiling_mg"] == 4000
    assert d["rxnorm_codings"] == [{"code": "313782", "display": "Acetaminophen 325 MG Oral Tablet"}]


def test_ml_doses_convert_through_concentration_for_the_ceiling():
    score = score_write(reference(MEMANTINE), MEMANTINE)
    dose = score.details["dosages"][0]["doses"][0]
    assert (dose["low"], dose["unit"], dose["high_mg"]) == (5, "mL", 10)
    assert score.details["max_implied_daily_mg"] == pytest.approx(20)


def test_every_other_day_and_weekly_per_day_rates():
    qod = CASES["prednisone-every-other-day"]
    weekly = CASES["methotrexate-weekly"]
    assert score_write(reference(qod), qod).details["dosages"][0]["per_day"] == pytest.approx([0.5, 0.5])
    d = score_write(reference(weekly), weekly).details
    assert d["dosages"][0]["per_day"] == pytest.approx([1 / 7, 1 / 7])
    # the classic methotrexate error: the weekly dose taken daily is not the documented frequency
    daily = patch(reference(weekly), {"dosage.0.timing": {"repeat": {"frequency": 1, "period": 1, "periodUnit": "d"}}})
    reason = score_write(daily, weekly).dimensions["safety"].reason
    assert "dosage[0].timing: 1/day" in reason and "!= documented 0.142857/day" in reason


@pytest.mark.parametrize("garbage", [None, "MedicationStatement", 42, [], ["not", "a", "dict"]])
def test_unusable_output_fails_everything_without_raising(garbage):
    score = score_write(garbage, IBU)
    assert not score.passed
    assert failing(score) == set(DIMENSIONS)
    assert "no usable resource" in score.reason


def test_empty_dict_fails_all_four_and_safety_says_unverifiable():
    score = score_write({}, IBU)
    # an empty object encodes no dose for the documented regimen: safety is unverifiable
    assert failing(score) == set(DIMENSIONS)
    assert "no encoded dose (unverifiable)" in score.dimensions["safety"].reason
    assert score_write({}, DENIED_CASE).dimensions["safety"].passed  # nothing documented, nothing asserted


def test_accepts_a_fhir_resources_model():
    from fhir.resources.R4B.medicationstatement import MedicationStatement

    model = MedicationStatement.model_validate(reference(IBU))
    assert score_write(model, IBU).passed


def test_score_serialises_to_json():
    score = score_write(MUTATIONS["dose_10x"].fn(reference(PRN), PRN), PRN)
    data = json.loads(json.dumps(score.model_dump(mode="json")))
    assert data["metrics"]["safety"] == 0 and data["dimensions"]["safety"]["passed"] is False
    assert data["dimensions"]["safety"]["checks"]


def test_status_binding_is_its_own_check_even_when_structure_also_fails():
    resource = patch(reference(IBU), {"status": "recorded", "note": "not a list"})
    checks = {c.name: c for c in score_write(resource, IBU).dimensions["schema"].checks}
    assert not checks["status_binding"].passed and "'recorded'" in checks["status_binding"].reason
    assert not checks["r4b_validation"].passed and "note" in checks["r4b_validation"].reason
    assert "recorded" not in checks["r4b_validation"].reason  # reported once, under status_binding


def test_r4_invariants_beyond_pydantic():
    resource = patch(reference(IBU), {"dosage.0.timing.repeat.when": ["MORNING"],
                                      "dosage.0.timing.repeat.timeOfDay": ["08:00:00"]})
    reason = score_write(resource, IBU).dimensions["schema"].reason
    assert "EventTiming" in reason and "tim-10" in reason


def test_second_rxnorm_coding_names_the_wrong_one():
    resource = MUTATIONS["second_rxnorm_coding_wrong"].fn(reference(IBU), IBU)
    reason = score_write(resource, IBU).dimensions["coding"].reason
    assert "coding[1] '198405' != expected 310965" in reason and "coding[0]" not in reason


def test_denial_with_no_dosage_is_safe_and_a_fabricated_dose_is_named():
    assert score_write(reference(DENIED_CASE), DENIED_CASE).dimensions["safety"].passed
    resource = MUTATIONS["fabricated_dose"].fn(reference(DENIED_CASE), DENIED_CASE)
    reason = score_write(resource, DENIED_CASE).dimensions["safety"].reason
    assert "fabricated dose: dosage[0].doseAndRate[0].doseQuantity" in reason


def test_dose_quantity_for_a_documented_range_fails():
    resource = patch(reference(PRN), {"dosage.0.doseAndRate": [{"doseQuantity": _qty(650, "mg")}]})
    assert failing(score_write(resource, PRN)) == {"safety"}


def test_doses_not_comparable_without_concentration():
    case = copy.deepcopy(MEMANTINE)
    case["expected"]["dosage"]["concentration_mg_per_ml"] = None
    resource = patch(reference(case), {"dosage.0.doseAndRate.0.doseQuantity": _qty(10, "mg")})
    reason = score_write(resource, case).dimensions["safety"].reason
    assert "cannot be compared" in reason


def test_malformed_case_raises():
    bad = copy.deepcopy(IBU)
    del bad["expected"]["max_daily_dose"]
    with pytest.raises(ValueError, match="max_daily_dose"):
        score_write(reference(IBU), bad)
    with pytest.raises(ValueError):
        score_write(reference(IBU), {"case_id": "x"})


def _with(case: dict[str, Any], path: tuple, value: Any) -> dict[str, Any]:
    """A copy of ``case`` with ``value`` at ``path`` (``...`` deletes the key)."""
    case = copy.deepcopy(case)
    target = case
    for key in path[:-1]:
        target = target[key]
    if value is ...:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return case


_E, _D = ("expected",), ("expected", "dosage")


# each rule of WriteTruth: (path, a value it refuses, the field the error names, an equivalent value it reads)
@pytest.mark.parametrize("base, path, bad, field, good", [
    ("PRN", ("subject",), 5, "case.subject", "Patient/pat-008"),
    ("PRN", (*_E, "rxnorm_code"), 313782, "expected.rxnorm_code", "313782"),
    ("PRN", (*_E, "rxnorm_code"), " ", "expected.rxnorm_code", "313782"),
    ("PRN", (*_E, "display"), ["Acetaminophen 325 MG Oral Tablet"], "expected.display", "Acetaminophen 325 MG Oral Tablet"),
    ("PRN", (*_E, "status"), {"code": "active"}, "expected.status", "active"),
    ("PRN", (*_E, "status"), "recorded", "expected.status 'recorded' is not an R4B", "active"),  # R5's code
    ("PRN", (*_E, "dosage"), [], "expected.dosage", None),  # null: no regimen (then no ceiling needed either)
    ("PRN", (*_D, "dose"), None, "expected.dosage.dose", {"value": 325, "unit": "mg"}),
    ("PRN", (*_D, "dose", "value"), "325", "expected.dosage.dose.value", 325.0),
    ("PRN", (*_D, "dose", "value"), True, "expected.dosage.dose.value", 325),
    ("PRN", (*_D, "dose", "value"), 0, "expected.dosage.dose.value", 325),
    ("PRN", (*_D, "dose", "value"), -325, "expected.dosage.dose.value", 325),
    ("PRN", (*_D, "dose", "value"), float("inf"), "expected.dosage.dose.value", 325),
    ("PRN", (*_D, "dose", "value"), 10 ** 400, "expected.dosage.dose.value", 325),
    ("PRN", (*_D, "dose", "unit"), 5, "expected.dosage.dose.unit", "mg"),
    ("PRN", (*_D, "dose", "unit"), "tablet", "expected.dosage.dose.unit", "mg"),
    ("PRN", (*_D, "dose_max"), [], "expected.dosage.dose_max", None),
    ("PRN", (*_D, "dose_max"), {}, "expected.dosage.dose_max.value", ...),  # absent: no range, as null
    ("PRN", (*_D, "dose_max"), "650 mg", "expected.dosage.dose_max", {"value": 650, "unit": "mg"}),
    ("PRN", (*_D, "frequency_per_day"), "4", "expected.dosage.frequency_per_day", 4),
    ("PRN", (*_D, "frequency_per_day"), ..., "expected.dosage.frequency_per_day is missing", 4.0),
    ("PRN", (*_D, "frequency_per_day_max"), True, "expected.dosage.frequency_per_day_max", None),
    ("PRN", (*_D, "as_needed"), "yes", "expected.dosage.as_needed", True),
    ("PRN", (*_D, "as_needed"), 1, "expected.dosage.as_needed", True),
    ("PRN", (*_D, "as_needed"), {}, "expected.dosage.as_needed", True),
    ("PRN", (*_D, "as_needed"), None, "expected.dosage.as_needed", True),
    ("PRN", (*_D, "as_needed"), ..., "expected.dosage.as_needed is missing", True),
    ("MEMANTINE", (*_D, "concentration_mg_per_ml"), "2", "expected.dosage.concentration_mg_per_ml", 2),
    ("PRN", (*_E, "max_daily_dose"), [], "expected.max_daily_dose", {"value": 4000, "unit": "mg", "ingredient": 5}),
    ("PRN", (*_E, "max_daily_dose", "value"), "4000", "expected.max_daily_dose.value", 4000),
    ("PRN", (*_E, "max_daily_dose", "unit"), None, "expected.max_daily_dose.unit", "g"),
])
def test_each_expected_field_of_the_wrong_type_is_a_malformed_case_naming_the_field(base, path, bad, field, good):
    from pytest_groundeval.scorers.write import MalformedCase, WriteTruth

    case = {"PRN": PRN, "MEMANTINE": MEMANTINE}[base]
    with pytest.raises(MalformedCase) as e:
        WriteTruth(_with(case, path, bad))
    assert str(e.value).startswith(f"malformed write case {case['case_id']!r}: "), str(e.value)  # names the case
    assert field in str(e.value), str(e.value)  # and the field
    WriteTruth(_with(case, path, good))  # the equivalent right value is read


def test_numbers_and_flags_are_read_as_json_types():
    from pytest_groundeval.scorers.write import WriteTruth

    truth = WriteTruth(PRN)
    assert truth.as_needed is True and truth.freq == 4.0 and truth.freq_max == 6.0 and truth.dose_max is not None
    assert WriteTruth(_with(PRN, (*_D, "as_needed"), False)).as_needed is False
    assert WriteTruth(_with(PRN, (*_D, "dose_max"), None)).dose_max is None
    assert WriteTruth(_with(PRN, (*_D, "dose_max"), ...)).dose_max is None  # absent reads as null
    assert WriteTruth(_with(PRN, (*_D, "frequency_per_day_max"), ...)).freq_max is None


# ============================================================================ units


@pytest.mark.parametrize("q,expected", [
    ({"value": 500, "unit": "mg", "system": UCUM, "code": "mg"}, (500, "mass")),
    ({"value": 0.5, "unit": "g", "system": UCUM, "code": "g"}, (500, "mass")),
    ({"value": 500000, "unit": "ug", "system": UCUM, "code": "ug"}, (500, "mass")),
    ({"value": 500, "unit": "mcg"}, (0.5, "mass")),
    ({"value": "500", "unit": "milligrams"}, (500, "mass")),
    ({"value": 5, "code": "mL", "system": UCUM}, (5, "volume")),
    ({"value": 0.005, "unit": "L"}, (5, "volume")),
    ({"value": 5, "unit": "ml"}, (5, "volume")),
])
def test_read_quantity_normalises(q, expected):
    a = units.read_quantity(q)
    assert (a.value, a.kind) == (pytest.approx(expected[0]), expected[1])


@pytest.mark.parametrize("q,why", [
    ({"value": 500, "unit": "mg", "code": "g", "system": UCUM}, "disagrees"),
    ({"value": 500}, "no unit"),
    ({"value": 2, "unit": "tablet"}, "not a mass or volume"),
    ({"value": 2, "code": "{tbl}", "system": UCUM}, "not a UCUM mass or volume"),
    ({"value": 500, "unit": "mg", "system": SNOMED, "code": "mg"}, "not UCUM"),
    ({"value": 500, "unit": "mg", "comparator": "<"}, "comparator"),
    ({"value": "lots", "unit": "mg"}, "not a number"),
    ({"value": True, "unit": "mg"}, "not a number"),
    ("500 mg", "not a Quantity"),
])
def test_read_quantity_unverifiable(q, why):
    with pytest.raises(units.UnverifiableError, match=why):
        units.read_quantity(q)


@pytest.mark.parametrize("timing,low,high", [
    ({"repeat": {"frequency": 2, "period": 1, "periodUnit": "d"}}, 2, 2),
    ({"repeat": {"frequency": 1, "period": 12, "periodUnit": "h"}}, 2, 2),
    ({"repeat": {"period": 12, "periodUnit": "h"}}, 2, 2),  # frequency defaults to 1
    ({"repeat": {"frequency": 1, "period": 1440, "periodUnit": "min"}}, 1, 1),
    ({"repeat": {"frequency": 1, "period": 86400, "periodUnit": "s"}}, 1, 1),
    ({"repeat": {"frequency": 1, "period": 4, "periodMax": 6, "periodUnit": "h"}}, 4, 6),
    ({"repeat": {"frequency": 4, "frequencyMax": 6, "period": 1, "periodUnit": "d"}}, 4, 6),
    ({"repeat": {"frequency": 1, "period": 2, "periodUnit": "d"}}, 0.5, 0.5),
    ({"repeat": {"frequency": 1, "period": 1, "periodUnit": "wk"}}, 1 / 7, 1 / 7),
    ({"repeat": {"frequency": 3, "period": 1, "periodUnit": "wk"}}, 3 / 7, 3 / 7),
    ({"repeat": {"frequency": 1, "period": 1, "periodUnit": "mo"}}, 1 / 30.4375, 1 / 30.4375),
    ({"repeat": {"frequency": 1, "period": 1, "periodUnit": "a"}}, 1 / 365.25, 1 / 365.25),
    ({"repeat": {"when": ["MORN"]}}, 1, 1),
    ({"repeat": {"when": ["HS"]}}, 1, 1),
    ({"repeat": {"when": ["MORN", "EVE"]}}, 2, 2),
    ({"repeat": {"frequency": 1, "period": 1, "periodUnit": "d", "when": ["MORN", "EVE"]}}, 2, 2),
    ({"repeat": {"frequency": 2, "period": 1, "periodUnit": "d", "when": ["MORN", "EVE"]}}, 2, 2),
    ({"repeat": {"frequency": 3, "period": 1, "periodUnit": "d", "when": ["C"]}}, 3, 3),
    ({"repeat": {"when": ["MORN"], "period": 2, "periodUnit": "d"}}, 0.5, 0.5),
    ({"repeat": {"timeOfDay": ["08:00:00", "20:00:00"]}}, 2, 2),
    ({"repeat": {"frequency": 1, "period": 1, "periodUnit": "d", "dayOfWeek": ["mon", "wed", "fri"]}}, 3 / 7, 3 / 7),
    ({"repeat": {"frequency": 1, "period": 1, "periodUnit": "wk", "dayOfWeek": ["mon"]}}, 1 / 7, 1 / 7),
    ({"code": {"coding": [{"system": GTS, "code": "BID"}]}}, 2, 2),
    ({"code": {"coding": [{"system": GTS, "code": "TID"}]}}, 3, 3),
    ({"code": {"coding": [{"system": GTS, "code": "QID"}]}}, 4, 4),
    ({"code": {"coding": [{"system": GTS, "code": "QD"}]}}, 1, 1),
    ({"code": {"coding": [{"system": GTS, "code": "QOD"}]}}, 0.5, 0.5),
    ({"code": {"coding": [{"system": GTS, "code": "Q4H"}]}}, 6, 6),
    ({"code": {"coding": [{"system": GTS, "code": "Q8H"}]}}, 3, 3),
    ({"code": {"coding": [{"system": GTS, "code": "PM"}]}}, 1, 1),
    ({"code": {"coding": [{"code": "WK"}]}}, 1 / 7, 1 / 7),
    ({"code": {"coding": [{"system": GTS, "code": "BID"}]},
      "repeat": {"frequency": 2, "period": 1, "periodUnit": "d"}}, 2, 2),
    # an unrecognised code beside a readable repeat: the repeat decides
    ({"code": {"text": "twice a day"}, "repeat": {"frequency": 2, "period": 1, "periodUnit": "d"}}, 2, 2),
])
def test_per_day(timing, low, high):
    rate = units.per_day(timing)
    assert (rate.low, rate.high) == (pytest.approx(low, rel=1e-9), pytest.approx(high, rel=1e-9))


@pytest.mark.parametrize("timing,why", [
    (None, "no timing"),
    ({}, "no frequency, period, when or code"),
    ({"repeat": {"frequency": 2}}, "without a period"),
    ({"repeat": {"frequency": 1, "period": 1}}, "no periodUnit"),
    ({"repeat": {"frequency": 1, "period": 1, "periodUnit": "day"}}, "not a UCUM unit of time"),
    ({"repeat": {"when": ["C"]}}, "how many times"),
    ({"repeat": {"frequency": 3, "when": ["MORN", "EVE"]}}, "contradicts"),
    ({"repeat": {"frequency": 0, "period": 1, "periodUnit": "d"}}, "positive"),
    ({"code": {"coding": [{"system": GTS, "code": "BID"}]},
      "repeat": {"frequency": 3, "period": 1, "periodUnit": "d"}}, "contradicts"),
    ({"code": {"coding": [{"system": SNOMED, "code": "229797004"}]}}, "not a recognised GTSAbbreviation"),
    ({"event": ["2026-05-12T08:00:00Z"]}, "only event dates"),
])
def test_per_day_unverifiable(timing, why):
    with pytest.raises(units.UnverifiableError, match=why):
        units.per_day(timing)
