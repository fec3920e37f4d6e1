"""A FHIR server's state as plain data, and the diff of two states (eval-free).

A state is ``{"<resourceType>/<id>": resource}``: every resource a case's repository holds
(``fhir/server`` dumps it before and after the agent). :func:`diff_states` says what was
created, updated or deleted, with the server's own bookkeeping (``meta.versionId``,
``meta.lastUpdated``, ``meta.author`` and ``meta.project``/``meta.compartment`` that
Medplum's repository sets) left out: a resource rewritten unchanged is not a change.
"""

from __future__ import annotations

from typing import Any, Mapping

from pytest_groundeval.model import FhirChange

SERVER_META = ("versionId", "lastUpdated", "author", "project", "compartment", "source")


def content(resource: Mapping[str, Any]) -> dict[str, Any]:
    """``resource`` without the server's bookkeeping in ``meta`` (an empty ``meta`` dropped)."""
    out = dict(resource)
    meta = out.get("meta")
    if isinstance(meta, Mapping):
        kept = {k: v for k, v in meta.items() if k not in SERVER_META}
        if kept:
            out["meta"] = kept
        else:
            out.pop("meta")
    return out


def state_of(resources: list[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """A state from a list of resources (each with ``resourceType`` and ``id``)."""
    return {f"{r['resourceType']}/{r['id']}": dict(r) for r in resources}


def diff_states(before: Mapping[str, Mapping[str, Any]], after: Mapping[str, Mapping[str, Any]]) -> list[FhirChange]:
    """Every resource that differs between ``before`` and ``after``, in key order."""
    changes: list[FhirChange] = []
    for key in sorted(set(before) | set(after)):
        old, new = before.get(key), after.get(key)
        rtype, _, rid = key.partition("/")
        if old is None and new is not None:
            changes.append(FhirChange(kind="created", resource_type=rtype, id=rid, after=content(new)))
        elif new is None and old is not None:
            changes.append(FhirChange(kind="deleted", resource_type=rtype, id=rid, before=content(old)))
        elif old is not None and new is not None and content(old) != content(new):
            changes.append(FhirChange(kind="updated", resource_type=rtype, id=rid, before=content(old),
                                      after=content(new)))
    return changes
