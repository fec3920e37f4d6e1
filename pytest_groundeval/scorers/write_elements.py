"""The write task's declared elements: what a MedicationStatement may hold, and where its free
text is (the default-deny walker is :mod:`pytest_groundeval.scorers.elements`).

Every element of the written resource is one of:

**verified** against the case's truth, by the dimension named:

* ``status`` (constraints); ``subject.reference`` / ``subject.type`` (constraints: the case's
  patient in any literal form); ``informationSource`` (constraints: only the case's patient,
  "patient reported", by the same rules as ``subject``; no one else the case knows);
  ``effective[x]`` (constraints: each date must be one the note states); ``subject.display`` and ``subject.identifier`` (constraints:
  the case records the patient only by reference, so a display may say only "patient" and the
  id, and an identifier's value must be the id: a name or identifier of anyone is another
  patient's until the case can confirm it, as orders fails one that names another patient);
* ``medicationCodeableConcept`` and ``medicationReference.reference``, and ``contained``
  Medications (``code``, ``ingredient``, ``form``): coding (every coding must denote the
  product: RxNorm by its code, NDC through the committed concept map, any other coding only
  when it has no display and its code denotes no other product);
* ``dosage``: ``sequence`` (phases), ``timing`` (``repeat`` frequency / period / ``when`` /
  ``timeOfDay`` / ``dayOfWeek`` / ``count`` / bounds, and a GTS ``code``), ``asNeeded[x]``,
  ``route``, ``method`` and ``site`` (constraints: each must fit the documented route),
  ``doseAndRate`` doses and rates and the three maxima (safety).

**inert** (says nothing clinical): ``id``, ``meta``, ``language``, ``text.status``, the
resource's own ``identifier``, ``dateAsserted`` (when it was recorded), ``note.time`` /
``note.authorReference`` (who wrote a note), ``dosage.doseAndRate.type`` (ordered vs calculated),
a contained resource's ``id``.

**free text**, read for claims that must agree with the verified structure
(:func:`pytest_groundeval.scorers.write.score_write`: drugs, doses, frequencies, as-needed,
durations, statuses, routes / actions, dangerous instructions): ``text.div`` (XHTML, read
without its tags), ``note.text`` and ``note.authorString``, ``meta`` tag and security
displays (a string a reader sees, inside otherwise inert elements), ``statusReason`` and ``reasonCode`` (text and coding
displays), ``medicationCodeableConcept.text`` / ``medicationReference.display`` (also coding's),
and per dosage ``text``, ``patientInstruction``, ``additionalInstruction`` (text and coding
displays), ``timing.code.text`` and ``asNeededCodeableConcept`` (text and coding displays).

Everything else fails schema as ``unverified element: <path>``: ``extension``, ``category``,
``basedOn`` / ``partOf`` / ``derivedFrom`` / ``context``,
``reasonReference``, codes of ``statusReason`` / ``reasonCode`` / ``additionalInstruction`` /
``asNeededCodeableConcept`` (their displays are read, a code nobody maps is not),
``timing.event`` / ``repeat.duration`` / ``repeat.offset`` / ``repeat.boundsRange``, and any
contained resource that is not a Medication.
"""

from __future__ import annotations

import html
import re
from typing import Any

from pytest_groundeval.scorers.elements import ElementSchema, text_elements

_TIMING = ("timing.repeat.frequency", "timing.repeat.frequencyMax", "timing.repeat.period", "timing.repeat.periodMax",
           "timing.repeat.periodUnit", "timing.repeat.when", "timing.repeat.timeOfDay", "timing.repeat.dayOfWeek",
           "timing.repeat.count", "timing.repeat.countMax", "timing.repeat.boundsDuration",
           "timing.repeat.boundsPeriod", "timing.code.coding")
_DOSAGE_VERIFIED = ("sequence", "asNeededBoolean", "asNeededCodeableConcept", "route", "method", "site",
                    "doseAndRate.doseQuantity", "doseAndRate.doseRange", "doseAndRate.rateQuantity",
                    "doseAndRate.rateRange", "doseAndRate.rateRatio", "maxDosePerPeriod",
                    "maxDosePerAdministration", "maxDosePerLifetime") + _TIMING
_DOSAGE_TEXT = ("text", "patientInstruction", "additionalInstruction.text", "additionalInstruction.coding.display",
                "timing.code.text", "asNeededCodeableConcept.text", "asNeededCodeableConcept.coding.display")
_MEDICATION = ("code", "ingredient.itemCodeableConcept", "ingredient.itemReference", "ingredient.strength",
               "ingredient.isActive", "form")

MEDICATION_STATEMENT = ElementSchema(
    "MedicationStatement",
    verified=("status", "subject", "informationSource.reference", "informationSource.type",
              "informationSource.display", "effectiveDateTime", "effectivePeriod.start", "effectivePeriod.end",
              "medicationCodeableConcept", "medicationReference.reference",
              "contained.resourceType", "implicitRules", "modifierExtension",
              *(f"contained.{p}" for p in _MEDICATION), *(f"dosage.{p}" for p in _DOSAGE_VERIFIED)),
    inert=("id", "meta", "language", "text.status", "identifier", "dateAsserted", "note.time",
           "note.authorReference", "dosage.doseAndRate.type", "contained.id"),
    text=("text.div", "note.text", "note.authorString", "meta.tag.display", "meta.security.display", "statusReason.text", "statusReason.coding.display", "reasonCode.text",
          "reasonCode.coding.display", "medicationCodeableConcept.text", "medicationReference.display",
          *(f"dosage.{p}" for p in _DOSAGE_TEXT)),
)
"""The write task's MedicationStatement (see the module doc for what each element is)."""

# texts of the medication itself: the coding dimension reads them as names of the product
_MEDICATION_TEXTS = ("medicationCodeableConcept", "medicationReference", "contained")
_TAG = re.compile(r"<[^>]*>")


def plain(path: str, text: str) -> str:
    """A free text as a reader sees it: ``text.div`` without its XHTML tags."""
    if path == "text.div":
        return " ".join(html.unescape(_TAG.sub(" ", text)).split())
    return text


def resource_texts(resource: dict[str, Any], *, medication: bool = False) -> list[tuple[str, str]]:
    """(path, text) of every free text of the resource outside its dosages (each dosage's texts
    are read against that dosage: :func:`dosage_texts`); the medication's own text and
    display only with ``medication`` (the coding dimension reads them as the product's name)."""
    skip = ("dosage",) if medication else ("dosage", *_MEDICATION_TEXTS)
    return [(path, plain(path, text)) for path, text in _texts(resource) if not path.startswith(skip)]


def dosage_texts(dosage: dict[str, Any]) -> list[tuple[str, str]]:
    """(path inside the dosage, text) of every free text the schema declares in one dosage:
    ``text``, ``patientInstruction``, ``additionalInstruction[k].text`` and its codings'
    displays, ``timing.code.text``, the as-needed reason."""
    return [(path[len("dosage[0]."):], text) for path, text in _texts({"dosage": [dosage]})]


def _texts(resource: dict[str, Any]) -> list[tuple[str, str]]:
    """The schema's free texts; none for a resource nested too deeply to walk (its schema
    dimension fails: ``verified_elements`` cannot read it either)."""
    try:
        return text_elements(resource, MEDICATION_STATEMENT)
    except RecursionError:
        return []


__all__ = ["MEDICATION_STATEMENT", "dosage_texts", "plain", "resource_texts"]
