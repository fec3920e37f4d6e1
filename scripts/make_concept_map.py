"""Build the orders task's concept map (``pytest_groundeval/fhir/concept_map.json``).

Usage::

    uv run python scripts/make_concept_map.py --source ../shared/data/synthea-r4 --source fixtures/orders \\
        --out pytest_groundeval/fhir/concept_map.json

(those are the defaults, resolved against the repository root).

A concept is one thing a written resource may name: a test (HbA1c, a lipid panel, the blood
pressure panel), a blood-pressure component, a specimen, a condition (an order's reason), a
body site, a body position, rest or exertion, a measuring method, an interpretation, an
observation category. Each has the codings that denote it in the code systems the task knows
(LOINC <-> SNOMED CT <-> CPT <-> ICD-10-CM, HL7's interpretation and category systems) and the
words that name it in free text (regular expressions, matched case-insensitively on word
boundaries). ``with`` lists the concepts a text about it may name beside it (a systolic
component's display names "blood pressure").

The cross-system equivalences are the table below (curated: Synthea carries no SNOMED or CPT
translation of its LOINC codes). The data decide the rest: every coding of a mapped code that
the ``--source`` bundles hold is read, its display recorded under ``displays`` and checked to
be named by its concept's words; a display the words do not name, or a mapped code the data
hold under another concept, stops the script (exit 1, nothing written). Same inputs, byte-
identical output.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_groundeval.fhir.codes import LOINC, SNOMED  # noqa: E402

CPT = "http://www.ama-assn.org/go/cpt"
ICD10CM = "http://hl7.org/fhir/sid/icd-10-cm"
INTERPRETATION = "http://terminology.hl7.org/CodeSystem/v3-ObservationInterpretation"
CATEGORY = "http://terminology.hl7.org/CodeSystem/observation-category"

# (id, kind, label, codings, words, with)
CONCEPTS: list[tuple[str, str, str, list[tuple[str, str]], list[str], list[str]]] = [
    # tests
    ("hba1c", "test", "hemoglobin A1c", [(LOINC, "4548-4"), (SNOMED, "43396009"), (CPT, "83036")],
     [r"ha?emoglobin\s*a1c", r"hb\s*a1c", r"hgb\s*a1c", r"a1c", r"glyc(?:at|osylat)ed\s+ha?emoglobin",
      r"glycoha?emoglobin", r"hemoglobin[ae]?\s+(?:glyquee|glicosilada|glicada)", r"glykiertes\s+ha?emoglobin"],
     ["blood"]),
    ("lipid-panel", "test", "lipid panel",
     [(LOINC, "57698-3"), (LOINC, "24331-1"), (SNOMED, "16254007"), (CPT, "80061")],
     [r"lipid\w*(?:\s+(?:panel|profile))?", r"(?:bilan|perfil)\s+lipid\w*", r"cholesterol", r"ldl", r"hdl",
      r"triglycerides?"], ["serum-plasma"]),
    ("glucose", "test", "glucose", [(LOINC, "2339-0"), (LOINC, "2345-7")],
     [r"glucose", r"blood\s+sugar", r"glyc[ae]?emia"], []),
    ("renal-function", "test", "kidney function (creatinine, eGFR)", [(LOINC, "2160-0"), (LOINC, "33914-3")],
     [r"creatinine", r"e?gfr", r"glomerular\s+filtration\s+rate", r"(?:kidney|renal)\s+(?:function|panel)"], []),
    ("urine-albumin", "test", "urine albumin", [(LOINC, "14959-1")], [r"micro-?albumin\w*", r"albuminuria"], []),
    ("cbc", "test", "complete blood count", [(LOINC, "58410-2")], [r"complete\s+blood\s+count", r"cbc"], []),
    ("tsh", "test", "thyroid stimulating hormone", [(LOINC, "3016-3")], [r"tsh", r"thyroid\w*"], []),
    ("heart-rate", "test", "heart rate", [(LOINC, "8867-4")], [r"heart\s+rate", r"pulse(?:\s+rate)?"], []),
    ("body-temperature", "test", "body temperature", [(LOINC, "8310-5")], [r"(?:body\s+)?temperature"], []),
    ("oxygen-saturation", "test", "oxygen saturation", [(LOINC, "2708-6"), (LOINC, "59408-5")],
     [r"o2\s+sat\w*", r"oxygen\s+saturation", r"spo2"], []),
    ("respiratory-rate", "test", "respiratory rate", [(LOINC, "9279-1")], [r"respiratory\s+rate", r"respirations?"],
     []),
    ("body-weight", "test", "body weight", [(LOINC, "29463-7")], [r"(?:body\s+)?weight"], []),
    ("bp-panel", "test", "blood pressure panel",
     [(LOINC, "85354-9"), (LOINC, "55284-4"), (SNOMED, "75367002"), (SNOMED, "163020007")],
     [r"blood\s+pressure", r"bp", r"arterial\s+pressure", r"tension\s+arterielle", r"presion\s+arterial",
      r"blutdruck"], ["systolic", "diastolic"]),
    # blood-pressure components
    ("systolic", "bp-component", "systolic blood pressure",
     [(LOINC, "8480-6"), (SNOMED, "271649006"), (SNOMED, "72313002")], [r"systol\w*", r"sistol\w*", r"sbp"], ["bp-panel"]),
    ("diastolic", "bp-component", "diastolic blood pressure",
     [(LOINC, "8462-4"), (SNOMED, "271650006"), (SNOMED, "1091811000000102")], [r"diastol\w*", r"dbp"],
     ["bp-panel"]),
    # specimens ("blood" in "blood pressure" names no specimen)
    ("blood", "specimen", "blood", [(SNOMED, "119297000")],
     [r"(?:whole\s+|venous\s+|capillary\s+)?blood(?!\s*pressure)"], []),
    ("urine", "specimen", "urine", [(SNOMED, "122575003")], [r"urine", r"urinary", r"urinalysis"], []),
    ("serum-plasma", "specimen", "serum or plasma", [(SNOMED, "119364003"), (SNOMED, "119361006")],
     [r"serum", r"plasma"], []),
    # conditions (an order's reason)
    ("diabetes", "condition", "diabetes mellitus",
     [(SNOMED, "44054006"), (SNOMED, "73211009"), (ICD10CM, "E11.9"), (ICD10CM, "E11")],
     [r"diabet(?:es|ic)(?:\s+mellitus)?", r"t2dm", r"dm2", r"type\s+2\s+dm"], []),
    ("hypertension", "condition", "hypertension", [(SNOMED, "38341003"), (SNOMED, "59621000"), (ICD10CM, "I10")],
     [r"hypertension", r"htn", r"high\s+blood\s+pressure"], []),
    ("hyperlipidemia", "condition", "hyperlipidemia", [(SNOMED, "55822004"), (ICD10CM, "E78.5")],
     [r"hyperlipida?emia", r"hypercholesterola?emia", r"dyslipida?emia"], []),
    ("prediabetes", "condition", "prediabetes", [(SNOMED, "15777000"), (ICD10CM, "R73.03")],
     [r"pre-?diabet(?:es|ic)"], []),
    # body sites
    ("left-arm", "body-site", "left arm", [(SNOMED, "368208006")],
     [r"left\s+(?:upper\s+)?arm", r"l\.?\s+arm", r"left\s+brachial", r"bras\s+gauche", r"brazo\s+izquierdo",
      r"linke[rn]?\s+(?:ober)?arm"], ["arm"]),
    ("right-arm", "body-site", "right arm", [(SNOMED, "368209003")],
     [r"right\s+(?:upper\s+)?arm", r"r\.?\s+arm", r"right\s+brachial", r"bras\s+droit", r"brazo\s+derecho",
      r"rechte[rn]?\s+(?:ober)?arm"], ["arm"]),
    ("arm", "body-site", "arm (no side)", [(SNOMED, "40983000")], [r"(?:upper\s+)?arm", r"brachial"], []),
    ("wrist", "body-site", "wrist", [], [r"(?:left\s+|right\s+)?wrist", r"radial"], []),
    ("leg", "body-site", "leg", [], [r"(?:left\s+|right\s+)?(?:leg|thigh|ankle|calf)"], []),
    # body positions
    ("sitting", "position", "sitting", [(SNOMED, "33586001")], [r"sitting", r"seated", r"sat", r"assise?", r"sentad[oa]", r"sitzend"], []),
    ("standing", "position", "standing", [(SNOMED, "10904000")], [r"standing", r"stood", r"upright", r"orthostatic", r"debout", r"de\s+pie", r"stehend"], []),
    ("lying", "position", "lying", [(SNOMED, "102538003"), (SNOMED, "40199007")],
     [r"lying", r"supine", r"recumbent", r"prone", r"couchee?", r"acostad[oa]", r"liegend"], []),
    # rest or exertion before the reading
    ("at-rest", "exertion", "at rest", [], [r"rested", r"at\s+rest", r"resting", r"after\s+(?:a\s+)?rest"], []),
    ("post-exercise", "exertion", "after exercise", [],
     [r"(?:after|post)[\s-]*(?:\w+\s+){0,2}?(?:exercise|exertion|exercising|walk(?:ing)?|run(?:ning)?|jog(?:ging)?|climbing|stairs|"
      r"workout)", r"exertion"], []),
    # measuring methods
    ("automated", "method", "automated (oscillometric) cuff", [],
     [r"automated", r"automatic", r"oscillometric", r"electronic"], []),
    ("manual", "method", "manual (auscultatory) cuff", [], [r"manual(?:ly)?", r"auscultat\w*", r"aneroid"], []),
    ("invasive", "method", "invasive (arterial line)", [], [r"arterial\s+line", r"intra-?arterial", r"invasive"], []),
    # interpretations (HL7 v3 ObservationInterpretation)
    ("normal", "interpretation", "normal", [(INTERPRETATION, "N")],
     [r"normal", r"within\s+normal\s+limits", r"wnl", r"normotensive"], []),
    ("high", "interpretation", "high", [(INTERPRETATION, "H")],
     [r"high", r"elevated", r"raised", r"above\s+(?:the\s+)?normal(?:\s+(?:range|limits?))?", r"hypertensive"],
     ["abnormal"]),
    ("critical-high", "interpretation", "critical high", [(INTERPRETATION, "HH"), (INTERPRETATION, "HU")],
     [r"critical(?:ly)?\s+high", r"(?:dangerously|significantly)\s+high", r"panic\s+high",
      r"hypertensive\s+(?:crisis|urgency|emergency)"], ["high", "critical", "abnormal"]),
    ("low", "interpretation", "low", [(INTERPRETATION, "L")],
     [r"low", r"below\s+(?:the\s+)?normal(?:\s+(?:range|limits?))?", r"hypotensi(?:ve|on)"], ["abnormal"]),
    ("critical-low", "interpretation", "critical low", [(INTERPRETATION, "LL"), (INTERPRETATION, "LU")],
     [r"critical(?:ly)?\s+low", r"(?:dangerously|significantly)\s+low", r"panic\s+low"],
     ["low", "critical", "abnormal"]),
    ("abnormal", "interpretation", "abnormal", [(INTERPRETATION, "A")], [r"abnormal"], []),
    ("critical", "interpretation", "critical", [(INTERPRETATION, "AA")], [r"critical(?:ly)?", r"panic"],
     ["abnormal"]),
    # observation categories
    ("vital-signs", "category", "vital signs", [(CATEGORY, "vital-signs")], [r"vital[\s-]+signs?", r"vitals"], []),
    ("laboratory", "category", "laboratory", [(CATEGORY, "laboratory"), (SNOMED, "108252007")],
     [r"laboratory(?:\s+(?:procedure|test))?"], []),
]


def iter_resources(path: Path) -> Iterator[dict[str, Any]]:
    raw = path.read_bytes()
    data = json.loads(gzip.decompress(raw) if path.name.endswith(".gz") else raw)
    entries = data.get("entry") if isinstance(data, dict) and data.get("resourceType") == "Bundle" else None
    for e in entries or []:
        if isinstance(e, dict) and isinstance(e.get("resource"), dict):
            yield e["resource"]


def codings(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        if isinstance(node.get("system"), str) and isinstance(node.get("code"), str):
            yield node
        for v in node.values():
            yield from codings(v)
    elif isinstance(node, list):
        for v in node:
            yield from codings(v)


def names(words: list[str], text: str) -> bool:
    return any(re.search(rf"(?<![a-z0-9]){w}(?![a-z0-9])", text, re.I) for w in words)


def build(sources: list[Path]) -> tuple[dict[str, Any], list[str]]:
    owner = {(s, c): cid for cid, _k, _l, cods, _w, _x in CONCEPTS for s, c in cods}
    words_of = {cid: words for cid, _k, _l, _c, words, _x in CONCEPTS}
    seen: dict[tuple[str, str], set[str]] = {}
    files = sorted(p for src in sources for p in src.rglob("*") if p.is_file()
                   and (p.name.endswith(".json") or p.name.endswith(".json.gz")))
    for path in files:
        for res in iter_resources(path):
            for c in codings(res):
                key = (c["system"], c["code"])
                if key in owner and isinstance(c.get("display"), str):
                    seen.setdefault(key, set()).add(c["display"].replace("\u200b", ""))
    problems = [f"{s}|{c} display {d!r} is not named by the words of {owner[(s, c)]}"
                for (s, c), ds in sorted(seen.items()) for d in sorted(ds) if not names(words_of[owner[(s, c)]], d)]
    ids = {cid for cid, *_ in CONCEPTS}
    problems += [f"{cid}: 'with' names unknown concept {w!r}" for cid, *_r, with_ in CONCEPTS for w in with_
                 if w not in ids]
    out = {"description": "Concepts the orders task verifies written resources against: the codings that denote "
                          "each, the words that name it in free text. Built by scripts/make_concept_map.py.",
           "systems": sorted({s for *_a, cods, _w, _x in CONCEPTS for s, _c in cods}),
           "concepts": [{"id": cid, "kind": kind, "label": label,
                         "codings": [{"system": s, "code": c, "displays": sorted(seen.get((s, c), ()))}
                                     for s, c in cods],
                         "words": words, "with": with_} for cid, kind, label, cods, words, with_ in CONCEPTS]}
    return out, problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--source", type=Path, action="append")
    ap.add_argument("--out", type=Path, default=ROOT / "pytest_groundeval" / "fhir" / "concept_map.json")
    args = ap.parse_args(argv)
    sources = args.source or [ROOT.parent / "shared" / "data" / "synthea-r4", ROOT / "fixtures" / "orders"]
    missing = [str(s) for s in sources if not s.is_dir()]
    if missing:
        print(f"no such source directory: {', '.join(missing)}", file=sys.stderr)
        return 2
    data, problems = build(sources)
    if problems:
        print("refused:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    args.out.write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    n = sum(len(c["displays"]) for k in data["concepts"] for c in k["codings"])
    print(f"{len(data['concepts'])} concepts, {sum(len(k['codings']) for k in data['concepts'])} codings "
          f"({n} displays seen in the data) -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
