"""The FHIR resources' operators for ``bench_validity.py`` (write: a MedicationStatement;
orders: the ServiceRequest, Observation or stopped MedicationRequest the agent writes).

``Ctx.facts`` of a resource: ``kind`` (``write``, ``hba1c``, ``bp``, ``stop``), ``note`` (the
case's note, "" when none), ``words`` (the drug words of the case), and per kind: write's
``ingredients`` and ``dose`` (``(value, unit)`` or None); bp's ``systolic``/``diastolic``;
``today``. Every operator returns deep copies; the answer passed in is never changed.
"""

from __future__ import annotations

import copy
import re
import uuid
from typing import Any, Callable

from _validity_ops import Ctx, absent_brand, mutant, variant

from pytest_groundeval.fhir.codes import LOINC  # noqa: E402
from pytest_groundeval.fhir.codes import SNOMED  # noqa: E402
CPT = "http://www.ama-assn.org/go/cpt"
XHTML = "http://www.w3.org/1999/xhtml"
INTERPRETATION = "http://terminology.hl7.org/CodeSystem/v3-ObservationInterpretation"

#: SNOMED CT substance concepts of common ingredients (a translation names the same drug; a
#: second coding names another)
SNOMED_SUBSTANCE = {
    "aspirin": "387458008", "warfarin": "372756006", "metformin": "372567009", "atorvastatin": "373444002",
    "lisinopril": "386873009", "simvastatin": "387584000", "amlodipine": "386864001", "clopidogrel": "386952008",
    "acetaminophen": "387517004", "ibuprofen": "387207008", "furosemide": "387475002",
    "hydrochlorothiazide": "387525002", "albuterol": "372897005", "amoxicillin": "372687004",
    "metoprolol": "372826007", "allopurinol": "387135004",
}
#: drugs taken for high blood pressure (a "hypertension" reason may be right for them)
ANTIHYPERTENSIVES = frozenset({
    "amlodipine", "lisinopril", "losartan", "valsartan", "metoprolol", "atenolol", "carvedilol", "propranolol",
    "hydrochlorothiazide", "chlorthalidone", "furosemide", "spironolactone", "clonidine", "enalapril", "ramipril",
    "benazepril", "nifedipine", "diltiazem", "verapamil", "hydralazine", "irbesartan", "olmesartan", "triamterene",
    "indapamide", "doxazosin", "prazosin", "terazosin", "labetalol", "bisoprolol", "nebivolol", "torsemide"})
#: the same concept in SNOMED CT of the orders' LOINC codes (a translation), and their LOINC names
SNOMED_OF_LOINC = {"4548-4": ("43396009", "Hemoglobin A1c measurement"), "85354-9": ("75367002", "Blood pressure"),
                   "8480-6": ("271649006", "Systolic blood pressure"), "8462-4": ("271650006", "Diastolic blood pressure")}
LOINC_NAMES = {"4548-4": "Hemoglobin A1c/Hemoglobin.total in Blood",
               "85354-9": "Blood pressure panel with all children optional",
               "8480-6": "Systolic blood pressure", "8462-4": "Diastolic blood pressure"}


def _div(text: str) -> dict[str, str]:
    return {"status": "generated", "div": f'<div xmlns="{XHTML}"><p>{text}</p></div>'}


def _concept(r: dict[str, Any], kind: str) -> dict[str, Any] | None:
    c = r.get("medicationCodeableConcept") if kind in ("write", "stop") else r.get("code")
    return c if isinstance(c, dict) else None


def _component(r: dict[str, Any], code: str) -> dict[str, Any] | None:
    return next((c for c in r.get("component") or [] if any(x.get("code") == code for x in c["code"]["coding"])), None)


def _dosage(r: dict[str, Any]) -> dict[str, Any] | None:
    d = r.get("dosage") or r.get("dosageInstruction")
    return d[0] if isinstance(d, list) and d else None


# ---------------------------------------------------------------- where text goes
Setter = Callable[[dict[str, Any], str], bool]  # puts a text in the resource; False: no such place


def _set_note(r, s):
    r["note"] = list(r.get("note") or []) + [{"text": s}]
    return True


def _set_div(r, s):
    r["text"] = _div(s)
    return True


def _set_status_reason(r, s):
    r["statusReason"] = {"text": s} if r["resourceType"] == "MedicationRequest" else [{"text": s}]
    return True


def _set_concept_text(kind):
    def put(r, s):
        c = _concept(r, kind)
        if c is None:
            return False
        c["text"] = s
        return True
    return put


def _set_display(kind):
    def put(r, s):
        c = _concept(r, kind)
        if c is None or not c.get("coding"):
            return False
        c["coding"][0]["display"] = s
        return True
    return put


def _set_dosage(key, as_list=False):
    def put(r, s):
        d = _dosage(r)
        if d is None:
            return False
        d[key] = [{"text": s}] if as_list else s
        return True
    return put


def _set_sr(key, as_list=False):
    def put(r, s):
        r[key] = [{"text": s}] if as_list else s
        return True
    return put


def _set_component_text(r, s):
    c = _component(r, "8480-6")
    if c is None:
        return False
    c["code"]["text"] = s
    return True


TEXT_PLACES: dict[str, dict[str, Setter]] = {
    "write": {"note": _set_note, "text.div": _set_div, "statusReason": _set_status_reason,
              "medicationCodeableConcept.text": _set_concept_text("write"),
              "coding.display": _set_display("write"), "dosage.text": _set_dosage("text"),
              "dosage.patientInstruction": _set_dosage("patientInstruction"),
              "dosage.additionalInstruction": _set_dosage("additionalInstruction", as_list=True)},
    "hba1c": {"note": _set_note, "text.div": _set_div, "code.text": _set_concept_text("hba1c"),
              "coding.display": _set_display("hba1c"), "patientInstruction": _set_sr("patientInstruction"),
              "orderDetail": _set_sr("orderDetail", as_list=True)},
    "bp": {"note": _set_note, "text.div": _set_div, "code.text": _set_concept_text("bp"),
           "coding.display": _set_display("bp"), "component.code.text": _set_component_text},
    "stop": {"note": _set_note, "statusReason": _set_status_reason, "text.div": _set_div},
}


NAME_PLACES = frozenset({"coding.display", "medicationCodeableConcept.text", "code.text", "component.code.text"})


def _contradictions(ctx: Ctx, where: str) -> list[tuple[str, str]]:
    """(what, statement) pairs that contradict the right resource, for the text place ``where``
    (a place that names the concept gets the name of another drug, test or reading, not a sentence)."""
    f = ctx.facts
    naming = where in NAME_PLACES
    kind = f["kind"]
    if kind == "write":
        brand = absent_brand(f["words"], ctx.rng)
        if naming:
            return [("drug", f"{brand[0]} tablet")] if brand else []
        out = [("status", "Patient stopped taking this medication last week." if f["status"] == "active"
                else "Patient takes this medication every day.")]
        if f["dose"] is not None:
            out.append(("dose", f"Take {f['dose'][0] * 3:g} {f['dose'][1]} each time."))
        if brand:
            out.append(("drug", f"Medication taken: {brand[0]} tablet."))
        return out
    if kind == "hba1c":
        return [("test", "Lipid panel")] if naming else [("test", "Test ordered: lipid panel."),
                                                          ("status", "Cancelled - do not draw.")]
    if kind == "bp":
        other = f"{f['systolic'] + 25}/{f['diastolic'] + 15} mmHg"
        if naming:
            return [("value", f"Blood pressure {other}")] + (
                [("component", "Diastolic blood pressure")] if where == "component.code.text" else [])
        out = [("value", f"Blood pressure {other}."), ("status", "Reading entered in error - disregard.")]
        if "seated" in f["note"]:
            out.append(("position", "Taken standing, straight after exercise."))
        return out
    return [("status", "Patient to carry on with this medication as before."),
            ("status", "Restart this medication tomorrow.")]


@mutant
def text_contradiction(r: dict[str, Any], ctx: Ctx) -> list[dict[str, Any]]:
    """A statement that contradicts the resource (another dose, test or reading, the opposite
    status, a brand of another drug) put in each text-bearing element (note, text.div,
    statusReason, code.text, a display, dosage text, patientInstruction, additionalInstruction):
    whoever reads that element acts on something else than the structure says."""
    out = []
    for where, put in TEXT_PLACES[ctx.facts["kind"]].items():
        for _what, said in _contradictions(ctx, where):
            m = copy.deepcopy(r)
            if put(m, said):
                out.append(m)
    return out


def _add_coding(concept: dict[str, Any] | None, coding: dict[str, Any]) -> bool:
    if concept is None:
        return False
    concept.setdefault("coding", []).append(coding)
    return True


@mutant
def second_coding(r: dict[str, Any], ctx: Ctx) -> list[dict[str, Any]]:
    """A second coding, in another system, that denotes another concept (a SNOMED/CPT lipid
    panel beside LOINC HbA1c; SNOMED "diastolic" on the systolic component; a SNOMED substance
    of another drug beside the RxNorm product): the resource names two things."""
    kind = ctx.facts["kind"]
    if kind == "hba1c":
        codings = [{"system": SNOMED, "code": "16254007", "display": "Lipid panel"},
                   {"system": CPT, "code": "80061", "display": "Lipid panel"}]
        out = []
        for coding in codings:
            m = copy.deepcopy(r)
            _add_coding(m["code"], coding)
            out.append(m)
        return out
    if kind == "bp":
        m = copy.deepcopy(r)
        comp = _component(m, "8480-6")
        return [m] if comp and _add_coding(comp["code"], {"system": SNOMED, "code": "271650006",
                                                          "display": "Diastolic blood pressure"}) else []
    other = sorted(i for i in SNOMED_SUBSTANCE if i not in ctx.facts["words"])
    if not other:
        return []
    drug = ctx.rng.choice(other)
    m = copy.deepcopy(r)
    ok = _add_coding(_concept(m, kind), {"system": SNOMED, "code": SNOMED_SUBSTANCE[drug],
                                         "display": f"{drug.capitalize()} (substance)"})
    return [m] if ok else []


@mutant
def extra_wrong_element(r: dict[str, Any], ctx: Ctx) -> list[dict[str, Any]]:
    """An extra clinical element with wrong content: a urine specimen, a hypertension reason or
    a knee body site on a blood HbA1c order; the other arm, a standing position after exercise,
    or an interpretation the values contradict on the note's seated reading; an injection
    method and a deltoid site on an oral product; a reason the note does not give."""
    f = ctx.facts
    kind, note = f["kind"], f["note"].casefold()
    hypertension = {"coding": [{"system": SNOMED, "code": "38341003", "display": "Hypertensive disorder"}]}
    extras: list[tuple[str, Any]] = []
    if kind == "hba1c":
        extras = [("specimen", [{"display": "Urine specimen"}]), ("reasonCode", [hypertension]),
                  ("bodySite", [{"text": "Left knee"}])]
    elif kind == "bp":
        arm = "Right arm" if "left arm" in note else "Left arm" if "right arm" in note else None
        if arm:
            extras.append(("bodySite", {"text": arm}))
        if "seated" in note:
            extras.append(("method", {"text": "Standing, after exercise"}))
        high = f["systolic"] >= 180 or f["diastolic"] >= 120
        code, shown = ("L", "Low") if high else ("HH", "Critical high")
        extras.append(("interpretation", [{"coding": [{"system": INTERPRETATION, "code": code, "display": shown}]}]))
    elif kind == "write":
        if not ANTIHYPERTENSIVES & set(f["ingredients"]) and not re.search(r"hypertension|blood pressure|\bbp\b|\bhtn\b",
                                                                           note):
            extras.append(("reasonCode", [hypertension]))  # a reason no drug of the case is taken for
        if _dosage(r) is not None and f.get("oral"):
            extras += [("dosage.method", {"text": "Inject"}), ("dosage.site", {"text": "Left deltoid"})]
    else:
        extras.append(("reasonCode", [hypertension]))
    out = []
    for path, value in extras:
        m = copy.deepcopy(r)
        if path.startswith("dosage."):
            _dosage(m)[path.split(".", 1)[1]] = value
        else:
            m[path] = value
        out.append(m)
    return out


_OTHER_UNIT = {"mg": "g", "g": "mg", "mcg": "mg", "ug": "mg", "mL": "L", "[iU]": "mL", "mm[Hg]": "kPa"}


@mutant
def unit_disagrees(r: dict[str, Any], ctx: Ctx) -> list[dict[str, Any]]:
    """A Quantity whose human ``unit`` says another unit than its UCUM ``code`` (kPa on
    mm[Hg], g on mg): a reader of the unit takes another amount."""
    m = copy.deepcopy(r)
    quantities = []
    if ctx.facts["kind"] == "bp":
        quantities = [c["valueQuantity"] for c in m.get("component") or [] if "valueQuantity" in c]
    elif _dosage(m) is not None:
        quantities = [dr["doseQuantity"] for dr in _dosage(m).get("doseAndRate") or [] if "doseQuantity" in dr]
    if not quantities:
        return []
    for q in quantities:
        q["unit"] = _OTHER_UNIT.get(q.get("code"), "mL" if q.get("code") != "mL" else "L")
    return [m]


FHIR_MUTANTS = (text_contradiction, second_coding, extra_wrong_element, unit_disagrees)


# ---------------------------------------------------------------- natural variants
@variant
def harmless_meta(r: dict[str, Any], ctx: Ctx) -> list[dict[str, Any]]:
    """``meta`` bookkeeping (versionId, lastUpdated) and, on a new resource, an ``id``: says
    nothing clinical."""
    m = copy.deepcopy(r)
    m["meta"] = {**(m.get("meta") or {}), "versionId": "1", "lastUpdated": f"{ctx.facts['today']}T09:00:00Z"}
    if ctx.facts["kind"] == "write":
        m["id"] = "medstatement-1"
    return [m]


@variant
def harmless_identifier(r: dict[str, Any], ctx: Ctx) -> list[dict[str, Any]]:
    """The resource's own business identifier (a urn:uuid): says nothing clinical. (Not on a
    stop: the case says to keep the rest of that resource as it is.)"""
    if ctx.facts["kind"] == "stop":
        return []
    m = copy.deepcopy(r)
    m["identifier"] = [{"system": "urn:ietf:rfc:3986", "value": f"urn:uuid:{uuid.UUID(int=ctx.rng.getrandbits(128))}"}]
    return [m]


def _narrative(r: dict[str, Any], ctx: Ctx) -> str:
    f = ctx.facts
    if f["kind"] == "write":
        return f"{f['display']}: {r['status']}"
    if f["kind"] == "hba1c":
        return "Order: hemoglobin A1c test"
    if f["kind"] == "bp":
        return f"Blood pressure {f['systolic']}/{f['diastolic']} mmHg"
    return "Medication stopped"


@variant
def agreeing_narrative(r: dict[str, Any], ctx: Ctx) -> list[dict[str, Any]]:
    """``text`` (status generated) whose div says what the structure says. (Not on a stop: the
    case says to keep the rest of that resource as it is.)"""
    if ctx.facts["kind"] == "stop":
        return []
    m = copy.deepcopy(r)
    m["text"] = _div(_narrative(r, ctx))
    return [m]


@variant
def agreeing_display(r: dict[str, Any], ctx: Ctx) -> list[dict[str, Any]]:
    """Each LOINC coding with its LOINC display, or (write) the concept's ``text`` set to the
    product's own display: names that agree with the codes."""
    kind = ctx.facts["kind"]
    m = copy.deepcopy(r)
    if kind == "write":
        m["medicationCodeableConcept"]["text"] = ctx.facts["display"]
        return [m]
    if kind == "stop":
        return []
    for concept in [m["code"]] + [c["code"] for c in m.get("component") or []]:
        for coding in concept["coding"]:
            if coding.get("system") == LOINC and coding.get("code") in LOINC_NAMES:
                coding["display"] = LOINC_NAMES[coding["code"]]
    return [m]


@variant
def translation(r: dict[str, Any], ctx: Ctx) -> list[dict[str, Any]]:
    """The same concept in another code system beside the asked one: SNOMED CT for the LOINC
    test, panel and components (orders). Not for a drug: the repo's data map no RxNorm product to
    an NDC or SNOMED product (an ingredient's substance code is a broader concept, not a
    translation), and a stop keeps its resource as it is."""
    kind = ctx.facts["kind"]
    m = copy.deepcopy(r)
    if kind in ("write", "stop"):
        return []
    for concept in [m["code"]] + [c["code"] for c in m.get("component") or []]:
        loinc = next((c["code"] for c in concept["coding"] if c.get("system") == LOINC), None)
        if loinc in SNOMED_OF_LOINC:
            code, shown = SNOMED_OF_LOINC[loinc]
            concept["coding"].append({"system": SNOMED, "code": code, "display": shown})
    return [m]


@variant
def agreeing_stop_words(r: dict[str, Any], ctx: Ctx) -> list[dict[str, Any]]:
    """(stop) A status reason and an added note that say the drug was stopped, as the note
    says: what the case allows beside the status."""
    if ctx.facts["kind"] != "stop":
        return []
    a, b = copy.deepcopy(r), copy.deepcopy(r)
    a["statusReason"] = {"text": f"Stopped as the clinic note of {ctx.facts['today']} says"}
    _set_note(b, f"Stopped per the clinic note of {ctx.facts['today']}.")
    return [a, b]


@variant
def routine_lab_order(r: dict[str, Any], ctx: Ctx) -> list[dict[str, Any]]:
    """(hba1c) What an order system adds to a lab order and that agrees with it: the category
    "Laboratory procedure" (SNOMED 108252007), priority routine (an overdue yearly test)."""
    if ctx.facts["kind"] != "hba1c":
        return []
    a, b = copy.deepcopy(r), copy.deepcopy(r)
    a["category"] = [{"coding": [{"system": SNOMED, "code": "108252007", "display": "Laboratory procedure"}]}]
    b["priority"] = "routine"
    return [a, b]


@variant
def date_asserted(r: dict[str, Any], ctx: Ctx) -> list[dict[str, Any]]:
    """(write) ``dateAsserted``: the date the note was written, where the note gives one."""
    found = re.search(r"\b(\d{4}-\d\d-\d\d)\b", ctx.facts["note"]) if ctx.facts["kind"] == "write" else None
    if not found:
        return []
    m = copy.deepcopy(r)
    m["dateAsserted"] = found.group(1)
    return [m]


@variant
def source_note(r: dict[str, Any], ctx: Ctx) -> list[dict[str, Any]]:
    """(bp, stop) The case's own note, word for word, as a note of the resource: the
    documentation the reading or the stop comes from (the committed notes say nothing else)."""
    if ctx.facts["kind"] not in ("bp", "stop") or not ctx.facts["note"]:
        return []
    m = copy.deepcopy(r)
    _set_note(m, ctx.facts["note"])
    return [m]


FHIR_VARIANTS = (harmless_meta, harmless_identifier, agreeing_narrative, agreeing_display, translation,
                 agreeing_stop_words, source_note, routine_lab_order, date_asserted)
