"""Which of a MedicationStatement's dosages are taken together, and how much that is on a day.

The write scorer checks the daily ceiling on the worst day, never on an average. This module
holds the two rules that says how dosages combine (the per-dosage per-day reading of a Timing,
average and peak, is :func:`units.per_day`):

* **phases** (:func:`phases`): FHIR ``Dosage.sequence`` orders dosage instructions; dosages
  with the same ``sequence`` are taken together, different ``sequence`` values follow one
  another (a taper: 20 mg for 5 days, then 10 mg). A dosage without a (valid) ``sequence`` is
  read as taken alongside every phase, the reading that cannot hide an amount. A day belongs to
  one phase, so the worst day is the worst phase's.
* **a phase's day** (:class:`PhaseDay`): the sum over its dosages of dose x administrations
  (average and peak) plus every rate, read as continuous for 24 h.

:func:`documented_peak` is the most administrations a documented ``frequency_per_day`` allows
on one day: 3/day is 3, every other day (0.5) or weekly (1/7) is 1 on the day it falls, 4-6/day
is 6.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


def sequence_of(dosage: Any) -> int | None:
    """``Dosage.sequence`` when it is a positive integer, else None (read as unsequenced)."""
    if not isinstance(dosage, dict):
        return None
    seq = dosage.get("sequence")
    if isinstance(seq, bool) or not isinstance(seq, int):
        return None
    return seq


def phases(dosages: list[Any]) -> list[tuple[str, list[int]]]:
    """``[(label, dosage indices)]``: one phase per ``sequence`` value (in order), each with the
    unsequenced dosages added; one phase of all dosages when none is sequenced."""
    seqs = sorted({s for s in map(sequence_of, dosages) if s is not None})
    unsequenced = [i for i, d in enumerate(dosages) if sequence_of(d) is None]
    if len(seqs) <= 1:
        return [("all dosages", list(range(len(dosages))))]
    return [(f"sequence {s}", sorted([i for i, d in enumerate(dosages) if sequence_of(d) == s] + unsequenced))
            for s in seqs]


def documented_peak(freq_high: float, rel_tol: float = 1e-3) -> float:
    """The most administrations a documented per-day frequency (its maximum) puts on one day."""
    return float(max(1, math.ceil(freq_high * (1 - rel_tol))))


@dataclass
class PhaseDay:
    """The amounts of one phase's day in mg: ``average`` (dose x average administrations per day,
    what a documented regimen states) and ``peak`` (dose x administrations on the worst day), both
    with the phase's rates; ``parts`` names what was added."""

    label: str
    average: float = 0.0
    peak: float = 0.0
    parts: list[str] = field(default_factory=list)

    def add(self, what: str, average: float, peak: float) -> None:
        self.average += average
        self.peak += peak
        self.parts.append(what)


__all__ = ["PhaseDay", "documented_peak", "phases", "sequence_of"]
