"""FHIR code systems and status value sets: the one copy.

The package's modules (tasks, scorers, the report, ``hc_tools``) and the data scripts
(``scripts/make_*.py``) import these names from here; no other module spells a code system
URI or a status value set out. Nothing here imports anything: the module is plain constants,
so the eval-free ``hc_tools`` and a script run from a checkout can both use it.
"""

from __future__ import annotations

# ---------------------------------------------------------------- code systems

#: RxNorm (the NLM's canonical URI, as FHIR R4 names it).
RXNORM = "http://www.nlm.nih.gov/research/umls/rxnorm"
#: UCUM, the system of every FHIR Quantity unit code.
UCUM = "http://unitsofmeasure.org"
#: SNOMED CT (route codes, substance codes).
SNOMED = "http://snomed.info/sct"
#: LOINC (laboratory and vital-sign observations, their orders).
LOINC = "http://loinc.org"
#: US National Drug Codes.
NDC = "http://hl7.org/fhir/sid/ndc"
#: HL7 v3 GTS abbreviations (``BID``, ``TID``, ...) on Timing.code.
GTS = "http://terminology.hl7.org/CodeSystem/v3-GTSAbbreviation"
#: HL7 v3 route of administration (``PO``, ...).
V3_ROUTE = "http://terminology.hl7.org/CodeSystem/v3-RouteOfAdministration"
#: meta.tag system naming a FHIR release.
FHIR_VERSION_TAG = "http://hl7.org/fhir/FHIR-version"

#: Spellings of RxNorm's system seen in the wild that are not the canonical URI: the OID (as
#: ``urn:oid:`` and bare), https, without ``www.``, and the bare name.
RXNORM_ALIASES = (
    "urn:oid:2.16.840.1.113883.6.88",
    "2.16.840.1.113883.6.88",
    RXNORM,
    "https://www.nlm.nih.gov/research/umls/rxnorm",
    "http://nlm.nih.gov/research/umls/rxnorm",
    "rxnorm",
)

# ---------------------------------------------------------------- statuses

#: R4B MedicationStatement.status (required binding, medication-statement-status), in the
#: spec's order. R5's ``recorded`` and ``draft`` are not in it.
MEDICATION_STATEMENT_STATUSES = (
    "active",
    "completed",
    "entered-in-error",
    "intended",
    "stopped",
    "on-hold",
    "unknown",
    "not-taken",
)

#: MedicationRequest.status (R4/R4B, required binding medicationrequest-status).
MEDICATION_REQUEST_STATUSES = (
    "active", "on-hold", "cancelled", "completed", "entered-in-error", "stopped", "draft", "unknown",
)

#: MedicationRequest.intent (R4, required binding medicationrequest-intent).
MEDICATION_REQUEST_INTENTS = (
    "proposal", "plan", "order", "original-order", "reflex-order", "filler-order", "instance-order", "option",
)

#: ServiceRequest.status (R4, required binding request-status).
SERVICE_REQUEST_STATUSES = (
    "draft", "active", "on-hold", "revoked", "completed", "entered-in-error", "unknown",
)

#: ServiceRequest.intent (R4, required binding request-intent).
SERVICE_REQUEST_INTENTS = (
    "proposal", "plan", "directive", "order", "original-order", "reflex-order", "filler-order", "instance-order",
    "option",
)

#: Observation.status (R4, required binding observation-status).
OBSERVATION_STATUSES = (
    "registered", "preliminary", "final", "amended", "corrected", "cancelled", "entered-in-error", "unknown",
)

#: The required status/intent bindings the FHIR server (fhir/server) checks on every write of
#: the resource types the suites write: resource type -> element -> allowed codes.
WRITE_BINDINGS = {
    "ServiceRequest": {"status": SERVICE_REQUEST_STATUSES, "intent": SERVICE_REQUEST_INTENTS},
    "Observation": {"status": OBSERVATION_STATUSES},
    "MedicationRequest": {"status": MEDICATION_REQUEST_STATUSES, "intent": MEDICATION_REQUEST_INTENTS},
    "MedicationStatement": {"status": MEDICATION_STATEMENT_STATUSES},
}

#: The MedicationRequest statuses of a current order.
REQUEST_ACTIVE = ("active",)
#: The MedicationRequest statuses of an ended order (taken once, no longer).
REQUEST_ENDED = ("stopped", "completed")

__all__ = [
    "FHIR_VERSION_TAG",
    "GTS",
    "LOINC",
    "MEDICATION_REQUEST_INTENTS",
    "MEDICATION_REQUEST_STATUSES",
    "MEDICATION_STATEMENT_STATUSES",
    "NDC",
    "OBSERVATION_STATUSES",
    "REQUEST_ACTIVE",
    "REQUEST_ENDED",
    "RXNORM",
    "RXNORM_ALIASES",
    "SERVICE_REQUEST_INTENTS",
    "SERVICE_REQUEST_STATUSES",
    "SNOMED",
    "UCUM",
    "WRITE_BINDINGS",
    "V3_ROUTE",
]
