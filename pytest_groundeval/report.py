"""The terminal summary: the same figures as the record's summary and gate."""

from __future__ import annotations

from typing import Any

from .tasks import TASKS


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    if value is None:
        return "-"
    return str(value)


def terminal_lines(record: dict[str, Any]) -> list[str]:
    lines = [f"agent: {record['agent']}" + (f"  model: {record['model']}" if record.get("model") else "")]
    for task, summary in record["summary"].items():
        counts = (
            f"{task}: {summary['n_cases']} cases, {summary['n_passed']} passed, "
            f"{summary['n_failed']} failed, {summary['n_errors']} errors"
        )
        if summary.get("n_skipped"):
            counts += f", {summary['n_skipped']} skipped"
        lines.append(counts)
        metrics = TASKS[task].metrics if task in TASKS else ()
        width = max((len(m) for m in metrics), default=0)
        for m in metrics:
            ci = summary.get(f"{m}_ci95")
            ci_text = f"  95% CI [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""
            lines.append(f"  {m:<{width}}  {_fmt(summary.get(m))}{ci_text}")
    gate = record.get("gate")
    if gate is not None:
        for t in gate["thresholds"]:
            if not t["passed"]:
                why = f" ({t['reason']})" if t.get("reason") else ""
                lines.append(
                    f"groundeval gate: MISSED {t['metric']} = {_fmt(t['value'])} < threshold {t['threshold']}{why}"
                )
        lines.append("groundeval gate: " + ("PASSED" if gate["passed"] else "FAILED")
                     + f" ({sum(t['passed'] for t in gate['thresholds'])}/{len(gate['thresholds'])} thresholds met)")
    return lines
