"""Validating a MedicationStatement against FHIR R4B: the validate tool (eval-free)."""

from __future__ import annotations

import json
from typing import Any, Dict, List

from pytest_groundeval.fhir.codes import MEDICATION_STATEMENT_STATUSES as R4B_MEDICATION_STATEMENT_STATUSES

def validate_medication_statement(resource: Any) -> Dict[str, Any]:
    """Validate a MedicationStatement (a JSON dict, or a JSON string) against FHIR R4B.

    Runs HealthChain's ``validate_resource`` (structure, types, required
    fields, required code bindings) and checks explicitly that resourceType
    is MedicationStatement and that ``status`` is an R4B code. Never raises.

    Returns ``{"valid": bool, "issues": ["<path>: <problem>", ...]}``.
    """
    issues: List[str] = []
    if isinstance(resource, str):
        try:
            resource = json.loads(resource)
        except ValueError as exc:
            return {"valid": False, "issues": [f"resource is not valid JSON: {exc}"]}
    if not isinstance(resource, dict):
        return {"valid": False, "issues": [f"resource must be a JSON object, got {type(resource).__name__}"]}

    resource_type = resource.get("resourceType")
    if resource_type != "MedicationStatement":
        issues.append(f"resourceType: must be 'MedicationStatement', got {resource_type!r}")
    status = resource.get("status")
    if status is None:
        issues.append("MedicationStatement.status: required (one of "
                      + ", ".join(R4B_MEDICATION_STATEMENT_STATUSES) + ")")
    elif status not in R4B_MEDICATION_STATEMENT_STATUSES:
        issues.append(
            f"MedicationStatement.status: '{status}' is not in the R4B value set ("
            + ", ".join(R4B_MEDICATION_STATEMENT_STATUSES) + ")"
        )

    if resource_type == "MedicationStatement":
        try:
            from healthchain.fhir import validate_resource

            report = validate_resource(resource, "MedicationStatement", version="R4B")
            for issue in report.issues:
                if issue.severity not in ("error", "fatal"):
                    continue
                text = f"{issue.expression or 'MedicationStatement'}: {issue.diagnostics}"
                if issue.expression == "MedicationStatement.status" and any(
                    i.startswith("MedicationStatement.status:") for i in issues
                ):
                    continue  # already reported above
                issues.append(text)
        except Exception as exc:  # never raise into the agent loop
            issues.append(f"validator failed: {type(exc).__name__}: {exc}")

    return {"valid": not issues, "issues": issues}



__all__ = ["validate_medication_statement"]
