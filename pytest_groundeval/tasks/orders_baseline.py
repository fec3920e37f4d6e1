"""The orders suite's offline baseline: a rule-based agent that acts through the FHIR tools.

It reads the case's inputs (the base URL the harness set, the patient, today, the note) and
works on the server as a careful human would: it searches first, writes only when the case's
rule says so, and writes once. The rules are the instruction's, read independently of the
truth (``tasks/orders.py:derive_truth`` reads the seeded bundle; this reads the server):

* hba1c: the patient's Conditions, HbA1c results and active HbA1c orders, searched; an order
  is created when they are diabetic, no result is dated within 12 months and none is open;
* bp: the note's reading (``S/D mmHg`` at ``HH:MM`` with its UTC offset on the note's date);
  recorded unless an Observation with those values at that instant is on the server;
* stop: the medication the note names (``<name> was stopped``), matched against the
  displays of the patient's MedicationRequests; the active one is read, its status set to
  ``stopped`` and updated; nothing when it is stopped already.

The tools are ``pytest_groundeval.fhir.client.fhir_tools(base_url)`` (each returns the
server's answer as a value). Errors are values; the baseline reports them in its message.
"""

from __future__ import annotations

import json
import re
from datetime import date
from typing import Any, Callable

from pytest_groundeval.fhir.codes import LOINC, RXNORM, SNOMED, UCUM
from pytest_groundeval.model import AgentOutput
from pytest_groundeval.scorers.orders import parse_instant
from pytest_groundeval.tasks import orders_rules as task

VITAL_SIGNS_SYSTEM = "http://terminology.hl7.org/CodeSystem/observation-category"


class Tools:
    """The FHIR tools by name, called with keyword arguments; answers as JSON values."""

    def __init__(self, tools: list[Any]) -> None:
        self.tools = {str(getattr(t, "name", getattr(t, "__name__", ""))): t for t in tools}
        self.calls: list[dict[str, Any]] = []

    def call(self, name: str, **args: Any) -> Any:
        tool = self.tools.get(name)
        if tool is None:
            raise LookupError(f"no FHIR tool {name!r} (tools: {sorted(self.tools)})")
        out = tool.invoke(args) if hasattr(tool, "invoke") else tool(**args)
        if isinstance(out, str):
            try:
                out = json.loads(out)
            except ValueError:
                pass
        self.calls.append({"tool": name, "args": args})
        return out

    def search(self, rtype: str, params: dict[str, str]) -> list[dict[str, Any]]:
        found = self.call("fhir_search", resource_type=rtype, params={**params, "_count": "1000"})
        if isinstance(found, dict) and found.get("resourceType") == "Bundle":
            return [e["resource"] for e in found.get("entry") or [] if isinstance(e, dict)
                    and isinstance(e.get("resource"), dict) and e["resource"].get("resourceType") == rtype]
        raise RuntimeError(f"search {rtype} failed: {found}")


def default_tools(base_url: str) -> list[Any]:
    from pytest_groundeval.fhir.client import fhir_tools

    return list(fhir_tools(base_url))


def _created(answer: Any) -> str:
    if isinstance(answer, dict) and answer.get("resourceType") not in (None, "OperationOutcome") and answer.get("id"):
        return f"{answer['resourceType']}/{answer['id']}"
    raise RuntimeError(f"the server refused the write: {answer}")


def hba1c(api: Tools, patient: str, today: date) -> str:
    p = {"patient": patient}
    conditions = api.search("Condition", p)
    if not any(task.codes_of(c.get("code"), SNOMED) & set(task.DIABETES) and task.is_active_condition(c, today)
               for c in conditions):
        return "nothing was due: the patient has no diabetes on the problem list"
    results = api.search("Observation", {**p, "code": f"{LOINC}|{task.HBA1C}"})
    since = task.months_before(today, task.HBA1C_INTERVAL_MONTHS)
    days = [d for o in results for d in [task.day_of(o.get("effectiveDateTime"))] if d and since <= d <= today]
    if days:
        return f"nothing was due: an HbA1c result on {max(days).isoformat()}"
    orders = [s for s in api.search("ServiceRequest", p) if task.is_open_order(s)
              and task.HBA1C in task.codes_of(s.get("code"), LOINC)]
    if orders:
        return f"nothing was due: HbA1c already ordered (ServiceRequest/{orders[0].get('id')})"
    made = _created(api.call("fhir_create", resource={
        "resourceType": "ServiceRequest", "status": "active", "intent": "order",
        "code": {"coding": [{"system": LOINC, "code": task.HBA1C,
                             "display": "Hemoglobin A1c/Hemoglobin.total in Blood"}], "text": "Hemoglobin A1c"},
        "subject": {"reference": patient}, "authoredOn": today.isoformat()}))
    return f"ordered an HbA1c: {made}"


_BP = re.compile(r"(\d{2,3})\s*/\s*(\d{2,3})\s*mm\s*Hg", re.IGNORECASE)
_TIME = re.compile(r"\bat (\d{1,2}):(\d{2})\b.*?UTC\s*([+\-\u2212]\d{2}:\d{2})", re.IGNORECASE | re.DOTALL)
_DAY = re.compile(r"\b(\d{4}-\d{2}-\d{2})\b")


def bp(api: Tools, patient: str, note: str) -> str:
    m, t, d = _BP.search(note), _TIME.search(note), _DAY.search(note)
    if not (m and t and d):
        return "nothing was done: the note's reading could not be read"
    systolic, diastolic = int(m.group(1)), int(m.group(2))
    effective = f"{d.group(1)}T{int(t.group(1)):02d}:{t.group(2)}:00{t.group(3).replace(chr(0x2212), '-')}"
    when = parse_instant(effective)
    for o in api.search("Observation", {"patient": patient, "code": f"{LOINC}|{task.BP_PANEL}"}):
        if task.bp_of(o) == (float(systolic), float(diastolic), when):
            return f"nothing was due: the reading is recorded already (Observation/{o.get('id')})"

    def component(code: str, display: str, value: int) -> dict[str, Any]:
        return {"code": {"coding": [{"system": LOINC, "code": code, "display": display}]},
                "valueQuantity": {"value": value, "unit": "mmHg", "system": UCUM, "code": task.MMHG}}

    made = _created(api.call("fhir_create", resource={
        "resourceType": "Observation", "status": "final",
        "category": [{"coding": [{"system": VITAL_SIGNS_SYSTEM, "code": "vital-signs", "display": "Vital Signs"}]}],
        "code": {"coding": [{"system": LOINC, "code": task.BP_PANEL,
                             "display": "Blood pressure panel with all children optional"}]},
        "subject": {"reference": patient}, "effectiveDateTime": effective,
        "component": [component(task.SYSTOLIC, "Systolic blood pressure", systolic),
                      component(task.DIASTOLIC, "Diastolic blood pressure", diastolic)]}))
    return f"recorded blood pressure {systolic}/{diastolic} mmHg: {made}"


# the sentence's words before "was stopped" (a decimal point inside a strength is no sentence end)
_STOPPED = re.compile(r"(?:^|[.!?]\s+)((?:(?![.!?]\s).)+?) was stopped\b", re.IGNORECASE)


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9.]+", text.casefold())


def stop(api: Tools, patient: str, note: str) -> str:
    m = _STOPPED.search(note)
    if not m:
        return "nothing was done: the note names no stopped medication"
    said = _words(m.group(1))
    meds: dict[str, Any] = {}
    requests = api.search("MedicationRequest", {"patient": patient})

    def display(mr: dict[str, Any]) -> str:
        concept = mr.get("medicationCodeableConcept")
        if not isinstance(concept, dict):
            ref = task.ref_of(mr.get("medicationReference"))
            target = meds.get(ref or "")
            if target is None and ref:
                kind, _, rid = ref.partition("/")
                target = api.call("fhir_read", resource_type=kind, id=rid)
                meds[ref] = target if isinstance(target, dict) else {}
            concept = (target or {}).get("code")
        codings = concept.get("coding") if isinstance(concept, dict) and isinstance(concept.get("coding"), list) else []
        names = [str(c.get("display") or "") for c in codings if isinstance(c, dict) and c.get("system") == RXNORM]
        return " ".join(names + [str((concept or {}).get("text") or "")])

    def matches(mr: dict[str, Any]) -> bool:
        words = _words(display(mr))
        n = len(said)
        return n > 0 and any(words[i:i + n] == said for i in range(len(words) - n + 1))

    hits = [mr for mr in requests if matches(mr)]
    active = [mr for mr in hits if mr.get("status") == "active"]
    if not active:
        if any(mr.get("status") == "stopped" for mr in hits):
            return "nothing was due: the medication is stopped already"
        return f"nothing was done: no MedicationRequest names {m.group(1).strip()!r}"
    if len(active) > 1:
        return f"nothing was done: {len(active)} active MedicationRequests match {m.group(1).strip()!r}"
    current = api.call("fhir_read", resource_type="MedicationRequest", id=active[0]["id"])
    if not isinstance(current, dict) or current.get("resourceType") != "MedicationRequest":
        return f"nothing was done: reading MedicationRequest/{active[0]['id']} failed: {current}"
    updated = _created(api.call("fhir_update", resource={**current, "status": "stopped"}))
    return f"stopped {m.group(1).strip()}: {updated}"


def run_baseline(inputs: dict[str, Any], tools: Callable[[str], list[Any]] = default_tools) -> AgentOutput:
    """Act on the case's server; the message says what was done."""
    api = Tools(tools(inputs["fhir_base_url"]))
    patient = f"Patient/{inputs['patient_id']}"
    today = date.fromisoformat(inputs["today"])
    note = inputs.get("note") or ""
    kind = inputs.get("kind") or ("bp" if _BP.search(note) else "stop" if _STOPPED.search(note) else "hba1c")
    try:
        text = {"hba1c": lambda: hba1c(api, patient, today), "bp": lambda: bp(api, patient, note),
                "stop": lambda: stop(api, patient, note)}[kind]()
    except RuntimeError as e:
        text = f"stopped on an error: {e}"
    return AgentOutput(text=text, transcript=api.calls, steps=len(api.calls))


__all__ = ["Tools", "run_baseline"]
