"""The arguments of ``build_medication_statement`` for a committed write case: what a correct
tool-using agent passes (the case's expected code, display, status and documented regimen).
One copy for the tests and for the scripted agents they write into pytester projects (which
put this folder on ``sys.path``). Imports nothing."""

from __future__ import annotations

from typing import Any


def build_args(case: dict[str, Any], **override: Any) -> dict[str, Any]:
    """``case``'s expected MedicationStatement as the build tool's flat arguments; ``override``
    replaces any of them (e.g. the code and display a lookup returned)."""
    exp = case["expected"]
    args: dict[str, Any] = {"subject": case["subject"], "status": exp["status"],
                            "rxnorm_code": exp["rxnorm_code"], "display": exp["display"]}
    d = exp["dosage"]
    if d:
        args.update(dose_value=d["dose"]["value"], dose_unit=d["dose"]["unit"],
                    frequency_per_day=d["frequency_per_day"], as_needed=d["as_needed"])
        if d.get("dose_max"):
            args["dose_value_max"] = d["dose_max"]["value"]
        if d.get("frequency_per_day_max"):
            args["frequency_per_day_max"] = d["frequency_per_day_max"]
    args.update(override)
    return args
