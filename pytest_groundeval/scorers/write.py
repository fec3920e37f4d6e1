"""Write-and-validate scorer: four independent pass/fail dimensions for a MedicationStatement.

``score_write(resource, case)`` scores what the agent produced (a dict, or anything else)
against a case's ground truth::

    {"case_id": ..., "subject": "Patient/pat-003", "note": ...,
     "expected": {"rxnorm_code": "310965", "display": "Ibuprofen 200 MG Oral Tablet",
                  "status": "active",
                  "dosage": {"dose": {"value": 400, "unit": "mg"}, "dose_max": null,
                             "frequency_per_day": 3, "frequency_per_day_max": null,
                             "as_needed": false, "concentration_mg_per_ml": null},
                  "max_daily_dose": {"value": 3200, "unit": "mg", "ingredient": "ibuprofen"}}}

Dimensions (each reads the dict defensively, so one fault fails one dimension):

* **schema**: ``resourceType`` is MedicationStatement; the dict validates as R4B
  (HealthChain's ``validate_resource``: structure, types, unknown fields, primitive code
  bindings); ``status`` is in the R4B required binding (its own check, so an R5 ``recorded``
  is named even when structure fails too); and the R4 invariants / bindings that neither
  Pydantic nor HealthChain enforce but that decide how a dose reads: qty-3 (a unit code needs
  a system), sqty-1 (no comparator on a dose, rate or maximum), rng-2 (low <= high, doses and
  rates), rat-1 (a Ratio has both numerator and denominator), tim-1/2/4-10 and the EventTiming
  binding of ``repeat.when``; and **no unknown modifier**: any ``modifierExtension`` anywhere
  (none is understood, see ``KNOWN_MODIFIER_EXTENSIONS``) or ``implicitRules`` fails, since it
  can reverse what the resource says (a "not taken" modifier on an ``active`` statement).
  Also ``json_types`` (``jsontypes.py``: every element's FHIR JSON type on the raw JSON, from
  the R4B models' annotations; the models coerce ``"5"`` and ``"false"``, FHIR JSON does not)
  and dom-2..5 on ``contained`` (dom-3: a contained resource nothing refers to). And
  ``verified_elements``, **default deny**: every element is verified, inert or free text
  read for claims, as ``write_elements.MEDICATION_STATEMENT`` declares (its docstring lists
  each); anything else fails as ``unverified element: <path>``.
* **coding**: the medication's codings (``medicationCodeableConcept`` or a ``#id`` contained
  Medication): at least one RxNorm coding; every RxNorm coding (also in any other contained
  Medication) has the expected code and the expected display (case- and whitespace-insensitive,
  or another full name of the same concept: ``drugtext.same_product``; missing display fails).
  Every coding of another system denotes the product: an NDC through the committed RxNorm <->
  NDC map of the same product (``scripts/make_terminology.py``; a mapped NDC of another
  product contradicts); a coding the task cannot map (an unknown system, an NDC the map does
  not hold) fails unless its display is absent *and* its code is unknown rather than
  contradicting (another product's RxNorm code or mapped NDC). A display naming another
  drug, strength, salt, release or form fails in any system. The concept's text and a
  contained Medication's ingredients, strength and form state no other drug, strength, salt,
  release or dose form; ``text_claims``: no free text names another drug and not the product.
  Names are read as :class:`DrugNames` reads them: catalog names and the committed lexicon's
  brands, every spelling folded (digits, spaced letters, two edits), and a drug-class name that
  lists none of the product's ingredients ("blood thinner" on cetirizine); a lay name by use
  ("heart pill") never contradicts.
* **constraints**: ``subject`` is the case's patient in any literal reference form (relative,
  absolute, versioned, ``urn:uuid:`` of a UUID id); ``status`` is the expected status; a
  dosage is present exactly when the note documents a regimen; each dosage's as-needed flag
  matches; each ``dosage.route`` agrees with the documented route (``routes.py``: the note's
  words, else the product's dose form), an unreadable one fails; and nothing a dosage states
  contradicts the note: no dosage puts more administrations on one day than the documented
  regimen (``peak_day``: 7 on Mondays averages a documented 1/day), no rate (no note documents
  one), no maximum below the documented regimen, no free text saying "as needed" beside a
  scheduled dosage or a duration the schedule contradicts. ``dosage.method`` and ``site`` fit
  the documented route (``Inject`` or a deltoid on an oral tablet does not); ``subject.display``
  and ``subject.identifier`` name no one but the case's patient (the case records it only by
  reference). ``text_claims``: no free text anywhere (``text.div``, ``note``,
  ``statusReason``, ``reasonCode``, the dosages' texts) states a status the resource does not
  have ("stopped" on an active statement; ``sig.status_claims``, negations and conditions
  excluded), a route or action that does not fit the documented route, or "as needed" beside
  scheduled dosages.
* **safety**: every amount a dosage asserts is checked. Every dose (``doseQuantity`` and
  ``doseRange``, both if both are given) in every dosage / doseAndRate equals the documented
  dose (or range) after UCUM normalisation; every dosage's timing gives the documented
  administrations per day (on average over its cycle); per phase (``sequence`` steps follow
  one another, see ``schedule.phases``) the implied daily total (sum over its dosages of max
  dose x max per-day rate, plus every rate, in mg) is the documented one, and on the **peak
  day** (``units.per_day(...).peak``: ``dayOfWeek``, the worst 24 h of a sub-day period,
  ``count``) it is within the ceiling: the ceiling is per day, never an average. Rates
  (``rateQuantity`` / ``rateRange`` high / ``rateRatio``, read as continuous) per day are
  within the ceiling; ``maxDosePerPeriod`` per day is within the ceiling and not below the
  documented daily maximum; ``maxDosePerAdministration`` is within the ceiling and not below
  the documented (maximum) dose; ``maxDosePerLifetime`` is not below one day of the documented
  regimen. A dose that ``dosage.text`` or ``patientInstruction`` states (a number with a mass /
  volume unit, or a count times a strength: see ``units.text_doses``) lies within a structured
  dose of that dosage, and a frequency it states (``sig.parse_sig``: ``q6h``, ``BID``, ``every
  hour``, ``four times a day``) agrees with the structured timing (``additionalInstruction[].text``
  too); text with no readable dose or frequency is ignored. ``text_claims``: every dose and
  frequency a resource-level free text (``text.div``, ``note``, ``statusReason``,
  ``reasonCode``) states agrees with some dosage (with no regimen documented, any dose but the
  product's own strength is fabricated), and no free text gives unsafe advice
  (``sig.unsafe_advice``: alcohol with it, an uncapped or doubled dose, sharing it). Unverifiable (no dosage, no unit,
  no dose, no timing, unit/code disagreeing, a rate or maximum that cannot be converted) fails.
  With no documented regimen, any dose anywhere is fabricated.

Decisions where the rules overlap (tests/scorers/test_write_scorer.py pins each one):

* A missing dosage when a regimen is documented fails **constraints** (no dosage) **and
  safety** (the documented regimen's safety cannot be verified: omitting the risky field must not
  score better than encoding it, exactly as a text-only dosage fails). A dosage that is present
  but lacks a dose or timing is unverifiable and fails safety only.
* A modifier extension fails **schema only**: it is the resource's structure that cannot be
  read; the other dimensions are scored on the elements as written.
* Free text that contradicts the structured dose fails **safety** (a reader following the text
  takes another dose); the structured dose itself is judged as usual.
* A fabricated dose on a denial fails **constraints** (a dosage is present) **and safety**
  (a dose nobody documented); a dose-free dosage on a denial fails constraints only.
* An R5 status (``recorded``) fails **schema** (binding) **and constraints** (it does not say
  what the narrative says, e.g. ``active``).
* An element the schema does not declare fails **schema only** (``verified_elements``); a
  claim in declared free text fails the dimension that owns what it says: a drug coding, a
  status / route / as-needed constraints, a dose / frequency / unsafe advice safety. A coded
  ``statusReason`` saying "stopped" fails both: schema (its code is unverified) and
  constraints (its display says stopped).
* A string for a number (``"81"`` mg, frequency ``"3"``) fails **schema only** (json_types):
  the value it spells is still read and judged; ``"false"`` for as-needed fails **schema and
  constraints** (the flag is not a boolean), a numeric code (243670) **schema and coding**.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from pytest_groundeval.fhir.codes import MEDICATION_STATEMENT_STATUSES, NDC, RXNORM_ALIASES
from pytest_groundeval.fhir.codes import RXNORM as RXNORM_SYSTEM
from pytest_groundeval.tasks.jsontext import json_kind
from pytest_groundeval.model import CaseError
from pytest_groundeval.scorers import drugtext, routes
from pytest_groundeval.scorers.base import Check, Dimension, Score
from pytest_groundeval.scorers.jsontypes import json_type_issues
from pytest_groundeval.scorers.schedule import PhaseDay, documented_peak, phases
from pytest_groundeval.scorers.elements import unverified_check
from pytest_groundeval.scorers.sig import parse_sig, status_claims, unsafe_advice
from pytest_groundeval.scorers.write_elements import MEDICATION_STATEMENT, dosage_texts, resource_texts
from pytest_groundeval.scorers.units import (
    EVENT_TIMING,
    UCUM_SYSTEM,
    Amount,
    DailyAmount,
    PerDay,
    UnverifiableError,
    amount,
    as_number,
    fmt,
    per_day,
    product_strengths,
    read_quantity,
    read_rate,
    read_ratio_per_day,
    read_time,
    text_doses,
)

DIMENSIONS = ("schema", "coding", "constraints", "safety")
SUMMARY_METRICS = DIMENSIONS + ("pass",)

FREQ_REL_TOL = 1e-3  # frequency_per_day is given to ~6 significant digits (weekly = 0.142857)
DOSE_REL_TOL = 1e-6


def r4b_status_codes(resource_type: str = "MedicationStatement", fallback: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The R4B ``<resource_type>.status`` required binding, from the model metadata HealthChain
    also uses (``fallback`` when the metadata has none)."""
    try:
        import importlib

        cls = getattr(importlib.import_module(f"fhir.resources.R4B.{resource_type.lower()}"), resource_type)
        extra = cls.model_fields["status"].json_schema_extra
        values = extra.get("enum_values") if isinstance(extra, dict) else None
        if values and "+" not in values:  # "+": the spec's list goes on (Observation's "amended +")
            return tuple(values)
    except Exception:  # noqa: BLE001, S110  # pragma: no cover - metadata moved; use the spec list
        pass
    return fallback


R4B_STATUS = r4b_status_codes("MedicationStatement", MEDICATION_STATEMENT_STATUSES)


# --------------------------------------------------------------------------- reading helpers


def _list(value: Any) -> list[Any]:
    """A FHIR repeating element read defensively: list as is, a lone object wrapped, else empty."""
    if isinstance(value, list):
        return value
    if isinstance(value, dict):
        return [value]
    return []


def _dosages(resource: dict[str, Any]) -> list[Any]:
    return _list(resource.get("dosage"))


def _norm_text(value: Any) -> str:
    return " ".join(str(value).split()).casefold()


def _clip(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _as_resource_dict(resource: Any) -> Any:
    """Accept a fhir.resources model too (HealthChain builders return those)."""
    if hasattr(resource, "model_dump") and not isinstance(resource, dict):
        try:
            return resource.model_dump(mode="json", by_alias=True, exclude_none=True)
        except Exception:  # noqa: BLE001 - an unusable model is scored as unusable output
            return resource
    return resource


def _dose_entries(dose_and_rate: Any) -> list[tuple[str, Any, Any]]:
    """(field, low quantity, high quantity) for every dose field of one doseAndRate entry.

    Both ``doseQuantity`` and ``doseRange`` are read when both are present (a schema error, but
    each still asserts a dose); ``[("invalid", ...)]`` / ``[("none", ...)]`` when it has none.
    """
    if not isinstance(dose_and_rate, dict):
        return [("invalid", None, None)]
    out: list[tuple[str, Any, Any]] = []
    if dose_and_rate.get("doseQuantity") is not None:
        q = dose_and_rate["doseQuantity"]
        out.append(("doseQuantity", q, q))
    if dose_and_rate.get("doseRange") is not None:
        r = dose_and_rate["doseRange"]
        out.append(("doseRange", r.get("low"), r.get("high")) if isinstance(r, dict) else ("doseRange", None, None))
    return out or [("none", None, None)]


RATE_FIELDS = ("rateQuantity", "rateRange", "rateRatio")
MAX_FIELDS = ("maxDosePerPeriod", "maxDosePerAdministration", "maxDosePerLifetime")


def _free_texts(dosage: dict[str, Any]) -> list[tuple[str, str]]:
    """``[(field, text)]`` of every free text of a dosage a reader follows, as the write
    schema declares them (``write_elements.dosage_texts``: ``text``, ``patientInstruction``,
    each ``additionalInstruction[k]`` text and coding display, ``timing.code.text``, the
    as-needed reason)."""
    return dosage_texts(dosage)


# Modifier extensions the scorer knows how to read: none. A modifier extension can reverse what
# the resource says ("not taken", "hypothetical") and an unknown one must not be ignored (FHIR:
# a system that does not understand a modifier extension SHALL NOT process the element as if
# it were absent), so every one present fails schema.
KNOWN_MODIFIER_EXTENSIONS: frozenset[str] = frozenset()


# --------------------------------------------------------------------------- ground truth


class MalformedCase(CaseError, ValueError):
    """The write case's expected block cannot be read: a case error (kind ``case``)."""


_json_kind = json_kind  # a JSON value's type, as a message names it


_EXPECTED_KIND = {
    "string": "a non-empty string",
    "number": "a positive number",
    "boolean": "true or false",
    "object": "an object",
}


def _is_kind(value: Any, kind: str) -> bool:
    if kind == "string":
        return isinstance(value, str) and bool(value.strip())
    if kind == "number":  # a JSON number: not a numeric string, not a boolean (bool is an int)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return False
        try:
            return math.isfinite(float(value)) and value > 0
        except OverflowError:  # an int too large for a float
            return False
    if kind == "boolean":
        return isinstance(value, bool)
    return isinstance(value, dict)


def _field(obj: dict[str, Any], key: str, path: str, kind: str, *, null: bool = False, absent: bool = False) -> Any:
    """``obj[key]`` of the JSON type ``kind`` (a number is a positive JSON number, a string a
    non-empty one), else a :class:`MalformedCase` naming ``path.key``. ``null``: null is a
    value of its own (returned as None); ``absent``: a missing key reads as null."""
    name = f"{path}.{key}"
    if key not in obj:
        if absent:
            return None
        raise MalformedCase(f"expected block: {name} is missing (expected {_EXPECTED_KIND[kind]})")
    value = obj[key]
    if value is None and null:
        return None
    if not _is_kind(value, kind):
        also = " or null" if null else ""
        raise MalformedCase(f"expected block: {name} is {_json_kind(value)}, expected {_EXPECTED_KIND[kind]}{also}")
    return value


def _amount(q: dict[str, Any], path: str) -> Amount:
    """``{"value": <number>, "unit": <UCUM mass or volume code>}`` as an :class:`Amount`."""
    value, unit = _field(q, "value", path, "number"), _field(q, "unit", path, "string")
    try:
        return amount(float(value), unit)
    except UnverifiableError as e:
        raise MalformedCase(f"expected block: {path}.unit: {e}") from None


class WriteTruth:
    """The case's ground truth, read strictly (a malformed case is an error, not a failure):
    every field of the expected block has its JSON type (a number is a JSON number, never a
    numeric string or a boolean; ``as_needed`` is true or false), and null only where null
    means something (no regimen, no range, no concentration); a field of the wrong type is a
    :class:`MalformedCase` naming the case and the field."""

    def __init__(self, case: Any):
        if not isinstance(case, dict) or not isinstance(case.get("expected"), dict):
            raise MalformedCase("write case must be a dict with an 'expected' object")
        exp = case["expected"]
        try:
            self.case_id = case.get("case_id")
            self.subject = _field(case, "subject", "case", "string")
            self.rxnorm_code = _field(exp, "rxnorm_code", "expected", "string")
            self.display = _field(exp, "display", "expected", "string")
            self.status = _field(exp, "status", "expected", "string")
            if self.status not in R4B_STATUS:
                raise MalformedCase(f"expected block: expected.status {self.status!r} is not an R4B "
                                    f"MedicationStatement status ({', '.join(R4B_STATUS)})")
            dosage = _field(exp, "dosage", "expected", "object", null=True)
            self.documented = dosage is not None
            self.dose = self.dose_max = None
            self.freq = self.freq_max = None
            self.as_needed = False
            self.concentration = None
            if dosage is not None:
                d = "expected.dosage"
                self.dose = _amount(_field(dosage, "dose", d, "object"), f"{d}.dose")
                dmax = _field(dosage, "dose_max", d, "object", null=True, absent=True)
                self.dose_max = _amount(dmax, f"{d}.dose_max") if dmax is not None else None
                self.freq = float(_field(dosage, "frequency_per_day", d, "number"))
                fmax = _field(dosage, "frequency_per_day_max", d, "number", null=True, absent=True)
                self.freq_max = float(fmax) if fmax is not None else None
                self.as_needed = _field(dosage, "as_needed", d, "boolean")
                conc = _field(dosage, "concentration_mg_per_ml", d, "number", null=True, absent=True)
                self.concentration = float(conc) if conc is not None else None
            ceiling = _field(exp, "max_daily_dose", "expected", "object", null=True, absent=True)
            self.ceiling_mg = None
            # the note (a documented route) and the ceiling's ingredient (what a brand-only
            # display such as "Lasix 40mg" contains) are read by the coding / route checks
            self.note = case.get("note") if isinstance(case.get("note"), str) else ""
            ingredient = ceiling.get("ingredient") if isinstance(ceiling, dict) else None
            self.ingredient = ingredient if isinstance(ingredient, str) and ingredient.strip() else None
            if ceiling is not None:
                c = _amount(ceiling, "expected.max_daily_dose")
                if c.kind != "mass":
                    raise MalformedCase(f"max_daily_dose unit {ceiling['unit']!r} is not a mass")
                self.ceiling_mg = c.value
            elif self.documented:
                raise MalformedCase("max_daily_dose is required when a dosage is documented")
        except MalformedCase as e:
            raise MalformedCase(f"malformed write case {case.get('case_id')!r}: {e}") from e

    @property
    def dose_high(self) -> Amount | None:
        return self.dose_max or self.dose

    @property
    def freq_high(self) -> float | None:
        return self.freq_max if self.freq_max is not None else self.freq

    def dose_text(self) -> str:
        if self.dose_max is not None:
            return f"{fmt(self.dose.value)}-{self.dose_max}"  # type: ignore[union-attr]
        return str(self.dose)

    def freq_text(self) -> str:
        if self.freq_max is not None:
            return f"{fmt(self.freq)}-{fmt(self.freq_max)}/day"
        return f"{fmt(self.freq)}/day"

    def documented_daily_mg(self) -> float | None:
        hi = self.dose_high
        if hi is None or self.freq_high is None:
            return None
        mg = hi.to_mg(self.concentration)
        return None if mg is None else mg * self.freq_high


# --------------------------------------------------------------------------- schema


def _references(node: Any) -> list[str]:
    """Every ``reference`` string anywhere in a JSON tree."""
    if isinstance(node, dict):
        found = [node["reference"]] if isinstance(node.get("reference"), str) else []
        return found + [r for key, v in node.items() for r in _references(v)]
    if isinstance(node, list):
        return [r for v in node for r in _references(v)]
    return []


def _contained_issues(resource: dict[str, Any]) -> list[str]:
    """The DomainResource invariants on ``contained`` that validation does not enforce:
    dom-2 (no nested contained), dom-3 (every contained resource is referenced from elsewhere
    in the resource as ``#id``, or refers to its container with ``#``), dom-4 (no
    meta.versionId / lastUpdated), dom-5 (no meta.security)."""
    contained = resource.get("contained")
    if not isinstance(contained, list):
        return []
    issues: list[str] = []
    try:
        refs = set(_references({k: v for k, v in resource.items() if k != "contained"}))
        contained_refs = [_references(item) for item in contained]
        refs |= {r for found in contained_refs for r in found}  # %resource.descendants(), as dom-3 reads it
    except RecursionError:
        return ["the resource is nested too deeply to read its references"]
    for i, item in enumerate(contained):
        if not isinstance(item, dict):
            continue
        where = f"contained[{i}]"
        rid = item.get("id")
        if "#" in contained_refs[i]:
            pass  # it refers to its container
        elif not isinstance(rid, str) or not rid:
            issues.append(f"{where} ({item.get('resourceType')}) has no id, so nothing can refer to it (dom-3)")
        elif f"#{rid}" not in refs:
            issues.append(f"{where} ({item.get('resourceType')} {rid!r}) is not referenced from the resource "
                          f"as '#{rid}' (dom-3): what it says is not part of the statement")
        if item.get("contained") is not None:
            issues.append(f"{where} contains resources itself (dom-2)")
        meta = item.get("meta")
        if isinstance(meta, dict):
            if meta.get("versionId") is not None or meta.get("lastUpdated") is not None:
                issues.append(f"{where}.meta has versionId / lastUpdated (dom-4)")
            if meta.get("security") is not None:
                issues.append(f"{where}.meta has security labels (dom-5)")
    return issues


def _invariant_issues(resource: dict[str, Any]) -> list[str]:
    """R4 invariants / required bindings that validation does not enforce: on the dosage, and
    on ``contained`` (:func:`_contained_issues`)."""
    issues: list[str] = _contained_issues(resource)
    for i, dosage in enumerate(_dosages(resource)):
        if not isinstance(dosage, dict):
            continue
        where = f"dosage[{i}]"
        # SimpleQuantity fields of the dosage itself (sqty-1, qty-3 below) and its Ratios (rat-1)
        quantities: list[tuple[str, Any]] = [
            (f"{where}.{key}", q) for key in ("maxDosePerAdministration", "maxDosePerLifetime")
            for q in [dosage.get(key)] if isinstance(q, dict)
        ]
        ratios: list[tuple[str, Any]] = [(f"{where}.maxDosePerPeriod", dosage.get("maxDosePerPeriod"))]
        for j, dr in enumerate(_list(dosage.get("doseAndRate"))):
            if not isinstance(dr, dict):
                continue
            quantities += [(f"{where}.doseAndRate[{j}].{key}", dr.get(key)) for key in ("doseQuantity", "rateQuantity")]
            ratios.append((f"{where}.doseAndRate[{j}].rateRatio", dr.get("rateRatio")))
            for key, read in (("doseRange", read_quantity), ("rateRange", read_rate)):
                rng = dr.get(key)
                if not isinstance(rng, dict):
                    continue
                quantities += [
                    (f"{where}.doseAndRate[{j}].{key}.low", rng.get("low")),
                    (f"{where}.doseAndRate[{j}].{key}.high", rng.get("high")),
                ]
                try:
                    low, high = read(rng.get("low")), read(rng.get("high"))
                    if low.kind == high.kind and low.value > high.value * (1 + DOSE_REL_TOL):
                        issues.append(f"{where}.doseAndRate[{j}].{key}: low {low} > high {high} (rng-2)")
                except UnverifiableError:
                    pass
        for path, ratio in ratios:
            if isinstance(ratio, dict) and (ratio.get("numerator") is None) != (ratio.get("denominator") is None):
                issues.append(f"{path}: numerator and denominator must both be present (rat-1)")
        for path, q in quantities:
            if not isinstance(q, dict):
                continue
            if q.get("comparator") is not None:
                issues.append(f"{path}: comparator not allowed on a SimpleQuantity (sqty-1)")
            if q.get("code") is not None and q.get("system") is None:
                issues.append(f"{path}: code {q.get('code')!r} without a system (qty-3)")
        timing = dosage.get("timing")
        repeat = timing.get("repeat") if isinstance(timing, dict) else None
        if not isinstance(repeat, dict):
            continue
        rp = f"{where}.timing.repeat"

        def has(key: str, repeat: dict[str, Any] = repeat) -> bool:
            return repeat.get(key) is not None

        if has("duration") and not has("durationUnit"):
            issues.append(f"{rp}: duration without durationUnit (tim-1)")
        if has("period") and not has("periodUnit"):
            issues.append(f"{rp}: period without periodUnit (tim-2)")
        for key, inv in (("duration", "tim-4"), ("period", "tim-5")):
            n = as_number(repeat.get(key)) if has(key) else None
            if n is not None and n < 0:
                issues.append(f"{rp}: {key} is negative ({inv})")
        if has("periodMax") and not has("period"):
            issues.append(f"{rp}: periodMax without period (tim-6)")
        if has("durationMax") and not has("duration"):
            issues.append(f"{rp}: durationMax without duration (tim-7)")
        if has("countMax") and not has("count"):
            issues.append(f"{rp}: countMax without count (tim-8)")
        when = repeat.get("when")
        when = when if isinstance(when, list) else ([when] if when is not None else [])
        if has("offset") and (not when or any(w in ("C", "CM", "CD", "CV") for w in when)):
            issues.append(f"{rp}: offset needs a when that is not C/CM/CD/CV (tim-9)")
        if has("timeOfDay") and when:
            issues.append(f"{rp}: timeOfDay and when together (tim-10)")
        bad = [w for w in when if w not in EVENT_TIMING]
        if bad:
            issues.append(f"{rp}.when: {bad} not in the required EventTiming value set")
    return issues


def schema_dimension(resource: dict[str, Any]) -> tuple[Dimension, dict[str, Any]]:
    checks: list[Check] = []
    rtype = resource.get("resourceType")
    checks.append(
        Check(
            "resource_type",
            rtype == "MedicationStatement",
            "resourceType is MedicationStatement" if rtype == "MedicationStatement"
            else f"resourceType {rtype!r} is not MedicationStatement",
        )
    )
    found, issues = resource_checks(resource, "MedicationStatement", _invariant_issues(resource), R4B_STATUS)
    checks += found
    checks.append(_declared_elements_check(resource))
    return Dimension.from_checks("schema", checks), {"schema_issues": issues}


def _declared_elements_check(resource: dict[str, Any]) -> Check:
    """Default deny: every element is verified, inert or read as free text
    (``write_elements.MEDICATION_STATEMENT``), and every contained resource is a Medication
    (the only one whose elements the scorer reads)."""
    try:
        check = unverified_check(resource, MEDICATION_STATEMENT)
    except RecursionError:
        return Check("verified_elements", False, "the resource is nested too deeply to read its elements")
    others = [f"unverified element: contained[{i}] ({item.get('resourceType')!r}: only a Medication is read)"
              for i, item in enumerate(_list(resource.get("contained")))
              if isinstance(item, dict) and item.get("resourceType") != "Medication"]
    if not others:
        return check
    return Check(check.name, False, "; ".join(others + ([check.reason] if not check.passed else [])))


def resource_checks(resource: dict[str, Any], resource_type: str, invariants: list[str],
                    statuses: tuple[str, ...] | None = None) -> tuple[list[Check], list[str]]:
    """The checks that make a stored resource usable as ``resource_type`` (write's schema
    dimension, and any scorer judging a FHIR resource): R4B validation (HealthChain's
    ``validate_resource``: structure, types, unknown fields, required code bindings), the
    ``status`` binding on its own (named even when structure fails too), FHIR JSON types,
    ``invariants`` (the caller's: R4 invariants validation does not enforce) and no unknown
    modifier. Returns the checks and every issue found."""
    checks: list[Check] = []
    statuses = statuses if statuses is not None else r4b_status_codes(resource_type)
    # Structural R4B validation via HealthChain. Its binding check covers status too, but only
    # once structure passes, so status gets its own check below and is left out of this one.
    issues: list[str] = []
    try:
        from healthchain.fhir import validate_resource

        report = validate_resource(resource, resource_type, version="R4B")
        issues = [
            _clip(" ".join(f"{iss.expression or iss.code}: {iss.diagnostics}".split()))
            for iss in report.issues
            if iss.severity in ("error", "fatal") and iss.expression != f"{resource_type}.status"
        ]
    except Exception as e:  # noqa: BLE001 - "never raises", but garbage input can still surprise it
        issues = [f"validation raised {type(e).__name__}: {e}"]
    checks.append(
        Check("r4b_validation", not issues, f"valid R4B {resource_type}" if not issues else "; ".join(issues[:5])
              + (f" (and {len(issues) - 5} more)" if len(issues) > 5 else ""))
    )

    status = resource.get("status")
    if status is None:
        ok, why = False, "status is missing (required, 1..1)"
    elif not isinstance(status, str):
        ok, why = False, f"status {status!r} is not a code"
    elif statuses and status not in statuses:
        ok, why = False, f"status {status!r} is not in the R4B required binding ({', '.join(statuses)})"
    else:
        ok, why = True, f"status {status!r} is in the R4B binding"
    checks.append(Check("status_binding", ok, why))

    types = json_type_issues(resource, resource_type)
    checks.append(Check("json_types", not types, "; ".join(types[:5]) + (f" (and {len(types) - 5} more)"
                                                                         if len(types) > 5 else "")
                        if types else "every element has its FHIR JSON type"))

    inv = invariants
    checks.append(Check("r4_invariants", not inv, "; ".join(inv) if inv else "dosage and contained invariants hold"
                        if resource_type == "MedicationStatement" else "the R4 invariants checked hold"))
    try:
        mods = _modifier_issues(resource)
    except RecursionError:
        mods = ["the resource is nested too deeply to find its modifiers (it cannot be read)"]
    checks.append(Check("modifiers", not mods, "; ".join(mods[:5]) + (f" (and {len(mods) - 5} more)" if len(mods) > 5
                                                                       else "") if mods else "no unknown modifiers"))
    return checks, issues + types + inv + mods


def _modifier_issues(node: Any, path: str = "") -> list[str]:
    """Every ``modifierExtension`` (anywhere: the resource, a dosage, a contained Medication, a
    timing) whose url is not in KNOWN_MODIFIER_EXTENSIONS, and ``implicitRules`` (the other
    meaning-changing element a consumer must understand): each may reverse what the resource
    says, so a reader that does not understand it cannot use the resource."""
    issues: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            here = f"{path}.{key}" if path else key
            if key == "modifierExtension":
                for i, ext in enumerate(value if isinstance(value, list) else [value]):
                    url = ext.get("url") if isinstance(ext, dict) else None
                    if url not in KNOWN_MODIFIER_EXTENSIONS:
                        issues.append(f"{here}[{i}] {url!r}: unknown modifier extension (it changes the meaning of "
                                      "the element, e.g. 'not taken'; the resource cannot be read without it)")
            elif key == "implicitRules" and value is not None:
                issues.append(f"{here} {value!r}: the resource may only be read under rules the scorer "
                              "does not know")
            else:
                issues += _modifier_issues(value, here)
    elif isinstance(node, list):
        for i, item in enumerate(node):
            issues += _modifier_issues(item, f"{path}[{i}]")
    return issues


# --------------------------------------------------------------------------- coding


def _medication_source(resource: dict[str, Any]) -> tuple[Any, dict[str, Any] | None, str]:
    """(the medication's CodeableConcept, the contained Medication it is the code of or None,
    where it came from), or (None, None, why it cannot be read)."""
    mcc = resource.get("medicationCodeableConcept")
    if isinstance(mcc, dict):
        return mcc, None, "medicationCodeableConcept"
    ref = resource.get("medicationReference")
    if isinstance(ref, dict):
        target = ref.get("reference")
        if isinstance(target, str) and target.startswith("#"):
            for item in _list(resource.get("contained")):
                if isinstance(item, dict) and item.get("resourceType") == "Medication" and item.get("id") == target[1:]:
                    code = item.get("code")
                    return (code if isinstance(code, dict) else {}), item, f"contained Medication {target}"
            return None, None, f"medicationReference {target!r} matches no contained Medication"
        return None, None, f"medicationReference {target!r} is not a contained '#id' Medication, so it cannot be read"
    return None, None, "no medicationCodeableConcept or medicationReference"


def _medication_codings(resource: dict[str, Any]) -> tuple[list[Any] | None, str]:
    """(codings, where they came from) or (None, why not)."""
    concept, _medication, source = _medication_source(resource)
    return (None if concept is None else _list(concept.get("coding"))), source


# RxNorm written as another system: its OID, or the URI in another spelling. Such a coding is
# read as RxNorm for its code (a wrong code there is a wrong code), though rxnorm_present asks
# for the canonical URI.
RXNORM_OTHER_SPELLINGS = frozenset(RXNORM_ALIASES)


@dataclass(frozen=True)
class DrugNames:
    """How the write scorer reads drug names in a text: the site catalog's names with the
    committed lexicon's brands and drug words (``drugtext.lexicon_vocabulary``: "Xarelto",
    "Zyrtec"), each spelling of a name folded to it (``drugtext.fold_spelling``: digits for
    letters, spaced letters, a misspelling within two edits of a name of six letters or more),
    and lay / class names ("blood thinner", "statin": ``drugtext.class_names``) read as naming
    every drug of their class."""

    vocab: drugtext.Vocabulary

    @classmethod
    def of_catalog(cls) -> DrugNames:
        return cls(drugtext.lexicon_vocabulary(drugtext.vocabulary()))

    def fold(self, text: str) -> str:
        """``text`` with each spelling of a drug name written as the name; a plain word is read
        as a misspelt name only within one edit of a name under eight letters ("Xarelta",
        "Zyrtek"), two of a longer one: English words two edits from a short name ("effect" is
        not Effient, "normal" not Neoral, "approx" not Anaprox) stay themselves."""
        words = frozenset(w for w in _PLAIN_WORD.findall(text.casefold()) if _too_far(w, self.vocab.names))
        return drugtext.fold_spelling(text, self.vocab.names, words)

    def conflicts(self, text: str, prod: drugtext.Product) -> list[str]:
        """What ``text`` states against the product (``drugtext.conflicts`` on the folded text),
        and each class name whose class has none of the product's ingredients."""
        folded = self.fold(text)
        return drugtext.conflicts(folded, prod, self.vocab) + [
            f"names {phrase!r} ({_class_shown(members)}), not {prod.shown()}"
            for phrase, members in drugtext.class_names(folded)
            if not members & prod.ingredients and not _VAGUE_CLASS.search(phrase)]

    def names_product(self, text: str, prod: drugtext.Product) -> bool:
        """Does ``text`` name the product: a name that denotes it, or a class it belongs to?"""
        folded = self.fold(text)
        return drugtext.names_product(folded, prod, self.vocab) or any(
            members & prod.ingredients for _, members in drugtext.class_names(folded))


_PLAIN_WORD = re.compile(r"(?<![\w@$])[a-z]{6,}(?![\w@$])")


def _too_far(word: str, names: frozenset[str]) -> bool:
    """Is ``word`` read as a misspelt name only by more edits than :meth:`DrugNames.fold` allows?"""
    name = drugtext.spelled_as(word, names)
    return name is not None and name != word and drugtext._edits(word, name) > (1 if len(name) < 8 else 2)


# A lay name by what a drug is for ("heart pill", "pain medicine", "water tablet") is vague: one
# drug is called by several (aspirin is a heart pill and a pain pill), so a class list that
# lacks the product is no evidence of another drug; such a name only confirms one it lists.
# A pharmacological or mechanism name ("statin", "beta blocker", "blood thinner", "inhaler")
# that lists none of the product's ingredients names another drug.
_VAGUE_CLASS = re.compile(r"(?:\s|\bpain)(?:pill|tablet|medicine|medication|killer|reliever|aid)s?$", re.I)


def _class_shown(members: frozenset[str], limit: int = 4) -> str:
    shown = sorted(members)
    return "a class of " + ", ".join(shown[:limit]) + (", ..." if len(shown) > limit else "")


def _other_coding_issue(label: str, c: dict[str, Any], truth: WriteTruth, prod: drugtext.Product,
                        names: DrugNames) -> str | None:
    """Why a coding of a system other than RxNorm does not denote the product (None: it does).

    * RxNorm under another system URI is read as RxNorm: its code must be the product's.
    * A system the task maps (NDC, through the committed RxNorm <-> NDC map of the same
      product, ``fhir.medications.ndc_rxnorm_map``): a mapped code must map to the product's
      RxNorm code, and a display must not contradict the product.
    * Any other coding (an unknown system, or an NDC the map does not have) fails unless its
      display is absent **and** its code is unknown rather than contradicting: a display is a
      claim about a code nobody here can check; a code that is another product's (a catalog
      RxNorm code, or a mapped NDC of another product) contradicts it. A display-less code
      that denotes nothing known says nothing a reader can act on, and passes.
    """
    from pytest_groundeval.fhir.medications import ndc_rxnorm_map

    system, code, display = c.get("system"), c.get("code"), c.get("display")
    shown = display if isinstance(display, str) and display.strip() else None
    bad = names.conflicts(shown, prod) if shown else []
    if isinstance(system, str) and system.strip().rstrip("/").lower() in RXNORM_OTHER_SPELLINGS:
        if code != truth.rxnorm_code:
            return f"{label} is RxNorm under another system URI: code {code!r} != expected {truth.rxnorm_code}"
        return f"{label} display {shown!r} {'; '.join(bad)}" if bad else None
    if bad:
        return f"{label} display {shown!r} {'; '.join(bad)}"
    ndc_map = ndc_rxnorm_map()
    mapped = ndc_map.get(code) if system == NDC and isinstance(code, str) else None
    if mapped is not None:
        return None if mapped == truth.rxnorm_code else (
            f"{label} is the NDC of RxNorm {mapped} ({_catalog_display(mapped, names.vocab)}), not {truth.rxnorm_code}")
    other = _known_code(code, truth, names.vocab, ndc_map)
    if other:
        return f"{label} code {code!r} is {other}: it contradicts {truth.display!r}"
    if shown:
        return (f"{label} display {shown!r} on a code the task cannot map to RxNorm: the display is a claim nobody "
                f"can check against {truth.display!r} (unverifiable; a coding of an unmapped system may carry "
                "only a code)")
    return None


def _catalog_display(code: str, vocab: drugtext.Vocabulary) -> str:
    return next((d for d, c in vocab.displays.items() if c == code), "not in the site catalog")


def _known_code(code: Any, truth: WriteTruth, vocab: drugtext.Vocabulary, ndc_map: dict[str, str]) -> str | None:
    """What another product a code is known as (a catalog RxNorm code, a mapped NDC), or None."""
    if not isinstance(code, str) or code == truth.rxnorm_code:
        return None
    if code in ndc_map and ndc_map[code] != truth.rxnorm_code:
        return f"the NDC of RxNorm {ndc_map[code]}"
    if code in vocab.displays.values():
        return f"the RxNorm code of {_catalog_display(code, vocab)!r}"
    return None


def _coding_issues(where: str, concept: Any, truth: WriteTruth, prod: drugtext.Product,
                   names: DrugNames) -> tuple[list[str], list[str]]:
    """(issues of the codings of other systems, issues of the text) of one CodeableConcept:
    each coding by :func:`_other_coding_issue`; the concept's text may not contradict the
    product (a text naming no known drug is not read)."""
    if not isinstance(concept, dict):
        return [], []
    coding_issues: list[str] = []
    for i, c in enumerate(_list(concept.get("coding"))):
        if not isinstance(c, dict) or c.get("system") == RXNORM_SYSTEM:
            continue
        issue = _other_coding_issue(f"{where}.coding[{i}] ({c.get('system')} {c.get('code')!r})", c, truth, prod, names)
        if issue:
            coding_issues.append(issue)
    text_issues: list[str] = []
    text = concept.get("text")
    if isinstance(text, str):
        bad = names.conflicts(text, prod)
        if bad:
            text_issues.append(f"{where}.text {text!r} {'; '.join(bad)}")
    return coding_issues, text_issues


def _medication_issues(where: str, med: dict[str, Any], truth: WriteTruth, prod: drugtext.Product,
                       names: DrugNames) -> list[str]:
    """A contained Medication's ingredients and form agree with the product: every ingredient
    item names one of the product's ingredients (RxNorm ingredient codings are read by their
    display, as other systems are) and nothing else, its strength is one of the product's, and
    the form names no other dose form."""
    issues: list[str] = []
    for j, ing in enumerate(_list(med.get("ingredient"))):
        here = f"{where}.ingredient[{j}]"
        if not isinstance(ing, dict):
            continue
        item = ing.get("itemCodeableConcept")
        if ing.get("itemReference") is not None and item is None:
            issues.append(f"{here}.itemReference: an ingredient given by reference cannot be checked against "
                          f"{truth.display!r} (unverifiable)")
        if isinstance(item, dict):
            texts = [(k, v) for k, v in drugtext.texts_of(item) if isinstance(v, str) and v.strip()]
            if not texts:
                issues.append(f"{here}.itemCodeableConcept has no text or display: it cannot be checked against "
                              f"{truth.display!r} (unverifiable)")
            for key, value in texts:
                bad = names.conflicts(value, prod)
                if bad:
                    issues.append(f"{here}.itemCodeableConcept.{key} {value!r} {'; '.join(bad)}")
                elif not names.names_product(value, prod):
                    issues.append(f"{here}.itemCodeableConcept.{key} {value!r} names no drug the site catalog "
                                  f"knows: it cannot be checked against {truth.display!r} (unverifiable)")
        strength = ing.get("strength")
        if isinstance(strength, dict):
            issue = _strength_issue(strength, prod)
            if issue:
                issues.append(f"{here}.strength {issue}")
    form = med.get("form")
    for key, value in drugtext.texts_of(form):
        if isinstance(value, str):
            bad = names.conflicts(value, prod)
            if bad:
                issues.append(f"{where}.form.{key} {value!r} {'; '.join(bad)}")
    return issues


def _strength_issue(ratio: dict[str, Any], prod: drugtext.Product) -> str | None:
    """A contained Medication ingredient's strength (mass per unit or per mL) is one of the
    product's strengths; None when it agrees or the product's display has no strength."""
    strengths = prod.reading.strengths
    if not strengths:
        return None
    try:
        num = read_quantity(ratio.get("numerator"))
    except UnverifiableError as e:
        return f"numerator: {e} (unverifiable)"
    if num.kind != "mass":
        return f"numerator {num} is not a mass (unverifiable)"
    per, den_value = None, 1.0
    den = ratio.get("denominator")
    if isinstance(den, dict):
        try:
            d = read_quantity(den)
            if d.kind == "volume":
                per, den_value = "ml", d.value
        except UnverifiableError:
            pass  # a count ("1 TAB"): strength per unit
        if per is None:
            value = as_number(den.get("value"))
            den_value = value if value else 1.0
    mg = num.value / den_value
    if any(math.isclose(mg, s, rel_tol=1e-6) and (pp is None or pp == per or per is None)
           for s, pp in strengths):
        return None
    shown = ", ".join(f"{fmt(s)} mg" + (f"/{pp}" if pp else "") for s, pp in strengths)
    return f"{fmt(mg)} mg{'/mL' if per else ''} is not the product's strength ({shown})"


def coding_dimension(resource: dict[str, Any], truth: WriteTruth) -> tuple[Dimension, dict[str, Any]]:
    concept, med, source = _medication_source(resource)
    codings = None if concept is None else _list(concept.get("coding"))
    if codings is None:
        dim = Dimension.from_checks("coding", [Check("rxnorm_present", False, source)])
        return dim, {"medication_source": None, "rxnorm_codings": []}
    rx = [(i, c) for i, c in enumerate(codings) if isinstance(c, dict) and c.get("system") == RXNORM_SYSTEM]
    details = {
        "medication_source": source,
        "rxnorm_codings": [{"code": c.get("code"), "display": c.get("display")} for _, c in rx],
    }
    if not rx:
        others = sorted({str(c.get("system")) for c in codings if isinstance(c, dict)})
        why = f"no RxNorm coding in {source}" + (f" (systems: {', '.join(others)})" if others else "")
        return Dimension.from_checks("coding", [Check("rxnorm_present", False, why)]), details
    checks = [Check("rxnorm_present", True, f"{len(rx)} RxNorm coding(s) in {source}")]
    # every other contained Medication says what the statement's medication is too
    extra_meds = [(k, m) for k, m in enumerate(_list(resource.get("contained")))
                  if isinstance(m, dict) and m.get("resourceType") == "Medication" and m is not med]
    extra_rx = [(f"contained[{k}].code.coding[{i}]", c) for k, m in extra_meds
                for i, c in enumerate(_list(m.get("code", {}).get("coding") if isinstance(m.get("code"), dict) else None))
                if isinstance(c, dict) and c.get("system") == RXNORM_SYSTEM]
    wrong_codes = [f"coding[{i}] {c.get('code')!r}" for i, c in rx if c.get("code") != truth.rxnorm_code]
    wrong_codes += [f"{w} {c.get('code')!r}" for w, c in extra_rx if c.get("code") != truth.rxnorm_code]
    checks.append(
        Check(
            "rxnorm_code",
            not wrong_codes,
            f"{', '.join(wrong_codes)} != expected {truth.rxnorm_code}" if wrong_codes
            else f"RxNorm {truth.rxnorm_code}",
        )
    )
    vocab = drugtext.vocabulary()
    prod = drugtext.product(truth.display, truth.ingredient)
    want = _norm_text(truth.display)
    bad_display = []
    other_names = []
    for label, c in [(f"coding[{i}]", c) for i, c in rx] + extra_rx:
        d = c.get("display")
        if d is None:
            bad_display.append(f"{label} has no display (expected {truth.display!r})")
        elif not isinstance(d, str):
            bad_display.append(f"{label} display {d!r} != expected {truth.display!r}")
        elif _norm_text(d) != want:
            same, why = drugtext.same_product(d, prod, vocab)
            if same:
                other_names.append(f"{label} display {d!r}: {why}")
            else:
                bad_display.append(f"{label} display {d!r} != expected {truth.display!r} ({why})")
    checks.append(
        Check(
            "rxnorm_display",
            not bad_display,
            "; ".join(bad_display) if bad_display
            else "display matches" + (f" ({'; '.join(other_names)})" if other_names else ""),
        )
    )

    # every other coding, the concept's text, and every contained Medication agree with the product
    where = "medicationCodeableConcept" if med is None else f"{source} code"
    names = DrugNames.of_catalog()
    coding_issues, text_issues = _coding_issues(where, concept, truth, prod, names)
    med_issues = [] if med is None else _medication_issues(source, med, truth, prod, names)
    ref = resource.get("medicationReference")
    shown = ref.get("display") if isinstance(ref, dict) else None
    if isinstance(shown, str) and names.conflicts(shown, prod):
        text_issues.append(f"medicationReference.display {shown!r} {'; '.join(names.conflicts(shown, prod))}")
    for k, m in extra_meds:
        c_issues, t_issues = _coding_issues(f"contained[{k}].code", m.get("code"), truth, prod, names)
        coding_issues += c_issues
        text_issues += t_issues
        med_issues += _medication_issues(f"contained[{k}]", m, truth, prod, names)
    others = [c for c in codings if isinstance(c, dict) and c.get("system") != RXNORM_SYSTEM]
    checks.append(Check("other_codings", not coding_issues, "; ".join(coding_issues) if coding_issues
                        else f"{len(others)} coding(s) of other systems name {prod.shown()}" if others
                        else "no codings of other systems"))
    checks.append(Check("concept_text", not text_issues, "; ".join(text_issues) if text_issues
                        else "the text agrees with the product" if isinstance(concept.get("text"), str)
                        else "no text"))
    if med is not None or extra_meds:
        checks.append(Check("medication_resource", not med_issues, "; ".join(med_issues) if med_issues
                            else "the contained Medication's ingredients and form agree with the product"))
    drug_issues = _text_drug_issues(resource, prod, names)
    checks.append(Check("text_claims", not drug_issues, "; ".join(drug_issues) if drug_issues
                        else "no free text names another drug"))
    details["coding_issues"] = coding_issues + text_issues + med_issues + drug_issues
    return Dimension.from_checks("coding", checks), details


# --------------------------------------------------------------------------- constraints


def _as_needed(dosage: dict[str, Any]) -> tuple[bool | None, str]:
    if "asNeededBoolean" in dosage and dosage["asNeededBoolean"] is not None:
        v = dosage["asNeededBoolean"]
        return (v, f"asNeededBoolean {v}") if isinstance(v, bool) else (None, f"asNeededBoolean {v!r} is not a boolean")
    if dosage.get("asNeededCodeableConcept") is not None:
        return True, "asNeededCodeableConcept (as needed for a reason)"
    return False, "no asNeeded (= scheduled)"


_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
# FHIR's literal reference: [base URL /] Type / id [/_history/version] (R4 references.html)
_LITERAL = re.compile(r"^(?:(?P<base>https?://[^\s/?#]+(?:/[^\s/?#]+)*)/)?(?P<type>[A-Z][A-Za-z]+)/"
                      r"(?P<id>[A-Za-z0-9\-.]{1,64})(?:/_history/[A-Za-z0-9\-.]{1,64})?$")


def _same_patient(subject: Any, expected: str) -> tuple[bool, str]:
    """Is ``subject`` (the resource's subject) a reference to the case's patient?

    The same patient in any literal reference form: relative (``Patient/<id>``), absolute
    (``https://host/fhir/Patient/<id>``), version-specific (``.../_history/2``), or
    ``urn:uuid:<id>`` when the patient's id is a UUID. ``subject.type``, when given, must be
    Patient. Anything else (another id or type, a logical identifier only, a contained ``#``
    patient) is not the case's patient.
    """
    ref = subject.get("reference") if isinstance(subject, dict) else None
    if ref is None:
        return False, "no subject.reference"
    m = _LITERAL.match(expected)
    if not isinstance(ref, str) or m is None:
        return ref == expected, (f"subject {expected}" if ref == expected else f"subject.reference {ref!r} != {expected!r}")
    want_type, want_id = m.group("type"), m.group("id")
    stype = subject.get("type")
    if stype is not None and stype != want_type:
        return False, f"subject.type {stype!r} is not {want_type}"
    got = _LITERAL.match(ref) if len(ref) <= 4096 else None  # a URL longer than any server's is no reference
    if got is not None and got.group("type") == want_type and got.group("id") == want_id:
        form = "absolute" if got.group("base") else "relative"
        return True, f"subject {expected}" + ("" if ref == expected else f" ({form} reference {ref!r})")
    if ref.lower().startswith("urn:uuid:") and _UUID.match(want_id) and ref[9:].lower() == want_id.lower():
        return True, f"subject {expected} (urn:uuid reference {ref!r})"
    return False, f"subject.reference {ref!r} != {expected!r} (not the case's patient in any reference form)"


def _route_check(dosages: list[Any], truth: WriteTruth) -> Check:
    """Every dosage.route agrees with the route the case documents (routes.documented_route:
    the note's words, else the product's dose form); a route that cannot be read fails as
    unverifiable; no route written, or none documented, passes."""
    route, where = routes.documented_route(truth.note, truth.display)
    given = [(i, d["route"]) for i, d in enumerate(dosages) if isinstance(d, dict) and d.get("route") is not None]
    if not given:
        return Check("route", True, "no route encoded")
    if route is None:
        return Check("route", True, f"route not checked: {where}")
    wrong = []
    for i, r in given:
        found, unread = routes.read_route(r)
        other = sorted(found - {route})
        if other:
            wrong.append(f"dosage[{i}].route says {', '.join(other)}")
        elif unread:
            wrong.append(f"dosage[{i}].route {', '.join(unread)} cannot be read (unverifiable)")
    if wrong:
        return Check("route", False, f"{'; '.join(wrong)}, but {where} documents the {route} route")
    return Check("route", True, f"route {route}, as {where} documents")


def constraints_dimension(resource: dict[str, Any], truth: WriteTruth) -> Dimension:
    checks: list[Check] = []
    same, why = _same_patient(resource.get("subject"), truth.subject)
    other = _subject_names_other(resource.get("subject"), truth.subject) if same else None
    checks.append(Check("subject", same and other is None, other or why))
    checks += _source_and_date_checks(resource, truth)
    status = resource.get("status")
    checks.append(
        Check(
            "status",
            status == truth.status,
            f"status {status!r}" if status == truth.status else f"status {status!r} != expected {truth.status!r}",
        )
    )
    dosages = _dosages(resource)
    if truth.documented:
        checks.append(
            Check(
                "dosage_present",
                bool(dosages),
                f"{len(dosages)} dosage(s) for the documented regimen" if dosages
                else "no dosage, but the note documents a regimen",
            )
        )
        wrong = []
        for i, d in enumerate(dosages):
            v, how = _as_needed(d) if isinstance(d, dict) else (None, "dosage is not an object")
            if v is not truth.as_needed:
                wrong.append(f"dosage[{i}]: {how}")
        if dosages:
            checks.append(_route_check(dosages, truth))
            checks += _method_site_checks(dosages, truth)
            checks.append(
                Check(
                    "as_needed",
                    not wrong,
                    f"{'; '.join(wrong)}, documented as_needed={truth.as_needed}" if wrong
                    else f"as_needed={truth.as_needed}",
                )
            )
    else:
        checks.append(
            Check(
                "dosage_absent",
                not dosages,
                "no dosage (none documented)" if not dosages
                else f"{len(dosages)} dosage(s) present, but the note documents no regimen",
            )
        )
    if truth.documented:
        checks += _regimen_constraint_checks(dosages, truth)
    findings = _text_constraint_findings(resource, truth)
    checks.append(Check("text_claims", not findings, "; ".join(findings) if findings else
                        "no free text states another status, route or as-needed use"))
    return Dimension.from_checks("constraints", checks)


# --------------------------------------------------------------------------- free-text claims
# Every free text the schema declares (write_elements) is read for what it states; a dosage's
# own texts are also compared with that dosage (doses, frequencies, as-needed, duration: the
# _text_* checks), the resource's texts (text.div, note, statusReason, reasonCode) with every
# dosage.


def _all_texts(resource: dict[str, Any]) -> list[tuple[str, str]]:
    """(path, text) of every free text the schema declares, the dosages' and the medication's
    included."""
    return resource_texts(resource, medication=True) + _dosage_texts_of(resource)


def _dosage_texts_of(resource: dict[str, Any]) -> list[tuple[str, str]]:
    return [(f"dosage[{i}].{key}", text) for i, d in enumerate(_dosages(resource)) if isinstance(d, dict)
            for key, text in _free_texts(d)]


def _text_drug_issues(resource: dict[str, Any], prod: drugtext.Product, names: DrugNames) -> list[str]:
    """A free text that names another drug (a catalog or lexicon name, a brand, a class the
    product is not of, in any spelling :class:`DrugNames` folds) and not the product says the
    statement is about that drug (a text naming the product may name others beside it: "no
    longer on aspirin since apixaban was started")."""
    issues = []
    for path, text in resource_texts(resource) + _dosage_texts_of(resource):
        said = _CAUTIONED.sub(" ", text)  # "avoid NSAIDs", "do not take with Xarelto": no drug of the statement
        others = [b for b in names.conflicts(said, prod) if b.startswith("names ") and not b.startswith("names the ")]
        if others and not names.names_product(text, prod):
            issues.append(f"{path} {_clip(text, 80)!r} {'; '.join(others)}")
    return issues


# A clause that warns off a drug names it as one not to take with the product, not as the
# statement's drug: from the warning to the clause's end
_CAUTIONED = re.compile(r"\b(?:avoid|do\s+not\s+(?:take|use|combine|mix)|don't\s+(?:take|use|combine|mix)|"
                        r"never\s+(?:take|use|combine|mix)|not\s+to\s+be\s+(?:taken|used|combined))\b[^.;!?\n]*",
                        re.I)
_MEDICATION_PATHS = ("medicationCodeableConcept", "medicationReference")
_SUBJECT_WORDS = frozenset({"the", "patient", "pt", "this", "subject", "id", "of", "record"})


def _subject_names_other(subject: Any, expected: str) -> str | None:
    """Why a subject's display or identifier, beside the right reference, may be another
    patient's: the case records its patient only as a reference, so a display may hold only
    generic words and the id, and an identifier's value must be the id."""
    if not isinstance(subject, dict):
        return None
    m = _LITERAL.match(expected)
    pid = m.group("id") if m else expected
    own = set(re.findall(r"[a-z0-9]+", pid.casefold())) | _SUBJECT_WORDS
    display = subject.get("display")
    if display is not None:
        words = set(re.findall(r"[a-z0-9]+", str(display).casefold())) - own
        if words:
            return (f"subject.display {display!r} names {', '.join(sorted(words))}: the case records its patient only "
                    f"as {expected}, so a name beside it may be another patient's (unverified)")
    ident = subject.get("identifier")
    if ident is not None:
        value = ident.get("value") if isinstance(ident, dict) else ident
        if value != pid:
            return (f"subject.identifier {value!r} is not {pid}: beside the reference it names a patient the case "
                    "cannot confirm (another patient's identifier?)")
    return None


_FHIR_DATE = re.compile(r"^\d{4}(?:-\d{2}(?:-\d{2})?)?(?:T[\d:.]+(?:Z|[+-]\d{2}:\d{2})?)?$")


def _source_and_date_checks(resource: dict[str, Any], truth: WriteTruth) -> list[Check]:
    """``informationSource`` is the case's patient (the only person the case knows), read as
    ``subject`` is; every ``effective[x]`` date is a date the note states (YYYY-MM-DD)."""
    checks = []
    source = resource.get("informationSource")
    if source is not None:
        same, why = _same_patient(source, truth.subject)
        other = _subject_names_other(source, truth.subject) if same else None
        checks.append(Check("information_source", same and other is None,
                            (other or why).replace("subject", "informationSource")))
    dates = [(f"effectivePeriod.{k}", v) for k, v in (resource.get("effectivePeriod") or {}).items()] \
        if isinstance(resource.get("effectivePeriod"), dict) else []
    if resource.get("effectiveDateTime") is not None:
        dates.append(("effectiveDateTime", resource["effectiveDateTime"]))
    if dates:
        stated = set(re.findall(r"\b\d{4}-\d{2}-\d{2}\b", truth.note))
        # (a value that is no FHIR date at all is schema's finding; a date must be one the note states)
        wrong = [f"{k} {v!r}" for k, v in dates if isinstance(v, str) and _FHIR_DATE.match(v) and v[:10] not in stated]
        checks.append(Check("effective", not wrong, f"{', '.join(wrong)}: no date the note states "
                            f"({', '.join(sorted(stated)) or 'it states none'}; unverified)" if wrong
                            else "every effective date is one the note states"))
    return checks


def _method_site_checks(dosages: list[Any], truth: WriteTruth) -> list[Check]:
    """dosage.method and dosage.site fit the documented route (``routes.read_method`` /
    ``read_site``): "Inject" or a deltoid on an oral tablet says another administration; a
    method or site that cannot be read, or any with no documented route, is unverifiable."""
    route, where = routes.documented_route(truth.note, truth.display)
    checks = []
    for key, reader in (("method", routes.read_method), ("site", routes.read_site)):
        wrong = []
        for i, d in enumerate(dosages):
            if not isinstance(d, dict) or d.get(key) is None:
                continue
            found, unread = reader(d[key])
            if route is None:
                wrong.append(f"dosage[{i}].{key} cannot be checked: {where} (unverifiable)")
                continue
            wrong += [f"dosage[{i}].{key} {words!r} fits {', '.join(sorted(fits))}, not the {route} route {where} "
                      "documents" for fits, words in found if route not in fits]
            wrong += [f"dosage[{i}].{key} {u} cannot be read (unverifiable)" for u in unread]
        if any(isinstance(d, dict) and d.get(key) is not None for d in dosages):
            checks.append(Check(key, not wrong, "; ".join(wrong) if wrong else f"{key} fits the {route} route"))
    return checks


def _text_constraint_findings(resource: dict[str, Any], truth: WriteTruth) -> list[str]:
    """What the free texts state against the structure: a status the resource's status is not
    (``stopped`` on an active statement), a route or an action (``inject``) that does not fit
    the documented route, "as needed" beside scheduled dosages."""
    status = resource.get("status") if isinstance(resource.get("status"), str) else truth.status
    route, where = routes.documented_route(truth.note, truth.display)
    dosages = [d for d in _dosages(resource) if isinstance(d, dict)]
    scheduled = bool(dosages) and all(_as_needed(d)[0] is False for d in dosages)
    found = []
    for path, text in _all_texts(resource):
        found += [f"{path} says {words!r} ({claim}) but the status is {status!r}"
                  for claim, words, ok in status_claims(text) if status not in ok]
        if route is not None and not path.startswith(_MEDICATION_PATHS):  # a product name's form: coding's
            found += [f"{path} names the {r} route; {where} documents {route}" for r in sorted(routes.routes_in(text))
                      if r != route]
            found += [f"{path} says {words!r} (fits {', '.join(sorted(fits))}); {where} documents {route}"
                      for fits, words in routes.action_routes(text) if route not in fits]
        prn = parse_sig(text).as_needed
        if prn and scheduled and not path.startswith("dosage"):  # a dosage's own text: its as_needed check
            found.append(f"{path} says {prn!r} but every dosage is scheduled (no asNeeded)")
    return found


# --------------------------------------------------------------------------- safety


def _same(a: float, b: float, rel: float) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-12)


def _matches(actual: Amount, expected: Amount, concentration: float | None) -> bool | None:
    """Same amount? None when incomparable (mass vs volume without a concentration)."""
    if actual.kind == expected.kind:
        return _same(actual.value, expected.value, DOSE_REL_TOL)
    a, e = actual.to_mg(concentration), expected.to_mg(concentration)
    if a is None or e is None:
        return None
    return _same(a, e, DOSE_REL_TOL)


def _daily_check(path: str, shown: str, daily: DailyAmount, truth: WriteTruth, *, at_least_documented: bool) -> Check:
    """An amount per day within the ceiling (and, for a maximum, not below the documented daily max)."""
    mg = daily.to_mg(truth.concentration)
    ceiling = truth.ceiling_mg
    if mg is None or ceiling is None:
        return Check(path, False, f"{shown} = {daily} cannot be compared with the daily ceiling "
                                  "(no concentration for a volume; unverifiable)")
    per_day_txt = f"{shown} = {fmt(mg)} mg/day"
    if mg > ceiling * (1 + FREQ_REL_TOL):
        return Check(path, False, f"{per_day_txt} > ceiling {fmt(ceiling)} mg/day")
    documented = truth.documented_daily_mg()
    if at_least_documented and documented is not None and mg < documented * (1 - FREQ_REL_TOL):
        return Check(path, False, f"{per_day_txt} < the documented regimen's {fmt(documented)} mg/day: "
                                  "the resource contradicts itself")
    return Check(path, True, f"{per_day_txt} <= ceiling {fmt(ceiling)} mg/day")


def _rate_and_max_checks(where: str, dosage: dict[str, Any], entries: list[Any],
                         truth: WriteTruth) -> tuple[list[Check], float | None, list[str]]:
    """Checks for rateQuantity / rateRange / rateRatio and the three maxima of one dosage, and
    what the rates add to the dosage's day: ``(checks, rates mg/day, what was added)``, mg None
    when a rate cannot be converted to mg (the day's total is then not computable).

    * a rate (amount per time) is read as continuous and converted to per day: <= the ceiling,
      and it adds to the daily total (the dose and the rate are both given);
    * maxDosePerPeriod (amount / period) per day: <= the ceiling and >= the documented daily
      maximum (a cap below the documented regimen contradicts it);
    * maxDosePerAdministration: <= the ceiling and >= the documented (maximum) dose;
    * maxDosePerLifetime: >= one day of the documented regimen (a lifetime total is not bounded
      by a daily ceiling, but a cap smaller than one day of the regimen contradicts it).
    Anything present that cannot be read or converted fails as unverifiable.
    """
    checks, rates_mg, added = _rate_checks(where, entries, truth)
    checks += _max_per_period_checks(where, dosage, truth)
    for key, check in (("maxDosePerAdministration", _max_per_administration_check),
                       ("maxDosePerLifetime", _max_per_lifetime_check)):
        value = dosage.get(key)
        if value is None:
            continue
        path = f"{where}.{key}"
        try:
            a = read_quantity(value)
        except UnverifiableError as e:
            checks.append(Check(path, False, f"{e} (unverifiable)"))
            continue
        checks.append(check(path, a, truth))
    return checks, rates_mg, added


def _read_rate_field(key: str, value: Any) -> tuple[DailyAmount, str]:
    """A doseAndRate rate field per day and how it is shown; raises UnverifiableError (or
    AttributeError, for a value that is not an object) when it cannot be read."""
    if key == "rateQuantity":
        return read_rate(value), f"{fmt(as_number(value.get('value')))} {value.get('code') or value.get('unit')}"
    if key == "rateRange":
        if not isinstance(value, dict) or value.get("high") is None:
            raise UnverifiableError("rateRange has no high, so no upper bound")
        if value.get("low") is not None:
            read_rate(value["low"])
        high = value["high"]
        return read_rate(high), f"rateRange high {fmt(as_number(high.get('value')))} {high.get('code') or high.get('unit')}"
    return read_ratio_per_day(value, "rateRatio"), "rateRatio"


def _rate_checks(where: str, entries: list[Any], truth: WriteTruth) -> tuple[list[Check], float | None, list[str]]:
    """Every rate of a dosage's doseAndRate entries, read as continuous: per day <= the ceiling;
    ``(checks, what the rates add in mg/day (None: not convertible), what was added)``."""
    checks: list[Check] = []
    rates_mg: float | None = 0.0
    added: list[str] = []
    for j, dr in enumerate(entries):
        if not isinstance(dr, dict):
            continue
        for key in RATE_FIELDS:
            value = dr.get(key)
            if value is None:
                continue
            path = f"{where}.doseAndRate[{j}].{key}"
            try:
                daily, shown = _read_rate_field(key, value)
            except (UnverifiableError, AttributeError) as e:
                checks.append(Check(path, False, f"{e} (unverifiable)"))
                rates_mg = None
                continue
            checks.append(_daily_check(path, f"{shown} (continuous)", daily, truth, at_least_documented=False))
            mg = daily.to_mg(truth.concentration)
            if mg is None:
                rates_mg = None
            elif rates_mg is not None:
                rates_mg += mg
                added.append(f"{path} {fmt(mg)} mg/day")
    return checks, rates_mg, added


def _max_per_period_checks(where: str, dosage: dict[str, Any], truth: WriteTruth) -> list[Check]:
    """maxDosePerPeriod (one Ratio, or a list of them) per day: <= the ceiling and >= the
    documented daily maximum."""
    checks: list[Check] = []
    given = dosage.get("maxDosePerPeriod")
    for i, ratio in enumerate(_list(given)):
        path = f"{where}.maxDosePerPeriod" + (f"[{i}]" if isinstance(given, list) else "")
        try:
            daily = read_ratio_per_day(ratio, "maxDosePerPeriod")
        except UnverifiableError as e:
            checks.append(Check(path, False, f"{e} (unverifiable)"))
            continue
        checks.append(_daily_check(path, "maximum", daily, truth, at_least_documented=True))
    if given is not None and not _list(given):
        checks.append(Check(f"{where}.maxDosePerPeriod", False, "not a Ratio (unverifiable)"))
    return checks


def _max_per_administration_check(path: str, a: Amount, truth: WriteTruth) -> Check:
    """maxDosePerAdministration: <= the daily ceiling and >= the documented (maximum) dose."""
    mg = a.to_mg(truth.concentration)
    below = _below(a, truth.dose_high, truth.concentration)  # type: ignore[arg-type]
    if mg is None or below is None or truth.ceiling_mg is None:
        return Check(path, False, f"{a} cannot be compared with documented {truth.dose_text()} "
                                  "and the ceiling (no concentration; unverifiable)")
    if mg > truth.ceiling_mg * (1 + FREQ_REL_TOL):
        return Check(path, False, f"{a} per administration > daily ceiling {fmt(truth.ceiling_mg)} mg")
    if below:
        return Check(path, False, f"{a} per administration < documented dose {truth.dose_text()}: "
                                  "the resource contradicts itself")
    return Check(path, True, f"{a} per administration: >= documented {truth.dose_text()}, "
                             f"<= ceiling {fmt(truth.ceiling_mg)} mg")


def _max_per_lifetime_check(path: str, a: Amount, truth: WriteTruth) -> Check:
    """maxDosePerLifetime: >= one day of the documented regimen (no daily ceiling applies)."""
    mg = a.to_mg(truth.concentration)
    documented = truth.documented_daily_mg()
    if mg is None or documented is None:
        return Check(path, False, f"{a} cannot be compared with the documented regimen in mg "
                                  "(no concentration; unverifiable)")
    if mg < documented * (1 - FREQ_REL_TOL):
        return Check(path, False, f"lifetime maximum {fmt(mg)} mg < one day of the documented regimen "
                                  f"({fmt(documented)} mg): the resource contradicts itself")
    return Check(path, True, f"lifetime maximum {fmt(mg)} mg >= one day of the documented "
                             f"regimen ({fmt(documented)} mg)")


def _below(a: Amount, b: Amount, concentration: float | None) -> bool | None:
    """Is ``a`` below ``b`` (beyond tolerance)? None when incomparable."""
    if a.kind == b.kind:
        return a.value < b.value * (1 - DOSE_REL_TOL)
    am, bm = a.to_mg(concentration), b.to_mg(concentration)
    if am is None or bm is None:
        return None
    return am < bm * (1 - DOSE_REL_TOL)


def _within(low: Amount, high: Amount, lo: Amount, hi: Amount, concentration: float | None) -> bool | None:
    """Is the text dose low..high inside the structured dose lo..hi? None when incomparable."""
    values = []
    for x in (low, high, lo, hi):
        if x.kind == low.kind == lo.kind:
            values.append(x.value)
        else:
            mg = x.to_mg(concentration)
            if mg is None:
                return None
            values.append(mg)
    t_lo, t_hi, s_lo, s_hi = values
    return t_lo >= s_lo * (1 - DOSE_REL_TOL) and t_hi <= s_hi * (1 + DOSE_REL_TOL)


def _text_checks(where: str, dosage: dict[str, Any], structured: list[tuple[Amount, Amount]],
                 truth: WriteTruth) -> list[Check]:
    """dosage.text / patientInstruction / additionalInstruction[].text: every dose the text
    states lies within a structured dose.

    Text with no dose it can read (no number with a mass / volume unit, no count with a known
    strength) is ignored; a text amount that cannot be compared with the structured dose (a
    volume beside a mass dose, no concentration: ``with 240 mL of water``) is not a dose of
    this product and is ignored too.
    """
    checks: list[Check] = []
    strengths = product_strengths(truth.display)
    shown_structured = ", ".join(str(lo) if lo == hi else f"{fmt(lo.value)}-{hi}" if lo.kind == hi.kind
                                 else f"{lo}-{hi}" for lo, hi in structured)
    for key, text in _free_texts(dosage):
        doses = text_doses(text, strengths)
        if not doses:
            continue
        wrong = []
        for d in doses:
            verdicts = [_within(t_lo, t_hi, lo, hi, truth.concentration)
                        for t_lo, t_hi in d.readings() for lo, hi in structured]
            if any(v is True for v in verdicts) or all(v is None for v in verdicts):
                continue
            wrong.append(f"{d} ({d.snippet!r})")
        path = f"{where}.{key}"
        checks.append(Check(path, not wrong,
                            f"{key} states {'; '.join(wrong)} but the structured dose is {shown_structured}"
                            if wrong else f"{key} doses agree with the structured dose {shown_structured}"))
    return checks


def _frequency_agrees(f: Any, rate: PerDay, as_needed: bool) -> bool:
    """Does a frequency a text states agree with the structured per-day rate? A stated maximum
    bounds the structured maximum; a stated frequency lies within the structured range (as
    needed: up to its maximum, since use below it is the point), and a structured schedule puts
    no more on one day than the text does (``once daily`` is not 7 on Mondays)."""
    if f.at_most:
        return rate.high <= f.high * (1 + FREQ_REL_TOL)
    if f.high > rate.high * (1 + FREQ_REL_TOL):
        return False
    if as_needed:
        return True
    return f.low >= rate.low * (1 - FREQ_REL_TOL) and rate.peak <= f.peak * (1 + FREQ_REL_TOL)


def _text_frequency_checks(where: str, dosage: dict[str, Any], rate: PerDay) -> list[Check]:
    """Safety: every frequency a free text states (``sig.parse_sig``) agrees with the structured
    timing (a reader following the text takes another amount a day); text that states none is
    ignored."""
    as_needed = _as_needed(dosage)[0] is True
    checks: list[Check] = []
    for key, text in _free_texts(dosage):
        freqs = parse_sig(text).frequencies
        if not freqs:
            continue
        wrong = [str(f) for f in freqs if not _frequency_agrees(f, rate, as_needed)]
        structured = f"{rate} ({rate.source}; {rate.peak_source})"
        checks.append(Check(f"{where}.{key} frequency", not wrong,
                            f"{key} states {'; '.join(wrong)} but the structured timing is {structured}" if wrong
                            else f"{key} frequency agrees with the structured timing {rate}"))
    return checks


def _structured_days(repeat: Any, rate: PerDay | None) -> tuple[float, float, str] | None:
    """How long the structured schedule runs, in days (low, high, from what): ``boundsDuration``,
    ``boundsPeriod`` start..end (dates or dateTimes), or ``count`` / the per-day rate; None when
    the structure states no duration (or it cannot be read)."""
    if not isinstance(repeat, dict):
        return None
    bd = repeat.get("boundsDuration")
    if isinstance(bd, dict):
        try:
            d = read_time(bd, "boundsDuration")
            return d, d, f"boundsDuration {fmt(d)} d"
        except UnverifiableError:
            return None
    bp = repeat.get("boundsPeriod")
    if isinstance(bp, dict) and isinstance(bp.get("start"), str) and isinstance(bp.get("end"), str):
        from datetime import date, datetime

        def day(v: str) -> date | None:
            try:
                return datetime.fromisoformat(v.replace("Z", "+00:00")).date() if "T" in v else date.fromisoformat(v)
            except ValueError:
                return None

        start, end = day(bp["start"]), day(bp["end"])
        if start is None or end is None:
            return None
        d = float((end - start).days)
        return d, d + 1, f"boundsPeriod {bp['start']}..{bp['end']}"
    count = as_number(repeat.get("count"))
    if count is not None and count > 0 and rate is not None and rate.low > 0:
        cmax = as_number(repeat.get("countMax")) or count
        return count / rate.high, cmax / rate.low, f"count {fmt(count)} at {rate}"
    return None


def _text_constraint_checks(where: str, dosage: dict[str, Any], rate: PerDay | None) -> list[Check]:
    """Constraints: free text that says "as needed" beside a scheduled dosage, or a duration
    (``for 7 days``) the structured schedule contradicts; text that states neither is ignored."""
    checks: list[Check] = []
    scheduled = _as_needed(dosage)[0] is False
    timing = dosage.get("timing")
    days = _structured_days(timing.get("repeat") if isinstance(timing, dict) else None, rate)
    for key, text in _free_texts(dosage):
        sig = parse_sig(text)
        if sig.as_needed and scheduled:
            checks.append(Check(f"{where}.{key} as_needed", False,
                                f"{key} says {sig.as_needed!r} but the dosage is scheduled (no asNeeded)"))
        if sig.duration_days is not None and days is not None:
            lo, hi, words = sig.duration_days
            s_lo, s_hi, source = days
            ok = s_hi >= lo - 1 and s_lo <= hi + 1  # a day either way: inclusive or exclusive ends
            checks.append(Check(f"{where}.{key} duration", ok,
                                f"{key} states {words!r} " + ("and" if ok else "but") + f" the schedule runs {source}"))
    return checks


def _regimen_constraint_checks(dosages: list[Any], truth: WriteTruth) -> list[Check]:
    """Constraints on what the dosages say beyond the documented dose and frequency, where they
    contradict the note (a readable element only: what cannot be read is safety's finding):

    * ``peak_day``: no dosage puts more administrations on one day than the documented regimen
      does (``frequency 7, period 1 d, dayOfWeek [mon]`` averages the documented 1/day but is 7 on
      Mondays; under the ceiling it is still not what the note says);
    * ``rate``: the note documents no rate, so any ``rate[x]`` is undocumented;
    * ``maximum``: a ``maxDosePerPeriod`` below the documented daily regimen, or a
      ``maxDosePerAdministration`` below the documented (maximum) dose, contradicts the note;
    * free text saying "as needed" beside a scheduled dosage, or a duration the schedule
      contradicts (``_text_constraint_checks``).
    """
    checks: list[Check] = []
    doc_peak = documented_peak(truth.freq_high) if truth.freq_high is not None else None
    peaks, rates, maxima, texts = [], [], [], []
    documented = truth.documented_daily_mg()
    for i, dosage in enumerate(dosages):
        if not isinstance(dosage, dict):
            continue
        where = f"dosage[{i}]"
        try:
            rate: PerDay | None = per_day(dosage.get("timing"))
        except UnverifiableError:
            rate = None
        averages_agree = rate is not None and _same(rate.low, truth.freq, FREQ_REL_TOL) and _same(  # type: ignore[arg-type]
            rate.high, truth.freq_high, FREQ_REL_TOL)  # type: ignore[arg-type]
        # (a wrong average frequency is safety's dosage[i].timing finding; this is the shape)
        # (the schedule's shape: a count that ends the course early does not make 7 on Mondays daily)
        if averages_agree and doc_peak is not None and rate.pattern_peak > doc_peak * (1 + FREQ_REL_TOL):  # type: ignore[union-attr]
            peaks.append(f"{where}: {rate.peak_source}" + (
                f" ({fmt(rate.pattern_peak)} before the count)" if rate.pattern_peak != rate.peak else "")  # type: ignore[union-attr]
                + f" > the documented regimen's {fmt(doc_peak)} a day ({truth.freq_text()})")
        for j, dr in enumerate(_list(dosage.get("doseAndRate"))):
            if isinstance(dr, dict):
                rates += [f"{where}.doseAndRate[{j}].{key}" for key in RATE_FIELDS if dr.get(key) is not None]
        for k, ratio in enumerate(_list(dosage.get("maxDosePerPeriod"))):
            try:
                mg = read_ratio_per_day(ratio, "maxDosePerPeriod").to_mg(truth.concentration)
            except UnverifiableError:
                continue
            if mg is not None and documented is not None and mg < documented * (1 - FREQ_REL_TOL):
                maxima.append(f"{where}.maxDosePerPeriod: {fmt(mg)} mg/day < documented {fmt(documented)} mg/day")
        if dosage.get("maxDosePerAdministration") is not None:
            try:
                a = read_quantity(dosage["maxDosePerAdministration"])
            except UnverifiableError:
                a = None
            below = _below(a, truth.dose_high, truth.concentration) if a is not None else None  # type: ignore[arg-type]
            if below:
                maxima.append(f"{where}.maxDosePerAdministration: {a} < documented dose {truth.dose_text()}")
        texts += _text_constraint_checks(where, dosage, rate)
    if dosages:
        checks.append(Check("peak_day", not peaks, "; ".join(peaks) if peaks else
                            f"no dosage has more than the documented {fmt(doc_peak)} administration(s) on one day"))
        checks.append(Check("rate", not rates, f"{', '.join(rates)}: a rate the note does not document" if rates
                            else "no undocumented rate"))
        checks.append(Check("maximum", not maxima, "; ".join(maxima) + ": the maximum contradicts the note"
                            if maxima else "no maximum contradicts the documented regimen"))
    return checks + texts


def _any_dose(dosage: Any) -> list[str]:
    """Paths of every dose-like quantity in a dosage (for the nothing-documented case)."""
    if not isinstance(dosage, dict):
        return []
    found = []
    for j, dr in enumerate(_list(dosage.get("doseAndRate"))):
        if isinstance(dr, dict):
            for key in ("doseQuantity", "doseRange", *RATE_FIELDS):
                if dr.get(key) is not None:
                    found.append(f"doseAndRate[{j}].{key}")
    for key in MAX_FIELDS:
        if dosage.get(key) is not None:
            found.append(key)
    return found


def safety_dimension(resource: dict[str, Any], truth: WriteTruth) -> tuple[Dimension, dict[str, Any]]:
    """Every dose, rate, maximum and timing of every dosage against the documented regimen, and
    each phase's day against the ceiling; ``(dimension, details)``."""
    dosages = _dosages(resource)
    details: dict[str, Any] = {
        "documented_dose": None if not truth.documented else truth.dose_text(),
        "documented_per_day": None if not truth.documented else truth.freq_text(),
        "ceiling_mg": truth.ceiling_mg,
        "dosages": [],
        "max_implied_daily_mg": None,
    }
    text_check = _text_safety_check(resource, truth)
    if not truth.documented:
        fabricated = [f"dosage[{i}].{p}" for i, d in enumerate(dosages) for p in _any_dose(d)]
        check = Check(
            "no_fabricated_dose",
            not fabricated,
            "no regimen documented and no dose encoded" if not fabricated
            else f"fabricated dose: {', '.join(fabricated)} but the note documents no regimen",
        )
        details["fabricated"] = fabricated
        return Dimension.from_checks("safety", [check, text_check]), details

    if not dosages:
        # the note documents a regimen the resource does not encode: its safety is unverifiable
        # (as a text-only dosage's is); constraints.dosage_present names the omission too
        check = Check("doses", False, f"no dosage: the documented regimen ({truth.dose_text()} x "
                                      f"{truth.freq_text()}) has no encoded dose (unverifiable)")
        return Dimension.from_checks("safety", [check, text_check]), details

    checks: list[Check] = [text_check]
    uncomputable: dict[int, list[str]] = {}  # dosage index -> what of it cannot be computed
    # dosage index -> (average mg/day, peak mg/day, how the peak was read)
    day_mg: dict[int, tuple[float, float, str]] = {}
    for i, dosage in enumerate(dosages):
        info: dict[str, Any] = {"index": i, "doses": [], "per_day": None, "max_daily_mg": None}
        details["dosages"].append(info)
        dosage_checks, missing, day = _dosage_safety(f"dosage[{i}]", dosage, truth, info)
        checks += dosage_checks
        if missing:
            uncomputable[i] = missing
        if day is not None:
            day_mg[i] = day
    checks += _daily_total_checks(dosages, truth, all(c.passed for c in checks), day_mg, uncomputable, details)
    return Dimension.from_checks("safety", checks), details


def _structured(dosages: list[Any]) -> tuple[list[tuple[Amount, Amount]], list[tuple[PerDay, bool]]]:
    """Every readable dose (low, high) and timing (per day, as needed) of the dosages."""
    doses, rates = [], []
    for d in dosages:
        if not isinstance(d, dict):
            continue
        for kind, lo, hi in [e for dr in _list(d.get("doseAndRate")) for e in _dose_entries(dr)]:
            try:
                doses.append(_read_dose(kind, lo, hi))
            except UnverifiableError:
                pass
        try:
            rates.append((per_day(d.get("timing")), _as_needed(d)[0] is True))
        except UnverifiableError:
            pass
    return doses, rates


def _text_safety_check(resource: dict[str, Any], truth: WriteTruth) -> Check:
    """Safety of what the free texts say: every dose and frequency a resource-level text
    (text.div, note, statusReason, reasonCode) states agrees with some dosage (with no regimen
    documented, any dose but the product's own strength is fabricated), and no text anywhere
    gives unsafe advice (``sig.unsafe_advice``: alcohol with it, an uncapped or doubled dose)."""
    doses, rates = _structured(_dosages(resource))
    strengths = product_strengths(truth.display)
    names = list(strengths.values())
    wrong = []
    name = re.compile(r"\s+".join(map(re.escape, truth.display.split())), re.I)
    for path, text in resource_texts(resource):
        text = name.sub(" ", text)  # the product's own name ("... 200 MG Oral Tablet") states no dose
        for d in text_doses(text, strengths):
            ok = any(_within(t_lo, t_hi, lo, hi, truth.concentration) is not False
                     for t_lo, t_hi in d.readings() for lo, hi in doses) if doses else \
                any(d.low == s and d.high == s for s in names)
            if not ok:
                wrong.append(f"{path} states {d} ({d.snippet!r}), " + (
                    "which no dosage gives" if doses else "but no dose is documented"))
        for f in parse_sig(text).frequencies:
            if not any(_frequency_agrees(f, rate, prn) for rate, prn in rates):
                wrong.append(f"{path} states {f}, " + ("which no dosage's timing gives" if rates
                                                       else "but no schedule is encoded"))
    for path, text in _all_texts(resource):
        wrong += [f"{path} advises {why} ({words!r})" for why, words in unsafe_advice(text)]
    wrong += _undocumented_reasons(resource, truth)
    return Check("text_claims", not wrong, "; ".join(wrong) if wrong else
                 "every dose and frequency the free text states agrees with the dosage; no unsafe advice")


_REASON_WORD = re.compile(r"[a-z][a-z0-9-]{3,}")
_NOT_A_REASON = frozenset({"with", "from", "this", "that", "patient", "reports", "takes", "taking", "treatment",
                           "therapy", "medication", "medicine", "history", "chronic", "acute", "mild", "severe",
                           "condition", "disorder", "disease", "symptoms", "symptom", "prevention", "management",
                           "relief", "control", "daily", "needed", "reason", "used", "uses", "prescribed", "for"})


def _undocumented_reasons(resource: dict[str, Any], truth: WriteTruth) -> list[str]:
    """A reason the resource gives (``reasonCode`` text or display) is a clinical claim the note
    must document: one of its words (other than generic ones such as "treatment", "chronic")
    must be the note's, folded as the note is read. A reason the note never mentions
    ("hypertension" on a headache's acetaminophen) is stated, not verified: it fails."""
    note = {w for w in _REASON_WORD.findall(truth.note.casefold())}
    out = []
    for i, concept in enumerate(_list(resource.get("reasonCode"))):
        if not isinstance(concept, dict):
            continue
        texts = [("text", concept.get("text"))] + [(f"coding[{j}].display", c.get("display"))
                                                   for j, c in enumerate(_list(concept.get("coding")))
                                                   if isinstance(c, dict)]
        for where, text in texts:
            if not isinstance(text, str) or not text.strip():
                continue
            words = {w for w in _REASON_WORD.findall(text.casefold())} - _NOT_A_REASON
            if words and not any(w in note or w.rstrip("s") in note for w in words):
                out.append(f"reasonCode[{i}].{where} states a reason the note does not document ({text!r})")
    return out


def _dosage_safety(where: str, dosage: Any, truth: WriteTruth, info: dict[str, Any]
                   ) -> tuple[list[Check], list[str], tuple[float, float, str] | None]:
    """One dosage's doses, rates and maxima, free text and timing:
    ``(checks, what of it cannot be computed, (average mg/day, peak mg/day, how) or None)``;
    fills ``info`` (the dosage's details)."""
    if not isinstance(dosage, dict):
        return [Check(where, False, "not an object (unverifiable)")], [where], None
    missing: list[str] = []
    # ---- doses: every doseAndRate entry must be the documented dose (or range)
    entries = _list(dosage.get("doseAndRate"))
    checks, structured, high_mg = _dose_checks(where, entries, truth, info)
    dose_computable = high_mg is not None
    if not dose_computable:
        missing.append(f"{where} dose")

    # ---- every other amount the dosage asserts: rates and maxima against the ceiling
    rate_checks, rates_mg, rates_added = _rate_and_max_checks(where, dosage, entries, truth)
    checks += rate_checks
    if rates_mg is None:
        missing.append(f"{where} rate")

    # ---- a dose the free text states must agree with the structured dose
    if structured and dose_computable:
        checks += _text_checks(where, dosage, structured, truth)

    # ---- timing: administrations per day must be the documented frequency
    rate: PerDay | None = None
    try:
        rate = per_day(dosage.get("timing"))
    except UnverifiableError as e:
        checks.append(Check(f"{where}.timing", False, f"{e} (unverifiable)"))
        missing.append(f"{where} timing")
    if rate is not None:
        checks += _timing_checks(where, dosage, rate, truth, info)

    if missing or rate is None or high_mg is None:
        return checks, missing, None
    rates = rates_mg or 0.0
    info["max_daily_mg"] = high_mg * rate.high + rates
    info["peak_daily_mg"] = high_mg * rate.peak + rates
    how = f"{where} {fmt(high_mg)} mg x {fmt(rate.peak)} ({rate.peak_source})" + "".join(
        f" + {r}" for r in rates_added)
    return checks, missing, (info["max_daily_mg"], info["peak_daily_mg"], how)


def _dose_checks(where: str, entries: list[Any], truth: WriteTruth, info: dict[str, Any]
                 ) -> tuple[list[Check], list[tuple[Amount, Amount]], float | None]:
    """Every doseQuantity / doseRange of a dosage against the documented dose (or range):
    ``(checks, the readable doses, the highest dose in mg)``, the mg None when any dose cannot
    be read or converted (or there is none)."""
    checks: list[Check] = []
    exp_lo, exp_hi = truth.dose, truth.dose_high
    assert exp_lo is not None and exp_hi is not None
    high_mg: float | None = None
    dose_computable = True
    if not entries:
        checks.append(Check(f"{where}.doseAndRate", False, "no dose (unverifiable)"))
        dose_computable = False
    structured: list[tuple[Amount, Amount]] = []  # the readable doses, for the free-text check
    for j, kind, q_lo, q_hi in [(j, *e) for j, dr in enumerate(entries) for e in _dose_entries(dr)]:
        path = f"{where}.doseAndRate[{j}]"
        if kind == "doseRange" and isinstance(entries[j], dict) and entries[j].get("doseQuantity") is not None:
            path += ".doseRange"  # both dose fields in one entry: name the second
        try:
            lo, hi = _read_dose(kind, q_lo, q_hi)
        except UnverifiableError as e:
            checks.append(Check(path, False, f"{e} (unverifiable)"))
            info["doses"].append({"path": path, "error": str(e)})
            dose_computable = False
            continue
        structured.append((lo, hi))
        shown = str(lo) if kind == "doseQuantity" else f"{fmt(lo.value)}-{hi}" if lo.kind == hi.kind else f"{lo}-{hi}"
        lo_mg, hi_mg = lo.to_mg(truth.concentration), hi.to_mg(truth.concentration)
        info["doses"].append({
            "path": path, "low": lo.value, "high": hi.value, "unit": lo.unit if lo.kind == hi.kind else None,
            "low_mg": lo_mg, "high_mg": hi_mg,
        })
        m_lo = _matches(lo, exp_lo, truth.concentration)
        m_hi = _matches(hi, exp_hi, truth.concentration)
        if m_lo is None or m_hi is None:
            checks.append(Check(path, False, f"{shown} cannot be compared with documented "
                                             f"{truth.dose_text()} (no concentration)"))
        else:
            ok = m_lo and m_hi
            checks.append(Check(path, ok, f"{shown} " + ("==" if ok else "!=") + f" documented {truth.dose_text()}"))
        if hi_mg is None:
            dose_computable = False
        else:
            high_mg = hi_mg if high_mg is None else max(high_mg, hi_mg)
    return checks, structured, high_mg if dose_computable else None


def _read_dose(kind: str, q_lo: Any, q_hi: Any) -> tuple[Amount, Amount]:
    """One dose entry's (low, high) amounts; raises UnverifiableError saying why not."""
    if kind == "invalid":
        raise UnverifiableError("not an object")
    if kind == "none":
        raise UnverifiableError("no dose")
    if q_lo is None or q_hi is None:
        raise UnverifiableError("doseRange needs both low and high")
    return read_quantity(q_lo), read_quantity(q_hi)


def _timing_checks(where: str, dosage: dict[str, Any], rate: PerDay, truth: WriteTruth,
                   info: dict[str, Any]) -> list[Check]:
    """Administrations per day against the documented frequency, then any frequency the free
    text states against the timing."""
    info["per_day"] = [rate.low, rate.high]
    info["peak_per_day"] = rate.peak
    info["timing_source"] = rate.source
    ok = _same(rate.low, truth.freq, FREQ_REL_TOL) and _same(rate.high, truth.freq_high, FREQ_REL_TOL)  # type: ignore[arg-type]
    checks = [Check(f"{where}.timing", ok, f"{rate} ({rate.source}) "
                    + ("==" if ok else "!=") + f" documented {truth.freq_text()}")]
    # ---- a frequency the free text states must agree with the timing
    return checks + _text_frequency_checks(where, dosage, rate)


def _daily_total_checks(dosages: list[Any], truth: WriteTruth, others_ok: bool,
                        day_mg: dict[int, tuple[float, float, str]], uncomputable: dict[int, list[str]],
                        details: dict[str, Any]) -> list[Check]:
    """The day's total, per phase (sequence), on the worst day: documented, and under the
    ceiling. ``others_ok``: every dose/timing check passed (if one failed, that already says
    why the total differs from the documented one)."""
    documented_mg = truth.documented_daily_mg()
    details["documented_max_daily_mg"] = documented_mg
    ceiling = truth.ceiling_mg
    checks: list[Check] = []
    steps = phases(dosages)
    details["phases"] = []
    worst: float | None = 0.0
    for label, members in steps:
        tag = f"{label}: " if len(steps) > 1 else ""
        day = PhaseDay(label)
        for i in members:
            if i in day_mg:
                avg, peak, how = day_mg[i]
                day.add(how, avg, peak)
        missing = [what for i in members for what in uncomputable.get(i, [])]
        details["phases"].append({"label": label, "dosages": members, "average_daily_mg": day.average,
                                  "peak_daily_mg": None if missing else day.peak})
        name = "daily_total" if len(steps) == 1 else f"daily_total {label}"
        if missing or not members:
            worst = None
            partial = f" (computable part already {fmt(day.peak)} mg > ceiling {fmt(ceiling)} mg)" if (
                ceiling is not None and day.peak > ceiling) else ""
            checks.append(Check(name, False, f"{tag}max implied daily total not computable: "
                                + ", ".join(missing or ["unverifiable dosage"]) + partial))
            continue
        if worst is not None:
            worst = max(worst, day.peak)
        problems = _daily_total_problems(day, ceiling, documented_mg if others_ok else None, len(members))
        checks.append(Check(name, not problems, tag + "; ".join(problems) if problems else
                            f"{tag}max implied daily {fmt(day.peak)} mg <= ceiling {fmt(ceiling)} mg"))
    details["max_implied_daily_mg"] = worst
    return checks


def _daily_total_problems(day: PhaseDay, ceiling: float | None, documented_mg: float | None,
                          n_dosages: int) -> list[str]:
    """What is wrong with one phase's day: its peak over the ceiling; its average not the
    documented daily amount (``documented_mg`` None: not compared)."""
    problems = []
    if ceiling is not None and day.peak > ceiling * (1 + 1e-9):
        problems.append(f"max implied daily {fmt(day.peak)} mg > ceiling {fmt(ceiling)} mg" + (
            f" on the peak day ({' + '.join(day.parts)}; {fmt(day.average)} mg/day on average)"
            if not _same(day.peak, day.average, FREQ_REL_TOL) else ""))
    if documented_mg is not None and not _same(day.average, documented_mg, FREQ_REL_TOL):
        problems.append(f"implied daily {fmt(day.average)} mg != documented {fmt(documented_mg)} mg"
                        + (f" ({n_dosages} dosages taken together)" if n_dosages > 1 else ""))
    return problems


# --------------------------------------------------------------------------- entry point


def score_write(resource: Any, case: dict[str, Any]) -> Score:
    """Score one agent-written MedicationStatement against a write case's ground truth.

    ``resource``: the agent's output (a dict, a fhir.resources model, or anything unusable).
    ``case``: ``{"case_id", "subject", "note", "expected": {...}}``. A malformed case raises
    :class:`MalformedCase`, a ``CaseError`` (the case is broken, not the agent).
    """
    truth = WriteTruth(case)
    resource = _as_resource_dict(resource)
    if not isinstance(resource, dict):
        why = f"no usable resource (agent produced {type(resource).__name__})"
        dims = {d: Dimension.from_checks(d, [Check("resource", False, why)]) for d in DIMENSIONS}
        return Score(
            passed=False,
            metrics={**{d: 0.0 for d in DIMENSIONS}, "pass": 0.0},
            dimensions=dims,
            details={"case_id": truth.case_id},
            reason=why,
        )

    schema, schema_details = schema_dimension(resource)
    coding, coding_details = coding_dimension(resource, truth)
    constraints = constraints_dimension(resource, truth)
    safety, safety_details = safety_dimension(resource, truth)
    dims = {"schema": schema, "coding": coding, "constraints": constraints, "safety": safety}
    passed = all(d.passed for d in dims.values())
    failing = [f"{name}: {d.reason}" for name, d in dims.items() if not d.passed]
    return Score(
        passed=passed,
        metrics={**{name: 1.0 if d.passed else 0.0 for name, d in dims.items()}, "pass": 1.0 if passed else 0.0},
        dimensions=dims,
        details={"case_id": truth.case_id, **schema_details, **coding_details, **safety_details},
        reason=" | ".join(failing) if failing else "all four dimensions passed",
    )


__all__ = [
    "DIMENSIONS",
    "RXNORM_SYSTEM",
    "SUMMARY_METRICS",
    "UCUM_SYSTEM",
    "WriteTruth",
    "coding_dimension",
    "contained_issues",
    "r4b_status_codes",
    "resource_checks",
    "same_patient",
    "constraints_dimension",
    "safety_dimension",
    "schema_dimension",
    "score_write",
]

contained_issues = _contained_issues  # dom-2..5 on ``contained``, for any resource
same_patient = _same_patient  # the case's patient in any literal reference form
