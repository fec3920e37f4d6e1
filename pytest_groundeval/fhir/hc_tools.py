"""HealthChain FHIR operations wrapped as agent tools.

Eval-free on purpose: nothing here knows about cases, ground truth or scores,
and nothing imports from the rest of ``pytest_groundeval``, so the module can
be lifted into HealthChain's agent toolkit as it is.

Three tools, each taking flat JSON-friendly arguments and returning a
JSON-serialisable dict. Errors come back as values (``{"error": "..."}`` or
``{"valid": False, "issues": [...]}``) the agent can read and act on; no tool
raises.

- :func:`lookup_medication_code` searches a site RxNorm catalog (a JSON list
  of ``{code, display, system}``) so the agent looks codes up instead of
  guessing them. :class:`Catalog` is a HealthChain ``TerminologyLookup``
  (``search``, ``entries()``), so it also serves ``FHIRToolkit(lookup=...)``;
  and any other ``TerminologyLookup`` can serve the tool (``catalog=``).
- :func:`build_medication_statement` builds an R4B MedicationStatement with
  ``healthchain.fhir.create_medication_statement`` / ``create_dosage``, adding
  what those helpers do not cover (UCUM system/code on quantities, dose
  ranges, frequency ranges, non-daily periods, notes). ``FHIRToolkit``'s
  ``build_resource`` covers less still (FRICTION.md D10).
- :func:`validate_medication_statement` runs
  ``healthchain.fhir.validate_resource`` against R4B plus the checks an agent
  needs spelled out (resourceType, the required ``status`` binding); it does
  not go through ``FHIRToolkit``'s ``validate_resource`` tool, which has no
  FHIR version and raises on non-dict input (FRICTION.md D11).

:func:`langchain_tools` returns the three as LangChain ``StructuredTool`` s;
``langchain_core`` is imported only there. :func:`list_medication_requests` and
:func:`langchain_bundle_tools` read one patient's bundle through
``FHIRToolkit``'s ``get_coded_entries`` tool; :func:`fhir_toolkit` is that
toolkit over a bundle with the site catalog as its lookup. HealthChain itself is
imported only inside the functions that use it.
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import re
import threading
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from pytest_groundeval.tasks.resources import MissingDataError, data_path

if TYPE_CHECKING:  # HealthChain costs ~0.2 s to import; hc_tools imports it only when used
    from healthchain.terminology import TerminologyLookup
    from healthchain.tools import FHIRToolkit

RXNORM_SYSTEM = "http://www.nlm.nih.gov/research/umls/rxnorm"
UCUM_SYSTEM = "http://unitsofmeasure.org"

#: R4B MedicationStatement.status (required binding, medication-statement-status).
#: R5's ``recorded`` and ``draft`` are not in it.
R4B_MEDICATION_STATEMENT_STATUSES = (
    "active",
    "completed",
    "entered-in-error",
    "intended",
    "stopped",
    "on-hold",
    "unknown",
    "not-taken",
)

#: UCUM codes accepted for a dose amount (case-sensitive, as UCUM is).
UCUM_DOSE_UNITS = {
    "kg": "kilogram",
    "g": "gram",
    "mg": "milligram",
    "ug": "microgram",
    "ng": "nanogram",
    "L": "liter",
    "mL": "milliliter",
    "uL": "microliter",
    "[iU]": "international unit",
    "[IU]": "international unit",
    "U": "unit",
    "meq": "milliequivalent",
    "mmol": "millimole",
}

# Common non-UCUM spellings and the UCUM code to suggest instead.
_UNIT_HINTS = {
    "mcg": "ug",
    "µg": "ug",
    "μg": "ug",
    "gm": "g",
    "gram": "g",
    "grams": "g",
    "milligram": "mg",
    "milligrams": "mg",
    "ml": "mL",
    "cc": "mL",
    "l": "L",
    "iu": "[iU]",
    "units": "U",
    "unit": "U",
    "meq": "meq",
    "mEq": "meq",
}

_COUNT_UNITS = {
    "tablet", "tablets", "tab", "tabs", "capsule", "capsules", "cap", "caps", "puff",
    "puffs", "drop", "drops", "pill", "pills", "patch", "spray", "sprays", "{tablet}",
    "{tbl}", "{capsule}", "{puff}", "{actuat}", "actuation", "actuations",
}

CATALOG_FILE = ("terminology", "rxnorm.json")  # inside groundeval's packaged data


def default_catalog_path() -> Path:
    """The packaged RxNorm catalog (a loud ``MissingDataError`` if the package lacks it)."""
    return data_path(*CATALOG_FILE)

# --------------------------------------------------------------------------
# Catalog and lookup
# --------------------------------------------------------------------------

# Word-level synonyms applied to queries and catalog displays alike.
_WORD_SYNONYMS = {
    "hctz": "hydrochlorothiazide",
    "apap": "acetaminophen",
    "paracetamol": "acetaminophen",
    "asa": "aspirin",
    "amox": "amoxicillin",
    "hcl": "hydrochloride",
    "tab": "tablet",
    "tabs": "tablet",
    "tablets": "tablet",
    "tbl": "tablet",
    "cap": "capsule",
    "caps": "capsule",
    "capsules": "capsule",
    "soln": "solution",
    "sol": "solution",
    "susp": "suspension",
    "inj": "injection",
    "injectable": "injection",
    "chew": "chewable",
    "po": "oral",
    "mdi": "inhaler",
    "inh": "inhaler",
    "xr": "er",
    "xl": "er",
    "sr": "er",
    "cr": "er",
    "ir": "ir",
    "dr": "dr",
    "ec": "dr",
}

# Phrase-level normalisation, run on lower-cased text before tokenising.
_PHRASES: Sequence[Tuple[str, str]] = (
    (r"\b(?:extended|sustained|controlled|prolonged)[\s-]*release\b", " er "),
    (r"\bimmediate[\s-]*release\b", " ir "),
    (r"\b(?:delayed[\s-]*release|enteric[\s-]*coated)\b", " dr "),
    (r"\b(?:12|24)\s*-?\s*h(?:ou)?rs?\b", " er "),
)

_MASS_TO_MG = {"g": Fraction(1000), "mg": Fraction(1), "mcg": Fraction(1, 1000),
               "ug": Fraction(1, 1000), "µg": Fraction(1, 1000), "μg": Fraction(1, 1000)}

_STRENGTH = re.compile(
    r"(?P<num>\d+(?:\.\d+)?)\s*(?P<unit>mg|mcg|µg|μg|ug|g|ml|unt|units?|actuat|%)"
    r"(?:\s*/\s*(?P<pernum>\d+(?:\.\d+)?)?\s*(?P<per>ml|actuat|mg|hr|h))?(?![a-z])"
)
_WORD = re.compile(r"\d+(?:\.\d+)?|[a-z]+")

_STOPWORDS = {
    "a", "an", "the", "of", "and", "with", "for", "by", "mouth", "take", "takes",
    "taking", "per", "day", "daily", "once", "twice", "times", "dose", "doses", "to",
    "in", "on", "at", "medication", "medicine", "drug", "strength",
}

# Tokens that say little about which product is meant: a match on these alone
# does not make an entry a candidate.
_GENERIC = {
    "mg", "g", "ml", "ug", "unt", "actuat", "oral", "tablet", "capsule", "chewable",
    "solution", "suspension", "injection", "er", "ir", "dr", "hr", "day", "pack",
    "prefilled", "syringe", "inhaler", "topical", "cream", "system", "dose",
    "metered", "powder", "dry", "sublingual", "transdermal", "patch", "spray",
    "mucosal", "ophthalmic", "gel", "drug", "implant", "auto", "injector", "release",
    "extended", "hydrochloride", "sodium", "potassium", "calcium", "acetate",
    "sulfate", "maleate", "succinate", "tartrate", "bitartrate", "phosphate",
    "hydrobromide", "human",
}


def _fmt_number(value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    text = f"{float(value):.6f}".rstrip("0").rstrip(".")
    return text


def _tokenize(text: str) -> Tuple[List[str], List[str]]:
    """Return (primary tokens, derived tokens) for a display or a query.

    Primary tokens are what the text says (normalised words, strengths like
    ``25mg`` or ``2mg/ml``); derived tokens are extra handles that also match
    (the bare number and unit of a strength) but do not count as unmatched
    content of a catalog display.
    """
    t = text.lower().replace("[", " ").replace("]", " ")
    for pattern, repl in _PHRASES:
        t = re.sub(pattern, repl, t)
    primary: List[str] = []
    derived: List[str] = []

    def strength(match: "re.Match[str]") -> str:
        num = Fraction(match.group("num"))
        unit = match.group("unit")
        per = match.group("per")
        if per and match.group("pernum") and Fraction(match.group("pernum")) != 0:
            num = num / Fraction(match.group("pernum"))  # 160 mg/5 mL -> 32 mg/mL
        if unit in _MASS_TO_MG:
            num, unit = num * _MASS_TO_MG[unit], "mg"
        elif unit.startswith("unit"):
            unit = "unt"
        amount = f"{_fmt_number(num)}{unit}"
        primary.append(amount + (f"/{per}" if per else ""))
        # "0.044 MG/ACTUAT" also answers to "44 mcg"; "25mg" to a bare "25".
        derived.extend([_fmt_number(num), unit] + ([amount, per] if per else []))
        return " "

    t = _STRENGTH.sub(strength, t)
    for word in _WORD.findall(t):
        word = _WORD_SYNONYMS.get(word, word)
        if re.fullmatch(r"\d+(?:\.\d+)?", word):
            word = _fmt_number(Fraction(word))
        primary.append(word)
    if "er" not in primary and "dr" not in primary:
        derived.append("ir")  # not extended/delayed release: answers to "IR"
    return primary, derived


def _weight(token: str) -> int:
    """Product names count double: 'metformin ER' prefers metformin IR to cefaclor ER."""
    return 2 if token.isalpha() and token not in _GENERIC else 1


class CatalogEntries(list):
    """A catalog's entries: a plain list of ``{code, display, system}`` dicts.

    Calling it (``catalog.entries()``) returns the same entries as HealthChain
    ``Coding`` objects, in catalog order. That is the enumeration capability
    ``FHIRToolkit`` looks for (``hasattr(lookup, "entries")``, then
    ``lookup.entries()``) to register its ``list_codes`` tool, the same
    signature as ``LocalCodeLookup.entries()``.
    """

    def __call__(self) -> list:
        from healthchain.terminology import Coding

        return [Coding(**entry) for entry in self]


class Catalog:
    """An in-memory RxNorm catalog: a list of ``{code, display, system}``.

    Implements HealthChain's ``TerminologyLookup`` protocol
    (``search(text, system=None) -> list[Coding]``) and its optional enumeration
    (``entries()``), so it plugs into ``healthchain.tools.FHIRToolkit(lookup=...)``
    as it is. HealthChain is imported only when ``search``/``entries()`` is
    called. :meth:`lookup` is the scored form the agent tool returns.
    """

    def __init__(self, entries: Iterable[Dict[str, Any]]):
        self.entries: CatalogEntries = CatalogEntries()
        self._index: List[Tuple[Dict[str, str], set, set]] = []
        self.by_code: Dict[str, Dict[str, str]] = {}
        for raw in entries:
            entry = {
                "code": str(raw["code"]),
                "display": str(raw["display"]),
                "system": str(raw.get("system") or RXNORM_SYSTEM),
            }
            primary, derived = _tokenize(entry["display"])
            self.entries.append(entry)
            self._index.append((entry, set(primary), set(primary) | set(derived)))
            self.by_code.setdefault(entry["code"], entry)

    @classmethod
    def from_path(cls, path: Union[str, Path]) -> "Catalog":
        with open(path, "rb") as fh:
            data = json.loads(fh.read().decode("utf-8"))
        if not isinstance(data, list):
            raise ValueError(f"{path}: expected a JSON list of {{code, display, system}}")
        return cls(data)

    def __len__(self) -> int:
        return len(self.entries)

    def lookup(self, query: str, limit: int = 5) -> List[Dict[str, Any]]:
        primary, _ = _tokenize(query)
        wanted = [t for t in dict.fromkeys(primary) if t not in _STOPWORDS]
        if not wanted:
            return []
        total = sum(_weight(t) for t in wanted)
        ranked = []
        for entry, display_primary, display_all in self._index:
            matched = [t for t in wanted if t in display_all]
            if not any(t not in _GENERIC for t in matched):
                continue
            weight = sum(_weight(t) for t in matched)
            unmatched_display = len(display_primary - set(matched))
            key = (len(matched) < len(wanted), -weight, unmatched_display, entry["display"], entry["code"])
            ranked.append((key, weight / total, entry))
        ranked.sort(key=lambda r: r[0])
        return [{**entry, "score": round(score, 3)} for _, score, entry in ranked[: max(0, limit)]]

    def search(self, text: str, system: Optional[str] = None, *, limit: Optional[int] = None) -> list:
        """HealthChain's ``TerminologyLookup.search``: the ranking of :meth:`lookup` as ``Coding`` s.

        Entries matching every query word come first, then partial matches
        (``Coding`` has no field for :meth:`lookup`'s score). ``system``
        restricts the result to one code system URI; ``limit`` (not part of the
        protocol) caps it; by default every match is returned. A query that is
        not a string, or matches nothing, gives ``[]``.
        """
        from healthchain.terminology import Coding

        if not isinstance(text, str):
            return []
        hits = [h for h in self.lookup(text, len(self.entries)) if system is None or h["system"] == system]
        if limit is not None:
            hits = hits[: max(0, limit)]
        return [Coding(code=h["code"], display=h["display"], system=h["system"]) for h in hits]


#: What a ``catalog=`` argument accepts: a :class:`Catalog`, a catalog file, any other
#: HealthChain ``TerminologyLookup`` (used through its ``search``), or ``None`` for the
#: module-level catalog.
CatalogArg = Union[Catalog, str, Path, "TerminologyLookup", None]

_catalog_lock = threading.Lock()
_catalog: Optional[Catalog] = None
_catalog_path: Optional[Path] = None  # None: the packaged catalog


def load_catalog(path: Union[str, Path, None] = None) -> Catalog:
    """Load a catalog file (default: the packaged catalog)."""
    return Catalog.from_path(path or default_catalog_path())


def set_catalog(catalog: Union[Catalog, str, Path, Iterable[Dict[str, Any]], None]) -> None:
    """Set the module-level catalog the tools use by default.

    Accepts a :class:`Catalog`, a path (loaded lazily on first use), a list of
    entries, or ``None`` to go back to the default path.
    """
    global _catalog, _catalog_path
    with _catalog_lock:
        if catalog is None:
            _catalog, _catalog_path = None, None
        elif isinstance(catalog, Catalog):
            _catalog = catalog
        elif isinstance(catalog, (str, Path)):
            _catalog, _catalog_path = None, Path(catalog)
        else:
            _catalog = Catalog(catalog)


def get_catalog() -> Catalog:
    """The module-level catalog, loaded once on first use."""
    global _catalog
    with _catalog_lock:
        if _catalog is None:
            _catalog = Catalog.from_path(_catalog_path or default_catalog_path())
        return _catalog


def _is_lookup(catalog: Any) -> bool:
    """Any HealthChain ``TerminologyLookup`` (structural: a callable ``search``)."""
    return callable(getattr(catalog, "search", None))


def _resolve_catalog(catalog: CatalogArg) -> Union[Catalog, "TerminologyLookup"]:
    """The catalog to use: the module-level one, a :class:`Catalog`, one loaded from a
    path, or any other HealthChain ``TerminologyLookup`` as it is."""
    if catalog is None:
        return get_catalog()
    if isinstance(catalog, Catalog) or _is_lookup(catalog):
        return catalog
    return Catalog.from_path(catalog)


def lookup_medication_code(
    query: str, limit: int = 5, *, catalog: CatalogArg = None
) -> Dict[str, Any]:
    """Search the site RxNorm catalog for a medication.

    Words may come in any order and any case: ingredient, brand name
    (``Tylenol``), strength (``25 mg``; mcg and g are converted to mg), dose
    form (tablet, capsule, oral solution...) and release (ER/XR/XL/SR/"24 hr",
    IR). Abbreviations HCTZ, APAP, ASA, tab, cap, soln are understood. Matches
    are ranked: entries matching every query word first, then fewer; among
    equals, the entry with the fewest extra words. An empty or unknown query
    gives no matches.

    Returns ``{"query": query, "matches": [{code, display, system, score}]}``
    (score = share of query words matched), plus ``"error"`` if the query or
    catalog could not be used.
    """
    if not isinstance(query, str):
        return {"query": query, "matches": [], "error": "query must be a string, e.g. 'metoprolol succinate 25 mg ER tablet'"}
    if isinstance(limit, bool) or not isinstance(limit, int):
        try:
            limit = int(limit)
        except (TypeError, ValueError):
            return {"query": query, "matches": [], "error": "limit must be a positive integer"}
    if limit < 1:
        return {"query": query, "matches": [], "error": "limit must be a positive integer"}
    try:
        resolved = _resolve_catalog(catalog)
    except MissingDataError:
        raise  # an incomplete install is the harness's error, not a tool result for the model
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return {"query": query, "matches": [], "error": f"medication catalog unavailable: {exc}"}
    if isinstance(resolved, Catalog):
        return {"query": query, "matches": resolved.lookup(query, limit)}
    # Any other TerminologyLookup (a terminology service, HealthChain's LocalCodeLookup):
    # its RxNorm codings in its order, the first ``limit``, without a score.
    try:
        codings = list(resolved.search(query, RXNORM_SYSTEM))[:limit]
        return {"query": query, "matches": [{"code": c.code, "display": c.display, "system": c.system}
                                            for c in codings]}
    except Exception as exc:  # never raise into the agent loop
        return {"query": query, "matches": [], "error": f"terminology lookup failed: {type(exc).__name__}: {exc}"}


# --------------------------------------------------------------------------
# Building a MedicationStatement
# --------------------------------------------------------------------------

def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _clean_number(value: float) -> Union[int, float]:
    if float(value).is_integer():
        return int(value)
    return float(value)


def _check_unit(unit: Any) -> Optional[str]:
    """Return an error message if ``unit`` is not an accepted UCUM dose unit."""
    if not isinstance(unit, str) or not unit:
        return "dose_unit must be a UCUM unit code such as 'mg', 'g', 'ug' or 'mL'"
    if unit in UCUM_DOSE_UNITS:
        return None
    if unit.strip().lower() in _COUNT_UNITS:
        return (
            f"dose_unit '{unit}' counts dose units; give the amount of drug instead "
            "(number of tablets x strength, e.g. two 200 mg tablets -> dose_value 400, dose_unit 'mg'; "
            "for liquids, the volume in 'mL')"
        )
    hint = _UNIT_HINTS.get(unit) or _UNIT_HINTS.get(unit.strip().lower())
    if hint is None:
        for code in UCUM_DOSE_UNITS:
            if code.lower() == unit.strip().lower():
                hint = code
    suggestion = f"; use '{hint}'" if hint else ""
    return (
        f"dose_unit '{unit}' is not a UCUM code{suggestion} "
        f"(accepted: {', '.join(UCUM_DOSE_UNITS)})"
    )


def _quantity(value: Union[int, float], unit: str) -> Dict[str, Any]:
    return {"value": _clean_number(value), "unit": unit, "system": UCUM_SYSTEM, "code": unit}


def _timing(frequency_per_day: float, frequency_per_day_max: Optional[float]) -> Union[Dict[str, Any], str]:
    """Express administrations/day as Timing.repeat; an error string if impossible.

    3/day -> frequency 3 per 1 d; 0.5/day -> 1 per 2 d; 1/7 -> 1 per 1 wk;
    4-6/day -> frequency 4, frequencyMax 6 per 1 d.
    """
    tol = 1e-3

    def near_int(x: float) -> Optional[int]:
        n = round(x)
        return n if n >= 1 and abs(x - n) <= tol * max(1.0, abs(x)) else None

    # Candidate periods in days, shortest first.
    candidates: List[Tuple[float, str, float]] = [(1, "d", 1.0)]
    if frequency_per_day < 1:
        inverse = near_int(1.0 / frequency_per_day)
        if inverse:
            candidates.insert(0, (inverse // 7, "wk", float(inverse)) if inverse % 7 == 0 else (inverse, "d", float(inverse)))
    candidates += [(1, "wk", 7.0)] + [(p, "d", float(p)) for p in range(2, 31) if p != 7]
    for period, unit, days in candidates:
        freq = near_int(frequency_per_day * days)
        if freq is None:
            continue
        repeat: Dict[str, Any] = {"frequency": freq, "period": period, "periodUnit": unit}
        if frequency_per_day_max is not None:
            freq_max = near_int(frequency_per_day_max * days)
            if freq_max is None:
                continue
            if freq_max != freq:
                repeat["frequencyMax"] = freq_max
        return repeat
    return (
        f"frequency_per_day {frequency_per_day}"
        + (f" (max {frequency_per_day_max})" if frequency_per_day_max is not None else "")
        + " cannot be written as whole administrations per period of up to 30 days"
    )


def _error(message: str) -> Dict[str, str]:
    return {"error": message}


def build_medication_statement(
    subject: str,
    status: str,
    rxnorm_code: str,
    display: str,
    dose_value: Optional[float] = None,
    dose_unit: Optional[str] = None,
    frequency_per_day: Optional[float] = None,
    as_needed: Optional[bool] = None,
    dose_value_max: Optional[float] = None,
    frequency_per_day_max: Optional[float] = None,
    note_text: Optional[str] = None,
    *,
    catalog: CatalogArg = None,
) -> Dict[str, Any]:
    """Build a FHIR R4B MedicationStatement from flat arguments.

    - subject: patient reference, e.g. "Patient/pat-001".
    - status: R4B MedicationStatement.status: active, completed, entered-in-error,
      intended, stopped, on-hold, unknown, not-taken.
    - rxnorm_code, display: the RxNorm code and its display, as returned by
      lookup_medication_code.
    - dose_value, dose_unit: amount per single administration in a UCUM unit
      ('mg', 'g', 'ug', 'mL', ...): two 200 mg tablets -> 400 'mg'. Leave both
      out when the note documents no dose.
    - dose_value_max: upper end of a dose range (1-2 tablets of 325 mg ->
      dose_value 325, dose_value_max 650), same unit.
    - frequency_per_day: administrations per day (3 for TID, 0.5 for every
      other day, 1/7 for weekly); frequency_per_day_max: upper end of a range
      (every 4-6 hours -> 4 and 6).
    - as_needed: True for PRN.
    - note_text: free text kept as MedicationStatement.note.

    Returns ``{"resource": {...}}`` (a JSON dict valid against R4B) or
    ``{"error": "..."}`` saying what to fix. ``"warnings"`` lists catalog
    mismatches (code not in the site catalog, display differing from it).
    """
    try:
        return _build(
            subject, status, rxnorm_code, display, dose_value, dose_unit, frequency_per_day,
            as_needed, dose_value_max, frequency_per_day_max, note_text, catalog,
        )
    except Exception as exc:  # never raise into the agent loop
        return _error(f"could not build MedicationStatement: {type(exc).__name__}: {exc}")


def _build(
    subject, status, rxnorm_code, display, dose_value, dose_unit, frequency_per_day,
    as_needed, dose_value_max, frequency_per_day_max, note_text, catalog,
) -> Dict[str, Any]:
    from healthchain.fhir import create_dosage, create_medication_statement

    # --- identity -----------------------------------------------------------
    if not isinstance(subject, str) or not re.fullmatch(r"(Patient|Group)/[A-Za-z0-9\-.]{1,64}", subject.strip()):
        return _error("subject must be a reference like 'Patient/<id>'")
    subject = subject.strip()
    if status not in R4B_MEDICATION_STATEMENT_STATUSES:
        hint = " (R5's 'recorded' is not an R4B code; use 'active' for a current medication)" if status == "recorded" else ""
        return _error(
            f"status '{status}' is not an R4B MedicationStatement status{hint}; "
            f"use one of: {', '.join(R4B_MEDICATION_STATEMENT_STATUSES)}"
        )
    if isinstance(rxnorm_code, int) and not isinstance(rxnorm_code, bool):
        rxnorm_code = str(rxnorm_code)
    if not isinstance(rxnorm_code, str) or not re.fullmatch(r"\d{1,10}", rxnorm_code.strip()):
        return _error("rxnorm_code must be a numeric RxNorm code (RXCUI) such as '310965'; use lookup_medication_code")
    rxnorm_code = rxnorm_code.strip()
    if not isinstance(display, str) or not display.strip():
        return _error("display is required: pass the catalog display returned by lookup_medication_code")
    display = display.strip()

    # --- dose -----------------------------------------------------------------
    for name, value in (("dose_value", dose_value), ("dose_value_max", dose_value_max),
                        ("frequency_per_day", frequency_per_day), ("frequency_per_day_max", frequency_per_day_max)):
        if value is not None and not _is_number(value):
            return _error(f"{name} must be a number, got {value!r}")
    if dose_value is None and dose_unit is not None:
        return _error("dose_unit given without dose_value")
    if dose_value is None and dose_value_max is not None:
        return _error("dose_value_max given without dose_value (the lower end of the range)")
    if dose_value is not None:
        if dose_unit is None:
            return _error("dose_value needs a dose_unit (UCUM code such as 'mg' or 'mL')")
        unit_error = _check_unit(dose_unit)
        if unit_error:
            return _error(unit_error)
        if dose_value <= 0:
            return _error(f"dose_value must be positive, got {dose_value}")
        if dose_value_max is not None and dose_value_max < dose_value:
            return _error(f"dose_value_max ({dose_value_max}) is below dose_value ({dose_value})")

    # --- frequency ---------------------------------------------------------------
    if frequency_per_day is None and frequency_per_day_max is not None:
        return _error("frequency_per_day_max given without frequency_per_day (the lower end of the range)")
    repeat: Optional[Dict[str, Any]] = None
    if frequency_per_day is not None:
        if frequency_per_day <= 0:
            return _error(f"frequency_per_day must be positive, got {frequency_per_day}")
        if frequency_per_day_max is not None and frequency_per_day_max < frequency_per_day:
            return _error(f"frequency_per_day_max ({frequency_per_day_max}) is below frequency_per_day ({frequency_per_day})")
        timing = _timing(float(frequency_per_day), None if frequency_per_day_max is None else float(frequency_per_day_max))
        if isinstance(timing, str):
            return _error(timing)
        repeat = timing
    if as_needed is not None and not isinstance(as_needed, bool):
        return _error(f"as_needed must be true, false or null, got {as_needed!r}")
    if note_text is not None and not isinstance(note_text, str):
        return _error("note_text must be a string")

    # --- build through HealthChain ----------------------------------------------
    dosage = None
    if dose_value is not None or repeat is not None or as_needed is not None:
        dosage = create_dosage(
            dose_value=None if dose_value is None else _clean_number(dose_value),
            dose_unit=dose_unit,
            frequency=None if repeat is None else repeat["frequency"],
            period=None if repeat is None else repeat["period"],
            period_unit=None if repeat is None else repeat["periodUnit"],
            as_needed=as_needed,
        )
    statement = create_medication_statement(
        subject=subject,
        status=status,
        code=rxnorm_code,
        display=display,
        system=RXNORM_SYSTEM,
        dosage=dosage,
        generate_id=False,
        warn=False,
    )
    resource = statement.model_dump(mode="json", exclude_none=True)

    # create_dosage sets only value/unit on doseQuantity and has no dose
    # ranges or frequencyMax: finish those on the JSON form.
    if dosage is not None:
        dose_entry = resource["dosage"][0]
        if dose_value is not None:
            if dose_value_max is not None and dose_value_max != dose_value:
                dose_entry["doseAndRate"] = [{"doseRange": {
                    "low": _quantity(dose_value, dose_unit),
                    "high": _quantity(dose_value_max, dose_unit),
                }}]
            else:
                dose_entry["doseAndRate"] = [{"doseQuantity": _quantity(dose_value, dose_unit)}]
        if repeat is not None and "frequencyMax" in repeat:
            dose_entry["timing"]["repeat"]["frequencyMax"] = repeat["frequencyMax"]
    if note_text:
        resource["note"] = [{"text": note_text}]

    report = validate_medication_statement(resource)
    if not report["valid"]:
        return _error("built resource failed validation: " + "; ".join(report["issues"]))

    result: Dict[str, Any] = {"resource": resource}
    warnings = _catalog_warnings(rxnorm_code, display, catalog)
    if warnings:
        result["warnings"] = warnings
    return result


def _catalog_warnings(code: str, display: str, catalog: CatalogArg) -> List[str]:
    try:
        resolved = _resolve_catalog(catalog)
    except (OSError, ValueError, KeyError, TypeError):
        return []
    if not isinstance(resolved, Catalog):
        # another TerminologyLookup cannot be asked for a code, only searched: is the code
        # among what the display finds?
        try:
            found = {c.code: c.display for c in resolved.search(display, RXNORM_SYSTEM)}
        except Exception:  # never raise into the agent loop
            return []
        if code not in found:
            return [f"RxNorm code {code} is not what the terminology lookup finds for '{display}'; "
                    "check it with lookup_medication_code"]
        return []
    entry = resolved.by_code.get(code)
    if entry is None:
        return [f"RxNorm code {code} is not in the site catalog; check it with lookup_medication_code"]
    if entry["display"] != display:
        return [f"display for {code} differs from the catalog display '{entry['display']}'"]
    return []


# --------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------

def validate_medication_statement(resource: Any) -> Dict[str, Any]:
    """Validate a MedicationStatement (a JSON dict, or a JSON string) against FHIR R4B.

    Runs HealthChain's ``validate_resource`` (structure, types, required
    fields, required code bindings) and checks explicitly that resourceType
    is MedicationStatement and that ``status`` is an R4B code. Never raises.

    Returns ``{"valid": bool, "issues": ["<path>: <problem>", ...]}``.
    """
    issues: List[str] = []
    if isinstance(resource, str):
        try:
            resource = json.loads(resource)
        except ValueError as exc:
            return {"valid": False, "issues": [f"resource is not valid JSON: {exc}"]}
    if not isinstance(resource, dict):
        return {"valid": False, "issues": [f"resource must be a JSON object, got {type(resource).__name__}"]}

    resource_type = resource.get("resourceType")
    if resource_type != "MedicationStatement":
        issues.append(f"resourceType: must be 'MedicationStatement', got {resource_type!r}")
    status = resource.get("status")
    if status is None:
        issues.append("MedicationStatement.status: required (one of "
                      + ", ".join(R4B_MEDICATION_STATEMENT_STATUSES) + ")")
    elif status not in R4B_MEDICATION_STATEMENT_STATUSES:
        issues.append(
            f"MedicationStatement.status: '{status}' is not in the R4B value set ("
            + ", ".join(R4B_MEDICATION_STATEMENT_STATUSES) + ")"
        )

    if resource_type == "MedicationStatement":
        try:
            from healthchain.fhir import validate_resource

            report = validate_resource(resource, "MedicationStatement", version="R4B")
            for issue in report.issues:
                if issue.severity not in ("error", "fatal"):
                    continue
                text = f"{issue.expression or 'MedicationStatement'}: {issue.diagnostics}"
                if issue.expression == "MedicationStatement.status" and any(
                    i.startswith("MedicationStatement.status:") for i in issues
                ):
                    continue  # already reported above
                issues.append(text)
        except Exception as exc:  # never raise into the agent loop
            issues.append(f"validator failed: {type(exc).__name__}: {exc}")

    return {"valid": not issues, "issues": issues}


# --------------------------------------------------------------------------
# LangChain
# --------------------------------------------------------------------------

def langchain_tools(catalog: CatalogArg = None) -> list:
    """The three tools as LangChain StructuredTools (langchain_core imported lazily).

    ``catalog`` (a :class:`Catalog`, a path, or any other HealthChain
    ``TerminologyLookup``) fixes the catalog these tools use; by default they
    use the module-level catalog.
    """
    from langchain_core.tools import StructuredTool

    bound = None if catalog is None else _resolve_catalog(catalog)

    def with_catalog(fn: Any) -> Any:
        """``fn`` with the catalog fixed; its schema (signature, annotations) without it."""

        @functools.wraps(fn)
        def tool(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, catalog=bound, **kwargs)

        sig = inspect.signature(fn)
        tool.__signature__ = sig.replace(parameters=[p for n, p in sig.parameters.items() if n != "catalog"])
        tool.__annotations__ = {k: v for k, v in fn.__annotations__.items() if k != "catalog"}
        tool.__doc__ = None  # the tool's description is set below; keep it out of the args schema
        return tool

    def validate(resource: Union[Dict[str, Any], str]) -> Dict[str, Any]:
        # the function accepts anything (and says what is wrong); the schema tells the model what to send
        return validate_medication_statement(resource)

    return [
        StructuredTool.from_function(
            func=func, name=fn.__name__,
            description=inspect.cleandoc(fn.__doc__ or ""),
            handle_validation_error=_bad_tool_arguments,  # a readable value, too
        )
        for func, fn in (
            (with_catalog(lookup_medication_code), lookup_medication_code),
            (with_catalog(build_medication_statement), build_medication_statement),
            (validate, validate_medication_statement),
        )
    ]


__all__ = [
    "Catalog",
    "CatalogArg",
    "CatalogEntries",
    "default_catalog_path",
    "R4B_MEDICATION_STATEMENT_STATUSES",
    "RXNORM_SYSTEM",
    "UCUM_DOSE_UNITS",
    "UCUM_SYSTEM",
    "build_medication_statement",
    "get_catalog",
    "langchain_tools",
    "load_catalog",
    "lookup_medication_code",
    "set_catalog",
    "validate_medication_statement",
]


# --------------------------------------------------------------------------
# Reading one patient's bundle
# --------------------------------------------------------------------------

#: MedicationRequest.status (R4/R4B, required binding medicationrequest-status).
MEDICATION_REQUEST_STATUSES = (
    "active", "on-hold", "cancelled", "completed", "entered-in-error", "stopped", "draft", "unknown",
)


def fhir_toolkit(bundle: Any = None, catalog: CatalogArg = None) -> "FHIRToolkit":
    """HealthChain's ``FHIRToolkit`` over one bundle, with the site catalog as its lookup.

    ``bundle`` (a Bundle as a JSON string or dict, or an already loaded one) is
    loaded with ``load_bundle(..., version="R4B")`` before the toolkit gets it: the
    toolkit itself loads with the process-wide default FHIR version. ``catalog`` is
    as for :func:`lookup_medication_code` (default: the module-level catalog), so
    the toolkit's ``lookup_code`` / ``list_codes`` search the site catalog.
    Raises on an unreadable bundle (the tools below turn that into a value).
    """
    return _toolkit(bundle, _resolve_catalog(catalog))


def _toolkit(bundle: Any, lookup: Any) -> "FHIRToolkit":
    from healthchain.fhir import load_bundle
    from healthchain.tools import FHIRToolkit

    if isinstance(bundle, str):
        bundle = json.loads(bundle)
    if isinstance(bundle, dict):
        bundle = load_bundle(bundle, version="R4B")
    return FHIRToolkit(bundle=bundle, lookup=lookup)


def _bundle_reader(bundle: Any) -> Tuple[Any, frozenset]:
    """FHIRToolkit's ``get_coded_entries`` tool over ``bundle``, looked up once
    (``FHIRToolkit.run_tool`` rebuilds every tool's schema on each call), and the ids of the
    bundle's do-not-perform requests (:func:`_do_not_perform`). Only this tool of the kit is
    used, so its lookup stays HealthChain's default."""
    kit = _toolkit(bundle, None)
    return next(t for t in kit.get_tools() if t.name == "get_coded_entries"), _do_not_perform(kit.bundle)


def _do_not_perform(bundle: Any) -> frozenset:
    """Ids of the MedicationRequests with ``doNotPerform: true`` (a modifier element: the
    request says NOT to take the medication). HealthChain's ``CodedEntry`` does not carry it."""
    return frozenset(
        e.resource.id for e in (getattr(bundle, "entry", None) or [])
        if getattr(e.resource, "doNotPerform", None) is True and e.resource.get_resource_type() == "MedicationRequest"
    )


def _unreadable(exc: Exception) -> Dict[str, str]:
    return {"error": f"bundle cannot be read: {type(exc).__name__}: {exc}"}


def _bad_status(status: Any) -> Optional[Dict[str, str]]:
    if status is not None and (not isinstance(status, str) or status.strip().lower() not in MEDICATION_REQUEST_STATUSES):
        return {"error": f"status must be one of {', '.join(MEDICATION_REQUEST_STATUSES)} (or omitted for all), got {status!r}"}
    return None


def _medication_request_summary(get_coded_entries: Any, status: Optional[str], refused: frozenset = frozenset()) -> Dict[str, Any]:
    """The compact view of :func:`list_medication_requests`, read through FHIRToolkit's
    ``get_coded_entries`` tool (``medicationReference`` resolved in the bundle); requests
    whose id is in ``refused`` (doNotPerform) are their own items, ``do_not_perform: true``."""
    entries = get_coded_entries.run(
        resource_type="MedicationRequest", status=None if status is None else status.strip().lower()
    )
    if isinstance(entries, dict):  # the toolkit's error value, {"ok": false, "error": ...}
        return {"error": f"bundle cannot be read: {entries.get('error')}"}
    grouped: Dict[Tuple[Any, Any], Dict[str, Any]] = {}
    for e in entries:
        codings = e.get("codings") or []
        coding = next((c for c in codings if c.get("system") == RXNORM_SYSTEM and c.get("code")), None)
        code = coding["code"] if coding else e.get("code")
        dnp = e.get("resource_id") in refused
        item = grouped.setdefault((code, e.get("status"), dnp), {
            "code": code,
            "display": (coding.get("display") if coding else None) or e.get("display"),
            "status": e.get("status"),
            "requests": 0,
            "last_authored_on": None,
            **({"do_not_perform": True} if dnp else {}),
        })
        item["requests"] += 1
        authored_on = e.get("authored_on")
        if authored_on and (item["last_authored_on"] is None or authored_on > item["last_authored_on"]):
            item["last_authored_on"] = authored_on
    out = list(grouped.values())
    return {"status": status, "count": len(out), "medication_requests": out}


def list_medication_requests(bundle: Any, status: Optional[str] = None) -> Dict[str, Any]:
    """List the patient's MedicationRequests, optionally only those with one status.

    ``status`` is a MedicationRequest status (active, stopped, completed, on-hold,
    cancelled, draft, entered-in-error, unknown); omit it for all. Read with
    HealthChain's ``FHIRToolkit`` (its ``get_coded_entries`` tool over the bundle
    loaded as R4B; ``medicationReference`` resolved in the bundle); each request is
    identified by its RxNorm coding, wherever it sits in the concept's codings.

    Compact: one item per (code, status) with how many requests it has and the
    latest authoredOn. Returns ``{"status": status, "count": n,
    "medication_requests": [{code, display, status, requests, last_authored_on}]}``
    in bundle order, or ``{"error": "..."}``.
    ``bundle`` is a Bundle as a JSON string or dict, or an already loaded one.
    """
    bad = _bad_status(status)
    if bad:
        return bad
    try:
        reader, refused = _bundle_reader(bundle)
    except Exception as exc:  # never raise into the agent loop
        return _unreadable(exc)
    return _medication_request_summary(reader, status, refused)


def langchain_bundle_tools(bundle: Any, catalog: CatalogArg = None) -> list:
    """Tools over ONE patient's bundle, as LangChain StructuredTools: the catalog lookup
    (as in :func:`langchain_tools`) and ``list_medication_requests`` bound to this bundle
    (loaded once, on first use, into a HealthChain ``FHIRToolkit``). Nothing else of any other
    patient is reachable: the toolkit's own ``load_bundle`` tool (which opens any file
    path it is given) is not exposed."""
    lookup = next(t for t in langchain_tools(catalog) if t.name == "lookup_medication_code")
    lock = threading.Lock()
    loaded: Dict[str, Any] = {}

    def list_medication_requests_tool(status: Optional[str] = None) -> Dict[str, Any]:
        with lock:
            if "reader" not in loaded:
                try:
                    loaded["reader"] = _bundle_reader(bundle)
                except Exception as exc:  # never raise into the agent loop
                    return _unreadable(exc)
        return _bad_status(status) or _medication_request_summary(loaded["reader"][0], status, loaded["reader"][1])

    return [lookup, _list_requests_tool(list_medication_requests_tool)]


def _bad_tool_arguments(exc: Exception) -> str:
    """What a tool-using model gets for arguments that do not fit the tool's schema."""
    return json.dumps({"error": f"invalid tool arguments: {exc}"})


_LIST_REQUESTS_DOC = """List this patient's MedicationRequests from their FHIR record.

status: only requests with this status (active, stopped, completed, on-hold,
cancelled, draft, entered-in-error, unknown); omit it for all.
Returns {{"status", "count", "medication_requests": [{{code, display, status,
requests, last_authored_on}}]}}, one item per code and status (code and display
are the RxNorm coding{note}; "do_not_perform": true marks requests that say
not to take it), or {{"error": "..."}}."""


def _list_requests_tool(func: Any, note: str = "") -> Any:
    """``list_medication_requests`` over one bundle (``func(status)``), as a StructuredTool."""
    from langchain_core.tools import StructuredTool

    return StructuredTool.from_function(func=func, name="list_medication_requests",
                                        description=_LIST_REQUESTS_DOC.format(note=note),
                                        handle_validation_error=_bad_tool_arguments)


__all__ += ["MEDICATION_REQUEST_STATUSES", "fhir_toolkit", "langchain_bundle_tools", "list_medication_requests"]


def _compact_resource(resource: Dict[str, Any]) -> Dict[str, Any]:
    """A resource without its narrative (``text``) and ``meta``: what an agent reads."""
    return {k: v for k, v in resource.items() if k not in ("text", "meta")}


def _resolve(resolve_reference: Any, reference: Any) -> Dict[str, Any]:
    if not isinstance(reference, str) or not reference.strip():
        return {"error": f"reference must be a non-empty string such as 'Medication/<id>' or 'urn:uuid:<id>', got {reference!r}"}
    try:
        got = resolve_reference.run(reference=reference.strip())
    except Exception as exc:  # never raise into the agent loop
        return {"error": f"reference {reference!r} cannot be resolved: {type(exc).__name__}: {exc}"}
    if not isinstance(got, dict) or not got.get("ok") or not isinstance(got.get("resource"), dict):
        why = got.get("error") if isinstance(got, dict) else got
        return {"error": f"reference {reference!r} not found in this patient's record: {why}"}
    return {"reference": reference.strip(), "resource": _compact_resource(got["resource"])}


def read_resource(bundle: Any, reference: str) -> Dict[str, Any]:
    """Read one resource of the bundle by reference (``Medication/<id>``, ``urn:uuid:<id>``;
    e.g. a MedicationRequest's ``medicationReference``), resolved with HealthChain's
    ``FHIRToolkit`` ``resolve_reference`` tool. Returns ``{"reference", "resource"}`` (the
    resource without its narrative and ``meta``) or ``{"error": "..."}``; never raises."""
    try:
        kit = _toolkit(bundle, None)
        resolver = next(t for t in kit.get_tools() if t.name == "resolve_reference")
    except Exception as exc:  # never raise into the agent loop
        return _unreadable(exc)
    return _resolve(resolver, reference)


def langchain_record_tools(bundle: Any) -> list:
    """Read-only tools over ONE patient's bundle, as LangChain StructuredTools:
    ``list_medication_requests`` (as in :func:`langchain_bundle_tools`) and
    ``read_resource`` (:func:`read_resource`), both over one HealthChain ``FHIRToolkit``
    loaded on first use. No catalog, no file access, nothing of any other patient."""
    from langchain_core.tools import StructuredTool

    lock = threading.Lock()
    loaded: Dict[str, Any] = {}

    def tools() -> Union[Dict[str, Any], Dict[str, str]]:
        with lock:
            if "tools" not in loaded:
                try:
                    kit = _toolkit(bundle, None)
                    loaded["tools"] = {t.name: t for t in kit.get_tools()}
                    loaded["refused"] = _do_not_perform(kit.bundle)
                except Exception as exc:  # never raise into the agent loop
                    return {"error": _unreadable(exc)}
            return loaded["tools"]

    def list_medication_requests_tool(status: Optional[str] = None) -> Dict[str, Any]:
        kit = tools()
        if "error" in kit:
            return kit["error"]
        return _bad_status(status) or _medication_request_summary(kit["get_coded_entries"], status, loaded["refused"])

    def read_resource_tool(reference: str) -> Dict[str, Any]:
        kit = tools()
        if "error" in kit:
            return kit["error"]
        return _resolve(kit["resolve_reference"], reference)

    lister = _list_requests_tool(list_medication_requests_tool, "; a medicationReference is already resolved")
    reader = StructuredTool.from_function(
        func=read_resource_tool, name="read_resource",
        description=inspect.cleandoc(
            """Read one resource of this patient's FHIR record by reference, e.g. a
            medicationReference ('Medication/<id>' or 'urn:uuid:<id>') or 'Patient/<id>'.
            Returns {"reference", "resource"} (the resource JSON without narrative) or
            {"error": "..."}."""),
        handle_validation_error=_bad_tool_arguments,
    )
    return [lister, reader]


__all__ += ["langchain_record_tools", "read_resource"]
