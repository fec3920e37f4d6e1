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

Amounts per time (:func:`read_rate`, :func:`read_ratio_per_day`) for ``rateQuantity``,
``rateRange``, ``rateRatio`` and ``maxDosePerPeriod``: a mass or volume per UCUM time
(``mg/h``, ``mL/(24.h)``, ``mg/d``; ``unit`` text like ``mg/hr`` too), converted to an amount
per day. A rate is read as continuous (x 24 h a day): the worst case, the only reading a rate
alone supports.

Doses in free text (:func:`text_doses`, for ``dosage.text`` / ``patientInstruction``): a number
with a mass or volume unit (``400 mg``, ``0.5 g``, ``ten milligrams``, ``5 mL``, ``325-650 mg``),
a count times a strength (``two 200 mg tablets``, ``2 x 5 mg``) and a count of units
(``2 tablets``, ``half a tablet``, ``2 puffs``, ``2 of them``) times the strength in force: the
last strength the text gave (``325 mg tablets, 1-2 tablets``; ``90 mcg/actuation, 2 puffs``),
else the coded product's (one plain ``N MG`` in the display for tablets / capsules,
``N MG/ACTUAT`` for puffs); a count with no strength is not a dose. Not doses: concentrations
and per-unit strengths (``2 mg/mL``, ``190 mg/dL``, ``mg/kg``), amounts per day (``mg/day``,
``per day``, ``a day``, ``in 24 hours``), and a strength that the next count in the same
sentence multiplies (``500 mg, two tablets`` = 1000 mg). An amount followed by a count can also
be the dose the count restates (``400 mg (2 tablets)`` of a 200 mg tablet), so both readings are
offered unless the amount is marked as a strength (``400 mg tablets, 2 tablets`` = 800 mg) or
the count times the product strength is not that amount. A strength not followed by a count
reads as one unit, i.e. the dose (``ibuprofen 200 mg three times a day`` says 200 mg per dose).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from pytest_groundeval.fhir.codes import GTS as GTS_SYSTEM
from pytest_groundeval.fhir.codes import UCUM as UCUM_SYSTEM

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
# Timing.repeat.dayOfWeek (R4 required binding days-of-week)
DAYS_OF_WEEK: frozenset[str] = frozenset({"mon", "tue", "wed", "thu", "fri", "sat", "sun"})
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
    value, unit, code = _quantity_parts(q, "dose", positive=None, comparator=", so it is not an exact dose")
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


# Pressure units (a blood pressure's Quantity): UCUM code -> the human spellings that name it
# (compared after case folding and dropping spaces, dots and brackets: "mm Hg", "mmHg.", "mm[Hg]")
PRESSURE_UNITS: dict[str, tuple[str, ...]] = {
    "mm[Hg]": ("mmhg", "millimetersofmercury", "millimetresofmercury", "millimeterofmercury",
               "millimetreofmercury", "torr"),
    "kPa": ("kpa", "kilopascal", "kilopascals"),
    "cm[H2O]": ("cmh2o", "cmwater", "centimetersofwater", "centimetresofwater"),
    "Pa": ("pa", "pascal", "pascals"),
}


def _folded_unit(text: str) -> str:
    return re.sub(r"[\s.\[\]()_-]+", "", text).casefold()


def unit_names_code(unit: Any, code: Any) -> str | None:
    """Why a Quantity's human ``unit`` does not name its UCUM ``code`` (None: it does, or there
    is no ``unit``). Mass, volume and pressure units are known; a ``unit`` naming another unit
    than the code, or a unit the table cannot read, is a disagreement a reader would act on."""
    if unit is None:
        return None
    if not isinstance(unit, str) or not isinstance(code, str):
        return f"unit {unit!r} beside code {code!r}"
    folded = _folded_unit(unit)
    if code in PRESSURE_UNITS:
        if folded in PRESSURE_UNITS[code] or folded == _folded_unit(code):
            return None
        other = next((c for c, names in PRESSURE_UNITS.items() if folded in names or folded == _folded_unit(c)), None)
        return (f"unit {unit!r} is {other}, not the code's {code}" if other else
                f"unit {unit!r} does not name the code's {code}")
    said = unit_text_code(unit)
    if code in UCUM_CODES and said is not None:
        return None if UCUM_CODES[said] == UCUM_CODES[code] else f"unit {unit!r} is {said}, not the code's {code}"
    return None if unit == code else f"unit {unit!r} does not name the code's {code}"


@dataclass(frozen=True)
class PerDay:
    """Administrations per day as a range (``low == high`` for a fixed schedule), averaged over
    the schedule's cycle (what a documented ``frequency_per_day`` states), and ``peak``: the
    most administrations the schedule allows on any one day, or in any 24 h for periods shorter
    than a day (see :func:`peak_from_repeat`); ``peak_source`` says how it was read;
    ``pattern_peak``: the same before a ``count`` caps it (the schedule's shape: 7 on Mondays is
    not once daily, however short the course)."""

    low: float
    high: float
    source: str
    peak: float = 0.0
    peak_source: str = ""
    pattern_peak: float = 0.0

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
    days = days if isinstance(days, list) else [days]
    bad = [d for d in days if not isinstance(d, str) or d not in DAYS_OF_WEEK]
    if bad:  # an unknown day must not count as a day (it would spread a peak day thinner)
        raise UnverifiableError(f"dayOfWeek {bad} are not days-of-week codes ({', '.join(sorted(DAYS_OF_WEEK))})")
    n_days = len(set(days))
    if n_days and max(p_days, pmax_days) <= 1:
        scale = n_days / 7
        low, high = low * scale, high * scale
        desc += f" on {n_days} days/wk"

    parts = []
    if freq is not None:
        parts.append(f"frequency {fmt(freq)}" + (f"-{fmt(freq_max)}" if freq_max is not None else ""))
    parts.append(f"per {desc}")
    if events:
        parts.append(f"events {events}")
    peak, peak_source, pattern = peak_from_repeat(repeat, max(lo_count, hi_count), min(p_days, pmax_days),
                                                  max(p_days, pmax_days), n_days, n if not generic_meal else 0)
    return PerDay(low, high, "repeat " + ", ".join(parts), peak, peak_source, pattern)


_EPS = 1e-9


def _ceil(x: float) -> int:
    """ceil, forgiving float noise (24 / (4 / 24) is 6, not 7)."""
    return math.ceil(x * (1 - _EPS) - _EPS)


def peak_from_repeat(repeat: dict[str, Any], count: float, p_min: float, p_max: float, n_days: int,
                     n_events: int) -> tuple[float, str, float]:
    """The most administrations a ``Timing.repeat`` allows on one day (in any 24 h when the
    period is shorter than a day): ``count`` administrations per period (the frequencyMax end),
    periods of ``p_min``..``p_max`` days (the shortest is the worst), ``n_days`` listed
    ``dayOfWeek`` values, ``n_events`` distinct named times of day (``when`` / ``timeOfDay``).

    * period < 1 day: ``count x ceil(24 h / period)`` in any 24 h (q4h: 6; q5h: 5; q7h: 4);
    * period <= 1 day on listed weekdays: every administration of the day falls on each listed
      day: ``frequency 7, period 1 d, dayOfWeek [mon]`` is 7 on Monday (its average is 1/day);
    * a period of a week or more on listed weekdays: the period's administrations shared by the
      listed days of that period (``ceil(count / (days x weeks))``); a period between a day and
      a week on listed weekdays: all of them on one day (nothing says otherwise);
    * otherwise a period of a day or more: spread over the period (``ceil(count / days)``; 3 a
      week is 1 a day), but named times of day put up to ``min(count, events)`` on one day;
    * ``count`` / ``countMax`` (total administrations of the course) caps the peak.

    Returns (peak, how it was read, the peak before the count cap).
    """
    if p_min < 1 - _EPS:
        peak, how = count * _ceil(1 / p_min), f"{fmt(count)} per {fmt(p_min * 24)} h, in 24 h"
    elif n_days and p_max <= 1 + _EPS:
        peak, how = count, f"{fmt(count)} on each of the {n_days} listed weekday(s)"
    elif n_days and p_min >= 7 - _EPS:
        peak, how = float(_ceil(count / (n_days * p_min / 7))), \
            f"{fmt(count)} per {fmt(p_min)} d shared by {n_days} listed weekday(s)"
    elif n_days:
        peak, how = count, f"{fmt(count)} per {fmt(p_min)} d, all on one listed weekday"
    else:
        peak = float(max(_ceil(count / p_min), min(count, n_events)))
        how = f"{fmt(count)} per {fmt(p_min)} d" + (f", {n_events} times of day" if n_events else "")
    pattern = peak
    cap = _positive(repeat.get("countMax"), "countMax") or _positive(repeat.get("count"), "count")
    if cap is not None and cap < peak:
        peak, how = cap, how + f", capped by count {fmt(cap)}"
    return peak, f"peak {fmt(peak)}/day ({how})", pattern


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
    peak = max(1.0, rate)  # BID 2, Q4H 6; QOD, WK, MO: one on the day it falls
    return PerDay(rate, rate, f"code {'/'.join(sorted(found))}", peak, f"peak {fmt(peak)}/day (code)", peak), ""


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
        if from_code.peak > from_repeat.peak:  # the worse of two readings that agree on average
            return PerDay(from_repeat.low, from_repeat.high, from_repeat.source, from_code.peak, from_code.peak_source,
                          max(from_code.pattern_peak, from_repeat.pattern_peak))
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


# --------------------------------------------------------------------------- amounts per time

# Human-readable time units (casefolded) -> the UCUM code of PERIOD_UNIT_DAYS
TIME_SYNONYMS: dict[str, str] = {
    "s": "s", "sec": "s", "second": "s", "seconds": "s",
    "min": "min", "mins": "min", "minute": "min", "minutes": "min",
    "h": "h", "hr": "h", "hrs": "h", "hour": "h", "hours": "h",
    "d": "d", "day": "d", "days": "d",
    "wk": "wk", "week": "wk", "weeks": "wk",
    "mo": "mo", "month": "mo", "months": "mo",
    "a": "a", "yr": "a", "year": "a", "years": "a",
}


def _time_days(text: Any, *, ucum_only: bool) -> float | None:
    """Days in one time unit (``h``, ``24.h``, ``(24.h)``, ``24 hours``); None if not one."""
    if not isinstance(text, str):
        return None
    t = text.strip()
    if t.startswith("(") and t.endswith(")"):
        t = t[1:-1].strip()
    m = re.fullmatch(r"(?:(\d+(?:\.\d+)?)\s*\.?\s*)?([A-Za-z]+)", t)
    if not m:
        return None
    n = float(m.group(1)) if m.group(1) else 1.0
    unit = m.group(2)
    code = unit if unit in PERIOD_UNIT_DAYS else (None if ucum_only else TIME_SYNONYMS.get(unit.casefold()))
    if code is None or n <= 0:
        return None
    return n * PERIOD_UNIT_DAYS[code]


def _quantity_parts(q: Any, what: str, *, positive: bool | None, comparator: str = "",
                    no_unit: str = "unit") -> tuple[float, Any, Any]:
    """(value, unit, code) of a Quantity that states one exact amount in UCUM, else an
    :class:`UnverifiableError` saying what is wrong with ``what`` (``positive``: > 0, >= 0
    for False, any number for None)."""
    if not isinstance(q, dict):
        raise UnverifiableError(f"{what} is not a Quantity object ({type(q).__name__})")
    value = as_number(q.get("value"))
    if value is None or (positive is not None and (value <= 0 if positive else value < 0)):
        raise UnverifiableError(f"{what} value {q.get('value')!r} is not a {'positive ' if positive else ''}number")
    if q.get("comparator") is not None:
        raise UnverifiableError(f"{what} has comparator {q.get('comparator')!r}{comparator}")
    system = q.get("system")
    if system is not None and system != UCUM_SYSTEM:
        raise UnverifiableError(f"{what} unit system {system!r} is not UCUM ({UCUM_SYSTEM})")
    unit, code = q.get("unit"), q.get("code")
    if unit is None and code is None:
        raise UnverifiableError(f"{what} {fmt(value)} has no {no_unit}")
    return value, unit, code


def read_time(q: Any, what: str = "period") -> float:
    """A FHIR Quantity of time (e.g. a Ratio denominator ``1 d`` / ``24 h``) in days."""
    value, unit, code = _quantity_parts(q, what, positive=True, no_unit="unit of time")
    by_code = _time_days(code, ucum_only=True) if code is not None else None
    if code is not None and by_code is None:
        raise UnverifiableError(f"{what} code {code!r} is not a UCUM unit of time")
    by_unit = _time_days(unit, ucum_only=False) if unit is not None else None
    if unit is not None and by_unit is None:
        raise UnverifiableError(f"{what} unit {unit!r} is not a unit of time")
    if by_code is not None and by_unit is not None and not math.isclose(by_code, by_unit, rel_tol=1e-9):
        raise UnverifiableError(f"{what} unit {unit!r} disagrees with code {code!r}")
    return value * (by_code if by_code is not None else by_unit)  # type: ignore[operator]


@dataclass(frozen=True)
class DailyAmount:
    """An amount per day: ``value`` mg/day (mass) or mL/day (volume)."""

    value: float
    kind: str

    def __str__(self) -> str:
        return f"{fmt(self.value)} {BASE_UNIT[self.kind]}/day"

    def to_mg(self, concentration_mg_per_ml: float | None) -> float | None:
        return Amount(self.value, self.kind).to_mg(concentration_mg_per_ml)


def _rate_unit(text: Any, *, ucum_only: bool) -> tuple[str, float] | None:
    """(UCUM amount code, days per unit of time) from ``mg/h``, ``mL/(24.h)``, ``mg per hour``."""
    if not isinstance(text, str):
        return None
    m = re.fullmatch(r"\s*([^/\s]+)\s*(?:/|\s+per\s+)\s*(.+?)\s*", text) if not ucum_only else \
        re.fullmatch(r"([^/\s]+)/(.+)", text)
    if not m:
        return None
    amount_code = ucum_code(m.group(1)) if ucum_only else unit_text_code(m.group(1))
    days = _time_days(m.group(2), ucum_only=ucum_only)
    if amount_code is None or days is None:
        return None
    return amount_code, days


def read_rate(q: Any) -> DailyAmount:
    """A rate Quantity (``{"value": 200, "unit": "mg/h"}``) as an amount per day (continuous)."""
    value, unit, code = _quantity_parts(q, "rate", positive=False, comparator=", so it is not an exact rate")
    by_code = _rate_unit(code, ucum_only=True) if code is not None else None
    if code is not None and by_code is None:
        raise UnverifiableError(f"rate code {code!r} is not a UCUM mass or volume per time")
    by_unit = _rate_unit(unit, ucum_only=False) if unit is not None else None
    if unit is not None and by_unit is None:
        raise UnverifiableError(f"rate unit {unit!r} is not a mass or volume per time")
    if by_code and by_unit:
        (c1, d1), (c2, d2) = by_code, by_unit
        if UCUM_CODES[c1] != UCUM_CODES[c2] or not math.isclose(d1, d2, rel_tol=1e-9):
            raise UnverifiableError(f"rate unit {unit!r} disagrees with code {code!r}")
    amount_code, days = by_code or by_unit  # type: ignore[misc]
    a = amount(value, amount_code)
    return DailyAmount(a.value / days, a.kind)


def read_ratio_per_day(r: Any, what: str = "ratio") -> DailyAmount:
    """A Ratio of an amount to a time (``500 mg / 1 d``, ``650 mg / 4 h``) as an amount per day."""
    if not isinstance(r, dict):
        raise UnverifiableError(f"{what} is not a Ratio object ({type(r).__name__})")
    if r.get("numerator") is None:
        raise UnverifiableError(f"{what} has no numerator (amount)")
    if r.get("denominator") is None:
        raise UnverifiableError(f"{what} has no denominator (per what period?)")
    a = read_quantity(r["numerator"])
    days = read_time(r["denominator"], f"{what} denominator")
    return DailyAmount(a.value / days, a.kind)


# --------------------------------------------------------------------------- doses in free text

_WORD_NUMBERS: dict[str, float] = {
    "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "half": 0.5, "½": 0.5, "1/2": 0.5,
    "one-half": 0.5, "one half": 0.5, "a": 1, "an": 1,
}
_WORDS = "one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve"
_NUM = rf"(?:\d{{1,3}}(?:,\d{{3}})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+|(?:{_WORDS})(?![a-z]))"
_COUNT_NUM = rf"(?:one[- ]half|half|½|1/2|[1-9]|1[0-2]|(?:{_WORDS})(?![a-z]))"
_SEP = r"\s*(?:-|–|—|to|or)\s*"
_MASS_VOL = (r"(?:mg|mcg|µg|μg|ug|gm|g|grams?|milligrams?|micrograms?|ml|milliliters?|millilitres?)"
             r"(?![\w/])")
_TABLET_UNITS = r"tablets?|tabs?|capsules?|caps?|caplets?|pills?"
_ACTUATION_UNITS = r"puffs?|inhalations?|actuations?|actuation|sprays?"
_PER_UNIT = (rf"(?:(?:{_TABLET_UNITS}|{_ACTUATION_UNITS})(?![a-z])|ml|milliliters?|millilitres?|l|dl|kg|m2"
             r"|teaspoons?|tsp|cc)(?![a-z0-9])")
_B = r"(?<![\w.,/])"  # a number starts a token: not q8h, x2, 1.5.2, 2026/05
_PER_UNIT_RE = re.compile(
    rf"{_B}(?P<v>{_NUM})\s*(?P<u>(?:mg|mcg|µg|μg|ug|gm|g|grams?|milligrams?|micrograms?))\s*"
    rf"(?:/|\bper\b)\s*(?:(?:an?|one|1)\s*)?(?P<dn>\d+(?:\.\d+)?\s*)?(?P<du>{_PER_UNIT})", re.I)
_COMPOSITE_RE = re.compile(
    rf"{_B}(?P<n>{_COUNT_NUM})(?:{_SEP}(?P<m>{_COUNT_NUM}))?(?:\s*[x×]\s*|\s+)"
    rf"(?P<v>{_NUM})\s*(?P<u>{_MASS_VOL})", re.I)
_COUNT_RE = re.compile(
    rf"(?<![\w.,/])(?P<n>{_COUNT_NUM}|an?)(?:{_SEP}(?P<m>{_COUNT_NUM}))?\s+(?:of\s+)?(?:an?\s+)?"
    rf"(?P<u>(?:{_TABLET_UNITS}|{_ACTUATION_UNITS}|them|those|these)(?![a-z]))", re.I)
_AMOUNT_RE = re.compile(rf"{_B}(?P<v>{_NUM})(?:{_SEP}(?P<w>{_NUM}))?\s*(?P<u>{_MASS_VOL})", re.I)
_DAILY_AFTER = re.compile(
    r"\s*(?:/\s*|\bper\s+|\ban?\s+|\bin\s+(?:an?\s+|any\s+|one\s+)?|\bover\s+(?:an?\s+)?|\bwithin\s+(?:an?\s+)?)"
    r"(?:24\s*-?\s*(?:h|hrs?|hours?)\b|d\b|days?\b)", re.I)
_TABLET_CLASS, _ACTUATION_CLASS = "unit", "actuation"
# "325 mg tablets", "81 mg oral tablet", "500 mg immediate-release tablet": the amount is a strength
_STRENGTH_MARK = re.compile(rf"\s*(?:[\w-]+\s+){{0,2}}?(?:{_TABLET_UNITS})(?![a-z])", re.I)


def _num_value(token: str) -> float:
    t = " ".join(token.casefold().split())
    if t in _WORD_NUMBERS:
        return float(_WORD_NUMBERS[t])
    return float(t.replace(",", ""))


def _unit_class(unit: str) -> str:
    return _ACTUATION_CLASS if re.fullmatch(_ACTUATION_UNITS, unit, re.I) else _TABLET_CLASS


def product_strengths(display: Any) -> dict[str, Amount]:
    """Strength per unit of the coded product, from its RxNorm display, where it is unambiguous.

    ``Ibuprofen 200 MG Oral Tablet`` -> a tablet / capsule is 200 mg; ``... 0.09 MG/ACTUAT
    Metered Dose Inhaler`` -> a puff is 0.09 mg. Two strengths, or a concentration (``2 MG/ML``):
    none for tablets.
    """
    out: dict[str, Amount] = {}
    if not isinstance(display, str):
        return out
    act = re.findall(r"(\d+(?:\.\d+)?)\s*(MG|MCG)\s*/\s*ACTUAT", display, re.I)
    if len(act) == 1:
        out[_ACTUATION_CLASS] = amount(float(act[0][0]), unit_text_code(act[0][1]) or "mg")
    if "/" not in display:
        plain = re.findall(r"(?<![\w.])(\d+(?:\.\d+)?)\s*(MG|MCG|G)(?![A-Za-z])", display, re.I)
        if len(plain) == 1:
            out[_TABLET_CLASS] = amount(float(plain[0][0]), unit_text_code(plain[0][1]) or "mg")
    return out


@dataclass(frozen=True)
class TextDose:
    """A per-administration dose a free text states: ``low``-``high`` and the words that say it;
    ``alternatives``: other (low, high) readings of the same words (see the module doc)."""

    low: Amount
    high: Amount
    snippet: str
    alternatives: tuple[tuple[Amount, Amount], ...] = ()

    def readings(self) -> list[tuple[Amount, Amount]]:
        return [(self.low, self.high), *self.alternatives]

    def __str__(self) -> str:
        if math.isclose(self.low.value, self.high.value, rel_tol=1e-9):
            return str(self.low)
        return f"{fmt(self.low.value)}-{self.high}"


def _blank(text: str, m: re.Match[str]) -> str:
    return text[: m.start()] + " " * (m.end() - m.start()) + text[m.end():]


def text_doses(text: Any, strengths: dict[str, Amount] | None = None) -> list[TextDose]:
    """The per-administration doses a free text states (see the module doc); [] if none."""
    if not isinstance(text, str) or not text.strip():
        return []
    work = text
    events: list[tuple[int, str, Any]] = []  # (position, kind, payload)

    def span(m: re.Match[str]) -> str:
        return " ".join(text[m.start(): m.end()].split())

    def daily(m: re.Match[str]) -> bool:
        return _DAILY_AFTER.match(work, m.end()) is not None

    # per-unit strengths and concentrations: never a dose; per tablet / per puff sets a strength
    for m in list(_PER_UNIT_RE.finditer(work)):
        du = m.group("du")
        if re.fullmatch(rf"{_TABLET_UNITS}|{_ACTUATION_UNITS}", du, re.I) and not m.group("dn"):
            a = amount(_num_value(m.group("v")), unit_text_code(m.group("u")) or "mg")
            events.append((m.start(), "strength", (_unit_class(du), a)))
        work = _blank(work, m)
    # a count times a strength: "two 200 mg tablets", "2 x 5 mg"
    for m in list(_COMPOSITE_RE.finditer(work)):
        if not daily(m):
            a = amount(_num_value(m.group("v")), unit_text_code(m.group("u")) or "mg")
            lo = _num_value(m.group("n"))
            hi = _num_value(m.group("m")) if m.group("m") else lo
            events.append((m.start(), "dose", TextDose(Amount(a.value * lo, a.kind), Amount(a.value * hi, a.kind),
                                                       span(m))))
        work = _blank(work, m)
    for m in list(_COUNT_RE.finditer(work)):
        if not daily(m):
            lo = _num_value(m.group("n"))
            hi = _num_value(m.group("m")) if m.group("m") else lo
            events.append((m.start(), "count", (_unit_class(m.group("u")), lo, hi, span(m), m.end())))
        work = _blank(work, m)
    for m in list(_AMOUNT_RE.finditer(work)):
        if not daily(m):
            code = unit_text_code(m.group("u"))
            if code is not None:
                lo = amount(_num_value(m.group("v")), code)
                hi = amount(_num_value(m.group("w")), code) if m.group("w") else lo
                marked = _STRENGTH_MARK.match(work, m.end()) is not None
                events.append((m.start(), "amount", (lo, hi, span(m), m.end(), marked)))
        work = _blank(work, m)

    events.sort(key=lambda e: e[0])
    product = dict(strengths or {})
    current = dict(product)
    found: list[TextDose] = []
    restated: tuple[Amount, bool] | None = None  # (amount, marked) the next count may restate
    for i, (_pos, kind, payload) in enumerate(events):
        if kind == "dose":
            found.append(payload)
        elif kind == "strength":
            cls, a = payload
            current[cls] = a
        elif kind == "amount":
            lo, hi, snippet, end, marked = payload
            nxt = events[i + 1] if i + 1 < len(events) else None
            if (nxt is not None and nxt[1] == "count" and nxt[2][0] == _TABLET_CLASS and lo == hi
                    and nxt[0] - end <= 60 and not re.search(r"[.;]\s|\n", text[end: nxt[0]])):
                current[_TABLET_CLASS] = lo  # "500 mg, two tablets": the strength the count multiplies
                restated = (lo, marked)
            else:
                found.append(TextDose(lo, hi, snippet))
        elif kind == "count":
            cls, n_lo, n_hi, snippet, _end = payload
            s = current.get(cls)
            alternatives: tuple[tuple[Amount, Amount], ...] = ()
            if restated is not None and cls == _TABLET_CLASS:
                a, marked = restated
                p = product.get(cls)
                if not marked and n_lo == n_hi and (p is None or (p.kind == a.kind and math.isclose(
                        p.value * n_lo, a.value, rel_tol=1e-6))):
                    alternatives = ((a, a),)  # "400 mg (2 tablets)": the amount is the dose, restated
            restated = None
            if s is not None:
                found.append(TextDose(Amount(s.value * n_lo, s.kind), Amount(s.value * n_hi, s.kind), snippet,
                                      alternatives))
    return found
