"""The site RxNorm catalog and its lookup tool (eval-free).

:class:`Catalog` is an in-memory catalog of ``{code, display, system}`` entries and a
HealthChain ``TerminologyLookup`` (``search``, ``entries()``); :func:`lookup_medication_code`
is the agent tool that searches it (or any other ``TerminologyLookup``). The module-level
catalog (:func:`get_catalog`, :func:`set_catalog`) is what the tools use by default.
"""

from __future__ import annotations

import json
import re
import threading
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from pytest_groundeval.fhir.codes import RXNORM as RXNORM_SYSTEM

if TYPE_CHECKING:  # HealthChain costs ~0.2 s to import; it is imported only when used
    from healthchain.terminology import TerminologyLookup

CATALOG_FILE = ("terminology", "rxnorm.json")  # inside groundeval's packaged data


def default_catalog_path() -> Path:
    """The packaged RxNorm catalog (a loud ``MissingDataError`` if the package lacks it).

    The one import from outside ``fhir/``: groundeval's packaged-data locator (it knows where
    the installed package keeps its data, nothing of evals), imported here only."""
    from pytest_groundeval.tasks.resources import data_path

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
    from pytest_groundeval.tasks.resources import MissingDataError

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



__all__ = [
    "CATALOG_FILE",
    "Catalog",
    "CatalogArg",
    "CatalogEntries",
    "default_catalog_path",
    "get_catalog",
    "load_catalog",
    "lookup_medication_code",
    "set_catalog",
]
