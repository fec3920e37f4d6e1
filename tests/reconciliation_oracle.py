"""A rule-based reconciliation solver that reads only the rendered single-call prompt.

It is given the prompt string exactly as an agent is (no truth, no case file, no generator
choices, no file access) and answers the task's JSON. Written apart from the generator's own
round-trip reader (``scripts/make_reconciliation_cases.py``: ``resolve``): its own note
splitter, its own word matching (hyphens split, a one-letter typo forgiven in a long name),
HealthChain to read the bundle. If it scores exact match 1.0 on a case, the case is
answerable from what the agent sees.
"""

from __future__ import annotations

import json
import re

NOTE_HEAD = "Intake note (patient-reported medications):\n"
CATALOG_HEAD = "\n\nSite RxNorm catalog"
BUNDLE_HEAD = "Bundle:\n"  # the bundle opens the prompt
RXNORM = "http://www.nlm.nih.gov/research/umls/rxnorm"

_FREQUENCY = re.compile(r"\b(?:as needed|(?:once|twice|three times|four times) a (?:day|week)|daily|"
                        r"every (?:morning|evening|\d+ hours))\b")
_LEAD_WORDS = {"also", "takes", "on", "states", "she", "he", "they", "gives", "pt"}
#: what a mention's form word requires of a display (any of these words)
_FORM_WORDS = {"iud": {"intrauterine"}, "patch": {"transdermal", "patch"}, "ring": {"ring"},
               "implant": {"implant"}, "inhaler": {"inhaler"}, "injections": {"injection", "injectable", "syringe"},
               "sl": {"sublingual"}, "tablets": {"tablet"}, "liquid": {"solution", "suspension"},
               "eye": {"ophthalmic"}, "drops": {"ophthalmic"}}
#: common names whose display words differ
_COMMON_NAMES = {"alendronate": ["alendronic"], "vk": ["v", "potassium"], "b12": ["b", "12"]}


def sections(prompt: str) -> tuple[str, list[tuple[str, str]], dict]:
    """(intake note, catalog entries listed, bundle) from the prompt."""
    note = prompt.split(NOTE_HEAD, 1)[1].split(CATALOG_HEAD, 1)[0].strip()
    block = prompt.split(CATALOG_HEAD, 1)[1]
    entries = []
    for line in block.split(":\n", 1)[1].splitlines():
        code, sep, display = line.partition(": ")
        if sep and code.strip().isdigit():
            entries.append((code.strip(), display.strip()))
    return note, entries, json.JSONDecoder().raw_decode(prompt.split(BUNDLE_HEAD, 1)[1])[0]


def record(bundle: dict) -> tuple[dict[str, str], dict[str, set]]:
    """The bundle's MedicationRequests, read with HealthChain: {code: display}, {code: statuses}."""
    from healthchain.fhir import get_medications, load_bundle

    displays: dict[str, str] = {}
    statuses: dict[str, set] = {}
    for e in get_medications(load_bundle(bundle, version="R4B")):
        if e.resource_type != "MedicationRequest":
            continue
        coding = next((c for c in e.codings if c.system == RXNORM and c.code), None)
        if coding is not None:
            displays.setdefault(coding.code, coding.display or e.display or "")
            statuses.setdefault(coding.code, set()).add(e.status or "")
    return displays, statuses


def mentions(note: str) -> list[str]:
    body = note.split(":", 1)[1] if ":" in note else note
    out = []
    for sentence in re.split(r"\.\s+|\.$", body):
        if not sentence.strip() or re.search(r"\b(?:denies|no other)\b", sentence, re.IGNORECASE):
            continue
        for item in sentence.split(";"):
            words = item.split()
            while words and words[0].lower() in _LEAD_WORDS:
                words.pop(0)
            if words:
                out.append(" ".join(words))
    return out


def _one_typo_apart(a: str, b: str) -> bool:
    if len(a) < 8 or len(a) != len(b):
        return False
    return sum(x != y for x, y in zip(a, b)) == 1


def _matches(mention: str, display: str) -> bool:
    text = _FREQUENCY.sub(" ", mention.lower())
    shown = display.lower()
    words = set(re.findall(r"[a-z]+", shown))
    numbers = {float(n) for n in re.findall(r"\d+(?:\.\d+)?", shown)}
    extended = "extended release" in shown or bool(re.match(r"\d+ ?hr\b", shown))
    for token in re.split(r"[\s\-]+", text):
        if not token or token in ("mg", "unt", "ml"):
            continue
        if re.fullmatch(r"\d+(?:\.\d+)?(?:/\d+(?:\.\d+)?)*", token):
            if any(float(n) not in numbers for n in token.split("/")):
                return False
        elif token in ("er", "xl"):
            if not extended:
                return False
        elif token in _FORM_WORDS:
            if not _FORM_WORDS[token] & words:
                return False
        elif token in _COMMON_NAMES:
            for part in _COMMON_NAMES[token]:
                if part not in words and not (part.isdigit() and float(part) in numbers):
                    return False
        elif token not in words and not any(_one_typo_apart(token, w) for w in words):
            return False
    return True


def solve(prompt: str) -> str:
    """The answer JSON for ``prompt``. An ambiguous or unmatched mention is left out (and the
    case will not be an exact match)."""
    note, catalog, bundle = sections(prompt)
    displays, statuses = record(bundle)
    answer: dict[str, dict[str, str]] = {}
    for mention in mentions(note):
        hits = [c for c, d in displays.items() if _matches(mention, d)]
        if len(hits) == 1:
            st = statuses[hits[0]]
            verdict = "matched" if "active" in st else "stopped-but-taking" if st & {"stopped", "completed"} else None
            if verdict:
                answer[hits[0]] = {"code": hits[0], "display": displays[hits[0]], "verdict": verdict}
            continue
        if hits:
            continue  # two record medications fit: no answer
        hits = [(c, d) for c, d in catalog if c not in displays and _matches(mention, d)]
        if len(hits) == 1:
            answer[hits[0][0]] = {"code": hits[0][0], "display": hits[0][1], "verdict": "unrecorded"}
    for code, st in statuses.items():
        if "active" in st and code not in answer:
            answer[code] = {"code": code, "display": displays[code], "verdict": "unreported"}
    return json.dumps({"medications": list(answer.values())})
