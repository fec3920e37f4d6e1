"""The HTML report of a run record: one self-contained file, openable from disk.

``groundeval report RUN -o report.html`` (and ``groundeval report BASE NEW -o diff.html``),
or ``--groundeval-html PATH`` at the end of a pytest run. No network: the CSS, the script
and the SVG charts are inline, and the page's Content-Security-Policy allows nothing else
(its one script and one style sheet by hash, no connection, no image but ``data:``).

What is shown, all taken from the record (nothing is recomputed that the record holds), in
the order one looks for it:

* the summary strip: per task its cases by outcome (errors by kind: ``error:agent`` ...; each
  count a button that filters the case table), its headline figure (by the declared kinds:
  the overall F1, else ``pass``, else the first declared figure) with its interval; the gate,
  completeness and cost; with a base run, each task's changed cases and the p-value of its
  paired ``pass`` test;
* the cases, right below (within the first screen): a table the page's script builds from the
  record's cases (inlined as JSON), filtered by outcome (an error is shown, counted and
  filtered as ``error (<kind>)``, never as failed) and task and searched by case id; a row
  opens to predicted vs truth (codes the agent added or missed highlighted), the scorer's
  reason per dimension and check, the tool-call transcript, the raw output and the attempts;
* with a base run: per task the paired tests as ``groundeval compare`` computes them
  (``compare.compare`` over the records, ``intersect``: the metrics, deltas with their 95%
  interval, McNemar / bootstrap p-values; not recomputed here), each run's summary side by
  side, and every case whose outcome changed with its outcome and reason in both runs and
  its task's ``pass`` p-value;
* the run header: agent, model, what was requested, git sha, times, completeness, gate,
  options, versions;
* per task: the outcome counts and every declared summary figure (the record's
  ``summary.<task>.specs``) with its 95% interval;
* charts (inline SVG, drawn here): the pass rate per scoring dimension with its interval
  (tasks whose scorer has dimensions: write), a histogram of per-case F1 (tasks with a
  per-case ``f1``: extraction, reconciliation), and per class of a declared breakdown (the
  prf specs with a ``group``: reconciliation's verdicts) precision / recall / F1 with the
  summed TP / FP / FN;
* tokens and cost, for the run and per task.

The case table is virtualised: its scroll box (sized by the script: as tall as its rows, at
most 75% of the window; a layout boundary) holds only the rows in and near its view, two
spacer rows standing for the others (one-line rows of one measured height; an open row's
detail measured when first shown, later by a ``ResizeObserver``); the search is applied
40 ms after the last keystroke. A 5,000-case page so lays out a few dozen rows per keystroke
(``scripts/bench_report_search.py`` measures it in Chromium).

Every figure is formatted here, once (:func:`num`: 3 decimals; :func:`usd`: 4), and the
script only places the strings: what the page shows is what the record holds. Every record
string is untrusted (agents write it): the server-side parts are HTML-escaped, the JSON
block has ``<``, ``>`` and ``&`` as ``\\u003c`` ... (so no ``</script>`` can end it), and the
script sets text only (``textContent``; no ``innerHTML``).

The script's state is in the URL fragment, so a view can be linked (and tested):
``#q=<id substring>&outcome=failed&task=write&change=changed&case=<task>:<case_id>``;
``outcome=error:<kind>`` keeps one error kind; ``case=`` (``open=``, its older name, works
too; ``[rK]`` after the id names repeat K) opens that case and scrolls it just below the
table's header, on load and when the fragment changes. A script error, or anything the
page's policy blocked (``securitypolicyviolation``), is written into ``#errors`` (also
``console.error``); when the script has run to its end, ``<body>`` carries ``data-ready="1"``.
"""

from __future__ import annotations

import argparse
import base64
import functools
import hashlib
import html
import json
import math
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import orjson

from pytest_groundeval.model import MetricSpec, headline_of
from pytest_groundeval.reporting.terminal import plural
from pytest_groundeval.store.record import escape_unencodable

OUTCOMES = ("passed", "failed", "error", "skipped")
HIST_BINS = tuple(f"{k / 10:.1f}–{(k + 1) / 10:.1f}" for k in range(10)) + ("1.0",)


# ---------------------------------------------------------------- formatting (the one place)
def num(value: Any) -> str:
    """A figure as the page shows it: floats with 3 decimals, integers as they are."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def usd(value: Any) -> str:
    return "–" if value is None else f"${float(value):.4f}"


def interval(ci: Any) -> str:
    if isinstance(ci, (list, tuple)) and len(ci) == 2 and all(_number(x) for x in ci):
        return f"[{float(ci[0]):.3f}, {float(ci[1]):.3f}]"
    return ""


def delta(new: Any, base: Any) -> str:
    if isinstance(new, bool) or isinstance(base, bool) or not (
            isinstance(new, (int, float)) and isinstance(base, (int, float))):
        return ""
    d = new - base
    if isinstance(new, int) and isinstance(base, int):
        return f"{d:+d}"
    return f"{d:+.3f}"


def seconds(value: Any) -> str:
    return "–" if not isinstance(value, (int, float)) else f"{float(value):.3f} s"


def e(value: Any) -> str:
    """Any value as HTML text (attribute-safe)."""
    return html.escape("" if value is None else str(value), quote=True)


def _pretty(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:  # (orjson: the same two-space layout as json.dumps(indent=2), a tenth of its time per case)
        return orjson.dumps(value, default=str, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode()
    except (TypeError, ValueError):
        return str(value)


def _number(x: Any) -> bool:
    """A finite number (NaN and infinities are drawn as nothing, and shown as they are)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


# ---------------------------------------------------------------- what the record holds, per task
def tasks_of(record: Mapping[str, Any]) -> list[str]:
    names = list((record.get("summary") or {}).keys())
    for c in record.get("cases") or []:
        if c.get("task") not in names:
            names.append(c.get("task"))
    return names


def _scored(c: Mapping[str, Any]) -> bool:
    return c.get("outcome") in ("passed", "failed") and isinstance(c.get("score"), dict)


def _metrics(c: Mapping[str, Any]) -> dict[str, Any]:
    return (c.get("score") or {}).get("metrics") or {} if isinstance(c.get("score"), dict) else {}


def f1_bin(f1: float) -> int:
    """Bin ``k`` (0..9) holds ``k/10 <= F1 < (k+1)/10``; bin 10 holds F1 = 1 exactly."""
    if f1 >= 1.0:
        return 10
    return max(0, min(9, math.floor(f1 * 10)))


def specs_of(summary: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The task's declared metrics as the record holds them (``summary.<task>.specs``)."""
    specs = summary.get("specs")
    return {k: v for k, v in specs.items() if isinstance(v, dict)} if isinstance(specs, dict) else {}


def verdict_groups(summary: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """The classes of a per-class breakdown (reconciliation's verdicts: the prf specs declared
    with a ``group``), in declaration order, each with the summary keys of its P/R/F1 and of
    its TP / FP / FN counts."""
    groups: dict[str, dict[str, str]] = {}
    for name, spec in specs_of(summary).items():
        if spec.get("kind") != "prf" or not spec.get("group") or spec.get("figure") not in ("precision", "recall", "f1"):
            continue
        keys = groups.setdefault(str(spec["group"]), {})
        keys[spec["figure"]] = name
        for m, count in zip(("tp", "fp", "fn"), spec.get("counts") or ()):
            keys[m] = count
    return groups


USAGE_KEYS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


class OutcomeCount:
    """Cases per outcome, errors also per kind (``error:agent``), counted case by case."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = dict.fromkeys(OUTCOMES, 0)
        self.kinds: dict[str, int] = {}

    def add(self, c: Mapping[str, Any]) -> None:
        o = str(c.get("outcome"))
        self.counts[o] = self.counts.get(o, 0) + 1
        if o == "error":
            kind = ((c.get("error") or {}) if isinstance(c.get("error"), dict) else {}).get("kind") or "unknown"
            self.kinds[f"error:{kind}"] = self.kinds.get(f"error:{kind}", 0) + 1

    def result(self) -> dict[str, int]:
        """In :data:`OUTCOMES` order, the kinds after ``error`` in order of first appearance."""
        out: dict[str, int] = {}
        for o, n in self.counts.items():
            out[o] = n
            if o == "error":
                out.update(self.kinds)
        return out


class TaskTally:
    """One task's cases as its section and its rows on the page show them, summed one case
    at a time (:class:`Tally`): outcomes, scoring dimensions, per-case F1, the items each
    verdict class names, tokens and cost."""

    def __init__(self, summary: Mapping[str, Any]) -> None:
        self.summary = summary
        self.n = self.run = 0  # cases; cases not skipped
        self.outcomes = OutcomeCount()
        self.dims: dict[str, int] = {}  # dimension (first appearance) -> scored cases that passed it
        self.has_f1, self.f1, self.f1_errors = False, [0] * len(HIST_BINS), 0
        self.groups = verdict_groups(summary)
        self.named = {(g, side): 0 for g in self.groups for side in ("truth", "predicted")}
        self.usage: dict[str, Any] = dict.fromkeys(USAGE_KEYS, 0)
        self.cost, self.priced, self.unpriced = 0.0, 0, 0

    def add(self, c: Mapping[str, Any]) -> None:
        self.n += 1
        self.outcomes.add(c)
        self.run += c.get("outcome") != "skipped"
        scored, metrics = _scored(c), _metrics(c)
        score = c.get("score") if isinstance(c.get("score"), dict) else {}
        for d, v in (score.get("dimensions") or {}).items():
            self.dims[d] = self.dims.get(d, 0) + (scored and isinstance(v, dict) and bool(v.get("passed")))
        self.has_f1 = self.has_f1 or "f1" in metrics
        if scored and _number(metrics.get("f1")):
            self.f1[f1_bin(float(metrics["f1"]))] += 1
        elif c.get("outcome") == "error":
            self.f1_errors += 1  # no score: counted 0 in the summary's means
        if self.groups:
            view = task_view(c)
            for side in ("truth", "predicted") if view is not None else ():
                for item in getattr(view, side) or ():
                    if item.verdict in self.groups:
                        self.named[(item.verdict, side)] += 1
        self._add_usage(c)

    def _add_usage(self, c: Mapping[str, Any]) -> None:
        usage = c.get("usage") or {}
        for k in USAGE_KEYS:
            if _number(usage.get(k)):
                self.usage[k] += int(usage[k])
        if _number(c.get("cost_usd")):
            self.cost += float(c["cost_usd"])
            self.priced += 1
        elif usage:
            self.unpriced += 1

    def dimension_rates(self) -> list[tuple[str, Any, Any]]:
        """``(dimension, pass rate, ci95)`` per dimension, then the overall ``pass`` when the
        summary has it: the summary's figures (computed from the cases only when it lacks one)."""
        rows = []
        for d, passed in self.dims.items():
            value = self.summary.get(d)
            if not _number(value):
                value = round(passed / self.run, 6) if self.run else None
            rows.append((d, value, self.summary.get(f"{d}_ci95")))
        if _number(self.summary.get("pass")) and "pass" not in self.dims:
            rows.append(("pass", self.summary["pass"], self.summary.get("pass_ci95")))
        return rows

    def verdict_rows(self) -> list[dict[str, Any]]:
        """Per verdict class: its P/R/F1 and summed TP / FP / FN (the record's figures), and
        how many truth and answer items name it."""
        rows = []
        for group, keys in self.groups.items():
            row: dict[str, Any] = {"name": group, "keys": keys}
            for m in ("precision", "recall", "f1", "tp", "fp", "fn"):
                row[m] = self.summary.get(keys.get(m, ""))
            for side in ("truth", "predicted"):
                row[side] = self.named[(group, side)]
            rows.append(row)
        return rows

    def usage_row(self) -> dict[str, Any]:
        return {**self.usage, "cost_usd": round(self.cost, 6), "cases_priced": self.priced,
                "cases_unpriced": self.unpriced}


class Tally:
    """A run's cases summed for the page in one pass over them (a large run's cases are read
    one at a time, never held as a list): per task, in the record's order (the summary's
    tasks, then any other a case names), a :class:`TaskTally`; and the outcomes of all."""

    def __init__(self, record: Mapping[str, Any]) -> None:
        summary = record.get("summary") or {}
        self.tasks: dict[Any, TaskTally] = {t: TaskTally(summary.get(t) or {}) for t in summary}
        self.outcomes = OutcomeCount()
        for c in record.get("cases") or []:
            task = self.tasks.get(c.get("task"))
            if task is None:
                task = self.tasks[c.get("task")] = TaskTally({})
            task.add(c)
            self.outcomes.add(c)


# ---------------------------------------------------------------- one case, as the script shows it
@functools.lru_cache(maxsize=None)
def _task_class(name: str) -> Any:
    """The installed task named ``name`` (None: not installed, or the tasks cannot be loaded;
    its cases are then shown without a task view). Cleared by each :func:`render`."""
    from pytest_groundeval.tasks import TaskLoadError, registry

    try:
        return registry().get(name)
    except TaskLoadError:
        return None


def task_view(case: Mapping[str, Any]) -> Any:
    """The case's :class:`~pytest_groundeval.tasks.base.CaseView`, from its task's own
    ``view`` (the report knows no task's shapes); None when the task has none."""
    cls = _task_class(str(case.get("task")))
    return None if cls is None else cls.view(case)


def code_diff(case: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """Truth's codes and the answer's, side by side: ``match``, ``added`` (answered, not in
    the truth), ``missed`` (in the truth, not answered), ``wrong-verdict`` (both, but the
    verdicts differ); ``wrong_name`` where the scorer found the display wrong."""
    view = task_view(case)
    if view is None:
        return None
    truth, pred = view.truth, view.predicted
    if truth is None or (pred is None and case.get("predicted") is not None):
        return None
    if pred is None and case.get("outcome") != "failed":
        return None  # not answered (an error): nothing to compare
    answered: dict[str, Any] = {}
    for p in pred or ():
        answered.setdefault(p.code, p)
    rows, seen = [], set()
    for t in truth:
        if t.code in seen:
            continue
        seen.add(t.code)
        p = answered.get(t.code)
        status = "missed" if p is None else "match"
        if p is not None and t.verdict is not None and p.verdict != t.verdict:
            status = "wrong-verdict"
        rows.append({"code": t.code, "truth_display": t.display, "predicted_display": None if p is None else p.display,
                     "truth_verdict": t.verdict, "predicted_verdict": None if p is None else p.verdict,
                     "status": status, "wrong_name": t.code in view.wrong_names})
    for code, p in answered.items():
        if code not in seen:
            rows.append({"code": code, "truth_display": None, "predicted_display": p.display,
                         "truth_verdict": None, "predicted_verdict": p.verdict, "status": "added",
                         "wrong_name": False})
    return rows


def case_summary(case: Mapping[str, Any]) -> str:
    """The row's one-line score: F1, or each dimension passed (✓) or not (✗)."""
    if not _scored(case):
        return ""
    metrics, dims = _metrics(case), (case.get("score") or {}).get("dimensions") or {}
    if dims:
        return " ".join(f"{d} {'✓' if (v or {}).get('passed') else '✗'}" for d, v in dims.items())
    if _number(metrics.get("f1")):
        return f"F1 {num(float(metrics['f1']))}"
    return ""


def case_view(case: Mapping[str, Any], base: Mapping[str, Any] | None) -> dict[str, Any]:
    score = case.get("score") if isinstance(case.get("score"), dict) else None
    error = case.get("error") if isinstance(case.get("error"), dict) else None
    usage = case.get("usage") if isinstance(case.get("usage"), dict) else None
    reason = reason_of(case)
    tokens = ""
    if usage and (_number(usage.get("input_tokens")) or _number(usage.get("output_tokens"))):
        tokens = f"{num(usage.get('input_tokens'))} / {num(usage.get('output_tokens'))}"
    dims = []
    for name, d in ((score or {}).get("dimensions") or {}).items():
        d = d if isinstance(d, dict) else {}
        dims.append({"name": name, "passed": bool(d.get("passed")), "reason": d.get("reason") or "",
                     "checks": [{"name": ch.get("name"), "passed": bool(ch.get("passed")), "reason": ch.get("reason")}
                                for ch in d.get("checks") or [] if isinstance(ch, dict)]})
    structured = case.get("structured_output")
    view = {
        "key": _key(case),
        "id": case.get("case_id"), "task": case.get("task"), "outcome": case.get("outcome"),
        "kind": (error or {}).get("kind"), "reason": reason, "summary": case_summary(case),
        "duration": seconds(case.get("duration_s")), "tokens": tokens,
        "cost": usd(case.get("cost_usd")) if case.get("cost_usd") is not None else "",
        "agent": case.get("agent"), "model": case.get("model"),
        "attempts": case.get("attempts"), "steps": case.get("steps"),
        "metrics": [[k, num(v)] for k, v in ((score or {}).get("metrics") or {}).items()],
        "dimensions": dims,
        "codes": code_diff(case),
        "predicted": _pretty(case.get("predicted")), "truth": _pretty(case.get("ground_truth")),
        "structured": _pretty(structured) if structured is not None and structured != case.get("predicted") else "",
        "details": _pretty((score or {}).get("details")) if (score or {}).get("details") else "",
        "raw_output": raw if isinstance(raw := case.get("raw_output"), str) else _pretty(raw),
        "error": None if error is None else {k: error.get(k) for k in ("kind", "error_class", "message", "traceback")},
        "usage": _pretty(usage) if usage else "",
        "transcript": case.get("transcript") if isinstance(case.get("transcript"), list) else None,
        "agent_reported": case.get("agent_reported") if isinstance(case.get("agent_reported"), list) else None,
        "attempt_log": [[a.get("attempt"), a.get("error_class") or "", a.get("error") or "",
                         seconds(a.get("duration_s"))] for a in case.get("attempt_log") or [] if isinstance(a, dict)],
        "fhir": _fhir_view(case.get("fhir")),
        "warnings": [str(w) for w in case.get("warnings") or []]
        + [f"truncated (groundeval's output bounds): {t}" for t in case.get("truncated") or []],
    }
    if base is not None:
        view["base_outcome"] = base.get("outcome")
        view["base_kind"] = (base.get("error") or {}).get("kind") if isinstance(base.get("error"), dict) else None
    return view


def outcome_label(case: Mapping[str, Any]) -> str:
    """The outcome as the page writes it: an error with its kind (``error (agent)``)."""
    error = case.get("error") if isinstance(case.get("error"), dict) else None
    outcome = str(case.get("outcome") or "–")
    return f"{outcome} ({error.get('kind')})" if outcome == "error" and error and error.get("kind") else outcome


def reason_of(case: Mapping[str, Any]) -> str:
    """The case's reason (``CaseResult.reason``): the error's message, the scorer's reason, or
    why it was skipped."""
    error = case.get("error") if isinstance(case.get("error"), dict) else None
    score = case.get("score") if isinstance(case.get("score"), dict) else None
    return (error or {}).get("message") or (score or {}).get("reason") or case.get("skip_reason") or ""


def _fhir_view(fhir: Any) -> dict[str, Any] | None:
    """A server-state case's FHIR activity (``CaseResult.fhir``): its requests (each with its
    status and, when the server refused it, why) and the state diff, for the row's detail."""
    if not isinstance(fhir, dict):
        return None
    requests = [r for r in fhir.get("requests") or [] if isinstance(r, dict)]
    changes = [c for c in fhir.get("changes") or [] if isinstance(c, dict)]
    return {
        "base_url": str(fhir.get("base_url") or ""),
        "requests": [[r.get("seq"), str(r.get("method") or ""), str(r.get("path") or ""), r.get("status"),
                      str(r.get("refused") or ""), _pretty(r.get("request")) if r.get("request") is not None else "",
                      _pretty(r.get("response")) if r.get("response") is not None else ""] for r in requests],
        "requests_cut": fhir.get("requests_cut") or 0,
        "changes": [[str(c.get("kind") or ""), f"{c.get('resource_type')}/{c.get('id')}",
                     _pretty(c.get("before")) if c.get("before") is not None else "",
                     _pretty(c.get("after")) if c.get("after") is not None else ""] for c in changes],
    }


# ---------------------------------------------------------------- server-side parts
def _table(head: Iterable[str], rows: Iterable[str], cls: str = "") -> str:
    th = "".join(f"<th>{e(h)}</th>" for h in head)
    return f'<table class="{e(cls)}"><thead><tr>{th}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def _kv(pairs: Iterable[tuple[str, str, str]]) -> str:
    """``(label, field, html)`` rows of a definition list (the html already escaped)."""
    return "<dl class=\"kv\">" + "".join(
        f'<dt>{e(label)}</dt><dd data-field="{e(field)}">{value}</dd>' for label, field, value in pairs) + "</dl>"


def _value(v: Any) -> str:
    if isinstance(v, (dict, list)):
        return f"<code>{e(json.dumps(v, ensure_ascii=False, default=str))}</code>"
    return e(num(v) if isinstance(v, (bool, int, float)) else ("–" if v is None else v))


def _header(record: Mapping[str, Any]) -> str:
    comp = record.get("completeness") or {}
    gate = record.get("gate")
    if comp.get("cut_short"):
        status = f'<span class="bad" data-status="cut-short">cut short</span>: {e(comp.get("reason"))}'
    else:
        status = '<span class="good" data-status="complete">complete</span>'
    if comp.get("subset"):
        status += ' <span class="warn" data-status="subset">(a subset of the cases)</span>'
    shard = comp.get("shard")
    comp_html = status + _kv([
        ("selected", "completeness.selected", _value(comp.get("selected"))),
        ("deselected", "completeness.deselected", _value(comp.get("deselected"))),
        ("recorded", "completeness.recorded", _value(comp.get("recorded"))),
        ("subset", "completeness.subset", _value(comp.get("subset"))),
        ("cut short", "completeness.cut_short", _value(comp.get("cut_short"))),
    ] + ([("shard", "completeness.shard", e(f"{shard.get('index')}/{shard.get('count')}"))]
         if isinstance(shard, dict) else []))
    if gate is None:
        gate_html = '<span data-gate="none">no gate (no threshold set)</span>'
    else:
        word = "PASSED" if gate.get("passed") else "FAILED"
        gate_html = f'<span class="{"good" if gate.get("passed") else "bad"}" data-gate="{word}">{word}</span>'
        if gate.get("reason"):
            gate_html += f" — {e(gate.get('reason'))}"
        rows = []
        for t in gate.get("thresholds") or []:
            ok = "met" if t.get("passed") else "MISSED"
            if t.get("applied") is False:
                ok = "not applied"
            rows.append(f'<tr data-threshold="{e(t.get("metric"))}"><td>{e(t.get("metric"))}</td>'
                        f'<td>{e(num(t.get("value")))}</td><td>{e(num(t.get("threshold")))}</td>'
                        f'<td>{e(ok)}</td><td>{e(t.get("reason") or "")}</td></tr>')
        if rows:
            gate_html += _table(("threshold", "value", "needs ≥", "", "reason"), rows, "gate")
    requested = record.get("requested") or {}
    opts = record.get("options") or {}
    opt_rows = [f'<tr data-option="{e(k)}"><td>{e(k)}</td><td>{_value(v)}</td></tr>' for k, v in opts.items()]
    versions = record.get("versions") or {}
    ver_rows = [f"<tr><td>{e(k)}</td><td>{e(v or '–')}</td></tr>" for k, v in versions.items()]
    return (
        "<section id=\"run\"><h2>Run</h2>" + _kv([
            ("run id", "run_id", e(record.get("run_id"))),
            ("agent", "agent", e(record.get("agent"))),
            ("model", "model", e(record.get("model") or "–")),
            ("requested", "requested", e(", ".join(f"{k}={v}" for k, v in requested.items() if v) or "–")),
            ("git sha", "git_sha", f"<code>{e(record.get('git_sha') or '–')}</code>"),
            ("started", "started_at", e(record.get("started_at"))),
            ("finished", "finished_at", e(record.get("finished_at"))),
            ("record format", "schema_version", e(record.get("schema_version"))),
            ("completeness", "completeness", comp_html),
            ("gate", "gate", gate_html),
        ])
        + "<details><summary>options</summary>" + _table(("option", "value"), opt_rows, "options") + "</details>"
        + "<details><summary>versions</summary>" + _table(("package", "version"), ver_rows, "versions")
        + "</details></section>"
    )


COUNT_LABELS = (("n_cases", "cases"), ("n_passed", "passed"), ("n_failed", "failed"),
                ("n_errors", "errors"), ("n_skipped", "skipped"))


def _task_metrics(task: str, summary: Mapping[str, Any], shown_elsewhere: set[str]) -> str:
    counts = " ".join(
        f'<span class="count {e(label)}"><b data-metric="{e(task)}.{e(key)}">{e(num(summary.get(key)))}</b> '
        f'{e(label)}</span>'
        for key, label in COUNT_LABELS if key in summary)
    rows = []
    for key, spec in specs_of(summary).items():  # every declared figure, in the task's order
        names = [key] + ([f"{key}_n"] if spec.get("among") == "applicable" else [])
        for name in names:
            if name in shown_elsewhere or name not in summary:
                continue
            ci = summary.get(f"{name}_ci95")
            rows.append(f'<tr data-kind="{e(spec.get("kind") if name == key else "count")}"><td>{e(name)}</td>'
                        f'<td class="num" data-metric="{e(task)}.{e(name)}">{_value(summary[name])}</td>'
                        f'<td class="num" data-metric="{e(task)}.{e(name)}_ci95">{e(interval(ci))}</td></tr>')
    return f'<p class="counts">{counts}</p>' + (_table(("metric", "value", "95% interval"), rows, "metrics")
                                                 if rows else "")


def _svg(width: int, height: int, body: str, label: str, cls: str) -> str:
    return (f'<svg class="chart {e(cls)}" xmlns="http://www.w3.org/2000/svg" role="img" aria-label="{e(label)}" '
            f'width="{width}" height="{height}" viewBox="0 0 {width} {height}">{body}</svg>')


def hbar_chart(rows: list[tuple[str, Any, Any]], label: str, attr: str, cls: str = "",
               row_classes: list[str] | None = None) -> str:
    """Horizontal bars on [0, 1]: ``(label, value, ci95)``; the value written beside each."""
    lw, bw, rh, top = 190, 320, 24, 8
    height = top + rh * len(rows) + 22
    width = lw + bw + 70
    parts = []
    for t in (0.0, 0.5, 1.0):
        x = lw + t * bw
        parts.append(f'<line class="grid" x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{height - 18}"/>'
                     f'<text class="tick" x="{x:.1f}" y="{height - 4}" text-anchor="middle">{t:.1f}</text>')
    for i, (name, value, ci) in enumerate(rows):
        y = top + i * rh
        v = float(value) if _number(value) else 0.0
        v = min(max(v, 0.0), 1.0)
        extra = f" {row_classes[i]}" if row_classes else ""
        parts.append(f'<g class="bar-row{e(extra)}" {attr}="{e(name)}">'
                     f'<text class="label" x="{lw - 8}" y="{y + rh / 2 + 4:.1f}" text-anchor="end">{e(name)}</text>'
                     f'<rect class="bar" x="{lw}" y="{y + 4}" width="{v * bw:.1f}" height="{rh - 8}"/>')
        if interval(ci):
            lo, hi = (min(max(float(x), 0.0), 1.0) for x in ci)
            mid = y + rh / 2
            x0, x1 = lw + lo * bw, lw + hi * bw
            parts.append(f'<path class="ci" d="M{x0:.1f} {mid:.1f}H{x1:.1f}M{x0:.1f} {mid - 5:.1f}V{mid + 5:.1f}'
                         f'M{x1:.1f} {mid - 5:.1f}V{mid + 5:.1f}"/>')
        parts.append(f'<text class="value" x="{lw + bw + 8}" y="{y + rh / 2 + 4:.1f}">{e(num(value))}</text></g>')
    return _svg(width, height, "".join(parts), label, cls)


def histogram_chart(counts: list[int], labels: tuple[str, ...], label: str, extra: list[tuple[str, int]]) -> str:
    """Vertical bars, one per bin (and one per extra column, e.g. errors), counts on top."""
    cols = [(lbl, n, "bin") for lbl, n in zip(labels, counts)] + [(lbl, n, "extra") for lbl, n in extra]
    cw, ch, top, bottom = 52, 150, 18, 34
    width, height = cw * len(cols) + 20, top + ch + bottom
    peak = max([n for _, n, _ in cols] + [1])
    parts = [f'<line class="grid" x1="10" y1="{top + ch}" x2="{width - 10}" y2="{top + ch}"/>']
    for i, (lbl, n, kind) in enumerate(cols):
        x = 10 + i * cw
        h = ch * n / peak
        parts.append(f'<g class="hist-bin {kind}" data-bin="{e(lbl)}">'
                     f'<rect class="bar" x="{x + 6}" y="{top + ch - h:.1f}" width="{cw - 12}" height="{h:.1f}"/>'
                     f'<text class="count" x="{x + cw / 2:.1f}" y="{top + ch - h - 4:.1f}" '
                     f'text-anchor="middle">{n}</text>'
                     f'<text class="tick" x="{x + cw / 2:.1f}" y="{top + ch + 16}" '
                     f'text-anchor="middle">{e(lbl)}</text></g>')
    return _svg(width, height, "".join(parts), label, "histogram")


def verdict_chart(rows: list[dict[str, Any]]) -> str:
    """Per verdict, three bars on [0, 1]: precision, recall, F1."""
    flat, classes = [], []
    for r in rows:
        for m in ("precision", "recall", "f1"):
            flat.append((f"{r['name']} · {m}", r[m], None))
            classes.append(f"m-{m}")
    return hbar_chart(flat, "precision, recall and F1 per verdict", "data-verdict-metric", "verdicts", classes)


def _task_section(task: str, tally: TaskTally) -> str:
    summary = tally.summary
    parts = [f'<section class="task" id="task-{e(task)}" data-task="{e(task)}"><h2>{e(task)}</h2>']
    verdicts = tally.verdict_rows()
    elsewhere = {v["keys"][m] for v in verdicts for m in v["keys"]}
    parts.append(_task_metrics(task, summary, elsewhere))
    charts = []
    dims = tally.dimension_rates()
    if dims:
        rows = "".join(f'<tr data-dimension="{e(d)}"><td>{e(d)}</td><td class="num">{e(num(v))}</td>'
                       f'<td class="num">{e(interval(ci))}</td></tr>' for d, v, ci in dims)
        charts.append('<figure class="dimensions"><figcaption>Pass rate per dimension (95% interval)</figcaption>'
                      + hbar_chart(dims, f"{task}: pass rate per dimension", "data-dimension", "dimension-chart")
                      + _table(("dimension", "pass rate", "95% interval"), [rows], "dimension-table") + "</figure>")
    if tally.has_f1:
        counts, errors = tally.f1, tally.f1_errors
        extra = [("error", errors)] if errors else []
        rows = "".join(f'<tr data-bin="{e(lbl)}"><td>{e(lbl)}</td><td class="num">{n}</td></tr>'
                       for lbl, n in list(zip(HIST_BINS, counts)) + extra)
        charts.append('<figure class="f1-histogram"><figcaption>Per-case F1 (cases per bin; "error": no score, '
                      'counted 0)</figcaption>' + histogram_chart(counts, HIST_BINS, f"{task}: per-case F1", extra)
                      + '<details><summary>counts</summary>' + _table(("F1", "cases"), [rows], "hist-table")
                      + "</details></figure>")
    if verdicts:
        rows = []
        for v in verdicts:
            cells = "".join(f'<td class="num" data-metric="{e(task)}.{e(v["keys"].get(m, ""))}">{e(num(v[m]))}</td>'
                            for m in ("precision", "recall", "f1"))
            cells += "".join(f'<td class="num" data-count="{m}" data-metric="{e(task)}.{e(v["keys"].get(m, ""))}">'
                             f'{e(num(v[m]))}</td>' for m in ("tp", "fp", "fn"))
            cells += "".join(f'<td class="num" data-count="{m}">{v[m]}</td>' for m in ("truth", "predicted"))
            rows.append(f'<tr data-verdict="{e(v["name"])}"><td>{e(v["name"])}</td>{cells}</tr>')
        charts.append('<figure class="verdicts"><figcaption>Per verdict</figcaption>' + verdict_chart(verdicts)
                      + _table(("verdict", "precision", "recall", "F1", "TP", "FP", "FN", "in truth", "answered"),
                               rows, "verdict-table") + "</figure>")
    parts.extend(charts)
    parts.append("</section>")
    return "".join(parts)


def _cost(u: Mapping[str, Any], per_task: bool = False) -> str:
    """The cost as the terminal says it (``terminal.cost_words``): "unknown" rather than $0 when
    a case was unpriced or its agent reported no usage (a task's row: unpriced cases only)."""
    from pytest_groundeval.reporting.terminal import cost_words

    if not _number(u.get("cost_usd")) and not u.get("cases_unpriced") and not u.get("cases_unreported"):
        return usd(u.get("cost_usd"))  # an old record with no cost at all: "–"
    return cost_words(u.get("cost_usd"), int(u.get("cases_unpriced") or 0),
                      0 if per_task else int(u.get("cases_unreported") or 0), int(u.get("cases_priced") or 0))


def _usage_section(record: Mapping[str, Any], tally: Tally) -> str:
    u = record.get("usage") or {}
    run = _kv([
        ("input tokens", "usage.input_tokens", e(num(u.get("input_tokens")))),
        ("output tokens", "usage.output_tokens", e(num(u.get("output_tokens")))),
        ("cost", "usage.cost_usd", e(_cost(u))),
        ("cases priced", "usage.cases_priced", e(num(u.get("cases_priced")))),
        ("cases unpriced", "usage.cases_unpriced", e(num(u.get("cases_unpriced")))),
        ("prices as of", "usage.prices_as_of", e(u.get("prices_as_of") or "–")),
        ("prices from", "usage.prices_source", e(u.get("prices_source") or "–")),
    ])
    rows = []
    for task, counted in tally.tasks.items():
        t = counted.usage_row()
        rows.append(f'<tr data-usage-task="{e(task)}"><td>{e(task)}</td>'
                    + "".join(f'<td class="num" data-usage="{k}">{e(num(t[k]))}</td>' for k in USAGE_KEYS)
                    + f'<td class="num" data-usage="cost_usd">{e(_cost(t, per_task=True))}</td>'
                    f'<td class="num" data-usage="cases_priced">{t["cases_priced"]}</td></tr>')
    budget = record.get("budget")
    budget_html = ""
    if isinstance(budget, dict):
        budget_html = "<h3>Budget</h3>" + _kv([
            ("max cost", "budget.max_cost_usd", e(usd(budget.get("max_cost_usd")))),
            ("spent", "budget.spent_usd", e(usd(budget.get("spent_usd")))),
            ("stopped", "budget.stopped", e(num(budget.get("stopped")))),
            ("cases not run", "budget.cases_not_run", e(num(budget.get("cases_not_run")))),
        ])
    return ('<section id="usage"><h2>Tokens and cost</h2>' + run
            + _table(("task", "input tokens", "output tokens", "cache written", "cache read", "cost", "cases priced"),
                     rows, "usage-table") + budget_html + "</section>")


def _key(c: Mapping[str, Any]) -> str:
    """A result's key on the page (``#case=``): ``task:case_id``, and ``[rK]`` for repeat K."""
    repeat = c.get("repeat")
    return f"{c.get('task')}:{c.get('case_id')}" + (f"[r{repeat}]" if repeat is not None else "")


def comparison(base: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The side-by-side of two runs: per task the summary figures of both, and the cases
    whose outcome changed (``regression``: was passed, now not; ``fix``: now passed), each
    with its outcome (an error with its kind) and its reason in both runs."""
    tasks = tasks_of(base) + [t for t in tasks_of(new) if t not in tasks_of(base)]
    summaries = {}
    for t in tasks:
        b, n = (base.get("summary") or {}).get(t) or {}, (new.get("summary") or {}).get(t) or {}
        keys = list(b) + [k for k in n if k not in b]
        summaries[t] = [(k, b.get(k), n.get(k)) for k in keys if not k.endswith("_ci95") and k != "specs"]
    before = {_key(c): c for c in base.get("cases") or []}
    after = {_key(c): c for c in new.get("cases") or []}
    flips = []
    for k, c in after.items():
        if k in before and outcome_label(before[k]) != outcome_label(c):
            was, now = before[k].get("outcome"), c.get("outcome")
            kind = "regression" if was == "passed" else "fix" if now == "passed" else "changed"
            flips.append({"key": k, "task": c.get("task"), "case_id": c.get("case_id"),
                          "base": outcome_label(before[k]), "new": outcome_label(c), "base_outcome": was, "new_outcome": now, "kind": kind,
                          "base_reason": reason_of(before[k]), "new_reason": reason_of(c)})
    return {"tasks": tasks, "summaries": summaries, "flips": flips,
            "only_base": [k for k in before if k not in after], "only_new": [k for k in after if k not in before]}


def paired_tests(base: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[Any, str]:
    """``groundeval compare``'s own comparison of the two records (``compare.compare``, the
    cases both hold: ``intersect``), and why there is none when it refuses them (no task in
    common, a record it cannot read): ``(Comparison | None, message)``."""
    from pydantic import ValidationError

    from pytest_groundeval.model import STORED, RunRecord
    from pytest_groundeval.reporting.compare import CompareError, compare, loaded_run

    try:  # (records read back: an older one says "not run" by its message, model.STORED)
        runs = [loaded_run(RunRecord.model_validate({k: v for k, v in r.items() if k != "reviews"}, context=STORED),
                           f"{side} ({r.get('run_id')})")
                for side, r in (("BASE", base), ("NEW", new))]
        return compare(runs[0], runs[1], intersect=True), ""
    except CompareError as exc:
        return None, str(exc)
    except ValidationError as exc:
        return None, f"a record is not a valid run record ({exc.error_count()} problems): no paired test"


def _p(m: Any, n_resamples: int) -> str:
    from pytest_groundeval.reporting.compare import _fmt_p

    return _fmt_p(m.p_value, n_resamples, m.test)


def _pass_test(task: Any) -> Any:
    """The task's paired test of ``pass`` (compare's first metric), or None."""
    return next((m for m in task.metrics if m.metric == "pass"), None) if task is not None else None


def _comparison_section(base: Mapping[str, Any], new: Mapping[str, Any], paired: Any, refused: str) -> str:
    cmp = comparison(base, new)
    head = _table(("", "base", "new"), [
        f'<tr><td>{e(label)}</td><td data-base="{e(f)}">{e(base.get(f) or "–")}</td>'
        f'<td data-new="{e(f)}">{e(new.get(f) or "–")}</td></tr>'
        for label, f in (("run id", "run_id"), ("agent", "agent"), ("model", "model"), ("git sha", "git_sha"),
                         ("started", "started_at"))], "compare-head")
    parts = ['<section id="comparison"><h2>Comparison with the base run</h2>', head]
    by_task = {t.task: t for t in paired.tasks} if paired is not None else {}
    if paired is None:
        parts.append(f'<p class="warn" data-paired="refused">No paired test: {e(refused)}</p>')
    else:
        parts.append('<p class="method">Paired tests as <code>groundeval compare</code> computes them: '
                     f'{e(_method_text(paired))}.</p>')
        parts += [f'<p class="warn" data-compare-warning>{e(w)}</p>' for w in paired.warnings]
    n_resamples = paired.n_resamples if paired is not None else 0
    for t in cmp["tasks"]:
        parts.append(f"<h3>{e(t)}</h3>")
        tc = by_task.get(t)
        if tc is not None:
            rows = []
            for m in tc.metrics:
                verdict = "REGRESSION" if m.regression else "improved" if m.improvement else ""
                rows.append(f'<tr data-paired="{e(t)}.{e(m.metric)}" class="{"regression" if m.regression else ""}">'
                            f'<td>{e(m.metric)}</td><td class="num" data-side="base">{e(num(m.base))}</td>'
                            f'<td class="num" data-side="new">{e(num(m.new))}</td>'
                            f'<td class="num" data-side="delta">{e(delta(m.new, m.base))}</td>'
                            f'<td class="num" data-side="delta_ci95">{e(interval(m.ci95))}</td>'
                            f'<td data-side="test">{e(m.test or "–")}</td>'
                            f'<td class="num" data-side="p">{e(_p(m, n_resamples))}</td><td>{e(verdict)}</td></tr>')
            parts.append(f'<p class="facts">{tc.n_cases} paired cases</p>'
                         + _table(("metric", "base", "new", "Δ", "Δ 95%", "test", "p", ""), rows, "paired")
                         + "".join(f'<p class="facts note">{e(n)}</p>' for n in tc.notes))
        b_sum, n_sum = (base.get("summary") or {}).get(t) or {}, (new.get("summary") or {}).get(t) or {}
        rows = []
        for k, bv, nv in cmp["summaries"][t]:
            rows.append(f'<tr data-compare="{e(t)}.{e(k)}"><td>{e(k)}</td>'
                        f'<td class="num" data-side="base">{_value(bv)}</td>'
                        f'<td class="num ci">{e(interval(b_sum.get(f"{k}_ci95")))}</td>'
                        f'<td class="num" data-side="new">{_value(nv)}</td>'
                        f'<td class="num ci">{e(interval(n_sum.get(f"{k}_ci95")))}</td>'
                        f'<td class="num" data-side="delta">{e(delta(nv, bv))}</td></tr>')
        parts.append("<details><summary>each run's own summary</summary>"
                     + _table(("metric", "base", "95%", "new", "95%", "Δ"), rows, "compare") + "</details>")
    flips = cmp["flips"]
    n_reg = sum(f["kind"] == "regression" for f in flips)
    n_fix = sum(f["kind"] == "fix" for f in flips)
    parts.append(f'<h3>Outcome changes</h3><p><b data-flips="all">{len(flips)}</b> changed: '
                 f'<b data-flips="regression">{n_reg}</b> regressions, <b data-flips="fix">{n_fix}</b> fixes; '
                 f'<b data-only="base">{len(cmp["only_base"])}</b> only in the base run, '
                 f'<b data-only="new">{len(cmp["only_new"])}</b> only in the new run.</p>')
    if flips:
        rows = []
        for f in flips:
            test = _pass_test(by_task.get(f["task"]))
            p = "–" if test is None else f"{_p(test, n_resamples)} ({test.test or 'no test'})"
            rows.append(
                f'<tr data-flip="{e(f["key"])}" class="{e(f["kind"])}"><td>{e(f["case_id"])}</td>'
                f'<td>{e(f["task"])}</td>'
                f'<td class="outcome {e(f["base_outcome"])}">{e(f["base"])}</td>'
                f'<td class="outcome {e(f["new_outcome"])}">{e(f["new"])}</td>'
                f'<td>{e(f["kind"])}</td><td class="flip-reason" data-side="base">{e(f["base_reason"])}</td>'
                f'<td class="flip-reason" data-side="new">{e(f["new_reason"])}</td>'
                f'<td class="num" data-side="p">{e(p)}</td></tr>')
        parts.append(_table(("case", "task", "base", "new", "", "reason in base", "reason in new",
                             "task's pass: p (test)"), rows, "flips"))
    for side in ("only_base", "only_new"):
        if cmp[side]:
            parts.append(f"<details><summary>only in the {side[5:]} run</summary><ul>"
                         + "".join(f'<li data-{side.replace("_", "-")}="{e(k)}">{e(k)}</li>' for k in cmp[side])
                         + "</ul></details>")
    parts.append("</section>")
    return "".join(parts)


def _method_text(paired: Any) -> str:
    from pytest_groundeval.reporting.compare import _method

    return _method(paired)


def _headline(summary: Mapping[str, Any]) -> tuple[str, Any, Any] | None:
    """The task's headline figure (``model.headline_of`` over its declared specs, among the
    figures the summary holds a number for): the one its task declares, else (a record of a
    task that declares none) its overall F1, else its ``pass`` rate, else its first figure."""
    specs = []
    for k, v in specs_of(summary).items():
        try:
            spec = MetricSpec.model_validate(v)
        except ValueError:
            continue
        if spec.name == k and _number(summary.get(k)):
            specs.append(spec)
    name = headline_of(specs)
    return None if name is None else (name, summary[name], summary.get(f"{name}_ci95"))


def _overview(record: Mapping[str, Any], base: Mapping[str, Any] | None, paired: Any, tally: Tally) -> str:
    """The strip at the top: per task its cases by outcome (errors by kind; each count a button
    that filters the case table), its headline figure, and with a base run its outcome changes
    and the p of its paired ``pass`` test; then the gate, completeness and cost."""
    flips = comparison(base, record)["flips"] if base is not None else []
    by_task = {t.task: t for t in paired.tasks} if paired is not None else {}
    rows = []
    for task, counted in tally.tasks.items():
        counts = counted.outcomes.result()
        buttons = []
        for o, n in counts.items():
            if not n or (o == "error" and any(k.startswith("error:") for k in counts)):
                continue  # the errors are shown by kind
            label = f"{o[6:]} error{'s' if n != 1 else ''}" if o.startswith("error:") else o
            buttons.append(f'<button type="button" class="count outcome {e(o.split(":")[0])}" data-task="{e(task)}" '
                           f'data-outcome="{e(o)}"><b data-count="{e(task)}.{e(o)}">{n}</b> {e(label)}</button>')
        cells = [f'<th scope="row">{e(task)}</th>',
                 f'<td><button type="button" class="count" data-task="{e(task)}" data-outcome="">'
                 f'<b data-count="{e(task)}.cases">{counted.n}</b> cases</button> {" ".join(buttons)}</td>']
        head = _headline((record.get("summary") or {}).get(task) or {})
        cells.append('<td class="headline">' + ("" if head is None else
                     f'{e(head[0])} <b data-headline="{e(task)}.{e(head[0])}">{e(num(head[1]))}</b> '
                     f'<span class="ci">{e(interval(head[2]))}</span>') + "</td>")
        if base is not None:
            mine = [f for f in flips if f["task"] == task]
            reg = sum(f["kind"] == "regression" for f in mine)
            test = _pass_test(by_task.get(task))
            p = "" if test is None else f"; pass Δ {delta(test.new, test.base)}, p {_p(test, paired.n_resamples)}"
            cells.append(f'<td><button type="button" class="count" data-task="{e(task)}" data-change="changed">'
                         f'<b data-count="{e(task)}.changed">{len(mine)}</b> changed</button> '
                         f'({reg} regression{"s" if reg != 1 else ""}{e(p)})</td>')
        rows.append(f'<tr data-strip-task="{e(task)}">{"".join(cells)}</tr>')
    gate = record.get("gate")
    comp = record.get("completeness") or {}
    facts = ['gate <b data-strip="gate">' + ("none" if gate is None else "PASSED" if gate.get("passed") else "FAILED")
             + "</b>",
             ('<b class="bad" data-strip="completeness">cut short</b>' if comp.get("cut_short")
              else '<span data-strip="completeness">complete</span>'),
             f'cost <b data-strip="cost">{e(_cost(record.get("usage") or {}).split(" (")[0])}</b>']
    return ('<section id="overview"><table class="strip"><tbody>' + "".join(rows) + "</tbody></table>"
            f'<p class="facts">{" · ".join(facts)} · details below: '
            '<button type="button" class="jump" data-jump="run">run</button> '
            + ('<button type="button" class="jump" data-jump="comparison">comparison</button> '
               if base is not None else "")
            + "".join(f'<button type="button" class="jump" data-jump="task-{e(t)}">{e(t)}</button> '
                      for t in tally.tasks)
            + '<button type="button" class="jump" data-jump="usage">tokens and cost</button></p></section>')


CASE_COLUMNS = (("case", "c-id"), ("task", "c-task"), ("outcome", "c-outcome"), ("base", "c-base"),
                ("score", "c-summary"), ("reason", "c-reason"), ("time", "c-num"), ("tokens in / out", "c-tokens"),
                ("cost", "c-num"))


def _cases_section(tally: Tally, comparing: bool) -> str:
    counts = tally.outcomes.result()
    opt = "".join(f'<option value="{e(o)}">{e("error: " + o[6:] if o.startswith("error:") else o)} ({n})</option>'
                  for o, n in counts.items() if n)
    topt = "".join(f'<option value="{e(t)}">{e(t)}</option>' for t in tally.tasks)
    change = ('<label>change <select id="change"><option value="">all</option>'
              '<option value="changed">outcome changed</option></select></label>') if comparing else ""
    cols = [c for c in CASE_COLUMNS if comparing or c[0] != "base"]
    colgroup = "".join(f'<col class="{cls}">' for _, cls in cols)
    head = "".join(f"<th>{e(name)}</th>" for name, _ in cols)
    return ('<section id="cases"><h2>Cases</h2><div class="controls">'
            '<label>search <input id="q" type="search" placeholder="case id" autocomplete="off"></label>'
            f'<label>outcome <select id="outcome"><option value="">all</option>{opt}</select></label>'
            f'<label>task <select id="task"><option value="">all</option>{topt}</select></label>{change}'
            '<span id="shown" aria-live="polite"></span></div>'
            '<noscript>The case table needs JavaScript; every case is in the run record.</noscript>'
            f'<div id="case-scroll"><table class="cases" id="case-table"><colgroup>{colgroup}</colgroup>'
            f"<thead><tr>{head}</tr></thead><tbody></tbody></table></div></section>")


def reviews_section(record: Mapping[str, Any], base: Mapping[str, Any] | None = None) -> str:
    """The human reviews beside the record (``groundeval review``; ``load_record`` puts them under
    ``record["reviews"]``): per reviewed case or dimension, the scorer's verdict beside the
    reviewer's, who, when and why. The figures and cases elsewhere on the page stay the scorer's."""
    rows, notes = [], []
    for side, rec in (("base", base), ("new" if base is not None else "", record)):
        got = (rec or {}).get("reviews") or {}
        notes += [str(w) for w in got.get("warnings") or []]
        if got.get("superseded"):
            notes.append(f"{plural(got['superseded'], 'earlier review')} superseded by later ones (all kept in {got.get('file')})")
        for r in got.get("standing") or []:
            case = f"{r.get('task')}:{r.get('case_id')}" + (f"[r{r['repeat']}]" if r.get("repeat") is not None else "")
            was, now = ("passed" if v == "pass" else "failed" for v in (r.get("original"), r.get("verdict")))
            rows.append(f'<tr data-review="{e(case)}" data-dimension="{e(r.get("dimension") or "")}">'
                        + (f"<td>{e(side)}</td>" if base is not None else "")
                        + f'<td>{e(case)}</td><td>{e(r.get("dimension") or "case")}</td>'
                        f'<td class="outcome {e(was)}" data-scorer="{e(was)}">{e(was)}</td>'
                        f'<td class="outcome {e(now)}" data-reviewed="{e(now)}">{e(now)}</td>'
                        f'<td data-by>{e(r.get("by"))}</td><td>{e(r.get("at"))}</td><td data-why>{e(r.get("reason"))}</td>'
                        "</tr>")
    if not rows and not notes:
        return ""
    head = (["run"] if base is not None else []) + ["case", "what", "scorer", "reviewer", "by", "when", "why"]
    return ('<section id="reviews"><h2>Human reviews</h2>'
            f'<p><b data-reviews="standing">{len(rows)}</b> standing review(s): the reviewer\'s verdict beside the '
            "scorer's. The figures and the cases on this page are the scorer's; <code>groundeval compare "
            "--with-reviews</code> compares the reviewed verdicts.</p>"
            + "".join(f'<p class="warn">{e(n)}</p>' for n in notes)
            + (_table(head, rows, "reviews") if rows else "") + "</section>")


# ---------------------------------------------------------------- the page
CSS = """
:root{--good:#1a7f37;--bad:#c62828;--warn:#b26a00;--muted:#666;--line:#ddd;--bar:#4a78b5;--bg2:#f6f8fa}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1200px;padding:0 16px 40px;color:#222}
h1{font-size:22px;margin:18px 0 4px}h2{font-size:18px;margin:26px 0 8px;border-bottom:1px solid var(--line)}h3{font-size:15px}
code,pre{font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
pre{background:var(--bg2);padding:8px;overflow:auto;max-height:420px;white-space:pre-wrap;word-break:break-word;margin:4px 0}
table{border-collapse:collapse;margin:6px 0}th,td{border-bottom:1px solid var(--line);padding:3px 8px;text-align:left;vertical-align:top}
th{background:var(--bg2)}td.num{text-align:right;font-variant-numeric:tabular-nums}
dl.kv{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin:6px 0}dl.kv dt{color:var(--muted)}dl.kv dd{margin:0}
dl.kv dl.kv{grid-template-columns:max-content max-content}
.good{color:var(--good);font-weight:600}.bad{color:var(--bad);font-weight:600}.warn{color:var(--warn)}
.counts .count{margin-right:12px}
figure{margin:10px 0 18px}figcaption{font-weight:600;margin-bottom:4px}
svg.chart{display:block;max-width:100%;height:auto}
svg .bar{fill:var(--bar)}svg .ci{stroke:#111;stroke-width:1.5;fill:none}svg .grid{stroke:#ccc}
svg text{font-size:12px;fill:#222}svg .tick{fill:var(--muted);font-size:11px}
svg .hist-bin.extra .bar{fill:var(--warn)}svg .m-recall .bar{fill:#7aa6d8}svg .m-f1 .bar{fill:#1f4e8c}
td.num{white-space:nowrap}
.controls{display:flex;flex-wrap:wrap;gap:14px;align-items:center;margin:8px 0}
.controls input{width:260px}#shown{color:var(--muted)}
#case-scroll{max-height:75vh;overflow:auto;contain:strict;border:1px solid var(--line);overscroll-behavior:contain}
table.cases{width:100%;table-layout:fixed;margin:0}table.cases thead th{position:sticky;top:0;z-index:1}
table.cases tr.case{cursor:pointer}table.cases tr.case:hover{background:#f0f4fa}
table.cases tr.case td{white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
table.cases tr.spacer td{padding:0;border:0}
col.c-id{width:22%}col.c-task{width:7em}col.c-outcome,col.c-base{width:8.5em}col.c-summary{width:9em}
col.c-num{width:5.5em}col.c-tokens{width:7em}
table.cases tr.case td.id::before{content:"▸ ";color:var(--muted)}table.cases tr.case.open td.id::before{content:"▾ "}
.outcome.passed{color:var(--good)}.outcome.failed{color:var(--bad)}.outcome.error{color:var(--warn)}.outcome.skipped{color:var(--muted)}
tr.detail>td{background:#fcfcfd;padding:8px 14px 14px}
.detail h4{margin:12px 0 4px}
.side{display:grid;grid-template-columns:minmax(0,1fr) minmax(0,1fr);gap:12px}
tr.code-added td{background:#fdecea}tr.code-missed td{background:#fff4e0}tr.code-wrong-verdict td{background:#f3e8fd}
tr.code-match td{background:#eef8f0}
.tag{display:inline-block;padding:0 6px;border-radius:3px;font-size:12px;font-weight:600}
.tag.added{background:var(--bad);color:#fff}.tag.missed{background:var(--warn);color:#fff}
.tag.wrong-verdict{background:#7b3fb5;color:#fff}.tag.match{background:var(--good);color:#fff}.tag.wrong-name{background:#555;color:#fff}
.check.fail{color:var(--bad)}.check.ok{color:var(--good)}
ol.transcript>li{margin-bottom:8px}
#errors{border:2px solid var(--bad);color:var(--bad);padding:8px;white-space:pre-wrap}
tr.regression td{background:#fdecea}tr.fix td{background:#eef8f0}
#overview{margin:6px 0 4px}table.strip{margin:4px 0}table.strip th{background:none;padding-right:14px}
table.strip td{border:0}table.strip tr{border-bottom:1px solid var(--line)}
button.count,button.jump{font:inherit;border:1px solid var(--line);background:#fff;border-radius:4px;padding:0 8px;
margin:1px 2px;cursor:pointer}button.count:hover,button.jump:hover{background:#f0f4fa}
button.count.error b{color:var(--warn)}button.count.failed b{color:var(--bad)}button.count.passed b{color:var(--good)}
.headline b{font-size:15px}.ci{color:var(--muted)}.facts{color:var(--muted)}
table.flips td.flip-reason{max-width:30em;overflow-wrap:anywhere}
"""

# the start of every page script of groundeval's (this report, the history page): whatever
# goes wrong in the page (an error, a rejected promise, what its policy blocks, console.error)
# is written into #errors, so a test (and a reader) sees it
JS_CATCHER = r"""
(function () {
  "use strict";
  var errs = [];
  function report(msg) {
    errs.push(String(msg));
    var box = document.getElementById("errors");
    if (box) { box.hidden = false; box.textContent = errs.join("\n"); }
  }
  window.addEventListener("error", function (ev) { report("error: " + (ev.message || ev.type)); });
  window.addEventListener("unhandledrejection", function (ev) { report("unhandled rejection: " + ev.reason); });
  document.addEventListener("securitypolicyviolation", function (ev) {
    report("blocked by the page's policy: " + ev.violatedDirective + " " + (ev.blockedURI || ""));
  });
  var consoleError = console.error;
  console.error = function () {
    report("console.error: " + Array.prototype.map.call(arguments, String).join(" "));
    return consoleError.apply(console, arguments);
  };
"""

JS = JS_CATCHER + r"""

  function el(tag, cls, text) {
    var n = document.createElement(tag);
    if (cls) { n.className = cls; }
    if (text !== undefined && text !== null) { n.textContent = String(text); }
    return n;
  }
  function add(parent) {
    for (var i = 1; i < arguments.length; i++) {
      var c = arguments[i];
      if (c === null || c === undefined) { continue; }
      parent.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    }
    return parent;
  }
  function pre(text, cls) { return el("pre", cls || "", text); }
  function heading(text) { return el("h4", "", text); }
  function fold(title, body) {
    var d = el("details");
    add(d, el("summary", "", title), body);
    return d;
  }
  function json(v) {
    if (v === null || v === undefined) { return ""; }
    if (typeof v === "string") { return v; }
    try { return JSON.stringify(v, null, 2); } catch (x) { return String(v); }
  }
  function row(cells, cls) {
    var tr = el("tr", cls || "");
    cells.forEach(function (c) { add(tr, typeof c === "string" || typeof c === "number" ? el("td", "", c) : c); });
    return tr;
  }
  function table(head, rows, cls) {
    var t = el("table", cls || ""), th = el("thead"), hr = el("tr"), tb = el("tbody");
    head.forEach(function (h) { add(hr, el("th", "", h)); });
    add(th, hr); add(t, th, tb);
    rows.forEach(function (r) { add(tb, r); });
    return t;
  }

  var DATA = JSON.parse(document.getElementById("groundeval-data").textContent);
  var CASES = DATA.cases;
  var comparing = !!DATA.comparing;
  var tbody = document.querySelector("#case-table tbody");

  function codesTable(codes) {
    var withVerdicts = codes.some(function (c) { return c.truth_verdict || c.predicted_verdict; });
    var head = ["", "code", "display (truth)", "display (answer)"];
    if (withVerdicts) { head.push("verdict (truth)", "verdict (answer)"); }
    return table(head, codes.map(function (c) {
      var tag = el("td");
      add(tag, el("span", "tag " + c.status, c.status));
      if (c.wrong_name) { add(tag, " ", el("span", "tag wrong-name", "wrong name")); }
      var cells = [tag, el("td", "code", c.code), el("td", "", c.truth_display || ""),
                   el("td", "", c.predicted_display || "")];
      if (withVerdicts) { cells.push(el("td", "", c.truth_verdict || ""), el("td", "", c.predicted_verdict || "")); }
      var tr = row(cells, "code-" + c.status);
      tr.setAttribute("data-status", c.status);
      tr.setAttribute("data-code", c.code);
      return tr;
    }), "codes");
  }

  function dimensionsBlock(dims) {
    var box = el("div", "dimensions");
    dims.forEach(function (d) {
      var h = el("div", "dimension");
      h.setAttribute("data-dimension", d.name);
      add(h, el("b", "check " + (d.passed ? "ok" : "fail"), (d.passed ? "✓ " : "✗ ") + d.name), ": ",
          el("span", "dim-reason", d.reason));
      var ul = el("ul");
      d.checks.forEach(function (ch) {
        var li = el("li", "check " + (ch.passed ? "ok" : "fail"));
        li.setAttribute("data-check", ch.name);
        add(li, (ch.passed ? "✓ " : "✗ ") + ch.name + ": ", el("span", "", ch.reason || ""));
        add(ul, li);
      });
      add(box, add(h, ul));
    });
    return box;
  }

  function transcriptBlock(steps) {
    var ol = el("ol", "transcript");
    steps.forEach(function (s) {
      var li = el("li", "step");
      var rest = {};
      if (s && typeof s === "object") {
        var label = s.tool ? "tool " + s.tool : (s.type || s.role || "step");
        add(li, el("b", "", label));
        Object.keys(s).forEach(function (k) {
          if (k === "tool" || k === "type" || k === "role") { return; }
          if (k === "args" || k === "result" || k === "content" || k === "tool_calls") {
            if (s[k] === "" || (Array.isArray(s[k]) && !s[k].length)) { return; }
            if (k === "tool_calls") {
              s[k].forEach(function (call) {
                add(li, el("div", "call", "→ calls " + (call && call.name)), pre(json(call && call.args), "args"));
              });
              return;
            }
            add(li, el("div", "field", k), pre(json(s[k]), k));
          } else { rest[k] = s[k]; }
        });
        if (Object.keys(rest).length) { add(li, pre(json(rest), "more")); }
      } else { add(li, pre(json(s))); }
      add(ol, li);
    });
    return ol;
  }

  function fhirBlock(f) {
    var box = el("div", "fhir");
    add(box, heading("FHIR server requests (" + f.requests.length +
                     (f.requests_cut ? ", " + f.requests_cut + " more not kept" : "") + ")"));
    add(box, el("p", "facts", "base " + f.base_url));
    var ol = el("ol", "fhir-requests");
    f.requests.forEach(function (r) {
      var li = el("li", "fhir-request" + (r[4] ? " refused" : ""));
      li.setAttribute("data-status", String(r[3]));
      add(li, el("b", "", r[1] + " " + r[2]), " → ", el("span", "status", String(r[3])));
      if (r[4]) { add(li, el("div", "warn", "refused: " + r[4])); }
      if (r[5]) { add(li, fold("request", pre(r[5], "fhir-body"))); }
      if (r[6]) { add(li, fold("response", pre(r[6], "fhir-body"))); }
      add(ol, li);
    });
    add(box, ol);
    add(box, heading("FHIR state diff (" + f.changes.length + ")"));
    if (!f.changes.length) { add(box, el("p", "facts", "nothing created, changed or deleted")); }
    f.changes.forEach(function (ch) {
      var d = el("div", "fhir-change");
      d.setAttribute("data-kind", ch[0]);
      add(d, el("b", "", ch[0] + " " + ch[1]));
      if (ch[2]) { add(d, fold("before", pre(ch[2], "fhir-before"))); }
      if (ch[3]) { add(d, pre(ch[3], "fhir-after")); }
      add(box, d);
    });
    return box;
  }

  function detailFor(c) {
    var box = el("div", "detail-body");
    var r = el("p", "reason");
    add(r, el("b", "", "reason: "), el("span", "", c.reason || "–"));
    add(box, r);
    var facts = [["agent", c.agent], ["model", c.model], ["attempts", c.attempts], ["steps", c.steps]]
      .filter(function (f) { return f[1] !== null && f[1] !== undefined && f[1] !== ""; })
      .map(function (f) { return f[0] + " " + f[1]; }).join(" · ");
    if (facts) { add(box, el("p", "facts", facts)); }
    c.warnings.forEach(function (w) { add(box, el("p", "warn", "warning: " + w)); });
    if (c.error) {
      add(box, heading("error (" + c.error.kind + ")"));
      add(box, pre((c.error.error_class ? c.error.error_class + ": " : "") + (c.error.message || ""), "error-message"));
      if (c.error.traceback) { add(box, fold("traceback", pre(c.error.traceback, "traceback"))); }
    }
    if (c.codes) { add(box, heading("codes: answer vs truth"), codesTable(c.codes)); }
    if (c.predicted || c.truth) {
      var side = el("div", "side");
      add(side, add(el("div", "predicted"), heading("predicted"), pre(c.predicted || "–", "predicted")),
                add(el("div", "truth"), heading("truth"), pre(c.truth || "–", "truth")));
      add(box, side);
    }
    if (c.dimensions.length) { add(box, heading("dimensions"), dimensionsBlock(c.dimensions)); }
    if (c.metrics.length) {
      add(box, heading("metrics"), table(["metric", "value"], c.metrics.map(function (m) {
        var tr = row([m[0], el("td", "num", m[1])]);
        tr.setAttribute("data-case-metric", m[0]);
        return tr;
      }), "case-metrics"));
    }
    if (c.details) { add(box, fold("scorer details", pre(c.details, "details"))); }
    if (c.transcript && c.transcript.length) {
      add(box, heading("tool calls the harness observed (" + c.transcript.length + ")"), transcriptBlock(c.transcript));
    }
    if (c.agent_reported && c.agent_reported.length) {
      add(box, fold("transcript the agent reported (" + c.agent_reported.length + " steps; not evidence)",
                    transcriptBlock(c.agent_reported)));
    }
    if (c.fhir) { add(box, fhirBlock(c.fhir)); }
    if (c.structured) { add(box, fold("structured output", pre(c.structured, "structured"))); }
    if (c.raw_output) { add(box, fold("raw output", pre(c.raw_output, "raw-output"))); }
    if (c.usage) { add(box, fold("usage", pre(c.usage, "usage"))); }
    if (c.attempt_log.length) {
      add(box, heading("attempts"), table(["attempt", "error class", "error", "time"],
        c.attempt_log.map(function (a) { return row(a.map(function (x) { return x === null ? "" : String(x); })); }),
        "attempts"));
    }
    return box;
  }

  // ---------------------------------------------------------------- the case table, virtualised
  // Only the rows in (and near) the scroll box's view are in the DOM: `list` holds the cases the
  // filters let through, `tops` each one's offset (a row, plus its detail when open), and two
  // spacer rows stand for the rest. A search is applied after a pause in typing (DEBOUNCE_MS).
  var DEBOUNCE_MS = 40, OVERSCAN_PX = 600, DETAIL_GUESS_PX = 320;
  var box = document.getElementById("case-scroll");
  var ncols = document.querySelectorAll("#case-table thead th").length;
  var entries = CASES.map(function (c, i) {
    return { c: c, i: i, tr: null, detail: null, open: false, dh: 0, id: String(c.id).toLowerCase(),
             changed: comparing && !!c.base_outcome && (c.base_outcome !== c.outcome || c.base_kind !== c.kind) };
  });
  var byKey = {};
  entries.forEach(function (en) { if (!byKey[en.c.key]) { byKey[en.c.key] = en; } });
  var list = entries, tops = [0], rowH = 0, scheduled = false;
  var spacerTop = spacer(), spacerBottom = spacer();

  function spacer() {
    var tr = el("tr", "spacer"), td = el("td");
    tr.setAttribute("aria-hidden", "true");
    td.colSpan = ncols;
    add(tr, td);
    return tr;
  }
  function outcomeText(outcome, kind) { return outcome + (outcome === "error" && kind ? " (" + kind + ")" : ""); }

  function rowOf(entry) {
    if (entry.tr) { return entry.tr; }
    var c = entry.c, tr = el("tr", "case");
    tr.setAttribute("data-key", c.key);
    tr.setAttribute("data-case-id", c.id);
    tr.setAttribute("data-task", c.task);
    tr.setAttribute("data-outcome", c.outcome);
    if (c.kind) { tr.setAttribute("data-error-kind", c.kind); }
    tr.tabIndex = 0;
    var id = el("td", "id", c.id);
    id.title = c.id;
    var cells = [id, el("td", "task", c.task), el("td", "outcome " + c.outcome, outcomeText(c.outcome, c.kind))];
    if (comparing) {
      var b = c.base_outcome ? outcomeText(c.base_outcome, c.base_kind) : "–";
      cells.push(el("td", "outcome base " + (c.base_outcome || ""), b));
      if (entry.changed) { tr.setAttribute("data-changed", "1"); }
    }
    var reason = el("td", "reason", c.reason);
    reason.title = c.reason;
    cells.push(el("td", "summary", c.summary), reason, el("td", "num", c.duration), el("td", "num", c.tokens),
               el("td", "num", c.cost));
    cells.forEach(function (td) { add(tr, td); });
    function toggle() { setOpen(entry, !entry.open); sync(); render(); }
    tr.addEventListener("click", toggle);
    tr.addEventListener("keydown", function (ev) {
      if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); toggle(); }
    });
    entry.tr = tr;
    return tr;
  }
  function detailOf(entry) {
    if (!entry.detail) {
      var d = el("tr", "detail"), td = el("td");
      d.setAttribute("data-for", entry.c.key);
      td.colSpan = ncols;
      add(d, add(td, detailFor(entry.c)));
      entry.detail = d;
    }
    return entry.detail;
  }
  function setOpen(entry, open) {
    entry.open = open;
    rowOf(entry).classList.toggle("open", open);
    layout();
  }

  function layout() {
    var y = 0, n = list.length;
    tops = new Array(n + 1);
    for (var i = 0; i < n; i++) {
      tops[i] = y;
      y += (rowH || 28) + (list[i].open ? (list[i].dh || DETAIL_GUESS_PX) : 0);
    }
    tops[n] = y;
    sizeBox();
  }
  function firstBelow(y) {  // the first index whose bottom is below y
    var lo = 0, hi = list.length;
    while (lo < hi) {
      var mid = (lo + hi) >> 1;
      if (tops[mid + 1] <= y) { lo = mid + 1; } else { hi = mid; }
    }
    return lo;
  }
  function render(pass) {
    pass = pass || 0;
    var n = list.length, view = Math.max(box.clientHeight, window.innerHeight);
    var from = firstBelow(Math.max(0, box.scrollTop - OVERSCAN_PX));
    var to = Math.min(n, firstBelow(box.scrollTop + view + OVERSCAN_PX) + 1);
    var frag = document.createDocumentFragment(), shown = [];
    spacerTop.firstChild.style.height = tops[from] + "px";
    spacerTop.hidden = tops[from] === 0;
    add(frag, spacerTop);
    for (var i = from; i < to; i++) {
      add(frag, rowOf(list[i]));
      if (list[i].open) { add(frag, detailOf(list[i])); }
      shown.push(list[i]);
    }
    spacerBottom.firstChild.style.height = (tops[n] - tops[to]) + "px";
    spacerBottom.hidden = tops[n] === tops[to];
    add(frag, spacerBottom);
    tbody.replaceChildren(frag);
    // measured heights replace the guesses, once: a row's (every row is one line), a detail's when
    // it is first shown (later changes come from the ResizeObserver); no forced layout otherwise
    var again = false;
    if (!rowH && shown.length) {
      rowH = shown[0].tr.getBoundingClientRect().height;
      again = rowH > 0;
    }
    shown.forEach(function (en) {
      if (en.open && !en.dh) {
        en.dh = en.detail.getBoundingClientRect().height;
        again = true;
        if (watcher) { watcher.observe(en.detail); }
      }
    });
    if (again && pass < 3) { layout(); render(pass + 1); }
  }
  // the scroll box is as tall as its rows, up to 75% of the window, and sized here (not by its
  // content), so what changes inside it is laid out without the rest of the page
  var headH = 0;
  function sizeBox() {
    if (!headH) { headH = document.querySelector("#case-table thead").getBoundingClientRect().height || 30; }
    var want = Math.ceil(Math.min(tops[list.length] + headH + 2, window.innerHeight * 0.75)) + "px";
    if (box.style.height !== want) { box.style.height = want; }
  }
  function schedule() {
    if (scheduled) { return; }
    scheduled = true;
    requestAnimationFrame(function () { scheduled = false; render(); });
  }
  // an open detail whose height changes (a <details> opened inside it): lay the rows out again
  var watcher = typeof ResizeObserver === "function" ? new ResizeObserver(function (items) {
    var changed = false;
    items.forEach(function (it) {
      var en = byKey[it.target.getAttribute("data-for")];
      if (en && en.open && it.target.isConnected) {
        var dh = it.target.getBoundingClientRect().height;
        if (Math.abs(dh - en.dh) > 0.5) { en.dh = dh; changed = true; }
      }
    });
    if (changed) { layout(); schedule(); }
  }) : null;
  box.addEventListener("scroll", schedule, { passive: true });
  window.addEventListener("resize", function () { sizeBox(); schedule(); });

  function scrollToEntry(entry) {  // the row just below the table's (sticky) header, the table on screen
    var i = list.indexOf(entry);
    if (i < 0) { return false; }
    document.getElementById("cases").scrollIntoView({ block: "start" });
    box.scrollTop = tops[i];
    render();
    box.scrollTop = tops[i];  // the heights measured while rendering may have moved it
    render();
    return true;
  }

  var q = document.getElementById("q"), fo = document.getElementById("outcome"),
      ft = document.getElementById("task"), fc = document.getElementById("change");

  function state() {
    var p = new URLSearchParams();
    if (q.value) { p.set("q", q.value); }
    if (fo.value) { p.set("outcome", fo.value); }
    if (ft.value) { p.set("task", ft.value); }
    if (fc && fc.value) { p.set("change", fc.value); }
    entries.forEach(function (en) { if (en.open) { p.append("case", en.c.key); } });
    return p.toString();
  }
  function sync() {
    try { history.replaceState(null, "", "#" + state()); } catch (x) { /* a file: URL may refuse: keep going */ }
  }
  function choose(select, value) {
    var known = Array.prototype.some.call(select.options, function (o) { return o.value === value; });
    select.value = known ? value : "";
  }
  function fromHash() {
    var p = new URLSearchParams(location.hash.replace(/^#/, ""));
    q.value = p.get("q") || "";
    choose(fo, p.get("outcome") || "");
    choose(ft, p.get("task") || "");
    if (fc) { choose(fc, p.get("change") || ""); }
    // #case=<task>:<id> (#open= its older name; several, or comma-separated): open them, show the first
    var wanted = [], open = {};
    p.getAll("case").concat(p.getAll("open")).forEach(function (k) {
      k.split(",").forEach(function (x) {
        var en = byKey[x] || byKey[x + "[r1]"];
        if (en && !open[en.c.key]) { open[en.c.key] = true; wanted.push(en); }
      });
    });
    entries.forEach(function (en) {
      if (en.open !== !!open[en.c.key]) { en.open = !!open[en.c.key]; rowOf(en).classList.toggle("open", en.open); }
    });
    apply();
    if (wanted.length) { scrollToEntry(wanted[0]); }
  }
  function matches(en, needle, o, t, ch) {
    var c = en.c;
    if (needle && en.id.indexOf(needle) < 0) { return false; }
    if (o) {
      if (o.indexOf("error:") === 0) {
        if (c.outcome !== "error" || c.kind !== o.slice(6)) { return false; }
      } else if (c.outcome !== o) { return false; }
    }
    return (!t || c.task === t) && (!ch || en.changed);
  }
  function apply() {
    var needle = q.value.trim().toLowerCase(), o = fo.value, t = ft.value, ch = fc ? fc.value : "";
    list = needle || o || t || ch ? entries.filter(function (en) { return matches(en, needle, o, t, ch); }) : entries;
    layout();
    if (box.scrollTop > tops[list.length]) { box.scrollTop = 0; }
    render();
    var counter = document.getElementById("shown");
    counter.textContent = list.length + " of " + entries.length + " cases shown";
    counter.setAttribute("data-shown", String(list.length));
    counter.setAttribute("data-total", String(entries.length));
  }
  var typing = null;
  q.addEventListener("input", function () {
    clearTimeout(typing);
    typing = setTimeout(function () { typing = null; apply(); sync(); }, DEBOUNCE_MS);
  });
  [fo, ft, fc].forEach(function (input) {
    if (input) { input.addEventListener("change", function () { apply(); sync(); }); }
  });
  // the summary strip: a count filters the table to its cases; the other buttons jump to a section
  Array.prototype.forEach.call(document.querySelectorAll("#overview button[data-task]"), function (b) {
    b.addEventListener("click", function () {
      q.value = "";
      choose(ft, b.getAttribute("data-task"));
      choose(fo, b.getAttribute("data-outcome") || "");
      if (fc) { choose(fc, b.getAttribute("data-change") || ""); }
      apply(); sync();
      box.scrollTop = 0;
      document.getElementById("cases").scrollIntoView({ block: "start" });
    });
  });
  Array.prototype.forEach.call(document.querySelectorAll("#overview button[data-jump]"), function (b) {
    b.addEventListener("click", function () {
      var target = document.getElementById(b.getAttribute("data-jump"));
      if (target) { target.scrollIntoView({ block: "start" }); }
    });
  });
  window.addEventListener("hashchange", fromHash);
  fromHash();
  document.body.setAttribute("data-ready", "1");
})();
"""


def csp_hash(text: str) -> str:
    """A script's or style sheet's hash as a Content-Security-Policy source."""
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")


def data_json_bytes(value: Any) -> bytes:
    """JSON safe inside ``<script type="application/json">``, as UTF-8: ``<``, ``>`` and ``&``
    only occur in JSON strings, where ``\\u003c`` ... mean the same, so nothing can close the
    element or open a comment (``</script>``, ``<!--``)."""
    try:
        blob = orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS, default=str)
    except (orjson.JSONEncodeError, TypeError):  # a lone surrogate, say: shown as the text \\udXXX
        blob = orjson.dumps(escape_unencodable(value), option=orjson.OPT_NON_STR_KEYS, default=str)
    return blob.replace(b"<", b"\\u003c").replace(b">", b"\\u003e").replace(b"&", b"\\u0026")


def data_json(value: Any) -> str:
    """:func:`data_json_bytes` as text."""
    return data_json_bytes(value).decode("utf-8")


def render(record: Mapping[str, Any], base: Mapping[str, Any] | None = None) -> str:
    """The report of ``record`` (a run record as JSON data) as one HTML page; with ``base``,
    compared with that earlier run."""
    return render_bytes(record, base).decode("utf-8")


def render_bytes(record: Mapping[str, Any], base: Mapping[str, Any] | None = None) -> bytes:
    """:func:`render` as the file holds it (UTF-8)."""
    return b"".join(render_chunks(record, base))


def render_chunks(record: Mapping[str, Any], base: Mapping[str, Any] | None = None) -> Iterator[bytes]:
    """The page in pieces, UTF-8: its head (the sections), then the cases' data one case at a
    time, then its end. The data, the bulk of the page, go in as orjson wrote them, and a
    large run's page is never all in memory at once, nor every case's view."""
    _task_class.cache_clear()
    css, js = CSS.strip(), JS.strip()
    csp = (f"default-src 'none'; script-src '{csp_hash(js)}'; style-src '{csp_hash(css)}'; img-src data:; "
           "base-uri 'none'; form-action 'none'")
    title = f"groundeval {record.get('run_id') or ''}" + (f" vs {base.get('run_id')}" if base is not None else "")
    gate = record.get("gate")
    verdict = "" if gate is None else (" — gate PASSED" if gate.get("passed") else " — gate FAILED")
    paired, refused = paired_tests(base, record) if base is not None else (None, "")
    # what one looks for first (the summary strip, the cases), then the details of the run
    tally = Tally(record)  # (one pass over the cases; the views below are the second)
    sections = [_overview(record, base, paired, tally), _cases_section(tally, base is not None),
                reviews_section(record, base)]
    if base is not None:
        sections.append(_comparison_section(base, record, paired, refused))
    sections.append(_header(record))
    sections += [_task_section(t, counted) for t, counted in tally.tasks.items()]
    sections.append(_usage_section(record, tally))
    yield (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{e(csp)}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{e(title)}</title><style>{css}</style></head>\n<body>"
        f"<h1>groundeval report{' (comparison)' if base is not None else ''}</h1>"
        f'<p class="subtitle">{e(record.get("agent"))} · {e(record.get("model") or "no model")} · '
        f"{e(record.get('run_id'))}{e(verdict)}</p>"
        '<div id="errors" hidden></div>\n'
        + "\n".join(sections)
        + '\n<script type="application/json" id="groundeval-data">'
    ).encode("utf-8", "backslashreplace")
    # {"comparing": ..., "cases": [view, ...]} as orjson writes it whole, one view at a time
    yield b'{"comparing":' + (b"true" if base is not None else b"false") + b',"cases":['
    before = {_key(c): c for c in base.get("cases") or []} if base is not None else {}
    for i, case in enumerate(record.get("cases") or []):
        view = case_view(case, before.get(_key(case)) if base is not None else None)
        yield (b"," if i else b"") + data_json_bytes(view)
    yield b"]}" + f"</script>\n<script>{js}</script>\n</body></html>\n".encode()


def write(record: Mapping[str, Any], path: Path | str, base: Mapping[str, Any] | None = None) -> Path:
    """Render and write the report to ``path``, piece by piece (:func:`render_chunks`), into a
    file of its own then moved over ``path`` (owner-only, like every file the harness writes:
    it holds the cases' data; a page that fails half-way leaves ``path`` as it was); the path
    written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)  # (mode 0600)
    try:
        with open(fd, "wb") as fh:
            for chunk in render_chunks(record, base):
                fh.write(chunk)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


# ---------------------------------------------------------------- groundeval report
class ReportError(Exception):
    """A record that cannot be reported on (unreadable, not a run record)."""


def load_record(path: Path, *, trust_stored: bool = False) -> dict[str, Any]:
    """A run record (``store.read_record``), as the JSON the page is rendered from: its cases
    re-derived and its summary and gate computed again (``store/verify.py``)."""
    from pytest_groundeval.store import StoreError, read_record
    from pytest_groundeval.store.verify import to_stderr, verified

    try:
        record = verified(read_record(path), str(path), trust_stored=trust_stored, warn=to_stderr)
    except StoreError as exc:
        raise ReportError(str(exc)) from None
    return page_data(path, record)


def page_data(path: Path, record: Any) -> dict[str, Any]:
    """A read run record as the JSON its page is rendered from: the record, and the human
    reviews beside it, for reviews_section (the record's own data unchanged)."""
    from pytest_groundeval.store.reviews import ReviewError, read_reviews

    try:
        reviews = read_reviews(path, record)
    except ReviewError as exc:
        raise ReportError(str(exc)) from None
    standing = [r for c in reviews.standing.values() for r in c.all()]
    return {**record.model_dump(mode="json"), "reviews": {
        "file": str(reviews.path), "standing": [r.model_dump(mode="json") for r in standing],
        "superseded": len(reviews.lines) - len(standing), "warnings": reviews.warnings}}


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "report", help="write a run record (or two, compared) as one self-contained HTML page",
        description="Write the HTML report of a run record: the run header, per-task figures with their "
        "intervals and charts, tokens and cost, and a case table to filter, search and open. With two records "
        "(BASE NEW), the page compares NEW with BASE. The file needs no network. Exit status: 0 written, "
        "2 a record could not be read or the page could not be written.")
    p.add_argument("runs", nargs="+", type=Path, metavar="RUN", help="a run record (runs/*.json); or BASE NEW")
    p.add_argument("-o", "--output", type=Path, metavar="REPORT.html",
                   help="where to write the page (default: the (new) record's path with .html)")
    from pytest_groundeval.store.verify import TRUST_HELP

    p.add_argument("--trust-stored", action="store_true", help=TRUST_HELP)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if len(args.runs) > 2:
        print("groundeval report: give one run record, or two (BASE NEW)", file=sys.stderr)
        return 2
    try:
        records = [load_record(path, trust_stored=getattr(args, "trust_stored", False)) for path in args.runs]
    except ReportError as exc:
        print(f"groundeval report: {exc}", file=sys.stderr)
        return 2
    new, base = records[-1], (records[0] if len(records) == 2 else None)
    out = args.output or args.runs[-1].with_suffix(".html")
    if any(out.resolve() == path.resolve() for path in args.runs):
        print(f"groundeval report: {out} is a record given to read; name another file with -o", file=sys.stderr)
        return 2
    try:
        write(new, out, base)
    except OSError as exc:
        print(f"groundeval report: could not write {out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"groundeval report: wrote {out}")
    return 0
