"""Labs (result interpretation) scorer: is the answer the record's result, read right?

The clinical definitions live here (what each LOINC code is, the precision a result is read
to, the thresholds), and the rules that judge one answer against the truth the task derived
(``tasks/labs.py``). Five dimensions, each a pass/fail with a reason, each applicable only
where the question asks it:

* ``abstention`` (every case): the answer says "no result" exactly when the record has no
  result that answers the question. Answering when there is none fails (the value came from
  somewhere else: a result after "today", one outside the window, another test, memory);
  abstaining when there is one fails.
* ``value`` (a result exists): the number is the answering Observation's value within the
  precision the result is read to (:data:`ANALYTES`' ``step``: HbA1c 0.1 %, eGFR 1, potassium
  0.1 mmol/L, glucose 1 mg/dL, creatinine 0.01 mg/dL, systolic and diastolic pressure
  1 mm[Hg], body weight 0.1 kg): ``|answer - value| <= step / 2``, so the record's value and
  the value rounded to its step both pass, the neighbouring reading does not. Blood pressure
  is two numbers (``systolic``, ``diastolic``, from the panel's 8480-6 / 8462-4 components);
  a change question's are the latest and the baseline values. A value is compared in the
  Observation's unit: the same quantity converted to another unit is not its value. A number
  the question does not ask for (``value`` beside ``systolic``/``diastolic``, a
  ``baseline_value`` on a question without a baseline) is a second answer and fails ``value``
  (a ``baseline_effective`` likewise fails ``date``).
* ``unit``: the UCUM code of the answer is the same unit as the Observation's (:func:`same_unit`):
  UCUM's case-sensitive grammar parsed, so ``mmol/l`` is ``mmol/L`` (``l`` and ``L`` are both
  the litre), ``mL/min`` is ``mL/min/{1.73_m2}`` (UCUM: an annotation has no effect on the
  unit; the sample data spells eGFR both ways) and ``meq/L`` is ``mmol/L`` (UCUM's
  equivalents are moles); ``mmHg``, ``mEq/L``, ``mL/min/1.73m2``, ``µmol/L``, ``MMOL/L`` are
  not UCUM codes, and a convertible but different unit (``mmol/L`` for glucose in ``mg/dL``) is
  another unit. A code longer than :data:`MAX_UCUM_LENGTH` or past a float's range fails.
* ``date``: the answering Observation's effective date (an ISO date, compared to the date as
  the record writes it; or a dateTime: the same instant, to the second). A change question
  also needs the baseline's.
* ``flag`` (threshold and change questions): true/false as the truth has it, computed from
  the record's value. The task refuses a case whose value lies within half a step of a
  threshold (the record's value and the value as read could fall on two sides), so a flag
  has one meaning.

A case passes when every dimension that applies passes. Metrics per case: ``pass``,
``abstention``, and where they apply ``value``, ``unit``, ``date``, ``flag`` and the pass of
its question kind (``latest_pass``, ``threshold_pass``, ``change_pass``) and of no-result
cases (``no_result_pass``); the summary's figures over the cases each applies to.

Gaming, as the tests try it: the earliest or any other value fails ``value`` and ``date``; a
result dated after "today" fails ``date`` (and ``value``); always abstaining fails every case
that has a result; a hedge (two values, abstaining and answering) is refused by the parser
(``tasks/labs.py``) and scores 0 everywhere, and so does a key given twice (JSON keeps the
last; a reader sees two answers); an unasked number or date beside the asked ones fails its
dimension; a key the answer does not have is refused by the parser (``unknown key: <k>``); a
number, date or flag the text around the object states beside the object's own (a second value,
another date, the opposite flag; ``tasks.labs.prose_hedges``, less the case's today and window
start) fails ``value``, ``date`` or ``flag`` (``abstention`` for an abstention); a value in another
unit fails ``value`` and ``unit``; numbers, units and JSON built
to crash or stall the reader are scored failures, never errors.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, Callable

from pytest_groundeval.model import CaseResult, MetricSpec, metric
from pytest_groundeval.scorers.aggregate import counts, rate_ci
from pytest_groundeval.scorers.base import Check, Dimension, Score, mean

LOINC = "http://loinc.org"


# ---------------------------------------------------------------- what each result is
@dataclass(frozen=True)
class Analyte:
    """A result the suite asks about: its LOINC codes (the first is the one the question
    names; others mean the same result), how it is named, and the step it is read to.
    ``components``: a panel's (name, LOINC) whose values are the answer (blood pressure)."""

    key: str
    codes: tuple[str, ...]
    name: str
    step: float
    components: tuple[tuple[str, str], ...] = ()

    @property
    def loinc(self) -> str:
        return self.codes[0]


ANALYTES: dict[str, Analyte] = {a.key: a for a in (
    Analyte("hba1c", ("4548-4",), "hemoglobin A1c", 0.1),
    Analyte("egfr", ("33914-3",), "estimated glomerular filtration rate (eGFR)", 1.0),
    Analyte("potassium", ("6298-4",), "serum potassium", 0.1),
    Analyte("glucose", ("2339-0",), "glucose", 1.0),
    Analyte("creatinine", ("38483-4",), "serum creatinine", 0.01),
    Analyte("weight", ("29463-7",), "body weight", 0.1),
    # the panel: 85354-9 in current Synthea, 55284-4 (the older panel code) in the sample data
    Analyte("bp", ("85354-9", "55284-4"), "blood pressure", 1.0,
            components=(("systolic", "8480-6"), ("diastolic", "8462-4"))),
)}


@dataclass(frozen=True)
class Criterion:
    """A threshold question: ``test(values) -> bool`` on the answering result's values
    (``{"value": x}`` or ``{"systolic": s, "diastolic": d}``); ``bounds``: per value name, the
    thresholds a value must not lie within half a step of (else the flag is ambiguous)."""

    key: str
    analyte: str
    text: str
    test: Callable[[dict[str, float]], bool]
    bounds: dict[str, tuple[float, ...]]


CRITERIA: dict[str, Criterion] = {c.key: c for c in (
    Criterion("hba1c_ge_6.5", "hba1c", "at or above 6.5 %", lambda v: v["value"] >= 6.5, {"value": (6.5,)}),
    Criterion("egfr_lt_60", "egfr", "below 60 mL/min/{1.73_m2}", lambda v: v["value"] < 60, {"value": (60.0,)}),
    Criterion("potassium_outside_3.5_5.1", "potassium", "outside 3.5-5.1 mmol/L (below 3.5 or above 5.1)",
              lambda v: v["value"] < 3.5 or v["value"] > 5.1, {"value": (3.5, 5.1)}),
    Criterion("bp_ge_140_90", "bp", "at or above 140/90 mm[Hg] (systolic at least 140 or diastolic at least 90)",
              lambda v: v["systolic"] >= 140 or v["diastolic"] >= 90, {"systolic": (140.0,), "diastolic": (90.0,)}),
)}

#: the change question: eGFR decline of more than 25 % over the 2 years up to today
CHANGE_ANALYTE = "egfr"
CHANGE_MONTHS = 24
CHANGE_DECLINE_PCT = 25.0

KINDS = ("latest", "threshold", "change")


def near_threshold(values: dict[str, float], criterion: Criterion, step: float) -> str | None:
    """Why the flag is ambiguous (a value within half a step of a threshold), or None."""
    for name, bounds in criterion.bounds.items():
        for b in bounds:
            if abs(values[name] - b) <= step / 2 + 1e-9:
                return f"{name} {values[name]:g} is within {step / 2:g} of the threshold {b:g}"
    return None


def decline_range(baseline: float, latest: float, step: float) -> tuple[float, float]:
    """The decline in percent ``(baseline - latest) / baseline * 100`` for every pair of
    readings within half a step of the two values: (lowest, highest)."""
    h = step / 2
    lo = (1 - (latest + h) / (baseline - h)) * 100 if baseline - h > 0 else -math.inf
    hi = (1 - (latest - h) / (baseline + h)) * 100
    return lo, hi


# ---------------------------------------------------------------- UCUM
_PREFIXES = {"Y": 1e24, "Z": 1e21, "E": 1e18, "P": 1e15, "T": 1e12, "G": 1e9, "M": 1e6, "k": 1e3, "h": 1e2,
             "da": 1e1, "d": 1e-1, "c": 1e-2, "m": 1e-3, "u": 1e-6, "n": 1e-9, "p": 1e-12, "f": 1e-15,
             "a": 1e-18, "z": 1e-21, "y": 1e-24}
_PA = (1000.0, {"g": 1, "m": -1, "s": -2})
#: UCUM atoms (case-sensitive codes): factor, dimension over base units, whether prefixes apply
_ATOMS: dict[str, tuple[float, dict[str, int], bool]] = {
    "m": (1.0, {"m": 1}, True), "g": (1.0, {"g": 1}, True), "s": (1.0, {"s": 1}, True),
    "K": (1.0, {"K": 1}, True), "Cel": (1.0, {"Cel": 1}, True),  # an offset scale: only itself
    "mol": (1.0, {"mol": 1}, True), "eq": (1.0, {"mol": 1}, True),
    "L": (1e-3, {"m": 3}, True), "l": (1e-3, {"m": 3}, True),
    "min": (60.0, {"s": 1}, False), "h": (3600.0, {"s": 1}, False), "d": (86400.0, {"s": 1}, False),
    "wk": (604800.0, {"s": 1}, False), "mo": (2629800.0, {"s": 1}, False), "a": (31557600.0, {"s": 1}, False),
    "%": (1e-2, {}, False), "[ppth]": (1e-3, {}, False), "[ppm]": (1e-6, {}, False),
    "U": (1e-6 / 60, {"mol": 1, "s": -1}, True), "kat": (1.0, {"mol": 1, "s": -1}, True),
    "[iU]": (1.0, {"[iU]": 1}, True), "[IU]": (1.0, {"[iU]": 1}, True),
    "Pa": (_PA[0], _PA[1], True), "bar": (1e8, _PA[1], True), "m[Hg]": (133322.0 * 1000, _PA[1], True),
    "[in_i]": (0.0254, {"m": 1}, False), "[ft_i]": (0.3048, {"m": 1}, False),
    "[lb_av]": (453.59237, {"g": 1}, False), "[oz_av]": (28.349523125, {"g": 1}, False),
    "10*": (10.0, {}, False), "10^": (10.0, {}, False),
}


class UcumError(ValueError):
    """Not a UCUM unit code (case-sensitive), or one with an atom this reader does not know."""


@dataclass(frozen=True)
class Unit:
    factor: float
    dims: tuple[tuple[str, int], ...]


def _combine(a: tuple[float, dict[str, int]], b: tuple[float, dict[str, int]], sign: int) -> tuple[float, dict[str, int]]:
    dims = dict(a[1])
    for k, v in b[1].items():
        dims[k] = dims.get(k, 0) + sign * v
    return a[0] * b[0] ** sign, {k: v for k, v in dims.items() if v}


def _atom(symbol: str, code: str) -> tuple[float, dict[str, int]]:
    m = re.fullmatch(r"(.+?)([+-]?\d+)?", symbol)
    name, exp = (m.group(1), int(m.group(2) or 1)) if m else (symbol, 1)
    if name.startswith("10*") or name.startswith("10^"):  # 10*3: ten to the third
        name, exp = name[:3], int(symbol[3:] or 1) if re.fullmatch(r"[+-]?\d+", symbol[3:] or "1") else None
        if exp is None:
            raise UcumError(f"{code!r}: {symbol!r} is not a power of ten")
    found = _ATOMS.get(name)
    if found is None:
        for p in sorted(_PREFIXES, key=len, reverse=True):
            if name.startswith(p) and name[len(p):] in _ATOMS and _ATOMS[name[len(p):]][2]:
                f, dims, _ = _ATOMS[name[len(p):]]
                found = (f * _PREFIXES[p], dims, True)
                break
    if found is None:
        raise UcumError(f"{code!r}: {name!r} is not a UCUM unit")
    f, dims, _ = found
    return f ** exp, {k: v * exp for k, v in dims.items()}


def _term(code: str, s: str, i: int, depth: int = 0) -> tuple[tuple[float, dict[str, int]], int]:
    acc: tuple[float, dict[str, int]] = (1.0, {})
    op = 1
    if i < len(s) and s[i] == "/":
        op, i = -1, i + 1
    expect = True
    while i < len(s):
        c = s[i]
        if not expect:
            if c == ")":
                break
            if c not in "./":
                raise UcumError(f"{code!r}: expected '.' or '/' at {s[i:]!r}")
            op, i, expect = (1 if c == "." else -1), i + 1, True
            continue
        if c == "(":
            inner, i = _term(code, s, i + 1, depth + 1)
            if i >= len(s) or s[i] != ")":
                raise UcumError(f"{code!r}: unbalanced parenthesis")
            i += 1
            part = inner
        elif c == "{":
            j = s.find("}", i)
            if j < 0:
                raise UcumError(f"{code!r}: unclosed annotation")
            i, part = j + 1, (1.0, {})  # an annotation alone is the unity
        else:
            m = re.match(r"(\d+)(?![*^])(?=$|[./)])", s[i:])
            if m:  # an integer factor
                part, i = (float(m.group(1)), {}), i + len(m.group(1))
            else:
                j = i
                while j < len(s) and s[j] not in "./(){":
                    if s[j] == "[":
                        k = s.find("]", j)
                        if k < 0:
                            raise UcumError(f"{code!r}: unclosed bracket")
                        j = k + 1
                    else:
                        j += 1
                if j == i:
                    raise UcumError(f"{code!r}: a unit is missing at {s[i:]!r}")
                part, i = _atom(s[i:j], code), j
                if i < len(s) and s[i] == "{":  # an annotation on the unit: no effect
                    k = s.find("}", i)
                    if k < 0:
                        raise UcumError(f"{code!r}: unclosed annotation")
                    i = k + 1
        acc = _combine(acc, part, op)
        expect = False
    if expect:
        raise UcumError(f"{code!r}: ends without a unit")
    if depth == 0 and i != len(s):
        raise UcumError(f"{code!r}: unexpected {s[i:]!r}")
    return acc, i


#: longer than any unit a result is written in; bounds the parser's work and nesting
MAX_UCUM_LENGTH = 200


def parse_ucum(code: str) -> Unit:
    """A UCUM code (case-sensitive grammar: prefixes, atoms, integer exponents, ``.`` and ``/``,
    parentheses, integer factors, ``10*n``, annotations) as a factor over base dimensions.
    A code longer than :data:`MAX_UCUM_LENGTH` or whose magnitude a float cannot hold is a
    :class:`UcumError` (an answer built to crash the reader is a failed unit, not an error)."""
    if not isinstance(code, str) or not code or code != code.strip() or " " in code:
        raise UcumError(f"{code!r}: a UCUM code is one token with no spaces")
    if len(code) > MAX_UCUM_LENGTH:
        raise UcumError(f"{code[:40]!r}...: {len(code)} characters, longer than any unit "
                        f"({MAX_UCUM_LENGTH})")
    try:
        (factor, dims), _ = _term(code, code, 0)
    except (OverflowError, RecursionError):
        raise UcumError(f"{code!r}: a magnitude no number can hold") from None
    return Unit(factor, tuple(sorted(dims.items())))


def same_unit(answer: str, truth: str) -> tuple[bool, str]:
    """Is ``answer`` the same UCUM unit as ``truth`` (same dimension, same magnitude)? And why."""
    if answer == truth:
        return True, f"{answer} as the record gives it"
    try:
        t = parse_ucum(truth)
    except UcumError:  # a record's unit this reader does not know: only its own spelling
        return False, f"{answer!r} is not the record's unit {truth!r}"
    try:
        a = parse_ucum(answer)
    except UcumError as e:
        return False, f"not a UCUM unit: {e} (the record's unit is {truth})"
    if a.dims == t.dims and math.isclose(a.factor, t.factor, rel_tol=1e-9):
        return True, f"{answer} is the same UCUM unit as the record's {truth}"
    return False, f"{answer} is not the record's unit {truth}"


# ---------------------------------------------------------------- dates
def parse_when(text: str) -> date | datetime:
    """An ISO date (``YYYY-MM-DD``) or a dateTime with a time (and an offset, else read as
    written); ValueError otherwise."""
    if not isinstance(text, str):
        raise ValueError(f"{text!r} is not an ISO date")
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
        return date.fromisoformat(text)
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})?", text):
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    raise ValueError(f"{text!r} is not an ISO date (YYYY-MM-DD) or dateTime")


def same_time(answer: str, effective: str) -> tuple[bool, str]:
    """An answer's date against an Observation's effective dateTime: a date must be the date
    the record writes; a dateTime the same instant (to the second; without an offset, the
    same wall time as written)."""
    truth_day = effective[:10]
    try:
        a = parse_when(answer)
    except ValueError as e:
        return False, str(e)
    if not isinstance(a, datetime):
        return (a.isoformat() == truth_day,
                f"{answer} is the effective date" if a.isoformat() == truth_day else f"{answer} is not {truth_day}")
    t = parse_when(effective) if "T" in effective else None
    if t is None:
        return a.date().isoformat() == truth_day, f"{answer} against the record's date {truth_day}"
    if (a.tzinfo is None) != (t.tzinfo is None):
        ok = a.replace(tzinfo=None, microsecond=0) == t.replace(tzinfo=None, microsecond=0)
    else:
        ok = a.replace(microsecond=0) == t.replace(microsecond=0)
    return ok, f"{answer} {'is' if ok else 'is not'} the effective time {effective}"


# ---------------------------------------------------------------- one answer
DIMENSIONS = ("abstention", "value", "unit", "date", "flag")


def _fmt(x: Any) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


#: the numbers and dates an answer can give (``tasks.labs.parse_answer``); a question asks some
ANSWER_NUMBERS = ("value", "systolic", "diastolic", "baseline_value")
ANSWER_DATES = ("effective", "baseline_effective")


def asked(truth: dict[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The answer's numbers and dates the question asks for: ``value`` (``systolic`` and
    ``diastolic`` for blood pressure) and ``effective``; a change question also the baseline's."""
    res = truth["result"]
    numbers = tuple(n for n in ("systolic", "diastolic") if n in res) or ("value",)
    dates: tuple[str, ...] = ("effective",)
    if truth.get("baseline") is not None:
        numbers, dates = numbers + ("baseline_value",), dates + ("baseline_effective",)
    return numbers, dates


def _unasked(pred: dict[str, Any], keys: tuple[str, ...], wanted: tuple[str, ...]) -> list[Check]:
    """A number or date the question does not ask for is a second answer (a hedge: the systolic
    as ``value`` beside ``systolic``, the earlier result as a ``baseline``): a failed check."""
    return [Check(k, False, f"{k} {_fmt(pred[k])} is given, but the question does not ask it (it asks "
                  f"{', '.join(wanted)}): one answer, not two") for k in keys if k not in wanted
            and pred.get(k) is not None]


def _value_checks(pred: dict[str, Any], truth: dict[str, Any]) -> list[Check]:
    checks = _unasked(pred, ANSWER_NUMBERS, asked(truth)[0])
    for prefix, res in (("", truth["result"]), ("baseline_", truth.get("baseline"))):
        if res is None:
            continue
        step = res["step"]
        names = [n for n in ("systolic", "diastolic") if n in res] or ["value"]
        for n in names:
            key = prefix + n
            want, got = res[n], pred.get(key)
            if got is None:
                extra = (" (a blood pressure answer gives systolic and diastolic)"
                         if n != "value" and pred.get("value") is not None else "")
                checks.append(Check(key, False, f"no {key} given{extra}; the record's is {_fmt(want)} {res['unit']}"))
                continue
            ok = abs(got - want) <= step / 2 + 1e-9 * max(1.0, abs(want))
            checks.append(Check(key, ok, f"{_fmt(got)} {'is' if ok else 'is not'} {_fmt(want)} {res['unit']} "
                                f"read to {step:g} ({res['observation']}, {res['effective'][:10]})"))
    return checks


def _date_checks(pred: dict[str, Any], truth: dict[str, Any]) -> list[Check]:
    checks = _unasked(pred, ANSWER_DATES, asked(truth)[1])
    for key, res in (("effective", truth["result"]), ("baseline_effective", truth.get("baseline"))):
        if res is None:
            continue
        got = pred.get(key)
        if got is None:
            checks.append(Check(key, False, f"no {key} given; the answering result is {res['observation']} of "
                                f"{res['effective'][:10]}"))
            continue
        ok, why = same_time(got, res["effective"])
        checks.append(Check(key, ok, f"{why} ({res['observation']})"))
    return checks


def _unit_check(pred: dict[str, Any], truth: dict[str, Any]) -> Check:
    want = truth["result"]["unit"]
    got = pred.get("unit")
    if got is None:
        return Check("unit", False, f"no unit given; the record's is {want}")
    ok, why = same_unit(got, want)
    return Check("unit", ok, why)


def _flag_check(pred: dict[str, Any], truth: dict[str, Any]) -> Check:
    want, got = truth["flag"], pred.get("flag")
    if got is None:
        return Check("flag", False, f"no flag given; the truth is {str(want).lower()} ({truth.get('why', '')})")
    return Check("flag", got == want, f"flag {str(got).lower()}, the truth is {str(want).lower()} "
                 f"({truth.get('why', '')})")


def applicable(truth: dict[str, Any]) -> tuple[str, ...]:
    """The dimensions a case's truth asks for (a truth not of this task's shape: abstention only)."""
    if not isinstance(truth, dict) or truth.get("no_result") or not isinstance(truth.get("result"), dict):
        return ("abstention",)
    return ("abstention", "value", "unit", "date") + (("flag",) if truth["kind"] in ("threshold", "change") else ())


def _hedge_checks(pred: dict[str, Any], truth: dict[str, Any], answered: tuple[str, ...]) -> dict[str, list[Check]]:
    """The prose's hedges (``tasks.labs.prose_hedges``: numbers, dates, flags the answer's text
    states beside its object), less the case's own dates (today, the window's start), as failed
    checks of the dimension each contradicts: a number ``value``, a date ``date``, a flag
    ``flag``; ``abstention`` when the answer abstained or the dimension is not asked."""
    own = {truth.get("today"), truth.get("window_start")} - {None}
    out: dict[str, list[Check]] = {}
    for h in pred.get("hedges") or []:
        values = h.get("value") if isinstance(h.get("value"), list) else [h.get("value")]
        if h.get("kind") == "date" and own & set(values):
            continue
        dim = {"date": "date", "flag": "flag"}.get(h.get("kind"), "value")
        dim = dim if dim in answered else "value" if "value" in answered else "abstention"
        out.setdefault(dim, []).append(Check(f"hedge:{h.get('kind')}", False, (
            f"the text around the answer states {h.get('kind')} {h.get('text')!r}, which the answer does not: "
            "a second answer (a hedge)")))
    return out


def score_labs(pred: dict[str, Any], truth: dict[str, Any]) -> Score:
    """One answer (``tasks.labs.parse_answer``'s dict) against the case's truth."""
    dims: dict[str, Dimension] = {}
    no_result = bool(truth.get("no_result"))
    abstained = bool(pred.get("no_result"))
    hedges = _hedge_checks(pred, truth, () if abstained or no_result else applicable(truth)[1:])
    if no_result:
        why = truth.get("why", "no result answers the question")
        dims["abstention"] = Dimension.from_checks("abstention", [Check(
            "abstention", abstained, f"{'said no result' if abstained else 'answered'}: {why}")]
            + hedges.get("abstention", []))
    else:
        dims["abstention"] = Dimension.from_checks("abstention", [Check(
            "abstention", not abstained,
            f"abstained, but the record has {truth['result']['observation']} of {truth['result']['effective'][:10]}"
            if abstained else "answered (the record has a result)")] + hedges.get("abstention", []))
        if abstained:
            for d in applicable(truth)[1:]:
                dims[d] = Dimension(passed=False, reason="abstained", checks=[Check(d, False, "abstained")])
        else:
            dims["value"] = Dimension.from_checks("value", _value_checks(pred, truth) + hedges.get("value", []))
            dims["unit"] = Dimension.from_checks("unit", [_unit_check(pred, truth)])
            dims["date"] = Dimension.from_checks("date", _date_checks(pred, truth) + hedges.get("date", []))
            if "flag" in applicable(truth):
                dims["flag"] = Dimension.from_checks("flag", [_flag_check(pred, truth)] + hedges.get("flag", []))
    passed = all(d.passed for d in dims.values())
    metrics = {name: 1.0 if d.passed else 0.0 for name, d in dims.items()}
    metrics.update(_pass_metrics(truth, passed))
    failed = [f"{name}: {d.reason}" for name, d in dims.items() if not d.passed]
    return Score(passed=passed, metrics=metrics, dimensions=dims, reason="; ".join(failed) or "correct",
                 details={"kind": truth.get("kind"), "no_result": no_result})


def _pass_metrics(truth: dict[str, Any], passed: bool) -> dict[str, float]:
    v = 1.0 if passed else 0.0
    truth = truth if isinstance(truth, dict) else {}
    out = {"pass": v}
    if truth.get("kind") in KINDS:
        out[f"{truth['kind']}_pass"] = v
    if truth.get("no_result"):
        out["no_result_pass"] = v
    return out


def unparsed(truth: dict[str, Any], reason: str) -> Score:
    """An answer that cannot be parsed: failed; every dimension the truth asks for is 0."""
    metrics = {d: 0.0 for d in applicable(truth)}
    metrics.update(_pass_metrics(truth, False))
    return Score(passed=False, metrics=metrics, details={"parse_error": reason}, reason=f"parse error: {reason}")


# ---------------------------------------------------------------- the summary
def specs() -> list[MetricSpec]:
    """``pass`` and ``abstention`` over every case; the other dimensions and the pass of each
    question kind (and of the no-result cases) over the cases each applies to (``<name>_n``)."""
    return [metric("pass", "rate"), metric("abstention", "rate")] + [
        metric(name, "rate", among="applicable")
        for name in ("value", "unit", "date", "flag", "latest_pass", "threshold_pass", "change_pass",
                     "no_result_pass")]


def summarize(results: list[CaseResult]) -> dict[str, Any]:
    """Rates over the cases (an errored case counts 0 in ``pass`` and ``abstention``); a rate
    over the applicable cases is over the scored cases whose score carries it, as every reader
    of the record computes it (``reporting/compare.py``), with their number ``<name>_n``."""
    run, summary = counts(results)
    for spec in specs():
        if spec.among == "cases":
            values = [r.metric(spec.name) for r in run]
        else:
            values = [v for r in run if (v := r.applicable_value(spec.name)) is not None]  # errored: 0
            summary[f"{spec.name}_n"] = len(values)
        summary[spec.name] = round(mean(values), 6)
        summary[f"{spec.name}_ci95"] = rate_ci(values)
    return summary


__all__ = ["ANALYTES", "ANSWER_DATES", "ANSWER_NUMBERS", "CRITERIA", "DIMENSIONS", "KINDS", "LOINC", "MAX_UCUM_LENGTH",
           "Analyte", "Criterion", "UcumError", "applicable", "asked", "decline_range", "near_threshold", "parse_ucum",
           "parse_when", "same_time", "same_unit", "score_labs", "specs", "summarize", "unparsed"]
