"""Generate the orders cases (and their seeded bundles) from the Synthea R4 sample bundles.

Usage::

    uv run python scripts/make_orders_cases.py --source ../shared/data/synthea-r4 --out fixtures/orders --seed 18

Writes ``<out>/<case_id>.json`` (the case: kind, patient, today, instruction, note, the
choices) and ``<out>/bundles/<case_id>.json`` (the state the case's FHIR server is seeded
with: a ``transaction`` Bundle, one ``PUT Type/id`` entry per resource, so the ids the case
names are the server's). A seeded bundle is the patient's record as of the case's ``today``:
the Patient (no narrative; no death after today), Conditions with onset on or before today,
HbA1c results and the last three blood-pressure panels up to today, the MedicationRequests
authored up to today (every active one, and the last of each other code up to a bound) and
the Medications they name; references rewritten from ``urn:uuid:`` to ``Type/id``, and those
to resources left out (encounters, practitioners, claims) dropped.

Kinds and variants (the task's ``tasks/orders.py`` says what each requires):

* ``hba1c-due``: a diabetic, today 14-20 months after the last HbA1c (``-lapsed``) or
  between the diabetes onset and the first HbA1c (``-never``);
* ``hba1c-due-decoy``: a lapsed diabetic whose record holds orders that are not an open
  HbA1c order (a completed HbA1c order from the last result, an active lipid panel order);
* ``hba1c-recent`` (nothing to do): a diabetic, today 1-10 months after an HbA1c;
* ``hba1c-nondiabetic`` (nothing to do): prediabetes (with old HbA1c results) or neither;
* ``hba1c-repeat`` (nothing to do): a lapsed diabetic whose seeded state already holds the
  active HbA1c ServiceRequest authored today (the instruction carried out once already);
* ``bp``: a nursing note documents a reading; ``bp-repeat``: the state already holds it;
* ``stop``: a note says one of several active medications was stopped; ``stop-repeat``: the
  state has it stopped already.

Self-check: every case is loaded back through ``OrdersTask`` (the truth it derives from the
written bundle must be what the generator chose); a case that does not round-trip stops the
script with exit 1, writing nothing. Same inputs + seed -> byte-identical files.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import random
import re
import shutil
import sys
import tempfile
import unicodedata
import uuid
from collections import Counter
from datetime import date, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_groundeval.fhir.codes import LOINC, RXNORM, SNOMED, UCUM  # noqa: E402
from pytest_groundeval.tasks import orders as task  # noqa: E402
from pytest_groundeval.tasks.datasets import bundle_files, no_bundles  # noqa: E402

KEEP = ("Patient", "Condition", "Observation", "MedicationRequest", "Medication")
DROP_KEYS = ("text", "encounter", "requester", "recorder", "asserter", "performer", "context", "insurance",
             "reasonReference", "basedOn", "partOf", "hasMember", "derivedFrom", "priorPrescription")
MAX_OTHER_MEDS = 8  # ended MedicationRequests kept per bundle (the last of each code)
BP_KEPT = 3
OFFSETS = ("-05:00", "-04:00", "+00:00", "-07:00", "+01:00", "-06:00")
COUNTS = {"hba1c-due": 8, "hba1c-due-decoy": 2, "hba1c-recent": 5, "hba1c-nondiabetic": 5, "hba1c-repeat": 6,
          "bp": 8, "bp-repeat": 5, "stop": 8, "stop-repeat": 5}


def rank(key: str, seed: int) -> str:
    return hashlib.sha256(f"{seed}:{key}".encode()).hexdigest()


def read(path: Path) -> dict[str, Any]:
    data = path.read_bytes()
    return json.loads(gzip.decompress(data) if path.name.endswith(".gz") else data)


def name_of(patient: dict[str, Any]) -> str:
    """``Given_Family_<id8>`` in ASCII letters (a case id is a file name and a test id)."""
    n = (patient.get("name") or [{}])[0]
    parts = [*(n.get("given") or [])[:1], n.get("family") or ""]
    ascii_parts = [unicodedata.normalize("NFKD", p).encode("ascii", "ignore").decode() for p in parts if p]
    return "_".join("".join(ch for ch in p if ch.isalpha()) for p in ascii_parts) + "_" + patient["id"][:8]


class Record:
    """One source patient: resources by type, dates parsed."""

    def __init__(self, path: Path) -> None:
        bundle = read(path)
        self.path = path
        self.res = [e["resource"] for e in bundle.get("entry", []) if isinstance(e.get("resource"), dict)]
        self.patient = next(r for r in self.res if r["resourceType"] == "Patient")
        self.pid = self.patient["id"]
        self.name = name_of(self.patient)
        self.death = task.day_of(self.patient.get("deceasedDateTime"))
        self.urls = {e["fullUrl"]: f"{e['resource']['resourceType']}/{e['resource']['id']}"
                     for e in bundle.get("entry", []) if "fullUrl" in e and isinstance(e.get("resource"), dict)}
        self.diabetes_onset = min((task.day_of(c.get("onsetDateTime")) for c in self.of("Condition")
                                   if task.codes_of(c.get("code"), SNOMED) & set(task.DIABETES)), default=None)
        self.prediabetic = any("15777000" in task.codes_of(c.get("code"), SNOMED) for c in self.of("Condition"))
        self.complication = any(task.codes_of(c.get("code"), SNOMED) & set(task.DIABETES_COMPLICATIONS)
                                for c in self.of("Condition"))
        self.a1c = sorted(d for o in self.of("Observation") if task.HBA1C in task.codes_of(o.get("code"), LOINC)
                          for d in [task.day_of(o.get("effectiveDateTime"))] if d)
        # None: nothing dated (e.g. a bundle trimmed to the Patient); main() skips it, naming it
        self.last_day = max((d for r in self.res for k in ("effectiveDateTime", "authoredOn", "onsetDateTime")
                             for d in [task.day_of(r.get(k))] if d), default=None)

    def of(self, rtype: str) -> list[dict[str, Any]]:
        return [r for r in self.res if r["resourceType"] == rtype]

    def alive_on(self, day: date) -> bool:
        return self.death is None or day < self.death

    def active_codes(self) -> dict[str, list[dict[str, Any]]]:
        by: dict[str, list[dict[str, Any]]] = {}
        meds = {f"Medication/{m['id']}": m for m in self.of("Medication")}
        for mr in self.of("MedicationRequest"):
            refs = {self.urls.get(task.ref_of(mr.get("medicationReference")) or "", "")}
            code = task.codes_of(mr.get("medicationCodeableConcept"), RXNORM) | {
                c for r in refs if r in meds for c in task.codes_of(meds[r].get("code"), RXNORM)}
            for c in code:
                by.setdefault(c, []).append(mr)
        return by


def clean(resource: dict[str, Any], urls: dict[str, str], kept: set[str]) -> dict[str, Any]:
    """A resource for the seeded state: dropped elements gone, references as ``Type/id``."""
    out = {k: v for k, v in resource.items() if k not in DROP_KEYS}

    def fix(node: Any) -> Any:
        if isinstance(node, dict):
            if isinstance(node.get("reference"), str):
                ref = urls.get(node["reference"], node["reference"])
                if ref not in kept:
                    return None
                return {**node, "reference": ref}
            fixed = {k: fix(v) for k, v in node.items()}
            return {k: v for k, v in fixed.items() if v is not None}
        if isinstance(node, list):
            items = [fix(v) for v in node]
            return [v for v in items if v is not None] or None
        return node

    return {k: v for k, v in ((k, fix(v)) for k, v in out.items()) if v is not None}


def seeded_state(rec: Record, today: date, *, stop_code: str | None = None) -> list[dict[str, Any]]:
    """The patient's resources as of ``today`` (see the module docstring)."""
    patient = dict(rec.patient)
    if rec.death is not None and rec.death > today:
        patient.pop("deceasedDateTime", None)
    out: list[dict[str, Any]] = [patient]
    for c in rec.of("Condition"):
        if (task.day_of(c.get("onsetDateTime")) or today) > today:
            continue
        abated = task.day_of(c.get("abatementDateTime"))
        if abated is not None and abated > today:  # as of today it has not abated yet
            c = {k: v for k, v in c.items() if k != "abatementDateTime"}
            c["clinicalStatus"] = {"coding": [{"system": "http://terminology.hl7.org/CodeSystem/condition-clinical",
                                               "code": "active"}]}
        out.append(c)
    obs = sorted((o for o in rec.of("Observation") if (task.day_of(o.get("effectiveDateTime")) or today) <= today),
                 key=lambda o: o.get("effectiveDateTime", ""))
    out += [o for o in obs if task.HBA1C in task.codes_of(o.get("code"), LOINC)]
    out += [o for o in obs if "55284-4" in task.codes_of(o.get("code"), LOINC)][-BP_KEPT:]
    mrs = sorted((m for m in rec.of("MedicationRequest") if (task.day_of(m.get("authoredOn")) or today) <= today),
                 key=lambda m: (m.get("authoredOn", ""), m["id"]))
    codes = rec.active_codes()
    code_of = {id(mr): c for c, items in codes.items() for mr in items}
    active = [m for m in mrs if m.get("status") == "active"]
    last_other: dict[str, dict[str, Any]] = {}
    for m in mrs:
        c = code_of.get(id(m))
        if m.get("status") != "active" and c and c not in {code_of.get(id(a)) for a in active}:
            last_other[c] = m
    others = sorted(last_other.values(), key=lambda m: m.get("authoredOn", ""))[-MAX_OTHER_MEDS:]
    out += sorted(active + others, key=lambda m: (m.get("authoredOn", ""), m["id"]))
    kept_refs = {rec.urls.get(task.ref_of(m.get("medicationReference")) or "") for m in active + others}
    out += [m for m in rec.of("Medication") if f"Medication/{m['id']}" in kept_refs]
    kept = {f"{r['resourceType']}/{r['id']}" for r in out}
    return [clean(r, rec.urls, kept) for r in out]


def transaction(resources: list[dict[str, Any]]) -> dict[str, Any]:
    return {"resourceType": "Bundle", "type": "transaction", "entry": [
        {"fullUrl": f"urn:uuid:{r['id']}", "resource": r, "request": {"method": "PUT", "url": f"{r['resourceType']}/{r['id']}"}}
        for r in resources]}


def seeded_id(what: str, pid: str, today: date) -> str:
    """A stable UUID for a resource the generator adds to a seeded state."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"groundeval:orders:{what}:{pid}:{today.isoformat()}"))


# ---------------------------------------------------------------- the cases
def hba1c_case(rec: Record, variant: str, today: date, due: bool, seed_order: bool = False,
               decoys: bool = False) -> dict[str, Any]:
    state = seeded_state(rec, today)
    if decoys:  # orders that are not an open HbA1c order: the test is still due
        lab = [{"coding": [{"system": SNOMED, "code": "108252007", "display": "Laboratory procedure"}]}]
        state.append({"resourceType": "ServiceRequest", "id": seeded_id("hba1c-order-done", rec.pid, today),
                      "status": "completed", "intent": "order", "category": lab,
                      "code": {"coding": [{"system": LOINC, "code": task.HBA1C,
                                           "display": "Hemoglobin A1c/Hemoglobin.total in Blood"}]},
                      "subject": {"reference": f"Patient/{rec.pid}"}, "authoredOn": rec.a1c[-1].isoformat()})
        state.append({"resourceType": "ServiceRequest", "id": seeded_id("lipid-order", rec.pid, today),
                      "status": "active", "intent": "order", "category": lab,
                      "code": {"coding": [{"system": LOINC, "code": "57698-3",
                                           "display": "Lipid panel with direct LDL - Serum or Plasma"}]},
                      "subject": {"reference": f"Patient/{rec.pid}"},
                      "authoredOn": (today - timedelta(days=10)).isoformat()})
    if seed_order:
        state.append({"resourceType": "ServiceRequest", "id": seeded_id("hba1c-order", rec.pid, today), "status": "active",
                      "intent": "order", "category": [{"coding": [{"system": SNOMED, "code": "108252007",
                                                                   "display": "Laboratory procedure"}]}],
                      "code": {"coding": [{"system": LOINC, "code": task.HBA1C,
                                           "display": "Hemoglobin A1c/Hemoglobin.total in Blood"}],
                               "text": "Hemoglobin A1c"},
                      "subject": {"reference": f"Patient/{rec.pid}"}, "authoredOn": today.isoformat()})
    return {"kind": "hba1c", "variant": variant, "today": today, "state": state,
            "instruction": task.PROTOCOL["hba1c"], "note": None, "choice": {"due": due}}


def bp_case(rec: Record, rng: random.Random, repeat: bool) -> dict[str, Any]:
    today = rec.last_day + timedelta(days=rng.randint(3, 40))
    systolic, diastolic = rng.randint(104, 168), rng.randint(62, 98)
    offset = rng.choice(OFFSETS)
    hh, mm = rng.randint(8, 16), rng.choice((5, 10, 15, 20, 25, 30, 35, 40, 45, 50))
    effective = f"{today.isoformat()}T{hh:02d}:{mm:02d}:00{offset}"
    arm = rng.choice(("left", "right"))
    note = (f"Nursing note, {today.isoformat()}. Patient seated, rested 5 minutes. Blood pressure taken at "
            f"{hh:02d}:{mm:02d} (local time, UTC{offset}), {arm} arm, automated cuff: {systolic}/{diastolic} mmHg. "
            "Patient denies headache or dizziness.")
    state = seeded_state(rec, today)
    if repeat:
        state.append({"resourceType": "Observation", "id": seeded_id("bp", rec.pid, today), "status": "final",
                      "category": [{"coding": [{"system": "http://terminology.hl7.org/CodeSystem/observation-category",
                                                "code": "vital-signs", "display": "Vital Signs"}]}],
                      "code": {"coding": [{"system": LOINC, "code": task.BP_PANEL,
                                           "display": "Blood pressure panel with all children optional"}]},
                      "subject": {"reference": f"Patient/{rec.pid}"}, "effectiveDateTime": effective,
                      "component": [
                          {"code": {"coding": [{"system": LOINC, "code": task.SYSTOLIC, "display": "Systolic blood pressure"}]},
                           "valueQuantity": {"value": systolic, "unit": "mmHg", "system": UCUM,
                                             "code": task.MMHG}},
                          {"code": {"coding": [{"system": LOINC, "code": task.DIASTOLIC, "display": "Diastolic blood pressure"}]},
                           "valueQuantity": {"value": diastolic, "unit": "mmHg", "system": UCUM,
                                             "code": task.MMHG}}]})
    return {"kind": "bp", "variant": "bp-repeat" if repeat else "bp", "today": today, "state": state,
            "instruction": task.PROTOCOL["bp"], "note": note,
            "choice": {"systolic": systolic, "diastolic": diastolic, "effective": effective, "due": not repeat}}


def wording_of(display: str) -> str:
    """How a note names a drug: its display up to the dose form ("Warfarin Sodium 5 MG"), an
    NDA prefix and a leading volume left out."""
    display = re.sub(r"^NDA\d+\s+", "", display)
    display = re.sub(r"^\d+(?:\.\d+)?\s+ML\s+", "", display)
    words = display.split()
    cut = next((i for i, w in enumerate(words) if w.upper() == "MG" or w.upper().startswith("MG/")), None)
    return " ".join(words[: cut + 1]) if cut is not None else display


def stop_case(rec: Record, rng: random.Random, repeat: bool) -> dict[str, Any] | None:
    today = rec.last_day + timedelta(days=rng.randint(3, 40))
    state = seeded_state(rec, today)
    by_ref = {f"{r['resourceType']}/{r['id']}": r for r in state}
    active: dict[str, list[dict[str, Any]]] = {}
    for r in state:
        if r["resourceType"] == "MedicationRequest" and r.get("status") == "active":
            for c in task.medication_code(r, by_ref):
                active.setdefault(c, []).append(r)
    single = sorted(c for c, items in active.items() if len(items) == 1)
    if len(active) < 2 or not single:
        return None
    code = rng.choice(single)
    mr = active[code][0]
    concept = mr.get("medicationCodeableConcept") or by_ref.get(task.ref_of(mr.get("medicationReference")) or "",
                                                                {}).get("code") or {}
    display = next((c.get("display") for c in concept.get("coding", []) if c.get("code") == code), None) or code
    wording = wording_of(display)
    reason = rng.choice(("it upset her stomach" if rec.patient.get("gender") == "female" else "it upset his stomach",
                         "of dizziness", "the prescriber asked", "of a rash"))
    note = (f"Clinic note, {today.isoformat()}. Medication review with the patient. {wording} was stopped on "
            f"{today.isoformat()} because {reason}. Other medications unchanged.")
    if repeat:
        mr["status"] = "stopped"
    return {"kind": "stop", "variant": "stop-repeat" if repeat else "stop", "today": today, "state": state,
            "instruction": task.PROTOCOL["stop"], "note": note,
            "choice": {"code": code, "wording": wording, "due": not repeat}}


def plan(records: list[Record], seed: int) -> list[tuple[Record, dict[str, Any]]]:
    rng = random.Random(seed)
    out: list[tuple[Record, dict[str, Any]]] = []
    diabetics = sorted((r for r in records if r.diabetes_onset and r.a1c), key=lambda r: rank(r.name, seed))
    lapsed, never, recent, repeat = [], [], [], []
    for r in diabetics:
        t = r.a1c[-1] + timedelta(days=rng.randint(430, 600))
        if r.alive_on(t):
            lapsed.append((r, hba1c_case(r, "hba1c-due-lapsed", t, True)))
            repeat.append((r, hba1c_case(r, "hba1c-repeat", t, False, seed_order=True)))
        if r.diabetes_onset and (r.a1c[0] - r.diabetes_onset).days > 400:
            t = r.diabetes_onset + timedelta(days=rng.randint(30, min(360, (r.a1c[0] - r.diabetes_onset).days - 30)))
            if r.alive_on(t):
                never.append((r, hba1c_case(r, "hba1c-due-never", t, True)))
        mid = r.a1c[len(r.a1c) // 2]
        nxt = next((d for d in r.a1c if d > mid), None)
        span = min(300, ((nxt - mid).days - 5) if nxt else 300)
        if span > 30:
            t = mid + timedelta(days=rng.randint(30, span))
            if r.alive_on(t):
                recent.append((r, hba1c_case(r, "hba1c-recent", t, False)))
    out += (lapsed[:4] + never)[: COUNTS["hba1c-due"]] if len(lapsed[:4] + never) >= COUNTS["hba1c-due"] else (
        lapsed + never)[: COUNTS["hba1c-due"]]
    out += recent[: COUNTS["hba1c-recent"]]
    out += repeat[: COUNTS["hba1c-repeat"]]
    others = sorted((r for r in records if not r.diabetes_onset and not r.complication and r.death is None),
                    key=lambda r: rank("nd" + r.name, seed))
    pre = [r for r in others if r.prediabetic and r.a1c][:3]
    plain = [r for r in others if not r.prediabetic and not r.a1c][:COUNTS["hba1c-nondiabetic"] - len(pre)]
    for r in pre:
        out.append((r, hba1c_case(r, "hba1c-nondiabetic", r.a1c[-1] + timedelta(days=rng.randint(430, 600)), False)))
    for r in plain:
        out.append((r, hba1c_case(r, "hba1c-nondiabetic", r.last_day + timedelta(days=rng.randint(3, 40)), False)))
    living = sorted((r for r in records if r.death is None), key=lambda r: rank("bp" + r.name, seed))
    used: set[str] = set()
    for r in living[: COUNTS["bp"] + COUNTS["bp-repeat"]]:
        repeat_it = len([1 for _, c in out if c["variant"] == "bp"]) >= COUNTS["bp"]
        out.append((r, bp_case(r, rng, repeat_it)))
        used.add(r.pid)
    n_stop = n_rep = 0
    for r in sorted((r for r in records if r.death is None), key=lambda r: rank("stop" + r.name, seed)):
        if n_stop >= COUNTS["stop"] and n_rep >= COUNTS["stop-repeat"]:
            break
        repeat_it = n_stop >= COUNTS["stop"]
        case = stop_case(r, rng, repeat_it)
        if case is None:
            continue
        out.append((r, case))
        n_rep += repeat_it
        n_stop += not repeat_it
    # decoys (drawn last: the cases above do not change): a lapsed diabetic whose record holds
    # orders that are not an open HbA1c order (an old completed one, an active one for another test)
    decoys = 0
    for r, c in lapsed:
        t = c["today"] + timedelta(days=rng.randint(1, 20))
        if decoys < COUNTS["hba1c-due-decoy"] and r.alive_on(t):
            out.append((r, hba1c_case(r, "hba1c-due-decoy", t, True, decoys=True)))
            decoys += 1
    return out


def write_atomic(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, ensure_ascii=False, indent=1) + "\n"
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--source", type=Path, default=ROOT.parent / "shared" / "data" / "synthea-r4")
    ap.add_argument("--out", type=Path, default=ROOT / "fixtures" / "orders")
    ap.add_argument("--seed", type=int, default=18)
    args = ap.parse_args(argv)
    files = bundle_files(args.source)
    if not files:
        print(no_bundles(args.source, "--source", args.out), file=sys.stderr)
        return 2
    records = []
    for p in files:
        rec = Record(p)
        if rec.last_day is None:  # a case's "today" is set after the record's last date
            print(f"skipped {p.name}: no dated resource (effectiveDateTime, authoredOn, onsetDateTime)",
                  file=sys.stderr)
            continue
        records.append(rec)
    cases: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
    seen: Counter[str] = Counter()
    for rec, c in plan(records, args.seed):
        base = f"{c['variant']}-{rec.name}"
        seen[base] += 1
        cid = base if seen[base] == 1 else f"{base}-{seen[base]}"
        item = {"case_id": cid, "kind": c["kind"], "variant": c["variant"], "patient_id": rec.pid,
                "today": c["today"].isoformat(), "instruction": c["instruction"], "note": c["note"],
                "choice": c["choice"], "bundle": f"bundles/{cid}.json", "source": rec.path.name}
        cases.append((cid, item, transaction(c["state"])))
    # self-check: the task derives from each written bundle the truth the generator chose
    problems = []
    for cid, item, bundle in cases:
        try:
            truth = task.derive_truth(item, bundle, cid)
        except Exception as e:  # noqa: BLE001 - every refusal is named
            problems.append(f"{cid}: {e}")
            continue
        if truth["due"] is not item["choice"]["due"]:
            problems.append(f"{cid}: derived due={truth['due']} ({truth['why']})")
    if not cases:  # nothing to write: keep what --out holds
        print(f"no case could be made from the {len(files)} bundle(s) in {args.source}; nothing written to "
              f"(or deleted from) {args.out}", file=sys.stderr)
        return 1
    if problems:
        print("refused:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    out = args.out
    if (out / "bundles").is_dir():
        shutil.rmtree(out / "bundles")
    for old in out.glob("*.json"):
        old.unlink()
    for cid, item, bundle in cases:
        write_atomic(out / f"{cid}.json", item)
        write_atomic(out / "bundles" / f"{cid}.json", bundle)
    table = Counter(item["variant"] for _, item, _ in cases)
    nothing = sum(not item["choice"]["due"] for _, item, _ in cases)
    for k, v in sorted(table.items()):
        print(f"{k:20s} {v}")
    print(f"{'total':20s} {len(cases)} ({nothing} with nothing to do)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
