"""The terminal summary: the same figures as the record's summary, usage, completeness and gate.

A figure with no interval in the record (a null ``*_ci95``: fewer than two cases) is printed
without one. The paths are not repeated here: the reporter prints the run record's and the HTML
report's (``HTML report: PATH``) after these lines, the subset and cut-short reasons, and
LangSmith (``integrations/langsmith/``) its experiments' URLs.

Which figures a task shows, and which way a missed threshold was missed, come from the
record's own metric specs (``summary.<task>.specs``): no task needs to be installed."""

from __future__ import annotations

from collections import Counter
from typing import Any

from pytest_groundeval.model import RunRecord


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    if value is None:
        return "-"
    return str(value)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def usage_line(record: RunRecord) -> str:
    """Tokens in and out and the cost; "cost unknown" when a case with usage had no price,
    or its agent ran and reported no usage (unknown, not $0)."""
    u = record.usage
    line = f"tokens: {u.input_tokens:,} in, {u.output_tokens:,} out; "
    silent = getattr(u, "cases_unreported", 0)
    if u.cases_unpriced or silent:
        why = []
        if u.cases_unpriced:
            why.append(f"{_plural(u.cases_unpriced, 'case')} unpriced")
        if silent:
            why.append(f"{_plural(silent, 'case')} without reported usage")
        return line + f"cost unknown: {', '.join(why)} (${u.cost_usd:.4f} for the {u.cases_priced} priced)"
    return line + f"cost ${u.cost_usd:.4f}"


def errors_line(record: RunRecord) -> str | None:
    """The errored cases counted by ``error.kind``, most first: "errors: 2 timeout, 1 agent"."""
    kinds = Counter(c.error.kind if c.error is not None else "unknown"
                    for c in record.cases if c.outcome == "error")
    if not kinds:
        return None
    return "errors: " + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0])))


def completeness_line(record: RunRecord) -> str:
    """Recorded of selected, and whether that was a subset or cut short (the reporter's own
    lines after the summary say which subset, and why it was cut short)."""
    c = record.completeness
    shard = getattr(c, "shard", None)
    prefix = "completeness: " + (f"shard {shard.index}/{shard.count}, " if shard is not None else "")
    notes = []
    if c.selected is None:
        line = prefix + f"{c.recorded} cases recorded"
        notes.append("selected count unknown")
    else:
        line = prefix + f"{c.recorded}/{c.selected} selected cases recorded"
    if c.subset:
        notes.append(f"a subset, {c.deselected} deselected")
    if c.cut_short:
        notes.append("cut short")
    return line + (f" ({'; '.join(notes)})" if notes else ", complete")


def terminal_lines(record: RunRecord) -> list[str]:
    lines = [f"agent: {record.agent}" + (f"  model: {record.model}" if record.model else "")]
    for task, summary in record.summary.items():
        counts = (
            f"{task}: {summary.n_cases} cases, {summary.n_passed} passed, "
            f"{summary.n_failed} failed, {summary.n_errors} errors"
        )
        if summary.n_skipped:
            counts += f", {summary.n_skipped} skipped"
        lines.append(counts)
        repeats = (record.repeats or {}).get(task)
        if repeats is not None:  # --repeat N
            lines.append(f"  {repeats.repeats} repeats per case; flaky: " + (", ".join(repeats.flaky_cases) or "none"))
        metrics = [name for name, spec in summary.specs.items() if spec.kind != "count"]  # counts are parts of others
        width = max((len(m) for m in metrics), default=0)
        for m in metrics:
            ci = summary.ci95(m)
            ci_text = f"  95% CI [{ci[0]:.3f}, {ci[1]:.3f}]" if ci is not None else ""
            lines.append(f"  {m:<{width}}  {_fmt(summary.value(m))}{ci_text}")
    lines.append(usage_line(record))
    errors = errors_line(record)
    if errors is not None:
        lines.append(errors)
    lines.append(completeness_line(record))
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
                task = record.summary.get(t.metric.partition(".")[0])
                spec = task.specs.get(t.key) if task is not None else None
                than = ">" if spec is not None and not spec.higher_is_better and t.value is not None else "<"
                lines.append(f"groundeval gate: MISSED {t.metric} = {_fmt(t.value)} {than} threshold {t.threshold}{why}")
        if gate.reason:
            lines.append(f"groundeval gate: {gate.reason}")
        applied = [t for t in gate.thresholds if t.applied]
        skipped = [t.metric for t in gate.thresholds if not t.applied]
        met = sum(t.passed for t in applied)
        lines.append("groundeval gate: " + ("PASSED" if gate.passed else "FAILED")
                     + f" ({met}/{len(applied)} thresholds met)"
                     + (f"; not applied (no case of their task ran): {', '.join(skipped)}" if skipped else ""))
    return lines
