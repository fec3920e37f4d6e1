"""The concept map (``concept_map.json``, built by ``scripts/make_concept_map.py``): what a
coding denotes and what free text names, for the concepts the orders task verifies.

Eval-free: it says which concept a ``system|code`` denotes, whether a code system is one the
map knows, and which concepts a text names (:func:`mentions`: every word of every concept,
matched case-insensitively on word boundaries, a name inside a longer one left out, so "critical
high" is not also "high" and "left arm" not also "arm"). Whether a coding or a text agrees with
what a resource must say is the scorer's rule (``scorers/orders.py``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any


@dataclass(frozen=True)
class Concept:
    id: str
    kind: str  # test, bp-component, specimen, condition, body-site, position, exertion, method, ...
    label: str
    codings: frozenset[tuple[str, str]]
    with_: frozenset[str]  # concepts a text about this one may name beside it
    pattern: re.Pattern[str]


@dataclass(frozen=True)
class Mention:
    concept: Concept
    start: int
    end: int
    text: str


class ConceptMap:
    def __init__(self, data: dict[str, Any]) -> None:
        self.by_id: dict[str, Concept] = {}
        self._coded: dict[tuple[str, str], Concept] = {}
        for item in data["concepts"]:
            words = "|".join(f"(?:{w})" for w in item["words"])
            c = Concept(item["id"], item["kind"], item["label"],
                        frozenset((x["system"], x["code"]) for x in item["codings"]), frozenset(item["with"]),
                        re.compile(rf"(?<![a-z0-9])(?:{words})(?![a-z0-9])", re.I))
            self.by_id[c.id] = c
            self._coded.update({key: c for key in c.codings})
        self.systems = frozenset(data["systems"])

    def __getitem__(self, cid: str) -> Concept:
        return self.by_id[cid]

    def denoted(self, system: Any, code: Any) -> Concept | None:
        """The concept ``system|code`` denotes (None: the map does not know that coding)."""
        return self._coded.get((system, code)) if isinstance(system, str) and isinstance(code, str) else None

    def known_system(self, system: Any) -> bool:
        return system in self.systems

    def code_anywhere(self, code: Any) -> Concept | None:
        """A concept some known system codes as ``code`` (a code copied into another system)."""
        return next((c for (_s, k), c in sorted(self._coded.items()) if k == code), None)

    def mentions(self, text: str, kinds: frozenset[str] | None = None) -> list[Mention]:
        """Every concept the text names (of ``kinds`` when given), a name inside a longer one
        of any concept left out; in the order they appear."""
        found = [Mention(c, m.start(), m.end(), m.group(0)) for c in self.by_id.values()
                 for m in c.pattern.finditer(text)]
        kept = [m for m in found if not any(o.start <= m.start and m.end <= o.end and (o.end - o.start) >
                                            (m.end - m.start) for o in found)]
        return sorted((m for m in kept if kinds is None or m.concept.kind in kinds), key=lambda m: (m.start, m.concept.id))


@lru_cache(maxsize=1)
def concept_map() -> ConceptMap:
    """The committed map (shipped in the package beside this module)."""
    raw = resources.files("pytest_groundeval.fhir").joinpath("concept_map.json").read_text(encoding="utf-8")
    return ConceptMap(json.loads(raw))


__all__ = ["Concept", "ConceptMap", "Mention", "concept_map"]
