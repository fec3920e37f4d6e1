"""FHIR facts shared by tasks and scripts: the RxNorm system, finding a concept's RxNorm
coding, and reading a bundle's MedicationRequests (inline or by ``medicationReference``
resolved inside the bundle). One copy; eval rules (what counts as truth) stay in tasks."""

from __future__ import annotations

from typing import Any, Iterable

from .model import CaseError

RXNORM = "http://www.nlm.nih.gov/research/umls/rxnorm"


def rxnorm_coding(concept: Any) -> dict[str, Any] | None:
    """The coding of a CodeableConcept whose system is RxNorm (first such), or None."""
    if not isinstance(concept, dict):
        return None
    for coding in concept.get("coding") or []:
        if isinstance(coding, dict) and coding.get("system") == RXNORM and coding.get("code"):
            return coding
    return None


def _resolve_medication(ref: str, request: dict, by_url: dict, by_type_id: dict) -> dict | None:
    if ref.startswith("#"):
        for contained in request.get("contained") or []:
            if isinstance(contained, dict) and contained.get("id") == ref[1:]:
                return contained
        return None
    if ref in by_url:
        return by_url[ref]
    if "/" in ref and not ref.startswith("urn:"):
        rtype, _, rid = ref.rpartition("/")
        return by_type_id.get((rtype.rsplit("/", 1)[-1], rid))
    return None


def bundle_resources(bundle: Any, source: str) -> list[tuple[str | None, dict]]:
    """``(fullUrl, resource)`` of every entry; a non-Bundle or a Bundle without a Patient is
    a :class:`CaseError` naming ``source``."""
    if not isinstance(bundle, dict) or bundle.get("resourceType") != "Bundle":
        kind = bundle.get("resourceType") if isinstance(bundle, dict) else type(bundle).__name__
        raise CaseError(f"{source}: not a FHIR Bundle (resourceType={kind!r})")
    resources: list[tuple[str | None, dict]] = []
    for entry in bundle.get("entry") or []:
        res = entry.get("resource") if isinstance(entry, dict) else None
        if isinstance(res, dict):
            resources.append((entry.get("fullUrl"), res))
    if not any(r.get("resourceType") == "Patient" for _, r in resources):
        raise CaseError(f"{source}: the Bundle has no Patient resource")
    return resources


def medication_requests(bundle: Any, source: str, statuses: Iterable[str]) -> list[tuple[str, dict[str, Any]]]:
    """``(status, rxnorm_coding)`` of every MedicationRequest whose status is in ``statuses``,
    in bundle order. A request in those statuses whose medication cannot be resolved, or
    has no RxNorm coding, is a :class:`CaseError` (never a smaller answer)."""
    wanted = set(statuses)
    resources = bundle_resources(bundle, source)
    maps: list[dict] = []  # by fullUrl, by (type, id): built only when a reference needs them
    found: list[tuple[str, dict[str, Any]]] = []
    for _, res in resources:
        if res.get("resourceType") != "MedicationRequest" or res.get("status") not in wanted:
            continue
        where = f"{source}: MedicationRequest/{res.get('id', '?')}"
        if "medicationCodeableConcept" in res:
            coding = rxnorm_coding(res["medicationCodeableConcept"])
        elif isinstance(res.get("medicationReference"), dict):
            ref = res["medicationReference"].get("reference") or ""
            if not maps:
                maps += [{url: r for url, r in resources if url},
                         {(r.get("resourceType"), r.get("id")): r for _, r in resources if r.get("id")}]
            med = _resolve_medication(ref, res, maps[0], maps[1])
            if med is None:
                raise CaseError(f"{where}: medicationReference {ref!r} cannot be resolved in the bundle")
            coding = rxnorm_coding(med.get("code"))
        else:
            raise CaseError(f"{where}: {res.get('status')} request names no medication")
        if coding is None:
            raise CaseError(f"{where}: {res.get('status')} medication has no RxNorm coding")
        found.append((res["status"], coding))
    return found


def distinct_codes(pairs: Iterable[tuple[str, dict[str, Any]]]) -> dict[str, str]:
    """``{code: display}`` distinct by code, first display wins, in order."""
    out: dict[str, str] = {}
    for _, coding in pairs:
        out.setdefault(str(coding["code"]), coding.get("display") or "")
    return out
