"""The orders suite's clinical rules and readers of FHIR resources, shared by the task (which
derives each case's truth from its seeded bundle), its offline baseline (which reads the
server) and the case generator (``scripts/make_orders_cases.py``): the codes the instructions
name, the diabetes protocol's facts, a blood-pressure panel's reading, a MedicationRequest's
RxNorm codes."""

from __future__ import annotations

from datetime import date, datetime
from typing import Any, Mapping

from pytest_groundeval.fhir.codes import LOINC, RXNORM, SNOMED
from pytest_groundeval.scorers.orders import day_of, parse_instant

HBA1C = "4548-4"
BP_PANEL = "85354-9"
SYSTOLIC = "8480-6"
DIASTOLIC = "8462-4"
MMHG = "mm[Hg]"
DIABETES = ("44054006",)  # SNOMED "Diabetes mellitus type 2" (Synthea's diabetes code)
#: conditions that imply diabetes: a patient with one of these but no DIABETES code is never a
#: "not diabetic" case (the generator refuses it; load says so)
DIABETES_COMPLICATIONS = ("368581000119106", "127013003", "422034002", "157141000119108", "90781000119102")
HBA1C_INTERVAL_MONTHS = 12


def resources(bundle: Any) -> list[dict[str, Any]]:
    """The resources of a Bundle (entries' ``resource``, or plain resources in ``entry``)."""
    if not isinstance(bundle, dict) or not isinstance(bundle.get("entry"), list):
        return []
    out = []
    for e in bundle["entry"]:
        r = e.get("resource") if isinstance(e, dict) and "resource" in e else e
        if isinstance(r, dict) and isinstance(r.get("resourceType"), str):
            out.append(r)
    return out


def codes_of(concept: Any, system: str | None = None) -> set[str]:
    """The codes of a CodeableConcept (of ``system`` when given)."""
    if not isinstance(concept, dict) or not isinstance(concept.get("coding"), list):
        return set()
    return {c["code"] for c in concept["coding"] if isinstance(c, dict) and isinstance(c.get("code"), str)
            and (system is None or c.get("system") == system)}


def months_before(d: date, months: int) -> date:
    """``d`` minus ``months`` calendar months (the last day of a shorter month)."""
    y, m = divmod(d.year * 12 + d.month - 1 - months, 12)
    m += 1
    for day in (d.day, 30, 29, 28):
        try:
            return date(y, m, day)
        except ValueError:
            continue
    raise ValueError(d)  # pragma: no cover


def is_active_condition(c: dict[str, Any], today: date) -> bool:
    clinical = codes_of(c.get("clinicalStatus"))
    onset = day_of(c.get("onsetDateTime")) or day_of(c.get("recordedDate"))
    abated = day_of(c.get("abatementDateTime"))
    return ("active" in clinical or "recurrence" in clinical or "relapse" in clinical) and (
        onset is None or onset <= today) and (abated is None or abated > today)


#: the intents of a ServiceRequest that orders (a proposal or plan orders nothing)
ORDER_INTENTS = ("order", "original-order", "reflex-order", "filler-order", "instance-order")


def is_open_order(sr: dict[str, Any]) -> bool:
    """An active ServiceRequest that orders the test: status active, an order intent, not an
    order NOT to do it (``doNotPerform``)."""
    return (sr.get("resourceType") == "ServiceRequest" and sr.get("status") == "active"
            and sr.get("intent") in ORDER_INTENTS and sr.get("doNotPerform") is not True)


def hba1c_facts(res: list[dict[str, Any]], patient: str, today: date) -> dict[str, Any]:
    """What the HbA1c protocol reads: diabetes, the last result, an active order."""
    conditions = [r for r in res if r["resourceType"] == "Condition"]
    diabetic = [c for c in conditions if codes_of(c.get("code"), SNOMED) & set(DIABETES) and is_active_condition(c, today)]
    complications = [c for c in conditions if codes_of(c.get("code"), SNOMED) & set(DIABETES_COMPLICATIONS)]
    results = sorted(d for r in res if r["resourceType"] == "Observation" and HBA1C in codes_of(r.get("code"), LOINC)
                     and r.get("status") in ("final", "amended", "corrected")
                     for d in [day_of(r.get("effectiveDateTime"))] if d is not None and d <= today)
    orders = sorted(r["id"] for r in res if is_open_order(r) and HBA1C in codes_of(r.get("code"), LOINC)
                    and ref_of(r.get("subject")) == patient)
    since = months_before(today, HBA1C_INTERVAL_MONTHS)
    last = results[-1] if results else None
    return {"diabetic": bool(diabetic), "complications_only": bool(complications) and not diabetic,
            "last_hba1c": last.isoformat() if last else None, "window_start": since.isoformat(),
            "recent": last is not None and last >= since, "open_orders": [f"ServiceRequest/{i}" for i in orders],
            "diabetes_conditions": sorted(f"Condition/{c['id']}" for c in diabetic if isinstance(c.get("id"), str))}


def patient_names(patient: dict[str, Any]) -> list[str]:
    """The words of a Patient's names (family, given, text), letters only, in lower case
    ("Danae554" is "danae")."""
    import re

    words: set[str] = set()
    for name in patient.get("name") or []:
        if not isinstance(name, dict):
            continue
        parts = [name.get("family"), name.get("text"), *(name.get("given") or [])]
        for part in parts:
            if isinstance(part, str):
                words |= {w for w in re.findall(r"[a-z]+", part.casefold()) if len(w) > 1}
    return sorted(words)


def patient_identifiers(patient: dict[str, Any]) -> list[str]:
    """The values of a Patient's identifiers, and its id."""
    values = {i["value"] for i in patient.get("identifier") or [] if isinstance(i, dict) and isinstance(i.get("value"), str)}
    return sorted(values | ({patient["id"]} if isinstance(patient.get("id"), str) else set()))


def ref_of(reference: Any) -> str | None:
    """A Reference's ``reference`` string."""
    return reference.get("reference") if isinstance(reference, dict) and isinstance(reference.get("reference"), str) else None


def bp_of(obs: dict[str, Any]) -> tuple[float, float, datetime] | None:
    """(systolic, diastolic, effective) of a blood-pressure panel Observation in mm[Hg]."""
    if not (codes_of(obs.get("code"), LOINC) & {BP_PANEL, "55284-4"}):
        return None
    values: dict[str, float] = {}
    for comp in obs.get("component") or []:
        q = comp.get("valueQuantity") if isinstance(comp, dict) else None
        if not isinstance(q, dict) or q.get("code") != MMHG or not isinstance(q.get("value"), (int, float)):
            continue
        for code in codes_of(comp.get("code"), LOINC) & {SYSTOLIC, DIASTOLIC}:
            values[code] = float(q["value"])
    when = parse_instant(obs.get("effectiveDateTime"))
    if SYSTOLIC not in values or DIASTOLIC not in values or when is None:
        return None
    return values[SYSTOLIC], values[DIASTOLIC], when


def medication_code(mr: dict[str, Any], by_ref: Mapping[str, dict[str, Any]]) -> set[str]:
    """The RxNorm codes of a MedicationRequest (inline or through its medicationReference)."""
    found = codes_of(mr.get("medicationCodeableConcept"), RXNORM)
    target = by_ref.get(ref_of(mr.get("medicationReference")) or "")
    if target is not None:
        found |= codes_of(target.get("code"), RXNORM)
    return found


__all__ = ["BP_PANEL", "DIABETES", "DIABETES_COMPLICATIONS", "DIASTOLIC", "HBA1C", "HBA1C_INTERVAL_MONTHS", "MMHG", "SYSTOLIC", "bp_of", "codes_of", "day_of", "hba1c_facts", "is_active_condition", "is_open_order", "medication_code", "months_before", "patient_identifiers", "patient_names", "ref_of", "resources"]
