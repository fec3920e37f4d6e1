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


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 case``, ``2 cases`` (``many``: an irregular plural): every count groundeval writes."""
    return f"{n} {word if n == 1 else (many or word + 's')}"


def cost_words(cost_usd: float | None, unpriced: int = 0, unreported: int = 0, priced: int = 0) -> str:
    """The cost as groundeval says it everywhere (terminal, HTML): ``$0.0123``; or "unknown" when
    a case with usage had no price, or its agent ran and reported no usage (unknown, not $0),
    with why and what the priced cases cost."""
    if not unpriced and not unreported:
        return f"${(cost_usd or 0.0):.4f}"
    why = []
    if unpriced:
        why.append(f"{plural(unpriced, 'case')} unpriced")
    if unreported:
        why.append(f"{plural(unreported, 'case')} without reported usage")
    return f"unknown: {', '.join(why)} (${(cost_usd or 0.0):.4f} for the {priced} priced)"


def usage_line(record: RunRecord) -> str:
    """Tokens in and out and the cost (:func:`cost_words`)."""
    u = record.usage
    cost = cost_words(u.cost_usd, u.cases_unpriced, getattr(u, "cases_unreported", 0) or 0, u.cases_priced)
    return f"tokens: {u.input_tokens:,} in, {u.output_tokens:,} out; cost {cost}"


def not_run(case: Any) -> bool:
    """An errored case the harness never ran to its answer (``ErrorInfo.not_run``: ``--max-cost``
    had no room for it, the stop after identical agent errors, a missing prerequisite, another
    case's crash): pytest's skip (``pytest/outcomes.py``), still an error in the record."""
    return case.outcome == "error" and case.error is not None and case.error.not_run


def errors_line(record: RunRecord) -> str | None:
    """The errored cases counted by ``error.kind``, most first, then those not run the same way:
    "errors: 2 timeout, 1 agent; not run: 40 budget"."""
    parts = []
    for label, want in (("errors", False), ("not run", True)):
        kinds = Counter(c.error.kind if c.error is not None else "unknown"
                        for c in record.cases if c.outcome == "error" and not_run(c) == want)
        if kinds:
            parts.append(f"{label}: " + ", ".join(f"{n} {k}" for k, n in
                                                  sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))))
    return "; ".join(parts) or None


def completeness_line(record: RunRecord) -> str:
    """Recorded of selected, and whether that was a subset or cut short (the reporter's own
    lines after the summary say which subset, and why it was cut short)."""
    c = record.completeness
    shard = getattr(c, "shard", None)
    prefix = "completeness: " + (f"shard {shard.index}/{shard.count}, " if shard is not None else "")
    notes = []
    if c.selected is None:
        line = prefix + f"{plural(c.recorded, 'case')} recorded"
        notes.append("selected count unknown")
    else:
        line = prefix + f"{c.recorded}/{c.selected} selected {'case' if c.selected == 1 else 'cases'} recorded"
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
    """``(word, task, reason, cases)`` in the record's order (``word``: ``failed``, ``error`` or
    ``not run``): the cases that errored, or were not run, the very same way (an agent bug hitting
    every case, the cases not run after the consecutive-error stop) together, also when their
    messages differ only by ids and numbers (``errortext.signature``: a server's error bodies
    naming each call's id), shown with the first case's message; each failure on its own (its
    reason is its own)."""
    from pytest_groundeval.run.errortext import signature

    groups: dict[tuple[str, str, str], list[Any]] = {}
    for c in record.cases:
        if c.outcome == "error":
            groups.setdefault(("not run" if not_run(c) else "error", c.task, signature(c.reason)), []).append(c)
        elif c.outcome == "failed":
            groups[(c.outcome, c.task, c.case_id)] = [c]  # a failure: its own line, always
    return [(word, task, cases[0].reason or "", cases) for (word, task, _), cases in groups.items()]


SECTION = "groundeval failures"  # the title of the lines below (the reporter's)


def pointer(task: str, case_id: str, n: int) -> str:
    """What pytest's own line for one case of a group of ``n`` says instead of the error
    (its short test summary, ``-rfE``: the whole message on CI or under ``-vv``): where the
    one line with the error is."""
    return f"errored as {n - 1} other {task} {'case' if n == 2 else 'cases'} did: one line under '{SECTION}'"


def failure_lines(record: RunRecord, examples: int = 3) -> list[str]:
    """What pytest's short test summary does not say once: the cases that errored the very same
    way, as one line with their count, the first few ids and, for an agent error, the agent's own
    file and line (from the kept traceback); and the cases not run (pytest skips them, listing
    none by default), one line per reason. A failure, and an error of its own, is pytest's one
    line (``FAILED``/``ERROR`` node id - reason), not repeated here."""
    lines = []
    for word, task, reason, cases in failure_groups(record):
        if word == "failed" or (word == "error" and len(cases) == 1):
            continue
        label = "NOT RUN" if word == "not run" else "ERROR"
        where = next((agent_frame(c.error.traceback) for c in cases
                      if c.error is not None and c.error.kind == "agent" and c.error.traceback), None)
        at = f" (at {where})" if where else ""
        if word == "not run":
            reason = reason.removeprefix("not run: ")  # the label says it
        if len(cases) == 1:
            lines.append(f"{label} {task}:{cases[0].case_id}: {reason}{at}")
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
        how.append(f"{plural(len(nodes), 'node id')}")
    shard = getattr(c, "shard", None)
    if shard is not None:
        how.append(f"--groundeval-shard {shard.index}/{shard.count}")
    if sel.get("limit"):
        how.append(f"--groundeval-limit {sel['limit']}")
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


def counts_line(record: RunRecord, task: str) -> str:
    """A task's cases in pytest's words: passed, failed, errors, not run (pytest's skips that
    count as errors in the record), skipped."""
    summary = record.summary[task]
    unrun = sum(1 for c in record.cases if c.task == task and not_run(c))
    line = (f"{task}: {plural(summary.n_cases, 'case')}, {summary.n_passed} passed, {summary.n_failed} failed, "
            f"{plural(summary.n_errors - unrun, 'error')}")
    if unrun:
        line += f", {unrun} not run"
    if summary.n_skipped:
        line += f", {summary.n_skipped} skipped"
    return line


def terminal_lines(record: RunRecord, quiet: bool = False) -> list[str]:
    """The summary; ``quiet`` (``-q``): each task's counts and its headline figure on one line,
    no table of figures."""
    from pytest_groundeval.model import headline_of

    lines = [f"agent: {record.agent}" + (f"  model: {record.model}" if record.model else "")]
    for task, summary in record.summary.items():
        counts = counts_line(record, task)
        if quiet:
            head = headline_of(summary.specs.values())
            value = summary.value(head) if head is not None else None
            lines.append(counts + (f"; {head} {_fmt(value)}" if value is not None else ""))
            continue
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
        lines.append(f"groundeval: {plural(len(warned), 'case')} with warnings (cases[].warnings in the record); "
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
    return (f"groundeval: {plural(n, 'MCP connection')} refused in {plural(len(hit), 'case')} ({ids}; cases[].refused_connections "
            f"in the record); first, {first.task}:{first.case_id}: {who}: {r.reason}")
