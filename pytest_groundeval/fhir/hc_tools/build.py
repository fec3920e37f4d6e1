"""Building a MedicationStatement from flat arguments: the build tool (eval-free).

:func:`build_medication_statement` goes through ``healthchain.fhir.create_medication_statement``
/ ``create_dosage`` and finishes what those helpers do not cover (UCUM system/code on
quantities, dose ranges, frequency ranges, non-daily periods, notes), then validates the
result. Each argument group is checked by its own function, in the order the agent reads the
errors: identity, dose, frequency, the rest.
"""

from __future__ import annotations

import math
import re
from typing import Any, Dict, List, Optional, Tuple, Union

from pytest_groundeval.fhir.codes import MEDICATION_STATEMENT_STATUSES as R4B_MEDICATION_STATEMENT_STATUSES
from pytest_groundeval.fhir.codes import RXNORM as RXNORM_SYSTEM
from pytest_groundeval.fhir.codes import UCUM as UCUM_SYSTEM
from pytest_groundeval.fhir.hc_tools.catalog import Catalog, CatalogArg, _resolve_catalog
from pytest_groundeval.fhir.hc_tools.validate import validate_medication_statement

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


class _Invalid(Exception):
    """An argument the agent must fix; its message is the tool's error value."""


def _build(
    subject, status, rxnorm_code, display, dose_value, dose_unit, frequency_per_day,
    as_needed, dose_value_max, frequency_per_day_max, note_text, catalog,
) -> Dict[str, Any]:
    try:
        subject, rxnorm_code, display = _identity(subject, status, rxnorm_code, display)
        _check_dose(dose_value, dose_unit, dose_value_max, frequency_per_day, frequency_per_day_max)
        repeat = _repeat(frequency_per_day, frequency_per_day_max)
        if as_needed is not None and not isinstance(as_needed, bool):
            raise _Invalid(f"as_needed must be true, false or null, got {as_needed!r}")
        if note_text is not None and not isinstance(note_text, str):
            raise _Invalid("note_text must be a string")
    except _Invalid as exc:
        return _error(str(exc))

    with_dosage = dose_value is not None or repeat is not None or as_needed is not None
    resource = _create(subject, status, rxnorm_code, display, dose_value, dose_unit, repeat, as_needed, with_dosage)
    if with_dosage:
        _finish_dosage(resource["dosage"][0], dose_value, dose_unit, dose_value_max, repeat)
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


def _identity(subject: Any, status: Any, rxnorm_code: Any, display: Any) -> Tuple[str, str, str]:
    """The subject, RxNorm code and display, stripped; raises :class:`_Invalid` for a bad
    subject, a status outside R4B's, a code that is not an RXCUI, a missing display."""
    if not isinstance(subject, str) or not re.fullmatch(r"(Patient|Group)/[A-Za-z0-9\-.]{1,64}", subject.strip()):
        raise _Invalid("subject must be a reference like 'Patient/<id>'")
    if status not in R4B_MEDICATION_STATEMENT_STATUSES:
        hint = " (R5's 'recorded' is not an R4B code; use 'active' for a current medication)" if status == "recorded" else ""
        raise _Invalid(
            f"status '{status}' is not an R4B MedicationStatement status{hint}; "
            f"use one of: {', '.join(R4B_MEDICATION_STATEMENT_STATUSES)}"
        )
    if isinstance(rxnorm_code, int) and not isinstance(rxnorm_code, bool):
        rxnorm_code = str(rxnorm_code)
    if not isinstance(rxnorm_code, str) or not re.fullmatch(r"\d{1,10}", rxnorm_code.strip()):
        raise _Invalid("rxnorm_code must be a numeric RxNorm code (RXCUI) such as '310965'; use lookup_medication_code")
    if not isinstance(display, str) or not display.strip():
        raise _Invalid("display is required: pass the catalog display returned by lookup_medication_code")
    return subject.strip(), rxnorm_code.strip(), display.strip()


def _check_dose(dose_value: Any, dose_unit: Any, dose_value_max: Any,
                frequency_per_day: Any, frequency_per_day_max: Any) -> None:
    """Raises :class:`_Invalid` for a number that is not one, a unit or maximum without a
    dose, a dose without a UCUM unit, a dose not positive, a maximum below the dose."""
    for name, value in (("dose_value", dose_value), ("dose_value_max", dose_value_max),
                        ("frequency_per_day", frequency_per_day), ("frequency_per_day_max", frequency_per_day_max)):
        if value is not None and not _is_number(value):
            raise _Invalid(f"{name} must be a number, got {value!r}")
    if dose_value is None and dose_unit is not None:
        raise _Invalid("dose_unit given without dose_value")
    if dose_value is None and dose_value_max is not None:
        raise _Invalid("dose_value_max given without dose_value (the lower end of the range)")
    if dose_value is None:
        return
    if dose_unit is None:
        raise _Invalid("dose_value needs a dose_unit (UCUM code such as 'mg' or 'mL')")
    unit_error = _check_unit(dose_unit)
    if unit_error:
        raise _Invalid(unit_error)
    if dose_value <= 0:
        raise _Invalid(f"dose_value must be positive, got {dose_value}")
    if dose_value_max is not None and dose_value_max < dose_value:
        raise _Invalid(f"dose_value_max ({dose_value_max}) is below dose_value ({dose_value})")


def _repeat(frequency_per_day: Optional[float], frequency_per_day_max: Optional[float]) -> Optional[Dict[str, Any]]:
    """Timing.repeat for the frequency (None: no frequency); raises :class:`_Invalid` for a
    maximum without a frequency, a frequency not positive, a maximum below it, or one that
    cannot be written as whole administrations per period."""
    if frequency_per_day is None and frequency_per_day_max is not None:
        raise _Invalid("frequency_per_day_max given without frequency_per_day (the lower end of the range)")
    if frequency_per_day is None:
        return None
    if frequency_per_day <= 0:
        raise _Invalid(f"frequency_per_day must be positive, got {frequency_per_day}")
    if frequency_per_day_max is not None and frequency_per_day_max < frequency_per_day:
        raise _Invalid(f"frequency_per_day_max ({frequency_per_day_max}) is below frequency_per_day ({frequency_per_day})")
    timing = _timing(float(frequency_per_day), None if frequency_per_day_max is None else float(frequency_per_day_max))
    if isinstance(timing, str):
        raise _Invalid(timing)
    return timing


def _create(subject: str, status: str, rxnorm_code: str, display: str, dose_value: Optional[float],
            dose_unit: Optional[str], repeat: Optional[Dict[str, Any]], as_needed: Optional[bool],
            with_dosage: bool) -> Dict[str, Any]:
    """The MedicationStatement as HealthChain's ``create_medication_statement`` /
    ``create_dosage`` build it, in its JSON form (``with_dosage``: one dosage)."""
    from healthchain.fhir import create_dosage, create_medication_statement

    dosage = None
    if with_dosage:
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
    return statement.model_dump(mode="json", exclude_none=True)


def _finish_dosage(dose_entry: Dict[str, Any], dose_value: Optional[float], dose_unit: Optional[str],
                   dose_value_max: Optional[float], repeat: Optional[Dict[str, Any]]) -> None:
    """What ``create_dosage`` leaves out, on the JSON form: it sets only value/unit on
    doseQuantity (UCUM system and code added here) and has no dose ranges or frequencyMax."""
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



__all__ = ["UCUM_DOSE_UNITS", "build_medication_statement"]
