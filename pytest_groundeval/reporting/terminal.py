"""The terminal summary: the same figures as the record's summary, usage, completeness and gate.

A figure with no interval in the record (a null ``*_ci95``: fewer than two cases) is printed
without one. The paths are not repeated here: the reporter prints the run record's and the HTML
report's (``HTML report: PATH``) after these lines, the subset and cut-short reasons, and
LangSmith (``integrations/langsmith/``) its experiments' URLs.

Which figures a task shows, and which way a missed threshold was missed, come from the
record's own metric specs (``summary.<task>.specs``): no task needs to be installed."""

from __future__ import annotations

import re
import sysconfig
from collections import Counter
from pathlib import Path
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


# ---------------------------------------------------------------- failures, grouped
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)', re.M)


def _foreign(path: str) -> bool:
    """A frame of groundeval, the standard library or an installed package (not the user's)."""
    p = Path(path)
    if not p.is_absolute() or path.startswith("<"):
        return True
    here = Path(__file__).resolve().parents[1]
    if here in p.parents:
        return True
    installed = {Path(v) for k, v in sysconfig.get_paths().items() if k in ("stdlib", "platstdlib", "purelib", "platlib")}
    return any(root in p.parents for root in installed) or "site-packages" in p.parts


def _frames_part(traceback: str) -> str:
    """The frame lines of a kept traceback (``runner._agent_traceback``: a header, the indented
    frames, then the error's message): never the message, whose text (a server's error body
    quoting the server's own traceback) is no frame of the agent's."""
    lines = traceback.splitlines()
    start = 1 if lines and lines[0].startswith("Traceback") else 0
    end = next((i for i in range(start, len(lines)) if lines[i] and not lines[i][0].isspace()), len(lines))
    return "\n".join(lines[start:end])


def agent_frame(traceback: str | None) -> str | None:
    """Where a kept agent traceback says the agent failed: its own last frame (``FILE:LINE in
    FUNC``), not groundeval's, the standard library's or an installed package's; else the last.
    Read from the traceback's frames only, never from the error's message."""
    frames = list(_FRAME.finditer(_frames_part(traceback or "")))
    if not frames:
        return None
    own = [f for f in frames if not _foreign(f["file"])] or frames
    last = own[-1]
    return f"{last['file']}:{last['line']} in {last['func']}"


def failure_groups(record: RunRecord) -> list[tuple[str, str, str, list[Any]]]:
    """``(outcome, task, reason, cases)`` in the record's order: the cases that errored the
    very same way (an agent bug hitting every case, the cases not run after the
    consecutive-error stop) together, also when their messages differ only by ids and numbers
    (``errortext.signature``: a server's error bodies naming each call's id), shown with the
    first case's message; each failure on its own (its reason is its own)."""
    from pytest_groundeval.run.errortext import signature

    groups: dict[tuple[str, str, str], list[Any]] = {}
    for c in record.cases:
        if c.outcome == "error":
            groups.setdefault((c.outcome, c.task, signature(c.reason)), []).append(c)
        elif c.outcome == "failed":
            groups[(c.outcome, c.task, c.case_id)] = [c]  # a failure: its own line, always
    return [(outcome, task, cases[0].reason or "", cases) for (outcome, task, _), cases in groups.items()]


def pointer(task: str, case_id: str, n: int) -> str:
    """What pytest's own line for one case of a group of ``n`` says instead of the error
    (its short test summary, ``-rfE``: the whole message on CI or under ``-vv``): where the
    one line with the error is."""
    return f"ERROR {task}:{case_id}: errored as {n - 1} other {task} case(s) did: one line under 'groundeval failures'"


def failure_lines(record: RunRecord, examples: int = 3) -> list[str]:
    """The failed and errored cases, one line each (a failure's whole reason); cases that
    errored the very same way as one line with their count and the first few ids. An agent
    error names the agent's own file and line, from the kept traceback."""
    lines = []
    for outcome, task, reason, cases in failure_groups(record):
        label = "ERROR" if outcome == "error" else "FAILED"
        where = next((agent_frame(c.error.traceback) for c in cases
                      if c.error is not None and c.error.kind == "agent" and c.error.traceback), None)
        at = f" (at {where})" if where else ""
        if len(cases) == 1:
            lines.append(f"{label} {task}:{cases[0].case_id}: {cases[0].reason or ''}{at}")
            continue
        ids = ", ".join(c.case_id for c in cases[:examples]) + (f", and {len(cases) - examples} more"
                                                                 if len(cases) > examples else "")
        lines.append(f"{label} {len(cases)} {task} cases: {reason}{at} ({ids})")
    return lines


def subset_line(record: RunRecord) -> str | None:
    """How the user chose a subset, in the words of the options that chose it."""
    c = record.completeness
    if not c.subset:
        return None
    sel = c.selection or {}
    how = []
    if sel.get("keyword"):
        how.append(f"-k {sel['keyword']!r}")
    if sel.get("markexpr"):
        how.append(f"-m {sel['markexpr']!r}")
    if sel.get("last_failed"):
        how.append("--lf")
    nodes = [a for a in sel.get("args") or [] if "::" in a]
    if nodes:
        how.append(f"{_plural(len(nodes), 'node id')}")
    shard = getattr(c, "shard", None)
    if shard is not None:
        how.append(f"--groundeval-shard {shard.index}/{shard.count}")
    if c.selected is None:
        counts = f"{c.deselected} deselected"
    else:
        counts = f"{c.selected} of {c.selected + c.deselected} collected cases selected"
    return f"groundeval: a subset of the cases ({counts})" + (f": {', '.join(how)}" if how else "")


def gate_lines(record: RunRecord) -> list[str]:
    """Each missed threshold, then one verdict (with why, when the run failed it otherwise)."""
    gate = record.gate
    if gate is None:
        return []
    lines = []
    for t in gate.thresholds:
        if not t.passed:
            why = f" ({t.reason})" if t.reason else ""
            task = record.summary.get(t.metric.partition(".")[0])
            spec = task.specs.get(t.key) if task is not None else None
            than = ">" if spec is not None and not spec.higher_is_better and t.value is not None else "<"
            lines.append(f"groundeval gate: MISSED {t.metric} = {_fmt(t.value)} {than} threshold {t.threshold}{why}")
    applied = [t for t in gate.thresholds if t.applied]
    skipped = [t.metric for t in gate.thresholds if not t.applied]
    met = sum(t.passed for t in applied)
    verdict = "PASSED" if gate.passed else "FAILED"
    if not gate.passed and gate.reason:
        verdict += f": {gate.reason}"
    lines.append(f"groundeval gate: {verdict} ({met}/{len(applied)} thresholds met)"
                 + (f"; not applied (no case of their task ran): {', '.join(skipped)}" if skipped else ""))
    return lines


def _no_value_lines(names: list[str]) -> list[str]:
    """The declared figures this run has no value for (a jury's without judges, a precision
    with nothing predicted) on one line, a family sharing a prefix as ``prefix_* (n)``, rather
    than a dash each (the record lists each, with its null)."""
    if not names:
        return []
    families: dict[str, list[str]] = {}
    for n in names:
        families.setdefault(n.split("_", 1)[0], []).append(n)
    parts = [f"{p}_* ({len(ns)})" if len(ns) > 1 else ns[0] for p, ns in families.items()]
    return [f"  no value: {', '.join(parts)}"]


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
        shown = [m for m in metrics if summary.value(m) is not None]
        width = max((len(m) for m in shown), default=0)
        for m in shown:
            ci = summary.ci95(m)
            ci_text = f"  95% CI [{ci[0]:.3f}, {ci[1]:.3f}]" if ci is not None else ""
            lines.append(f"  {m:<{width}}  {_fmt(summary.value(m))}{ci_text}")
        lines += _no_value_lines([m for m in metrics if m not in shown])
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
    refused = refused_line(record)
    if refused is not None:
        lines.append(refused)
    lines += gate_lines(record)
    return lines


def refused_line(record: RunRecord) -> str | None:
    """Connections to a case's MCP tools the harness refused (``cases[].refused_connections``):
    a process that was not the case's agent (another case's command, a detached server), or no
    token. What they asked never ran, so it is in no transcript: said here, once."""
    hit = [c for c in record.cases if c.refused_connections]
    if not hit:
        return None
    n = sum(len(c.refused_connections or []) for c in hit)
    first = hit[0]
    r = first.refused_connections[0]  # type: ignore[index]
    who = f"pid {r.pid}" + (f" ({r.command})" if r.command else "")
    ids = ", ".join(f"{c.task}:{c.case_id}" for c in hit[:5]) + (", ..." if len(hit) > 5 else "")
    return (f"groundeval: {n} MCP connection(s) refused in {len(hit)} case(s) ({ids}; cases[].refused_connections "
            f"in the record); first, {first.task}:{first.case_id}: {who}: {r.reason}")
