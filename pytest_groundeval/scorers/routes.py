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


# ------------------------------------------------------------------ methods and sites

PARENTERAL = frozenset({"intravenous", "intramuscular", "subcutaneous"})
# an administration's action (dosage.method, or a verb in free text) -> the routes it fits
_ACTIONS: tuple[tuple[frozenset[str], re.Pattern[str]], ...] = tuple((frozenset(r), re.compile(p, re.I)) for r, p in (
    (PARENTERAL, r"\binject(?:s|ed|ing|ion|able)?\b|\binfus(?:e|ed|ion)\b|\bshot\b"),
    ({"oral", "sublingual", "buccal"}, r"\bswallow(?:s|ed|ing)?\b|\bchew(?:s|ed|ing)?\b|\bdissolve[sd]?\b"),
    ({"inhalation", "nasal"}, r"\binhale[sd]?\b|\bsniff(?:s|ed)?\b|\bpuffs?\b"),
    ({"topical", "transdermal", "ophthalmic", "otic", "vaginal", "rectal", "nasal"}, r"\bappl(?:y|ies|ied)\b"),
    ({"ophthalmic", "otic", "nasal"}, r"\binstill(?:s|ed)?\b|\bdrops?\b"),
    ({"rectal", "vaginal"}, r"\binsert(?:s|ed)?\b|\bsuppositor"),
))
# a method that is only "take" / "administer" fits any route
_ANY_ACTION = re.compile(r"\b(?:take[ns]?|taking|took|administer(?:s|ed)?|administration|use[ds]?|give[ns]?)\b", re.I)
# body sites -> the routes a dose reaches them by
_SITES: tuple[tuple[frozenset[str], re.Pattern[str]], ...] = tuple((frozenset(r), re.compile(p, re.I)) for r, p in (
    ({"oral", "sublingual", "buccal", "inhalation"}, r"\bmouth\b|\boral\s+cavity\b"),
    ({"sublingual"}, r"\btongue\b"),
    ({"buccal"}, r"\bcheek\b|\bbuccal\b"),
    ({"inhalation"}, r"\blungs?\b|\bairways?\b|\brespiratory\b|\bbronch\w*"),
    ({"intramuscular", "subcutaneous"}, r"\bdeltoid\b|\bglute\w*|\bbuttocks?\b|\bthigh\b|\bvastus\b"),
    ({"subcutaneous", "topical", "transdermal"}, r"\babdomen\b|\babdominal\b"),
    ({"intravenous", "subcutaneous", "transdermal", "topical", "intramuscular"},
     r"\b(?:upper\s+)?arms?\b|\bforearm\b|\bhand\b|\bveins?\b"),
    ({"topical", "transdermal"}, r"\bskin\b|\bchest\b|\bback\b|\bshoulder\b|\bhip\b"),
    ({"ophthalmic"}, r"\beyes?\b|\bconjunctiva\w*"),
    ({"otic"}, r"\bears?\b"),
    ({"nasal", "inhalation"}, r"\bnose\b|\bnostrils?\b|\bnasal\b"),
    ({"rectal"}, r"\brectum\b|\brectal\b|\banus\b"),
    ({"vaginal"}, r"\bvagina\w*"),
))
# words of a site that locate without naming a site
_SITE_QUALIFIERS = re.compile(r"\b(?:left|right|upper|lower|both|bilateral|structure|region|of|the|entire|area|muscle|site)\b", re.I)


def action_routes(text: Any) -> list[tuple[frozenset[str], str]]:
    """``[(routes it fits, the words)]`` for every administration action a text names
    (``inject`` fits only the parenteral routes, ``swallow`` only the oral ones)."""
    if not isinstance(text, str):
        return []
    return [(routes, m.group(0)) for routes, pattern in _ACTIONS for m in pattern.finditer(text)]


def _concept_texts(concept: Any) -> tuple[list[str], list[str]]:
    """(readable texts, unreadable parts) of a CodeableConcept: its text and codings' displays;
    a coding with no display cannot be read (no method or site code table is kept)."""
    if not isinstance(concept, dict):
        return [], [f"not a CodeableConcept ({type(concept).__name__})"]
    texts, unread = [], []
    codings = concept.get("coding") if isinstance(concept.get("coding"), list) else []
    for i, c in enumerate(codings):
        display = c.get("display") if isinstance(c, dict) else None
        if isinstance(display, str) and display.strip():
            texts.append(display)
        else:
            unread.append(f"coding[{i}] has no display")
    if isinstance(concept.get("text"), str) and concept["text"].strip():
        texts.append(concept["text"])
    if not texts and not unread:
        unread.append("no coding and no text")
    return texts, unread


def read_method(method: Any) -> tuple[list[tuple[frozenset[str], str]], list[str]]:
    """(the actions a dosage.method names with the routes each fits, what could not be read).
    ``Take`` / ``Administer`` fit any route; a text naming no action cannot be read."""
    texts, unread = _concept_texts(method)
    found: list[tuple[frozenset[str], str]] = []
    for text in texts:
        actions = action_routes(text)
        if actions:
            found += actions
        elif not _ANY_ACTION.search(text):
            unread.append(repr(text))
    return found, unread


def read_site(site: Any) -> tuple[list[tuple[frozenset[str], str]], list[str]]:
    """(the body sites a dosage.site names with the routes that reach each, what could not be
    read: a site word this table does not know)."""
    texts, unread = _concept_texts(site)
    found: list[tuple[frozenset[str], str]] = []
    for text in texts:
        sites = [(routes, m.group(0)) for routes, pattern in _SITES for m in pattern.finditer(text)]
        rest = _SITE_QUALIFIERS.sub(" ", text)
        for _routes, words in sites:
            rest = rest.replace(words, " ")
        if sites and not re.search(r"[a-z]{3,}", rest, re.I):
            found += sites
        else:
            unread.append(repr(text))
    return found, unread


__all__ = ["PARENTERAL", "SNOMED_ROUTES", "action_routes", "documented_route", "read_method", "read_route",
           "read_site", "routes_in"]
