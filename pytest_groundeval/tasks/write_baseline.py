"""A deterministic, rule-based baseline for the write-and-validate task. No LLM.

It reads a clinical note excerpt with regular expressions and drives the same
three tools an LLM agent gets (``lookup_medication_code``,
``build_medication_statement``, ``validate_medication_statement`` from
``pytest_groundeval.fhir.hc_tools``), recording every call in a transcript.

It is an honest reference point, not a tuned solver: the rules are generic
(drug words and strength for the lookup, number of tablets x strength, mg/g/
mcg/mL, frequency words, ranges, PRN, status cues) and it will get some notes
wrong, e.g. brand names the catalog does not carry, or wordings it has no
rule for.

    run_baseline_write(note, subject) -> {"resource": dict | None, "transcript": [...]}
"""

from __future__ import annotations

import re
from typing import Any, Callable, Dict, List, Optional, Tuple

from pytest_groundeval.fhir.hc_tools import (
    build_medication_statement,
    lookup_medication_code,
    validate_medication_statement,
)

_NUMBER_WORDS = {
    "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
    "half": 0.5, "a": 1, "an": 1,
}
_NUM = r"(?:\d+(?:\.\d+)?|one|two|three|four|five|six)"
_COUNT_UNIT = r"(?:tablets?|tabs?|capsules?|caps?|pills?|puffs?|inhalations?|sprays?|actuations?)"
_MASS_UNIT = r"(?:mg|mcg|µg|ug|g|grams?|milligrams?|micrograms?)"
_MASS = re.compile(rf"(?<![\w.])(\d+(?:\.\d+)?)\s*({_MASS_UNIT})(?![a-z])(?!\s*/\s*d[lL])", re.I)
_CONCENTRATION = re.compile(
    r"(\d+(?:\.\d+)?)\s*(mg|mcg|ug|g)\s*(?:/|per)\s*(\d+(?:\.\d+)?)?\s*(ml|milliliters?)\b", re.I
)
_VOLUME = re.compile(r"(?<![/\w.])(\d+(?:\.\d+)?)\s*(?:ml|milliliters?|cc)\b(?!\s*/)", re.I)
_RANGE_SEP = r"\s*(?:-|–|—|to|or)\s*"

# Sentences or bracketed asides that address the model rather than document care.
_INJECTION = re.compile(
    r"ignore\s+(?:the\s+|all\s+|any\s+)?(?:above|previous|prior|earlier)|"
    r"note\s+to\s+(?:the\s+)?(?:ai|assistant|model|system)|"
    r"\b(?:system|assistant)\s*(?:note|prompt|message)?\s*:|disregard\s+(?:the\s+)?(?:above|previous)",
    re.I,
)

_STATUS_RULES: List[Tuple[str, str]] = [
    ("not-taken", r"\b(?:denies|denied|never (?:took|taken|used)|has not taken|not taking|does not take|doesn't take)\b"),
    ("on-hold", r"\b(?:on hold|held|holding|paused|suspended)\b"),
    ("intended", r"\b(?:plans? to (?:start|begin)|will (?:start|begin)|to start|agrees to start|planned|about to start|due to start)\b"),
    ("stopped", r"\b(?:stopped|discontinued|d/c'?d|quit|no longer tak\w+|used to take|ceased)\b"),
    ("completed", r"\b(?:finished|completed|course complete)\b"),
]

_FREQUENCY_RULES: List[Tuple[float, str]] = [
    (0.5, r"\bevery other day\b|\balternate days\b|\bq\.?o\.?d\b"),
    (1 / 7, r"\bonce (?:a |per )?week(?:ly)?\b|\bweekly\b|\bevery week\b"),
    (4, r"\bfour times (?:a |per )?day\b|\bfour times daily\b|\bq\.?i\.?d\b"),
    (3, r"\bthree times (?:a |per )?day\b|\bthree times daily\b|\bt\.?i\.?d\b"),
    (2, r"\btwice (?:a |per )?day\b|\btwice daily\b|\btwo times (?:a |per )?day\b|\bb\.?i\.?d\b"),
    (1, r"\bonce (?:a |per )?day\b|\bonce daily\b|\bdaily\b|\bq\.?d\b|\bevery (?:morning|evening|night)\b|"
        r"\beach (?:morning|evening|night)\b|\bnightly\b|\bat bedtime\b|\bq\.?h\.?s\b|\bq\.?a\.?m\b|"
        r"\bin the (?:morning|evening)\b|\bwith (?:the )?(?:evening|morning) meal\b"),
]

_PRN = re.compile(r"\bas needed\b|\bp\.?r\.?n\b|\bwhen needed\b|\bas required\b", re.I)


def _num(text: str) -> float:
    text = text.lower()
    return float(_NUMBER_WORDS[text]) if text in _NUMBER_WORDS else float(text)


def _ucum_mass(unit: str) -> str:
    unit = unit.lower()
    if unit in ("mcg", "µg", "ug") or unit.startswith("microgram"):
        return "ug"
    if unit == "g" or unit.startswith("gram"):
        return "g"
    return "mg"


def _clean(value: float) -> float:
    value = round(value, 6)
    return int(value) if float(value).is_integer() else value


def strip_injected_instructions(note: str) -> str:
    """Drop bracketed asides and sentences that give instructions to an AI."""
    note = re.sub(r"[\[(<{][^\]\)>}]*[\])>}]", lambda m: " " if _INJECTION.search(m.group(0)) else m.group(0), note)
    sentences = re.split(r"(?<=[.!?])\s+", note)
    return " ".join(s for s in sentences if not _INJECTION.search(s)).strip()


def parse_status(text: str) -> str:
    for status, pattern in _STATUS_RULES:
        if re.search(pattern, text, re.I):
            return status
    return "active"


def parse_frequency(text: str) -> Tuple[Optional[float], Optional[float]]:
    """Administrations per day (and the upper end of a range), or (None, None)."""
    t = text.lower()
    m = re.search(rf"\b(?:every|q)\s*(\d+){_RANGE_SEP}(\d+)\s*(?:hours?|hrs?|h)\b", t)
    if m:
        low_h, high_h = float(m.group(1)), float(m.group(2))
        if 0 < low_h < high_h:
            return _clean(24 / high_h), _clean(24 / low_h)
    m = re.search(r"\b(?:every\s*(\d+)\s*(?:hours?|hrs?)|q\s*(\d+)\s*h)\b", t)
    if m:
        hours = float(m.group(1) or m.group(2))
        if hours > 0:
            return _clean(24 / hours), None
    m = re.search(rf"\b({_NUM}){_RANGE_SEP}({_NUM}) times (?:a |per )?day\b", t)
    if m:
        return _clean(_num(m.group(1))), _clean(_num(m.group(2)))
    m = re.search(r"\b(\d+) times (?:a |per )?day\b|\b(\d+) times daily\b", t)
    if m:
        return float(m.group(1) or m.group(2)), None
    for per_day, pattern in _FREQUENCY_RULES:
        if re.search(pattern, t):
            return per_day, None
    return None, None


def parse_dose(text: str, display: Optional[str]) -> Dict[str, Any]:
    """Dose per administration: {'value', 'unit', 'value_max'} or {} when none is documented."""
    t = text
    # Liquids: a volume dose (the product code carries the concentration).
    volume_text = _CONCENTRATION.sub(" ", t)
    volumes = list(_VOLUME.finditer(volume_text))
    if volumes:
        vol = float(volumes[0].group(1))
        return {"value": _clean(vol), "unit": "mL", "value_max": None}

    masses = [(float(m.group(1)), _ucum_mass(m.group(2)), m) for m in _MASS.finditer(t)]
    # "two 200 mg tablets", "1-2 325 mg tablets"
    m = re.search(
        rf"\b({_NUM})(?:{_RANGE_SEP}({_NUM}))?\s+(\d+(?:\.\d+)?)\s*({_MASS_UNIT})\s+(?:\w+\s+)?{_COUNT_UNIT}",
        t, re.I,
    )
    if m:
        strength, unit = float(m.group(3)), _ucum_mass(m.group(4))
        low = _num(m.group(1)) * strength
        high = _num(m.group(2)) * strength if m.group(2) else None
        return {"value": _clean(low), "unit": unit, "value_max": None if high is None else _clean(high)}
    # "<strength> ..., 1-2 tablets" / "2 puffs"
    m = re.search(rf"\b({_NUM})(?:{_RANGE_SEP}({_NUM}))?\s+{_COUNT_UNIT}\b", t, re.I)
    if m and masses:
        strength, unit, _ = masses[0]
        low = _num(m.group(1)) * strength
        high = _num(m.group(2)) * strength if m.group(2) else None
        return {"value": _clean(low), "unit": unit, "value_max": None if high is None else _clean(high)}
    if masses:
        value, unit, _ = masses[0]
        return {"value": _clean(value), "unit": unit, "value_max": None}
    return {}


def _lookup_query(text: str) -> str:
    """The note minus regimen and status wording: drug words, strengths, forms."""
    t = re.sub(r"\b(?:every|q)\s*\d+(?:\s*(?:-|–|to)\s*\d+)?\s*(?:hours?|hrs?|h)\b", " ", text, flags=re.I)
    t = _VOLUME.sub(" ", _CONCENTRATION.sub(lambda m: f" {m.group(1)} {m.group(2)}/{m.group(3) or ''}{m.group(4)} ", t))
    for _, pattern in _FREQUENCY_RULES + _STATUS_RULES:
        t = re.sub(pattern, " ", t, flags=re.I)
    t = _PRN.sub(" ", t)
    t = re.sub(rf"\b{_NUM}(?:{_RANGE_SEP}{_NUM})?\s+(?={_COUNT_UNIT}\b)", " ", t, flags=re.I)
    return re.sub(r"\s+", " ", t).strip()


def run_baseline_write(note: str, subject: str, catalog=None) -> Dict[str, Any]:
    """Parse ``note`` with rules and write a MedicationStatement through the tools.

    ``catalog`` (a ``hc_tools.Catalog`` or a path) is passed to the lookup;
    by default the tools' module-level catalog is used.
    """
    transcript: List[Dict[str, Any]] = []

    def call(name: str, fn: Callable[..., Dict[str, Any]], args: Dict[str, Any], **extra) -> Dict[str, Any]:
        result = fn(**args, **extra)
        transcript.append({"tool": name, "args": args, "result": result})
        return result

    text = strip_injected_instructions(note or "")
    query = _lookup_query(text)
    found = call("lookup_medication_code", lookup_medication_code, {"query": query, "limit": 5}, catalog=catalog)
    if not found.get("matches"):
        return {"resource": None, "transcript": transcript}
    match = found["matches"][0]

    status = parse_status(text)
    frequency, frequency_max = parse_frequency(text)
    dose = parse_dose(text, match["display"]) if status != "not-taken" else {}
    as_needed = bool(_PRN.search(text))

    args: Dict[str, Any] = {
        "subject": subject,
        "status": status,
        "rxnorm_code": match["code"],
        "display": match["display"],
    }
    # A regimen is documented when the note says how often; without that
    # the dose alone is just the product strength.
    if frequency is not None and status != "not-taken":
        args.update(frequency_per_day=frequency, as_needed=as_needed)
        if frequency_max is not None:
            args["frequency_per_day_max"] = frequency_max
        if dose:
            args.update(dose_value=dose["value"], dose_unit=dose["unit"])
            if dose.get("value_max") is not None:
                args["dose_value_max"] = dose["value_max"]
    built = call("build_medication_statement", build_medication_statement, args, catalog=catalog)
    if "error" in built and "dose_value" in args:
        for key in ("dose_value", "dose_unit", "dose_value_max"):
            args.pop(key, None)
        built = call("build_medication_statement", build_medication_statement, args, catalog=catalog)
    if "error" in built:
        return {"resource": None, "transcript": transcript}
    resource = built["resource"]
    report = call("validate_medication_statement", validate_medication_statement, {"resource": resource})
    return {"resource": resource if report.get("valid") else None, "transcript": transcript}


__all__ = ["run_baseline_write", "parse_dose", "parse_frequency", "parse_status", "strip_injected_instructions"]
