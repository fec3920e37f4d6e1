"""The terminal summary: the same figures as the record's summary and gate."""

from __future__ import annotations

from typing import Any, Mapping

from .model import RunRecord


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    if value is None:
        return "-"
    return str(value)


def terminal_lines(record: RunRecord, tasks: Mapping[str, Any]) -> list[str]:
    lines = [f"agent: {record.agent}" + (f"  model: {record.model}" if record.model else "")]
    for task, summary in record.summary.items():
        counts = (
            f"{task}: {summary['n_cases']} cases, {summary['n_passed']} passed, "
            f"{summary['n_failed']} failed, {summary['n_errors']} errors"
        )
        if summary.get("n_skipped"):
            counts += f", {summary['n_skipped']} skipped"
        lines.append(counts)
        metrics = tasks[task].metrics if task in tasks else ()
        width = max((len(m) for m in metrics), default=0)
        for m in metrics:
            ci = summary.get(f"{m}_ci95")
            ci_text = f"  95% CI [{ci[0]:.3f}, {ci[1]:.3f}]" if isinstance(ci, list) else ""
            lines.append(f"  {m:<{width}}  {_fmt(summary.get(m))}{ci_text}")
    warned = [c for c in record.cases if c.warnings]
    if warned:
        first = warned[0]
        lines.append(f"groundeval: {len(warned)} case(s) with warnings (cases[].warnings in the record); "
                     f"first, {first.task}:{first.case_id}: {first.warnings[0]}")
    gate = record.gate
    if gate is not None:
        for t in gate.thresholds:
            if not t.passed:
                why = f" ({t.reason})" if t.reason else ""
                lines.append(f"groundeval gate: MISSED {t.metric} = {_fmt(t.value)} < threshold {t.threshold}{why}")
        if gate.reason:
            lines.append(f"groundeval gate: {gate.reason}")
        applied = [t for t in gate.thresholds if t.applied]
        skipped = [t.metric for t in gate.thresholds if not t.applied]
        met = sum(t.passed for t in applied)
        lines.append("groundeval gate: " + ("PASSED" if gate.passed else "FAILED")
                     + f" ({met}/{len(applied)} thresholds met)"
                     + (f"; not applied (no case of their task ran): {', '.join(skipped)}" if skipped else ""))
    return lines
