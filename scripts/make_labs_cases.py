"""Generate the labs (result interpretation) cases from Synthea bundles.

Usage::

    uv run python scripts/make_labs_cases.py --source ../shared/data/synthea-r4 --out fixtures/labs --seed 18

Each living patient's bundle is trimmed to a FHIR ``transaction`` Bundle of the Patient (no
narrative) and their Observations of the suite's LOINC codes and two neighbours of the same panel as potassium
(sodium, chloride: results an agent must not confuse with the asked one), each entry a
``PUT Type/id`` (ids kept, so the case knows the patient id the server will hold), references to
the patient as ``Patient/<id>``, encounter references (the bundle has no Encounter), ``meta`` and
``issued`` dropped. Written to ``<out>/bundles/<patient>.json``, one entry per line.

Candidate cases are generated per patient, question and "today" (every date a function of the
record's own result dates and a seeded draw):

* a result: today after the last result (nothing later in the record), or between two results
  (the record holds a result dated after today: the "future" trap), or (``within_months``) a
  window that holds the result;
* no result: the patient has none of that test; today before the first one (only later results);
  or (``within_months`` 12) the last one is older than the window; for the change question, fewer
  than two eGFR results in the 2 years up to today, or the earliest and the latest of two series
  (Synthea's ``mL/min`` and ``mL/min/{1.73_m2}``: no decline computable, ``tasks.labs.series_key``).

Each candidate's truth is the task's own (``tasks.labs.derive_truth`` on the trimmed bundle); a
candidate it refuses (a value within half a step of a threshold, a decline within reading
precision of 25 %, two results at the same time) is dropped, and so is one where a result's date
is today or a window's first day, or where another result of the same day has other values
(dates in the answer stay unambiguous). Candidates are then drawn per stratum (question kind,
analyte or criterion, flag or no result), ranked by sha256(seed, candidate), at most
``--per-patient`` cases per patient. The case file records the question, today and ``expect``
(result / no_result), never the truth: the task derives that at load.

Same inputs + seed -> byte-identical files. Prints the strata. Importable: ``main(argv)``.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import sys
from collections import Counter
from datetime import date, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_groundeval.model import CaseError  # noqa: E402
from pytest_groundeval.tasks.datasets import bundle_files, no_bundles  # noqa: E402
from pytest_groundeval.scorers.labs import ANALYTES, CHANGE_ANALYTE, CHANGE_MONTHS, CRITERIA, LOINC  # noqa: E402
from pytest_groundeval.tasks.labs import derive_truth, months_before, results  # noqa: E402

NEIGHBOURS = ("2947-0", "2069-3")  # sodium, chloride: the same panel as potassium
KEEP = {c for a in ANALYTES.values() for c in a.codes} | set(NEIGHBOURS)

#: (stratum, how many): kind/key/expect[/flag]
TARGETS: list[tuple[str, int]] = (
    [(f"latest/{a}/result", 2) for a in ANALYTES]
    + [("latest/window/result", 2), ("latest/any/no_result", 6)]
    + [(f"threshold/{c}/result/{f}", 3) for c in CRITERIA for f in ("true", "false")]
    + [("threshold/any/no_result", 6)]
    + [("change/egfr/result/true", 6), ("change/egfr/result/false", 6), ("change/egfr/no_result", 4)]
)


def rank(seed: str, *parts: str) -> str:
    return hashlib.sha256("\0".join((seed,) + parts).encode()).hexdigest()


def draw(seed: str, lo: int, hi: int, *parts: str) -> int:
    """A seeded whole number in lo..hi."""
    return lo + int(rank(seed, *parts)[:8], 16) % (hi - lo + 1)


# ------------------------------------------------------------------ trimming
def load(path: Path) -> dict[str, Any]:
    data = path.read_bytes()
    return json.loads(gzip.decompress(data) if path.name.endswith(".gz") else data)


def short_stem(path: Path) -> str:
    stem = path.name.split(".json")[0]
    name, _, uid = stem.rpartition("_")
    return f"{name}_{uid[:8]}" if name else stem


def trim(bundle: dict[str, Any]) -> dict[str, Any] | None:
    """The transaction bundle of a living patient (None: deceased, or not one patient)."""
    res = [e["resource"] for e in bundle.get("entry", []) if isinstance(e.get("resource"), dict)]
    patients = [r for r in res if r["resourceType"] == "Patient"]
    if len(patients) != 1 or "deceasedDateTime" in patients[0] or patients[0].get("deceasedBoolean"):
        return None
    patient = {k: v for k, v in patients[0].items() if k != "text"}
    pid = patient["id"]
    entries = [patient]
    for r in res:
        if r["resourceType"] != "Observation":
            continue
        codes = {c.get("code") for c in r.get("code", {}).get("coding", []) if c.get("system") == LOINC}
        if not codes & KEEP:
            continue
        obs = {k: v for k, v in r.items() if k not in ("encounter", "meta", "issued")}
        if obs.get("subject", {}).get("reference") in (f"urn:uuid:{pid}", f"Patient/{pid}"):
            obs["subject"] = {"reference": f"Patient/{pid}"}
        entries.append(obs)
    return {"resourceType": "Bundle", "type": "transaction",
            "entry": [{"fullUrl": f"urn:uuid:{r['id']}", "resource": r,
                       "request": {"method": "PUT", "url": f"{r['resourceType']}/{r['id']}"}} for r in entries]}


# ------------------------------------------------------------------ candidates
def _day(text: str) -> date:
    return date.fromisoformat(text[:10])


def candidates(stem: str, bundle: dict[str, Any], seed: str) -> list[dict[str, Any]]:
    resources = [e["resource"] for e in bundle["entry"]]
    pid = resources[0]["id"]
    every_day = sorted({_day(r["effectiveDateTime"]) for r in resources[1:] if "effectiveDateTime" in r})
    if not every_day:
        return []
    out = []

    def add(question: dict[str, Any], today: date, tag: str) -> None:
        out.append({"stem": stem, "question": question, "today": today, "tag": tag})

    for key, a in ANALYTES.items():
        days = [_day(r["effective"]) for r in results(resources, pid, a)]
        kinds = [("latest", {"kind": "latest", "analyte": key})] + [
            ("threshold", {"kind": "threshold", "criterion": c.key}) for c in CRITERIA.values() if c.analyte == key]
        for kind, q in kinds:
            if not days:
                add(dict(q, within_months=None), every_day[-1] + timedelta(days=draw(seed, 10, 200, stem, key, kind)),
                    "never")
                continue
            add(dict(q, within_months=None), days[-1] + timedelta(days=draw(seed, 5, 300, stem, key, kind, "a")),
                "after last")
            gaps = [(d1, d2) for d1, d2 in zip(days, days[1:]) if (d2 - d1).days >= 6]
            if gaps:
                d1, d2 = gaps[draw(seed, 0, len(gaps) - 1, stem, key, kind, "g")]
                add(dict(q, within_months=None),
                    d1 + timedelta(days=draw(seed, 2, (d2 - d1).days - 3, stem, key, kind, "b")), "future result")
                add(dict(q, within_months=12),
                    d1 + timedelta(days=draw(seed, 2, min(300, (d2 - d1).days - 3), stem, key, kind, "w")),
                    "in window")
            before = [d for d in every_day if d < days[0] - timedelta(days=30)]
            if before:
                add(dict(q, within_months=None), before[-1] + timedelta(days=draw(seed, 1, 20, stem, key, kind, "f")),
                    "only later results")
            stale = [(d1, d2) for d1, d2 in zip(days, days[1:] + [None]) if d2 is None or (d2 - d1).days > 420]
            if stale:
                d1, d2 = stale[draw(seed, 0, len(stale) - 1, stem, key, kind, "s")]
                room = 60 if d2 is None else min(60, (d2 - d1).days - 400)
                add(dict(q, within_months=12), d1 + timedelta(days=370 + draw(seed, 0, max(0, room - 5), stem, key,
                                                                              kind, "t")), "stale")
    egfr = [_day(r["effective"]) for r in results(resources, pid, ANALYTES[CHANGE_ANALYTE])]
    for i, d in enumerate(egfr):
        nxt = egfr[i + 1] if i + 1 < len(egfr) else None
        room = 40 if nxt is None else (nxt - d).days - 2
        if room >= 2:
            add({"kind": "change"}, d + timedelta(days=draw(seed, 1, min(room, 40), stem, "change", str(i))),
                "change")
    return out


def clear_dates(resources: list[dict[str, Any]], pid: str, cand: dict[str, Any], truth: dict[str, Any]) -> bool:
    """No result of the analyte on today or a window's first day; no other values on the day
    of an answering result."""
    found = results(resources, pid, ANALYTES[truth["analyte"]])
    edges = {cand["today"].isoformat()} | ({truth["window_start"]} if truth["window_start"] else set())
    if any(r["effective"][:10] in edges for r in found):
        return False
    for res in (truth["result"], truth["baseline"]):
        if res is None:
            continue
        same_day = [r for r in found if r["effective"][:10] == res["effective"][:10] and r is not res
                    and r["observation"] != res["observation"]]
        if any({k: r.get(k) for k in ("value", "systolic", "diastolic")}
               != {k: res.get(k) for k in ("value", "systolic", "diastolic")} for r in same_day):
            return False
    return True


def stratum(cand: dict[str, Any], truth: dict[str, Any]) -> str:
    q = cand["question"]
    kind = q["kind"]
    if truth["no_result"]:
        return f"{kind}/{'egfr' if kind == 'change' else 'any'}/no_result"
    if kind == "latest":
        return "latest/window/result" if q.get("within_months") else f"latest/{q['analyte']}/result"
    key = q.get("criterion", "egfr")
    return f"{kind}/{key}/result/{str(truth['flag']).lower()}"


def case_id(stem: str, q: dict[str, Any], taken: set[str]) -> str:
    key = q.get("analyte") or q.get("criterion") or "egfr_decline"
    base = f"{stem}_{q['kind']}_{key}".replace(".", "_") + ("_12mo" if q.get("within_months") else "")
    cid, n = base, 2
    while cid in taken:
        cid, n = f"{base}_{n}", n + 1
    taken.add(cid)
    return cid


def interleave(avail: list[tuple[str, dict[str, Any], dict[str, Any]]]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """The candidates by rank, one situation after another (round robin over the situations)."""
    groups: dict[str, list] = {}
    for item in sorted(avail, key=lambda x: x[0]):
        groups.setdefault(item[1]["tag"], []).append(item)
    order = sorted(groups)
    out = []
    for i in range(max((len(g) for g in groups.values()), default=0)):
        out += [groups[t][i] for t in order if i < len(groups[t])]
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--source", type=Path, required=True, help="folder of Synthea R4 bundles (.json / .json.gz)")
    p.add_argument("--out", type=Path, required=True, help="the cases folder (bundles go to OUT/bundles)")
    p.add_argument("--seed", default="18")
    p.add_argument("--per-patient", type=int, default=2, help="at most this many cases per patient")
    return p


def _write(path: Path, obj: Any) -> None:
    data = (json.dumps(obj, indent=1, ensure_ascii=False) + "\n").encode("utf-8")
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _write_bundle(path: Path, bundle: dict[str, Any]) -> None:
    """A bundle as compact JSON, one entry per line (small, and a diff shows which entry changed)."""
    head = json.dumps({k: v for k, v in bundle.items() if k != "entry"}, ensure_ascii=False)[:-1]
    lines = [json.dumps(e, ensure_ascii=False, separators=(",", ":")) for e in bundle["entry"]]
    data = (head + ', "entry": [\n' + ",\n".join(lines) + "\n]}\n").encode("utf-8")
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    seed = str(args.seed)
    files = bundle_files(args.source)
    if not files:
        print(no_bundles(args.source, "--source", args.out), file=sys.stderr)
        return 2
    bundles: dict[str, dict[str, Any]] = {}
    pool: dict[str, list[tuple[str, dict[str, Any], dict[str, Any]]]] = {}
    for path in files:
        trimmed = trim(load(path))
        if trimmed is None:
            continue
        stem = short_stem(path)
        bundles[stem] = trimmed
        resources = [e["resource"] for e in trimmed["entry"]]
        for cand in candidates(stem, trimmed, seed):
            try:
                truth = derive_truth(trimmed, cand["question"], cand["today"])
            except CaseError:
                continue
            if not clear_dates(resources, resources[0]["id"], cand, truth):
                continue
            key = rank(seed, stem, json.dumps(cand["question"], sort_keys=True), cand["today"].isoformat())
            pool.setdefault(stratum(cand, truth), []).append((key, cand, truth))
    per_patient: Counter = Counter()
    chosen: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
    seen: set[tuple[str, str]] = set()
    table = []
    for name, want in TARGETS:
        avail = pool.get(name, [])
        got = 0
        tags: Counter = Counter()
        for _, cand, truth in interleave(avail):  # a spread of the situations (future result, stale, ...)
            if got >= want:
                break
            ident = (cand["stem"], json.dumps(cand["question"], sort_keys=True))
            if per_patient[cand["stem"]] >= args.per_patient or ident in seen:
                continue
            seen.add(ident)
            per_patient[cand["stem"]] += 1
            tags[cand["tag"]] += 1
            chosen.append((name, cand, truth))
            got += 1
        table.append((name, len(avail), got, dict(tags)))
    if not chosen:  # nothing to write: keep what --out holds
        print(f"no case could be made from the {len(files)} bundle(s) in {args.source} (no living patient has a "
              f"result of the suite's analytes; a bundle trimmed by make_fixtures.py keeps no Observation: give "
              f"the untrimmed Synthea output); nothing written to (or deleted from) {args.out}", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bundles").mkdir(exist_ok=True)
    for old in list(args.out.glob("*.json")) + list((args.out / "bundles").glob("*.json")):
        old.unlink()
    taken: set[str] = set()
    for name, cand, truth in chosen:
        cid = case_id(cand["stem"], cand["question"], taken)
        _write(args.out / f"{cid}.json", {
            "case_id": cid, "bundle": f"bundles/{cand['stem']}.json", "today": cand["today"].isoformat(),
            "question": cand["question"], "expect": "no_result" if truth["no_result"] else "result",
            "situation": cand["tag"]})
    for stem in sorted({c["stem"] for _, c, _ in chosen}):
        _write_bundle(args.out / "bundles" / f"{stem}.json", bundles[stem])
    print(f"{'stratum':38} {'available':>9} {'chosen':>6}  situations")
    for name, avail, got, tags in table:
        print(f"{name:38} {avail:9d} {got:6d}  {', '.join(f'{k}: {v}' for k, v in sorted(tags.items()))}")
    print(f"{len(chosen)} cases over {len({c['stem'] for _, c, _ in chosen})} patients")
    short = [(n, w, g) for (n, w), (_, _, g, _) in zip(TARGETS, table) if g < w]
    for n, w, g in short:
        print(f"warning: stratum {n}: {g} of {w}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
