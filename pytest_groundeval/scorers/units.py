"""Reading doses and schedules out of FHIR R4 Quantity / Timing, for the write scorer.

Two jobs, both deterministic and dependency-free:

* :func:`read_quantity` turns a FHIR ``Quantity`` (``{"value", "unit", "code", "system"}``)
  into a :class:`Amount` in a base unit: mass in mg, volume in mL. ``unit`` (display text)
  and ``code`` (UCUM) must agree when both are present; a ``system`` other than UCUM, a
  missing unit, a comparator or a non-mass / non-volume unit (``tablet``) makes the dose
  unverifiable: :class:`UnverifiableError` with a readable reason.
* :func:`per_day` turns a FHIR ``Timing`` into administrations per day as a
  :class:`PerDay` range (min, max), from ``repeat`` (frequency[Max] per period[Max] in any
  UCUM time unit, ``when`` / ``timeOfDay`` events, ``dayOfWeek``) or from ``code`` (v3
  GTSAbbreviation: BID, TID, Q6H ...). When both are given they must agree.

Interpretation rules (documented because FHIR leaves room):

* ``frequency`` defaults to 1 when a period is given (FHIR's meaning-when-missing).
* ``when`` / ``timeOfDay`` values are events within a day; without a period the period is
  1 day. FHIR defines ``frequency`` as the number of times *per period*, so
  ``frequency 2, period 1 d, when [MORN, EVE]`` is 2 a day, not 4; ``frequency 1`` (or none)
  with n events is n a day; a frequency other than 1 or n with n > 1 events is ambiguous and
  therefore unverifiable. Generic meal codes (C, AC, PC, IC: "with meals") don't say how many
  meals, so they need an explicit frequency.
* ``dayOfWeek`` scales a daily (or shorter) period by days/7; with a weekly or longer
  period it only says which day.
* ``count`` (total repetitions of a course), ``duration``, ``bounds`` and ``offset`` don't
  change the per-day rate and are ignored.
* ``mo`` and ``a`` are UCUM's mean Julian month (30.4375 d) and year (365.25 d).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

UCUM_SYSTEM = "http://unitsofmeasure.org"
GTS_SYSTEM = "http://terminology.hl7.org/CodeSystem/v3-GTSAbbreviation"

MASS, VOLUME = "mass", "volume"
BASE_UNIT = {MASS: "mg", VOLUME: "mL"}

# UCUM codes (case-sensitive) -> (dimension, factor to the base unit)
UCUM_CODES: dict[str, tuple[str, float]] = {
    "ng": (MASS, 1e-6),
    "ug": (MASS, 1e-3),
    "mg": (MASS, 1.0),
    "g": (MASS, 1000.0),
    "kg": (MASS, 1e6),
    "uL": (VOLUME, 1e-3),
    "ul": (VOLUME, 1e-3),
    "mL": (VOLUME, 1.0),
    "ml": (VOLUME, 1.0),
    "cL": (VOLUME, 10.0),
    "cl": (VOLUME, 10.0),
    "dL": (VOLUME, 100.0),
    "dl": (VOLUME, 100.0),
    "L": (VOLUME, 1000.0),
    "l": (VOLUME, 1000.0),
}

# Human-readable ``Quantity.unit`` spellings (matched case-insensitively) -> UCUM code
UNIT_SYNONYMS: dict[str, str] = {
    "ng": "ng", "nanogram": "ng", "nanograms": "ng",
    "ug": "ug", "mcg": "ug", "µg": "ug", "μg": "ug", "microgram": "ug", "micrograms": "ug",
    "mg": "mg", "milligram": "mg", "milligrams": "mg",
    "g": "g", "gm": "g", "gram": "g", "grams": "g",
    "kg": "kg", "kilogram": "kg", "kilograms": "kg",
    "ul": "uL", "µl": "uL", "μl": "uL", "microliter": "uL", "microliters": "uL",
    "microlitre": "uL", "microlitres": "uL",
    "ml": "mL", "milliliter": "mL", "milliliters": "mL", "millilitre": "mL", "millilitres": "mL",
    "cl": "cL", "dl": "dL",
    "l": "L", "liter": "L", "liters": "L", "litre": "L", "litres": "L",
}

# Timing.repeat.periodUnit (UCUM units of time, R4 required binding) -> days
PERIOD_UNIT_DAYS: dict[str, float] = {
    "s": 1 / 86400,
    "min": 1 / 1440,
    "h": 1 / 24,
    "d": 1.0,
    "wk": 7.0,
    "mo": 30.4375,
    "a": 365.25,
}

# v3 GTSAbbreviation (the R4 TimingAbbreviation value set) -> administrations per day.
# Q12H is not in the code system but is common enough that refusing it would be pedantic.
GTS_PER_DAY: dict[str, float] = {
    "QD": 1, "AM": 1, "PM": 1, "BED": 1,
    "BID": 2, "TID": 3, "QID": 4,
    "QOD": 0.5,
    "Q1H": 24, "Q2H": 12, "Q3H": 8, "Q4H": 6, "Q6H": 4, "Q8H": 3, "Q12H": 2,
    "WK": 1 / 7, "MO": 1 / 30.4375,
}

# R4 EventTiming (required binding of Timing.repeat.when): FHIR's codes + v3 TimingEvent
EVENT_TIMING: frozenset[str] = frozenset({
    "MORN", "MORN.early", "MORN.late", "NOON", "AFT", "AFT.early", "AFT.late",
    "EVE", "EVE.early", "EVE.late", "NIGHT", "PHS",
    "HS", "WAKE", "C", "CM", "CD", "CV", "AC", "ACM", "ACD", "ACV", "PC", "PCM", "PCD", "PCV",
    "IC", "ICM", "ICD", "ICV",
})
# "with / before / after / between meals" without saying which meal: count unknown
GENERIC_MEAL_EVENTS: frozenset[str] = frozenset({"C", "AC", "PC", "IC"})


class UnverifiableError(ValueError):
    """A dose or schedule that cannot be read unambiguously; ``str(e)`` is the reason."""


def fmt(x: float | None) -> str:
    """Short human-readable number: 400, 0.5, 0.142857, 25500."""
    if x is None:
        return "?"
    return f"{x:.6g}"


def as_number(value: Any) -> float | None:
    """A finite number from a FHIR decimal / integer (JSON number or numeric string), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float, Decimal)):
        f = float(value)
    elif isinstance(value, str):
        try:
            f = float(value.strip())
        except ValueError:
            return None
    else:
        return None
    return f if math.isfinite(f) else None


@dataclass(frozen=True)
class Amount:
    """An amount in a base unit: ``value`` mg for mass, mL for volume."""

    value: float
    kind: str  # MASS | VOLUME

    @property
    def unit(self) -> str:
        return BASE_UNIT[self.kind]

    def __str__(self) -> str:
        return f"{fmt(self.value)} {self.unit}"

    def to_mg(self, concentration_mg_per_ml: float | None) -> float | None:
        """Mass in mg; volume converted via the concentration (None if there is none)."""
        if self.kind == MASS:
            return self.value
        if concentration_mg_per_ml is None:
            return None
        return self.value * concentration_mg_per_ml


def ucum_code(code: Any) -> str | None:
    """The canonical UCUM code if ``code`` is a known UCUM mass / volume code (case-sensitive)."""
    return code if isinstance(code, str) and code in UCUM_CODES else None


def unit_text_code(unit: Any) -> str | None:
    """The UCUM code a human-readable ``Quantity.unit`` means, if recognised."""
    if not isinstance(unit, str):
        return None
    u = unit.strip()
    if u in UCUM_CODES:
        return u
    return UNIT_SYNONYMS.get(u.casefold())


def amount(value: float, code: str) -> Amount:
    """An :class:`Amount` from a value and a UCUM code (ground truth side; raises on unknown)."""
    if code not in UCUM_CODES:
        raise UnverifiableError(f"unit {code!r} is not a UCUM mass or volume code")
    kind, factor = UCUM_CODES[code]
    return Amount(value * factor, kind)


def read_quantity(q: Any) -> Amount:
    """Read a FHIR Quantity as an :class:`Amount`; raise :class:`UnverifiableError` otherwise."""
    if not isinstance(q, dict):
        raise UnverifiableError(f"dose is not a Quantity object ({type(q).__name__})")
    value = as_number(q.get("value"))
    if value is None:
        raise UnverifiableError(f"dose value {q.get('value')!r} is not a number")
    if q.get("comparator") is not None:
        raise UnverifiableError(f"dose has comparator {q.get('comparator')!r}, so it is not an exact dose")
    system = q.get("system")
    if system is not None and system != UCUM_SYSTEM:
        raise UnverifiableError(f"unit system {system!r} is not UCUM ({UCUM_SYSTEM})")
    unit, code = q.get("unit"), q.get("code")
    if unit is None and code is None:
        raise UnverifiableError(f"dose {fmt(value)} has no unit")
    code_ucum = None
    if code is not None:
        code_ucum = ucum_code(code)
        if code_ucum is None:
            raise UnverifiableError(f"code {code!r} is not a UCUM mass or volume unit")
    unit_ucum = None
    if unit is not None:
        unit_ucum = unit_text_code(unit)
        if unit_ucum is None:
            shown = f" (code {code!r})" if code is not None else ""
            raise UnverifiableError(f"unit {unit!r}{shown} is not a mass or volume unit")
    if code_ucum and unit_ucum and UCUM_CODES[code_ucum] != UCUM_CODES[unit_ucum]:
        raise UnverifiableError(f"unit {unit!r} disagrees with code {code!r}")
    return amount(value, code_ucum or unit_ucum)  # type: ignore[arg-type]


@dataclass(frozen=True)
class PerDay:
    """Administrations per day as a range (``low == high`` for a fixed schedule)."""

    low: float
    high: float
    source: str

    def __str__(self) -> str:
        if math.isclose(self.low, self.high, rel_tol=1e-9):
            return f"{fmt(self.low)}/day"
        return f"{fmt(self.low)}-{fmt(self.high)}/day"


def _positive(value: Any, name: str) -> float | None:
    if value is None:
        return None
    n = as_number(value)
    if n is None or n <= 0:
        raise UnverifiableError(f"repeat.{name} {value!r} is not a positive number")
    return n


def _events_count(freq: float | None, n: int, generic_meal: bool, events: list[str]) -> float:
    """Administrations per period from a frequency and n within-day events (see module doc)."""
    if n == 0:
        return freq if freq is not None else 1.0
    if generic_meal:
        if freq is None:
            raise UnverifiableError(f"when {events} (any meal) does not say how many times a day")
        return freq
    if freq is None or freq == 1 or freq == n:
        return float(n)
    if n == 1:
        return freq
    raise UnverifiableError(f"frequency {fmt(freq)} contradicts the {n} events {events}")


def per_day_from_repeat(repeat: Any) -> PerDay | None:
    """Per-day range from ``Timing.repeat``; None if it carries no rate at all."""
    if not isinstance(repeat, dict):
        raise UnverifiableError("timing.repeat is not an object")
    freq = _positive(repeat.get("frequency"), "frequency")
    freq_max = _positive(repeat.get("frequencyMax"), "frequencyMax")
    period = _positive(repeat.get("period"), "period")
    period_max = _positive(repeat.get("periodMax"), "periodMax")
    when = repeat.get("when") or []
    time_of_day = repeat.get("timeOfDay") or []
    if not isinstance(when, list):
        when = [when]
    if not isinstance(time_of_day, list):
        time_of_day = [time_of_day]
    events = [str(w) for w in when] + [str(t) for t in time_of_day]
    n = len(set(events))
    generic_meal = any(w in GENERIC_MEAL_EVENTS for w in when)

    if freq is None and freq_max is None and period is None and period_max is None and not events:
        return None
    if period is not None:
        unit = repeat.get("periodUnit")
        if unit not in PERIOD_UNIT_DAYS:
            if unit is None:
                raise UnverifiableError(f"period {fmt(period)} has no periodUnit")
            raise UnverifiableError(f"periodUnit {unit!r} is not a UCUM unit of time")
        p_days = period * PERIOD_UNIT_DAYS[unit]
        pmax_days = period_max * PERIOD_UNIT_DAYS[unit] if period_max is not None else p_days
        desc = f"{fmt(period)}" + (f"-{fmt(period_max)}" if period_max is not None else "") + f" {unit}"
    elif period_max is not None:
        raise UnverifiableError("periodMax without period")
    elif events:
        p_days = pmax_days = 1.0
        desc = "1 d (events)"
    else:
        raise UnverifiableError(f"frequency {fmt(freq)} without a period (per what?)")

    lo_count = _events_count(freq, n, generic_meal, events)
    hi_count = _events_count(freq_max if freq_max is not None else freq, n, generic_meal, events)
    low = min(lo_count, hi_count) / max(p_days, pmax_days)
    high = max(lo_count, hi_count) / min(p_days, pmax_days)

    days = repeat.get("dayOfWeek") or []
    if isinstance(days, list) and days and max(p_days, pmax_days) <= 1:
        scale = len(set(map(str, days))) / 7
        low, high = low * scale, high * scale
        desc += f" on {len(set(map(str, days)))} days/wk"

    parts = []
    if freq is not None:
        parts.append(f"frequency {fmt(freq)}" + (f"-{fmt(freq_max)}" if freq_max is not None else ""))
    parts.append(f"per {desc}")
    if events:
        parts.append(f"events {events}")
    return PerDay(low, high, "repeat " + ", ".join(parts))


def per_day_from_code(code: Any) -> tuple[PerDay | None, str]:
    """Per-day rate from ``Timing.code`` (GTSAbbreviation); (None, why) if not recognised."""
    if not isinstance(code, dict):
        return None, "timing.code is not a CodeableConcept"
    codings = code.get("coding") or []
    if not isinstance(codings, list):
        codings = [codings]
    found: dict[str, float] = {}
    for c in codings:
        if not isinstance(c, dict):
            continue
        system, value = c.get("system"), c.get("code")
        if system not in (None, GTS_SYSTEM) or not isinstance(value, str):
            continue
        if value in GTS_PER_DAY:
            found[value] = GTS_PER_DAY[value]
    if not found:
        shown = [c.get("code") for c in codings if isinstance(c, dict)] or code.get("text")
        return None, f"timing.code {shown!r} is not a recognised GTSAbbreviation"
    rates = set(found.values())
    if len(rates) > 1:
        raise UnverifiableError(f"timing.code codings disagree: {sorted(found)}")
    rate = rates.pop()
    return PerDay(rate, rate, f"code {'/'.join(sorted(found))}"), ""


def per_day(timing: Any) -> PerDay:
    """Administrations per day from a FHIR Timing; raise :class:`UnverifiableError` otherwise."""
    if timing is None:
        raise UnverifiableError("no timing")
    if not isinstance(timing, dict):
        raise UnverifiableError(f"timing is not an object ({type(timing).__name__})")
    from_repeat = per_day_from_repeat(timing["repeat"]) if timing.get("repeat") is not None else None
    from_code, why = (None, "")
    if timing.get("code") is not None:
        from_code, why = per_day_from_code(timing["code"])
    if from_repeat is not None and from_code is not None:
        same = math.isclose(from_repeat.low, from_code.low, rel_tol=1e-3) and math.isclose(
            from_repeat.high, from_code.high, rel_tol=1e-3
        )
        if not same:
            raise UnverifiableError(
                f"timing.{from_code.source} ({from_code}) contradicts {from_repeat.source} ({from_repeat})"
            )
        return from_repeat
    if from_repeat is not None:
        return from_repeat
    if from_code is not None:
        return from_code
    if why:
        raise UnverifiableError(why)
    if timing.get("event"):
        raise UnverifiableError("timing lists only event dates, no repeating schedule")
    raise UnverifiableError("timing has no frequency, period, when or code")
