"""Routes of administration: what a note or a product documents, and what a dosage.route says.

The write case format has no route field, so the documented route is derived only where the
data states it:

1. the note's own words: "by mouth", "orally", "PO", "oral tablet" (oral); "inhaler", "puffs",
   "inhaled", "per actuation" (respiratory / inhalation); "sublingual", "intravenous" / "IV",
   "subcutaneous", "intramuscular", "transdermal", "topical", "rectal", "vaginal", "nasal",
   "ophthalmic", "otic";
2. else the expected product's RxNorm dose form, which fixes the route: "Oral Tablet",
   "Oral Solution" (oral), "Metered Dose Inhaler" (inhalation), "Transdermal System", ...
   An "Injection" names no single route (IV, IM or SC) and documents none.

A note or display whose words name two routes documents none (it cannot be told which).

A dosage's ``route`` (a CodeableConcept) is read from its codings (SNOMED CT route codes of the
FHIR route-codes value set, HL7 v3 ``PO``) and, for codings this table does not know, their
displays and the concept's text, read with the same words as the note.
"""

from __future__ import annotations

import re
from typing import Any

from pytest_groundeval.fhir.codes import SNOMED, V3_ROUTE

# SNOMED CT codes of the FHIR R4 route-codes value set (http://hl7.org/fhir/ValueSet/route-codes)
SNOMED_ROUTES = {
    "26643006": "oral",
    "447694001": "inhalation",  # respiratory tract route
    "18679011000001101": "inhalation",
    "37839007": "sublingual",
    "54471007": "buccal",
    "47625008": "intravenous",
    "78421000": "intramuscular",
    "34206005": "subcutaneous",
    "6064005": "topical",
    "45890007": "transdermal",
    "37161004": "rectal",
    "16857009": "vaginal",
    "46713006": "nasal",
    "54485002": "ophthalmic",
    "10547007": "otic",
}
V3_ROUTES = {"PO": "oral", "SL": "sublingual"}

_WORDS: tuple[tuple[str, re.Pattern[str]], ...] = tuple((name, re.compile(p, re.I)) for name, p in (
    ("inhalation", r"\binhal|\brespiratory\b|\bpuffs?\b|\bactuations?\b|\bnebuli[sz]"),
    ("sublingual", r"\bsub-?lingual"),
    ("buccal", r"\bbuccal"),
    ("intravenous", r"\bintravenous"),
    ("intramuscular", r"\bintramuscular"),
    ("subcutaneous", r"\bsub-?cutaneous|\bsubq\b"),
    ("transdermal", r"\btransdermal"),
    ("topical", r"\btopical"),
    ("rectal", r"\brectal|\bper rectum\b"),
    ("vaginal", r"\bvaginal"),
    ("nasal", r"\bintranasal|\bnasal\b"),
    ("ophthalmic", r"\bophthalmic"),
    ("otic", r"\botic\b"),
    ("oral", r"\boral(?:ly)?\b|\bby mouth\b|\bper os\b"),
))
# abbreviations count only in capitals ("po" / "im" / "iv" are also parts of words)
_ABBREVIATIONS = tuple((name, re.compile(p)) for name, p in (
    ("oral", r"\bPO\b"), ("intravenous", r"\bIV\b"), ("intramuscular", r"\bIM\b"), ("subcutaneous", r"\bS[CQ]\b"),
))
# a route word that sits inside another: "oral inhalation" is inhalation
_SUBSUMES = {"inhalation": {"oral"}, "sublingual": {"oral"}, "buccal": {"oral"}}


def routes_in(text: Any) -> set[str]:
    """The routes a free text names."""
    if not isinstance(text, str):
        return set()
    found = {name for name, pattern in _WORDS + _ABBREVIATIONS if pattern.search(text)}
    for outer, inner in _SUBSUMES.items():
        if outer in found:
            found -= inner
    return found


def documented_route(note: Any, display: Any) -> tuple[str | None, str]:
    """(route, where it was read) or (None, why none is documented)."""
    in_note = routes_in(note)
    if len(in_note) == 1:
        return next(iter(in_note)), "the note"
    if len(in_note) > 1:
        return None, f"the note names several routes ({', '.join(sorted(in_note))})"
    in_display = routes_in(display)
    if len(in_display) == 1:
        return next(iter(in_display)), "the product's dose form"
    return None, "neither the note nor the product's dose form names a route"


def read_route(route: Any) -> tuple[set[str], list[str]]:
    """(routes a dosage.route states, the parts of it that could not be read)."""
    if not isinstance(route, dict):
        return set(), [f"route is not a CodeableConcept ({type(route).__name__})"]
    found: set[str] = set()
    unread: list[str] = []
    codings = route.get("coding") if isinstance(route.get("coding"), list) else []
    for i, c in enumerate(codings):
        if not isinstance(c, dict):
            unread.append(f"coding[{i}] is not an object")
            continue
        system, code = c.get("system"), c.get("code")
        table = SNOMED_ROUTES if system == SNOMED else V3_ROUTES if system == V3_ROUTE else None
        if table is not None and isinstance(code, str) and code in table:
            found.add(table[code])
            shown = routes_in(c.get("display"))
            if shown and shown != {table[code]}:  # a code and a display that disagree both count
                found |= shown
        else:
            shown = routes_in(c.get("display"))
            if shown:
                found |= shown
            else:
                unread.append(f"coding[{i}] {system} {code!r}")
    text = route.get("text")
    if isinstance(text, str) and text.strip():
        shown = routes_in(text)
        if shown:
            found |= shown
        else:
            unread.append(f"text {text!r}")
    if not codings and not (isinstance(text, str) and text.strip()):
        unread.append("no coding and no text")
    return found, unread


__all__ = ["SNOMED_ROUTES", "documented_route", "read_route", "routes_in"]
