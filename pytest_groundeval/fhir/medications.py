"""FHIR facts shared by tasks and scripts: the RxNorm system, finding a concept's RxNorm
coding, and reading a bundle's MedicationRequests (inline or by ``medicationReference``
resolved inside the bundle). One copy; eval rules (what counts as truth) stay in tasks.

Everything read here is read strictly: a field of the wrong JSON type, or a bundle that is
not FHIR R4/R4B (a resource, a field or a version hint of another FHIR version), is a
:class:`CaseError` naming the file and the field -- never an exception of the reader and
never a smaller (or empty) truth."""

from __future__ import annotations

import functools
import json
import re
from typing import Any, Iterable

from pytest_groundeval.fhir.codes import FHIR_VERSION_TAG, RXNORM
from pytest_groundeval.tasks.jsontext import json_kind
from pytest_groundeval.model import CaseError


# Resource types R4/R4B do not have, with the version that has them.
OTHER_VERSION_TYPES: dict[str, str] = {
    "MedicationOrder": "DSTU2 resource (R4 has MedicationRequest)",
    "MedicationPrescription": "DSTU1 resource (R4 has MedicationRequest)",
    "DiagnosticOrder": "DSTU2 resource (R4 has ServiceRequest)",
    "Order": "DSTU2 resource",
    "OrderResponse": "DSTU2 resource",
    "DeviceUseRequest": "DSTU2 resource (R4 has DeviceRequest)",
    "ProcedureRequest": "STU3 resource (R4 has ServiceRequest)",
    "ReferralRequest": "STU3 resource (R4 has ServiceRequest)",
}
# Fields of the medication resources that R4/R4B do not have, with the version that has them.
OTHER_VERSION_FIELDS: dict[str, dict[str, str]] = {
    "MedicationRequest": {
        "context": "STU3 (R4: encounter)",
        "definition": "STU3 (R4: instantiatesCanonical)",
        "medication": "R5 (R4: medicationCodeableConcept / medicationReference)",
        "reported": "R5 (R4: reportedBoolean / reportedReference)",
        "informationSource": "R5",
        "renderedDosageInstruction": "R5",
    },
    "Medication": {
        "isBrand": "DSTU2/STU3",
        "isOverTheCounter": "STU3",
        "package": "DSTU2/STU3",
        "image": "STU3",
        "product": "DSTU2",
        "doseForm": "R5 (R4: form)",
        "totalVolume": "R5",
        "marketingAuthorizationHolder": "R5",
        "definition": "R5",
    },
}
_R4_RELEASE = re.compile(r"^(4\.0|4\.3)(\.\d+)?(-.*)?$|^R4B?$", re.IGNORECASE)  # R4 4.0.x, R4B 4.3.x
# a core profile of another release: .../fhir/STU3/StructureDefinition/..., or a |3.0.2 version
_OTHER_PROFILE = re.compile(
    r"hl7\.org/fhir/(DSTU1|DSTU2|STU3|R5|R6|0\.\d+|1\.\d+|3\.\d+|5\.\d+|6\.\d+)/"
    r"|^https?://hl7\.org/fhir/StructureDefinition/[^|]*\|(?!4\.0|4\.3)\d", re.IGNORECASE)


_kind = json_kind  # a JSON value's type, as a message names it


def _wrong(where: str, field: str, value: Any, expected: str) -> CaseError:
    return CaseError(f"{where}: {field} is {_kind(value)}, expected {expected}")


def rxnorm_coding(concept: Any, where: str = "CodeableConcept", field: str = "CodeableConcept") -> dict[str, Any] | None:
    """The coding of a CodeableConcept whose system is RxNorm (first such with a code), or
    None (no concept, no coding, no RxNorm coding). The concept, its ``coding`` list, a
    coding, or an RxNorm coding's ``code`` / ``display`` of the wrong JSON type is a
    :class:`CaseError` naming ``where`` and the field (``field`` names the concept)."""
    if concept is None:
        return None
    if not isinstance(concept, dict):
        raise _wrong(where, field, concept, "an object (a CodeableConcept)")
    codings = concept.get("coding")
    if codings is None:
        return None
    if not isinstance(codings, list):
        raise _wrong(where, f"{field}.coding", codings, "a list")
    for i, coding in enumerate(codings):
        if not isinstance(coding, dict):
            raise _wrong(where, f"{field}.coding[{i}]", coding, "an object (a Coding)")
        if coding.get("system") != RXNORM:
            continue
        code, display = coding.get("code"), coding.get("display")
        if code is not None and not isinstance(code, str):
            raise _wrong(where, f"{field}.coding[{i}].code", code, "a string")
        if display is not None and not isinstance(display, str):
            raise _wrong(where, f"{field}.coding[{i}].display", display, "a string")
        if code:
            return coding
    return None


@functools.lru_cache(maxsize=4096)  # (the same few profile URLs on every resource of every bundle)
def _other_profile(profile: str) -> bool:
    return _OTHER_PROFILE.search(profile) is not None


def _other_version(res: dict[str, Any]) -> str | None:
    """Why ``res`` (a resource or the Bundle) is not R4/R4B, or None: a resource type or a
    field of another FHIR version, or a ``meta`` hint (a core profile of another release,
    a FHIR-version tag) naming another version."""
    rtype = res.get("resourceType")
    if rtype in OTHER_VERSION_TYPES:
        return f"is a {OTHER_VERSION_TYPES[rtype]}"
    for field, version in OTHER_VERSION_FIELDS.get(rtype, {}).items():
        if field in res:
            return f"has {field!r}, a field of {rtype} in FHIR {version}"
    if rtype == "MedicationRequest" and isinstance(res.get("requester"), dict) and (
            "agent" in res["requester"] or "onBehalfOf" in res["requester"]):
        key = "agent" if "agent" in res["requester"] else "onBehalfOf"
        return f"has requester.{key}, STU3's requester (R4: requester is the Reference itself)"
    hint = res.get("fhirVersion") if rtype == "Bundle" else None  # not an R4 Bundle field, but exports write it
    if isinstance(hint, str) and not _R4_RELEASE.match(hint.strip()):
        return f"says fhirVersion {hint!r}"
    meta = res.get("meta")
    if isinstance(meta, dict):
        profiles, tags = meta.get("profile"), meta.get("tag")
        for profile in profiles if isinstance(profiles, list) else []:
            if isinstance(profile, str) and _other_profile(profile):
                return f"claims the profile {profile!r} of another FHIR version"
        for tag in tags if isinstance(tags, list) else []:
            if isinstance(tag, dict) and tag.get("system") == FHIR_VERSION_TAG and isinstance(tag.get("code"), str) \
                    and not _R4_RELEASE.match(tag["code"].strip()):
                return f"is tagged FHIR version {tag['code']!r}"
    return None


def _resolve_medication(ref: str, request: dict, where: str, by_url: dict, by_type_id: dict) -> dict | None:
    if ref.startswith("#"):
        contained = request.get("contained")
        if contained is not None and not isinstance(contained, list):
            raise _wrong(where, "contained", contained, "a list")
        for item in contained or []:
            if isinstance(item, dict) and item.get("id") == ref[1:]:
                return item
        return None
    if ref in by_url:
        return by_url[ref]
    if "/" in ref and not ref.startswith("urn:"):
        rtype, _, rid = ref.rpartition("/")
        return by_type_id.get((rtype.rsplit("/", 1)[-1], rid))
    return None


def bundle_resources(bundle: Any, source: str) -> list[tuple[str | None, dict]]:
    """``(fullUrl, resource)`` of every entry; a non-Bundle, a Bundle without a Patient, an
    entry / ``fullUrl`` / resource / ``resourceType`` / ``id`` of the wrong JSON type, or a
    bundle that is not FHIR R4/R4B (:func:`_other_version`) is a :class:`CaseError` naming
    ``source``."""
    if not isinstance(bundle, dict) or bundle.get("resourceType") != "Bundle":
        kind = bundle.get("resourceType") if isinstance(bundle, dict) else type(bundle).__name__
        raise CaseError(f"{source}: not a FHIR Bundle (resourceType={kind!r})")
    why = _other_version(bundle)
    if why:
        raise CaseError(f"{source}: not a FHIR R4 bundle: the Bundle {why}")
    entries = bundle.get("entry")
    if entries is not None and not isinstance(entries, list):
        raise _wrong(source, "Bundle.entry", entries, "a list")
    resources: list[tuple[str | None, dict]] = []
    for i, entry in enumerate(entries or []):
        if not isinstance(entry, dict):
            raise CaseError(f"{source}: Bundle.entry[{i}] is {_kind(entry)}, expected an object")
        res, url = entry.get("resource"), entry.get("fullUrl")
        if res is None:  # an entry without a resource (e.g. a request or a search outcome)
            continue
        if not isinstance(res, dict):
            raise _wrong(f"{source}: Bundle.entry[{i}]", "resource", res, "an object (a resource)")
        if url is not None and not isinstance(url, str):
            raise _wrong(f"{source}: Bundle.entry[{i}]", "fullUrl", url, "a string")
        if not isinstance(res.get("resourceType"), str):
            raise _wrong(f"{source}: Bundle.entry[{i}]", "resource.resourceType", res.get("resourceType"), "a string")
        if res.get("id") is not None and not isinstance(res["id"], str):
            raise _wrong(f"{source}: Bundle.entry[{i}] ({res['resourceType']})", "id", res["id"], "a string")
        why = _other_version(res)
        if why:
            raise CaseError(f"{source}: not a FHIR R4 bundle: Bundle.entry[{i}] ({res['resourceType']}) {why}")
        resources.append((url, res))
    if not any(r["resourceType"] == "Patient" for _, r in resources):
        raise CaseError(f"{source}: the Bundle has no Patient resource")
    return resources


def medication_requests(bundle: Any, source: str, statuses: Iterable[str]) -> list[tuple[str, dict[str, Any]]]:
    """``(status, rxnorm_coding)`` of every MedicationRequest whose status is in ``statuses``,
    in bundle order, leaving out requests with ``doNotPerform: true`` (FHIR R4
    MedicationRequest.doNotPerform is a modifier element: "If true indicates that the
    provider is asking for the medication request not to occur"; such a request is not a
    medication the patient takes). A request in those statuses whose medication cannot be resolved, or
    has no RxNorm coding, is a :class:`CaseError` (never a smaller answer); so is a request
    whose ``status`` is missing or not a string (it might be one of ``statuses``)."""
    wanted = set(statuses)
    resources = bundle_resources(bundle, source)
    maps: list[dict] = []  # by fullUrl, by (type, id): built only when a reference needs them
    found: list[tuple[str, dict[str, Any]]] = []
    for _, res in resources:
        if res["resourceType"] != "MedicationRequest":
            continue
        where = f"{source}: MedicationRequest/{res.get('id', '?')}"
        status = res.get("status")
        if not isinstance(status, str):
            raise (CaseError(f"{where}: has no status") if status is None
                   else _wrong(where, "status", status, "a string (a MedicationRequest status code)"))
        if status not in wanted:
            continue
        refused = res.get("doNotPerform")
        if refused is not None and not isinstance(refused, bool):
            raise _wrong(where, "doNotPerform", refused, "a boolean")
        if refused:  # a modifier: this request says NOT to take the medication
            continue
        if "medicationCodeableConcept" in res:
            coding = rxnorm_coding(res["medicationCodeableConcept"], where, "medicationCodeableConcept")
        elif "medicationReference" in res:
            reference = res["medicationReference"]
            if not isinstance(reference, dict):
                raise _wrong(where, "medicationReference", reference, "an object (a Reference)")
            ref = reference.get("reference")
            if ref is not None and not isinstance(ref, str):
                raise _wrong(where, "medicationReference.reference", ref, "a string")
            ref = ref or ""
            if not maps:
                maps += [{url: r for url, r in resources if url},
                         {(r["resourceType"], r["id"]): r for _, r in resources if r.get("id")}]
            med = _resolve_medication(ref, res, where, maps[0], maps[1])
            if med is None:
                raise CaseError(f"{where}: medicationReference {ref!r} cannot be resolved in the bundle")
            coding = rxnorm_coding(med.get("code"), f"{where}: medicationReference {ref!r}", "Medication.code")
        else:
            raise CaseError(f"{where}: {status} request names no medication")
        if coding is None:
            raise CaseError(f"{where}: {status} medication has no RxNorm coding")
        found.append((status, coding))
    return found


def do_not_perform_ids(bundle: Any) -> set[str]:
    """Ids of the MedicationRequests of a loaded (fhir.resources) Bundle with
    ``doNotPerform: true``."""
    out: set[str] = set()
    for entry in getattr(bundle, "entry", None) or []:
        res = getattr(entry, "resource", None)
        if getattr(res, "doNotPerform", None) is True and res.get_resource_type() == "MedicationRequest" and res.id:
            out.add(res.id)
    return out


def distinct_codes(pairs: Iterable[tuple[str, dict[str, Any]]]) -> dict[str, str]:
    """``{code: display}`` distinct by code, first display wins, in order (codes and displays
    are strings: :func:`rxnorm_coding` checked them)."""
    out: dict[str, str] = {}
    for _, coding in pairs:
        out.setdefault(coding["code"], coding.get("display") or "")
    return out


def patient_reference(bundle: Any) -> str:
    """``Patient/<id>`` of the bundle's Patient resource (a loaded Bundle or its JSON),
    or ``"the patient of this record"`` when it has none."""
    if isinstance(bundle, str):
        bundle = json.loads(bundle)
    entries = bundle.get("entry") if isinstance(bundle, dict) else getattr(bundle, "entry", None)
    for entry in entries or []:
        res = entry.get("resource") if isinstance(entry, dict) else getattr(entry, "resource", None)
        if isinstance(res, dict):
            kind, rid = res.get("resourceType"), res.get("id")
        else:
            kind, rid = getattr(res, "get_resource_type", lambda: None)(), getattr(res, "id", None)
        if kind == "Patient" and rid:
            return f"Patient/{rid}"
    return "the patient of this record"



NDC_MAP_FILE = ("terminology", "ndc_rxnorm.json")  # scripts/make_terminology.py writes it


@functools.lru_cache(maxsize=1)
def ndc_rxnorm_map() -> dict[str, str]:
    """The committed RxNorm <-> NDC map of the same products (NDC -> RxNorm code), built by
    ``scripts/make_terminology.py`` from the NDC codings the data pair with an RxNorm coding
    (read once per process; do not mutate the result)."""
    from pytest_groundeval.tasks.resources import data_path

    items = json.loads(data_path(*NDC_MAP_FILE).read_text(encoding="utf-8"))
    return {str(i["ndc"]): str(i["rxnorm_code"]) for i in items}
