"""The offline, deterministic reference agent (no key, no network).

Extraction: reads the bundle through HealthChain's own readers (``load_bundle`` +
``get_medications(status="active")``), an independent cross-check of groundeval's
ground-truth code, not a copy of it. Where the two disagree that is a finding (see
FRICTION.md), and neither side is bent to agree.

Write: a rule-based note parser that uses the same FHIR tools an LLM agent would.
"""

from __future__ import annotations

import json
from typing import Any

from .base import AgentOutput


class BaselineAgent:
    name = "baseline"
    model = None

    def run(self, prompt: str) -> str:
        raise TypeError("the baseline agent reads structured task inputs; it is driven through run_case()")

    def run_case(self, task: str, prompt: str, inputs: dict[str, Any]) -> AgentOutput:
        if task == "extraction":
            return AgentOutput(text=self.extract(inputs["bundle_json"]))
        if task == "write":
            from .baseline_write import run_baseline_write

            out = run_baseline_write(inputs["note"], inputs["subject"])
            resource = out.get("resource")
            return AgentOutput(
                text=json.dumps(resource) if resource is not None else "",
                resource=resource,
                transcript=out.get("transcript"),
                steps=len(out.get("transcript") or []),
            )
        raise ValueError(f"the baseline agent has no strategy for task {task!r}")

    @staticmethod
    def extract(bundle_json: str) -> str:
        from healthchain.fhir import get_medications, load_bundle

        bundle = load_bundle(bundle_json, version="R4B")
        meds: dict[str, str | None] = {}
        for entry in get_medications(bundle, status="active"):
            if entry.resource_type == "MedicationRequest" and entry.code:
                meds.setdefault(entry.code, entry.display)
        return json.dumps({"active_medications": [{"code": c, "display": d} for c, d in meds.items()]})
