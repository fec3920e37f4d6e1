"""Run history: many run records as one page (``groundeval report DIR -o index.html``) and as
one table (``groundeval runs DIR``).

Which records: each argument is a run record (``runs/<run_id>.json``) or a folder, read
**recursively** (every ``*.json`` and ``*.jsonl`` under it; folders and files whose names start
with ``.`` are left out, and so are files of other kinds: pages, locks). Everything is read
through the one typed reader (``store.read``). A journal (``*.jsonl``: a run's case-by-case
log, kept when its run was killed or cut short) and a shard's record (``completeness.shard``:
merge the shards first) are not runs of their own: each is skipped with a line saying so. Any
other file that is not a readable record (not JSON, not a groundeval record, an older or newer
record format, a record that is not valid) is an error naming the file, never skipped: a
history that silently left a run out would not say what it seems to. So is a folder with no
record in it, and two records of one run id.

What is shown, all from the records (nothing recomputed that a record holds):

* one row per run, oldest first (by ``started_at``): the time, the run id (a link to that run's
  own report page, written beside the index as ``<index>-runs/<run_id>.html`` by
  ``reporting/html.py``), agent, model, branch, gate, per task its pass rate (passed over the
  results that ran: the record's counts, skipped results left out) and its lead figure, and
  completeness;
* per task, each *headline* metric as a small SVG trend line over the runs, with its 95%
  interval where the record has one. The headline metrics of a task are those its record
  declares (``summary.<task>.specs``) as a ``rate``, ``mean`` or ``prf`` figure outside a
  per-class breakdown (no ``group``): counts are parts of other figures, ``custom`` figures
  and per-class breakdowns stay on each run's own page. Kinds are read from the specs, never
  from names;
* a task's *lead* figure (one per task, in the table): the figure its task declares as its
  headline (``Task.headline``: ``headline: true`` on its spec in the record; the same figure
  as the run report's strip, ``model.headline_of``); ``groundeval runs --metric TASK.METRIC``
  names another.

The branch is the record's ``git`` block (``{commit, branch, dirty}``) when the record has one;
a record without it (written before it) shows ``unknown`` and its ``git_sha`` as the commit.

The page is self-contained like the run report (``html.py``): no network, the style and the
script inline and allowed by hash in its Content-Security-Policy, every record string escaped
on the server side and set as text (``textContent``) by the script, the runs' figures inlined
as JSON with ``<``, ``>`` and ``&`` escaped. Filters by agent, model and branch hide the rows
and redraw the trend lines over the runs shown; the filter is in the URL fragment
(``index.html#agent=claude&branch=main``). When the script has run, ``<body>`` carries
``data-ready="1"``; a script error is written into ``#errors``.

``groundeval report`` is ``html.py``'s subcommand; :func:`add_parser` (registered after it in
``cli.SUBCOMMANDS``) adds ``--history`` to it and hands the command to :func:`report` when it
is given a folder, three or more records, or ``--history`` (then one or two records are a
history too; without it, one record is its report and two a comparison, as before). So
``html.py`` knows nothing of the history (this module uses its formatting and its pages).

The run pages are written while the records are read, one record in memory at a time; when a
later file is an error, the pages already written stay and the index is not written.
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Sequence
from urllib.parse import quote

from pytest_groundeval.model import MetricSpec, RunRecord, TaskSummary, headline_of
from pytest_groundeval.reporting.html import JS_CATCHER, csp_hash, data_json, e, interval, num
from pytest_groundeval.reporting.terminal import plural
from pytest_groundeval.store.record import open_private

HEADLINE_KINDS = ("rate", "mean", "prf")
UNKNOWN = "unknown"
NO_MODEL = "no model"


class HistoryError(Exception):
    """Records that cannot make a history (unreadable, none found, one run id twice)."""


# ---------------------------------------------------------------- what a record holds, per run
def headline_specs(summary: TaskSummary) -> list[MetricSpec]:
    """The task's headline metrics, in its declaration order: ``rate``, ``mean`` and ``prf``
    figures outside a per-class breakdown."""
    return [s for s in summary.specs.values() if s.kind in HEADLINE_KINDS and s.group is None]


def lead_metric(specs: Sequence[MetricSpec]) -> str | None:
    """The one figure the table shows per task (see the module's docstring)."""
    return headline_of(specs)


def git_of(record: Any) -> tuple[str, str | None, bool | None]:
    """``(branch, commit, dirty)``: the record's ``git`` block when it has one (read as an
    object or as a mapping), else ``unknown`` and the record's ``git_sha``."""
    git = getattr(record, "git", None)

    def part(name: str) -> Any:
        return git.get(name) if isinstance(git, dict) else getattr(git, name, None)

    branch = part("branch") if git is not None else None
    commit = part("commit") if git is not None else None
    dirty = part("dirty") if git is not None else None
    return (str(branch) if branch else UNKNOWN, str(commit) if commit else getattr(record, "git_sha", None),
            dirty if isinstance(dirty, bool) else None)


@dataclass(frozen=True)
class Figure:
    """One figure of one run: the record's value and 95% interval (None: none recorded)."""

    value: float | int | None
    ci: tuple[float, float] | None

    @property
    def text(self) -> str:
        return num(self.value)

    @property
    def ci_text(self) -> str:
        return interval(list(self.ci)) if self.ci is not None else ""


@dataclass(frozen=True)
class TaskPoint:
    """One task of one run: its outcome counts and its headline figures (by name, with specs)."""

    n_cases: int
    n_passed: int
    n_skipped: int
    figures: dict[str, Figure]
    specs: dict[str, MetricSpec]

    @property
    def ran(self) -> int:
        return self.n_cases - self.n_skipped

    @property
    def pass_rate(self) -> float | None:
        return self.n_passed / self.ran if self.ran > 0 else None

    @property
    def pass_text(self) -> str:
        return "–" if self.pass_rate is None else f"{num(self.pass_rate)} ({self.n_passed}/{self.ran})"


@dataclass(frozen=True)
class RunEntry:
    """One run of the history, from its record."""

    run_id: str
    started_at: str
    agent: str
    model: str
    branch: str
    commit: str | None
    dirty: bool | None
    completeness: str
    gate: str  # passed, failed, or none (no threshold)
    tasks: dict[str, TaskPoint]
    path: Path
    page: str | None = None  # the run's own page, relative to the index

    @property
    def when(self) -> str:
        """``started_at`` as the table shows it (UTC, to the second)."""
        t = _parse_time(self.started_at)
        return self.started_at if t is None else t.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


def completeness_text(record: RunRecord) -> str:
    c = record.completeness
    text = f"{c.recorded}/{c.selected}" if c.selected is not None else f"{c.recorded}/?"
    notes = [n for n, on in (("cut short", c.cut_short), ("subset", c.subset)) if on]
    return text + (" " + ", ".join(notes) if notes else " complete")


def entry_of(record: RunRecord, path: Path, page: str | None = None) -> RunEntry:
    branch, commit, dirty = git_of(record)
    tasks = {}
    for task, summary in record.summary.items():
        specs = headline_specs(summary)
        figures = {}
        for s in specs:
            v, ci = summary.value(s.name), summary.ci95(s.name)
            figures[s.name] = Figure(v if isinstance(v, (int, float)) else None,
                                     (float(ci[0]), float(ci[1])) if ci is not None and len(ci) == 2 else None)
        tasks[task] = TaskPoint(summary.n_cases, summary.n_passed, summary.n_skipped, figures,
                                {s.name: s for s in specs})
    gate = "none" if record.gate is None else ("passed" if record.gate.passed else "failed")
    return RunEntry(record.run_id, record.started_at, record.agent, record.model or NO_MODEL, branch, commit, dirty,
                    completeness_text(record), gate, tasks, path, page)


def _parse_time(text: str) -> datetime | None:
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except (TypeError, ValueError):
        return None
    return t if t.tzinfo is not None else t.replace(tzinfo=timezone.utc)


def _order(entry: RunEntry) -> tuple:
    t = _parse_time(entry.started_at)
    return (t is None, t or datetime.min.replace(tzinfo=timezone.utc), entry.run_id)


# ---------------------------------------------------------------- finding and reading the records
def candidates(paths: Iterable[Path]) -> list[Path]:
    """The files to read: each file given, and every ``*.json`` / ``*.jsonl`` under each folder
    given (recursively; names starting with ``.`` left out), in path order."""
    found: list[Path] = []
    for path in paths:
        path = Path(path)
        if not path.is_dir():
            found.append(path)  # the reader says what is wrong with it, if anything
            continue
        inside = [p for p in path.rglob("*") if p.suffix in (".json", ".jsonl") and p.is_file()
                  and not any(part.startswith(".") for part in p.relative_to(path).parts)]
        found.extend(sorted(inside))
    return found


@dataclass
class History:
    """The runs found (oldest first) and the files skipped, each with why."""

    runs: list[RunEntry] = field(default_factory=list)
    skipped: list[tuple[Path, str]] = field(default_factory=list)


def page_name(run_id: str) -> str:
    """A run's page file name: its run id, any character outside ``[A-Za-z0-9._-]`` as ``_``
    (a run id is the record's text: it names no folder)."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", run_id).lstrip(".") or "run"
    return safe + ".html"


def gather(paths: Sequence[Path], pages: Path | None = None, href: str = "", *, trust_stored: bool = False) -> History:
    """Read the records under ``paths`` (:func:`candidates`) one at a time. With ``pages``,
    write each run's own report page into that folder (``href``: that folder as the index
    links it). Raises :class:`HistoryError` naming the file for anything that is not a
    record, a journal or a shard, and when no record is found. Nothing of a record is taken as
    read: its cases re-derived, its summary and gate computed again (``store/verify.py``); one
    whose stored results disagree is refused unless ``trust_stored``."""
    from pytest_groundeval.reporting import html as html_report
    from pytest_groundeval.store import Journal, StoreError, read
    from pytest_groundeval.store.verify import to_stderr, verified
    from pytest_groundeval.store.reviews import is_reviews_file

    history = History()
    seen: dict[str, Path] = {}
    names: dict[str, str] = {}
    for path in candidates(paths):
        if is_reviews_file(path):
            history.skipped.append((path, "human reviews of the record beside it (shown on that run's page): "
                                          "not a run record, skipped"))
            continue
        try:
            stored = read(path)
        except StoreError as exc:
            raise HistoryError(str(exc)) from None
        if isinstance(stored, Journal):
            history.skipped.append((path, "a journal, not a run record (a run's case-by-case log, kept when the run "
                                          "was killed or cut short): skipped; its record, when the run wrote one, is "
                                          "read instead, or --resume it to get one"))
            continue
        shard = stored.completeness.shard
        if shard is not None:
            history.skipped.append((path, f"shard {shard.index}/{shard.count} of a sharded run, not a whole run: "
                                          "skipped; merge the shards (groundeval merge SHARD... -o RUN.json) and "
                                          "give the merged record"))
            continue
        try:
            stored = verified(stored, str(path), trust_stored=trust_stored, warn=to_stderr)
        except StoreError as exc:
            raise HistoryError(str(exc)) from None
        if stored.run_id in seen:
            raise HistoryError(f"{path} and {seen[stored.run_id]} are both run {stored.run_id!r}: give one of them")
        seen[stored.run_id] = path
        name = page_name(stored.run_id)
        if name in names:
            raise HistoryError(f"{path}: run {stored.run_id!r} and run {names[name]!r} would share the page {name}: "
                               "give one of them")
        names[name] = stored.run_id
        page = None
        if pages is not None:
            try:
                html_report.write(html_report.page_data(path, stored), pages / name)
            except OSError as exc:
                raise HistoryError(f"could not write {pages / name}: {exc.strerror or exc}") from None
            except html_report.ReportError as exc:  # its reviews file is unreadable
                raise HistoryError(str(exc)) from None
            page = f"{href}/{quote(name)}"
        history.runs.append(entry_of(stored, path, page))
        del stored
    if not history.runs:
        where = ", ".join(str(p) for p in paths)
        also = f" ({plural(len(history.skipped), 'file')} skipped: journals, shards or reviews)" if history.skipped else ""
        raise HistoryError(f"no run record in {where}{also}: give run records (runs/*.json) or a folder holding them "
                           "(read recursively)")
    history.runs.sort(key=_order)
    return history


# ---------------------------------------------------------------- the tasks, their metrics and lead figures
def tasks_of(runs: Sequence[RunEntry]) -> dict[str, list[MetricSpec]]:
    """Every task over the runs (in order of first appearance) with its headline metrics: the
    union over the runs, each spec as the newest run declaring it has it."""
    out: dict[str, dict[str, MetricSpec]] = {}
    for run in runs:
        for task, point in run.tasks.items():
            specs = out.setdefault(task, {})
            for name, spec in point.specs.items():
                specs[name] = spec  # newest last: its spec wins, the first appearance keeps the order
    return {t: list(s.values()) for t, s in out.items()}


def leads(runs: Sequence[RunEntry], chosen: Sequence[str] = ()) -> dict[str, str | None]:
    """Per task, the figure the table shows: ``chosen`` (``TASK.METRIC``), else :func:`lead_metric`
    of the task's headline metrics as the newest run holding the task declares them."""
    out: dict[str, str | None] = {}
    for task in tasks_of(runs):
        newest = next(r.tasks[task] for r in reversed(runs) if task in r.tasks)
        out[task] = lead_metric(list(newest.specs.values()))
    for item in chosen:
        task, _, metric = item.partition(".")
        if task not in out or not metric:
            raise HistoryError(f"--metric {item}: no task {task!r} in these runs (tasks: {', '.join(out)})"
                               if task not in out else f"--metric {item}: give TASK.METRIC")
        known = {n for r in runs if task in r.tasks for n in r.tasks[task].specs}
        if metric not in known:
            raise HistoryError(f"--metric {item}: {task} declares no headline metric {metric!r} in these runs "
                               f"(headline metrics: {', '.join(sorted(known))})")
        out[task] = metric
    return out


def figure_text(point: TaskPoint | None, metric: str | None) -> str:
    if point is None or metric is None or metric not in point.figures:
        return "–"
    f = point.figures[metric]
    return f.text + (f" {f.ci_text}" if f.ci_text else "")


# ---------------------------------------------------------------- groundeval runs: the table
def table(history: History, chosen: Sequence[str] = ()) -> list[str]:
    """The runs as plain text lines: a header, then one row per run, oldest first."""
    runs = history.runs
    lead = leads(runs, chosen)
    head = ["started", "run id", "agent", "model", "branch"]
    for task, metric in lead.items():
        head += [f"{task} pass rate", f"{task} {metric or '–'}"]  # as on the page: "pass" may be the lead
    head.append("completeness")
    rows = [head]
    for r in runs:
        row = [r.when, r.run_id, r.agent, r.model, r.branch]
        for task, metric in lead.items():
            point = r.tasks.get(task)
            row += [point.pass_text if point is not None else "–", figure_text(point, metric)]
        row.append(r.completeness)
        rows.append([" ".join(str(c).split()) for c in row])  # one line per run, whatever a name holds
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]


# ---------------------------------------------------------------- groundeval report DIR: the page
CSS = """
:root{--good:#1a7f37;--bad:#c62828;--warn:#b26a00;--muted:#666;--line:#ddd;--bar:#4a78b5;--bg2:#f6f8fa}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1280px;padding:0 16px 40px;color:#222}
h1{font-size:22px;margin:18px 0 4px}h2{font-size:18px;margin:26px 0 8px;border-bottom:1px solid var(--line)}
.subtitle,#shown,.muted{color:var(--muted)}
table{border-collapse:collapse;margin:6px 0}th,td{border-bottom:1px solid var(--line);padding:3px 8px;text-align:left;vertical-align:top}
th{background:var(--bg2)}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
code{font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
.controls{display:flex;flex-wrap:wrap;gap:14px;align-items:center;margin:8px 0}
.gate-passed{color:var(--good);font-weight:600}.gate-failed{color:var(--bad);font-weight:600}
.trends{display:flex;flex-wrap:wrap;gap:10px 22px}
figure.trend{margin:6px 0}figcaption{font-weight:600;font-size:13px}figcaption .kind{font-weight:400;color:var(--muted)}
svg.trend-chart{display:block}svg .line{fill:none;stroke:var(--bar);stroke-width:1.5}svg .pt{fill:var(--bar)}
svg .ci{stroke:#111;stroke-width:1;opacity:.55}svg .grid{stroke:#ddd}svg text{font-size:10px;fill:var(--muted)}
#errors{border:2px solid var(--bad);color:var(--bad);padding:8px;white-space:pre-wrap}
ul.skipped{color:var(--warn)}
"""

JS = JS_CATCHER + r"""
  var DATA = JSON.parse(document.getElementById("groundeval-history").textContent);
  var NS = "http://www.w3.org/2000/svg";
  var W = 300, H = 110, L = 34, R = 8, T = 8, B = 8, P = 6;
  function svg(tag, attrs, text) {
    var n = document.createElementNS(NS, tag);
    Object.keys(attrs || {}).forEach(function (k) { n.setAttribute(k, String(attrs[k])); });
    if (text !== undefined) { n.textContent = String(text); }
    return n;
  }
  function r2(x) { return Math.round(x * 100) / 100; }

  // one trend chart: the shown runs' figures (oldest left), each point with its interval
  function draw(box, task, metric, shown) {
    while (box.firstChild) { box.removeChild(box.firstChild); }
    var pts = [];
    shown.forEach(function (run) {
      var f = ((run.tasks[task] || {}).figures || {})[metric];
      if (f && typeof f[0] === "number" && isFinite(f[0])) { pts.push({ run: run, f: f }); }
    });
    var lo = 0, hi = 1;
    pts.forEach(function (p) {
      [p.f[0], p.f[2], p.f[3]].forEach(function (v) {
        if (typeof v === "number" && isFinite(v)) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
      });
    });
    var chart = svg("svg", { "class": "trend-chart", width: W, height: H, viewBox: "0 0 " + W + " " + H,
                             role: "img", "data-lo": lo, "data-hi": hi, "data-points": pts.length });
    chart.setAttribute("aria-label", task + " " + metric + " over " + pts.length + " runs");
    function y(v) { return T + (hi - v) / (hi - lo) * (H - T - B); }
    function x(i) { return pts.length === 1 ? (L + W - R) / 2 : L + P + i * (W - L - R - 2 * P) / (pts.length - 1); }
    [lo, hi].forEach(function (v) {
      chart.appendChild(svg("line", { "class": "grid", x1: L, x2: W - R, y1: r2(y(v)), y2: r2(y(v)) }));
      chart.appendChild(svg("text", { x: L - 4, y: r2(y(v) + 3), "text-anchor": "end" }, String(v)));
    });
    if (pts.length > 1) {
      chart.appendChild(svg("polyline", { "class": "line", points: pts.map(function (p, i) {
        return r2(x(i)) + "," + r2(y(p.f[0]));
      }).join(" ") }));
    }
    pts.forEach(function (p, i) {
      var g = svg("g", { "class": "point", "data-run": p.run.id, "data-value": p.f[1], "data-ci": p.f[4] });
      if (typeof p.f[2] === "number" && typeof p.f[3] === "number") {
        g.appendChild(svg("line", { "class": "ci", x1: r2(x(i)), x2: r2(x(i)), y1: r2(y(p.f[2])), y2: r2(y(p.f[3])) }));
      }
      var c = svg("circle", { "class": "pt", cx: r2(x(i)), cy: r2(y(p.f[0])), r: 3 });
      c.appendChild(svg("title", {}, p.run.id + " (" + p.run.when + "): " + p.f[1] + (p.f[4] ? " " + p.f[4] : "")));
      g.appendChild(c);
      chart.appendChild(g);
    });
    box.appendChild(chart);
  }

  var byId = {};
  DATA.runs.forEach(function (r) { byId[r.id] = r; });
  var rows = Array.prototype.slice.call(document.querySelectorAll("tr.run"));
  var filters = ["agent", "model", "branch"].map(function (name) {
    return { name: name, select: document.getElementById("filter-" + name) };
  });

  function apply() {
    var shown = [];
    rows.forEach(function (tr) {
      var visible = filters.every(function (f) {
        return !f.select.value || tr.getAttribute("data-" + f.name) === f.select.value;
      });
      tr.hidden = !visible;
      if (visible) { shown.push(byId[tr.getAttribute("data-run")]); }
    });
    Array.prototype.forEach.call(document.querySelectorAll("div.trend-plot"), function (box) {
      draw(box, box.getAttribute("data-task"), box.getAttribute("data-metric"), shown);
    });
    var counter = document.getElementById("shown");
    counter.textContent = shown.length + " of " + rows.length + " runs shown";
    counter.setAttribute("data-shown", String(shown.length));
    counter.setAttribute("data-total", String(rows.length));
  }
  function state() {
    var p = new URLSearchParams();
    filters.forEach(function (f) { if (f.select.value) { p.set(f.name, f.select.value); } });
    return p.toString();
  }
  function sync() {
    try { history.replaceState(null, "", "#" + state()); } catch (x) { /* a file: URL may refuse: keep going */ }
  }
  function fromHash() {
    var p = new URLSearchParams(location.hash.replace(/^#/, ""));
    filters.forEach(function (f) {
      var want = p.get(f.name) || "";
      var known = Array.prototype.some.call(f.select.options, function (o) { return o.value === want; });
      f.select.value = known ? want : "";
    });
    apply();
  }
  filters.forEach(function (f) {
    f.select.addEventListener("change", function () { apply(); sync(); });
  });
  window.addEventListener("hashchange", fromHash);
  fromHash();
  document.body.setAttribute("data-ready", "1");
})();
"""


def _select(name: str, values: Iterable[str]) -> str:
    options = "".join(f'<option value="{e(v)}">{e(v)}</option>' for v in sorted(set(values)))
    return (f'<label>{e(name)} <select id="filter-{e(name)}"><option value="">all</option>{options}</select>'
            "</label>")


def _run_row(r: RunEntry, lead: dict[str, str | None]) -> str:
    link = f'<a href="{e(r.page)}">{e(r.run_id)}</a>' if r.page else e(r.run_id)
    commit = (r.commit or "")[:12] + (" (dirty)" if r.dirty else "")
    cells = [f'<td class="when">{e(r.when)}</td>', f'<td class="run-id">{link}</td>',
             f'<td class="agent">{e(r.agent)}</td>', f'<td class="model">{e(r.model)}</td>',
             f'<td class="branch" title="{e(commit)}">{e(r.branch)}</td>',
             f'<td class="gate gate-{e(r.gate)}">{e(r.gate)}</td>']
    for task, metric in lead.items():
        point = r.tasks.get(task)
        cells.append(f'<td class="num" data-pass="{e(task)}">{e(point.pass_text if point else "–")}</td>')
        cells.append(f'<td class="num" data-lead="{e(task)}">{e(figure_text(point, metric))}</td>')
    cells.append(f'<td class="completeness">{e(r.completeness)}</td>')
    return (f'<tr class="run" data-run="{e(r.run_id)}" data-agent="{e(r.agent)}" data-model="{e(r.model)}" '
            f'data-branch="{e(r.branch)}">' + "".join(cells) + "</tr>")


def _run_data(r: RunEntry) -> dict[str, Any]:
    """A run as the script draws it: per task and headline metric ``[value, "value", lo, hi,
    "[lo, hi]"]`` (numbers to place the point, the strings the page shows)."""
    tasks = {}
    for task, point in r.tasks.items():
        tasks[task] = {"figures": {name: [f.value if isinstance(f.value, (int, float)) else None, f.text,
                                          f.ci[0] if f.ci else None, f.ci[1] if f.ci else None, f.ci_text]
                                   for name, f in point.figures.items()}}
    return {"id": r.run_id, "when": r.when, "tasks": tasks}


def render(history: History) -> str:
    """The history page of ``history``'s runs, as one HTML document."""
    runs = history.runs
    lead = leads(runs)
    css, js = CSS.strip(), JS.strip()
    csp = (f"default-src 'none'; script-src '{csp_hash(js)}'; style-src '{csp_hash(css)}'; img-src data:; "
           "base-uri 'none'; form-action 'none'")
    head = ["started", "run", "agent", "model", "branch", "gate"]
    for task, metric in lead.items():
        head += [f"{task} pass rate", f"{task} {metric or '–'}"]
    head.append("completeness")
    th = "".join(f"<th>{e(h)}</th>" for h in head)
    skipped = ""
    if history.skipped:
        skipped = ('<ul class="skipped" id="skipped">' + "".join(
            f'<li data-skipped="{e(p)}"><code>{e(p)}</code>: {e(why)}</li>' for p, why in history.skipped) + "</ul>")
    sections = []
    for task, specs in tasks_of(runs).items():
        figs = "".join(
            f'<figure class="trend" data-task="{e(task)}" data-metric="{e(s.name)}"><figcaption>{e(s.name)} '
            f'<span class="kind">{e(s.kind)}, {"higher" if s.higher_is_better else "lower"} is better'
            f'{", 95% interval" if s.interval != "none" else ""}</span></figcaption>'
            f'<div class="trend-plot" data-task="{e(task)}" data-metric="{e(s.name)}"></div></figure>'
            for s in specs)
        sections.append(f'<section class="task" data-task="{e(task)}"><h2>{e(task)}</h2>'
                        f'<div class="trends">{figs or "<p>no headline metric declared</p>"}</div></section>')
    span = f"{runs[0].when} to {runs[-1].when}" if len(runs) > 1 else runs[0].when
    data = data_json({"runs": [_run_data(r) for r in runs]})
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{e(csp)}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>groundeval run history</title><style>{css}</style></head>\n<body>"
        "<h1>groundeval run history</h1>"
        f'<p class="subtitle">{len(runs)} run{"s" if len(runs) != 1 else ""}, {e(span)} (oldest first; each run '
        "links to its own report)</p>"
        '<div id="errors" hidden></div>\n' + skipped
        + '<section id="runs"><h2>Runs</h2><div class="controls">'
        + _select("agent", (r.agent for r in runs)) + _select("model", (r.model for r in runs))
        + _select("branch", (r.branch for r in runs)) + '<span id="shown"></span></div>'
        + f'<table class="runs"><thead><tr>{th}</tr></thead><tbody>'
        + "".join(_run_row(r, lead) for r in runs) + "</tbody></table></section>\n"
        + "\n".join(sections)
        + f'\n<script type="application/json" id="groundeval-history">{data}</script>'
        f"\n<script>{js}</script>\n</body></html>\n"
    )


def write_index(history: History, path: Path) -> Path:
    """Write the page (owner-only, like every file the harness writes)."""
    text = render(history)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(open_private(path), "wb") as fh:
        fh.write(text.encode("utf-8", "backslashreplace"))
    return path


# ---------------------------------------------------------------- the commands
def wants_history(args: argparse.Namespace) -> bool:
    """``groundeval report`` makes the history page: with ``--history``, a folder, or 3+ records."""
    return bool(getattr(args, "history", False)) or len(args.runs) > 2 or any(Path(p).is_dir() for p in args.runs)


def _say_skipped(command: str, history: History) -> None:
    for path, why in history.skipped:
        print(f"groundeval {command}: {path}: {why}", file=sys.stderr)


def report(args: argparse.Namespace) -> int:
    """``groundeval report DIR_OR_RECORDS... -o index.html``."""
    out: Path | None = args.output
    if out is None:
        dirs = [Path(p) for p in args.runs if Path(p).is_dir()]
        if len(args.runs) != 1 or not dirs:
            print("groundeval report: name the history page with -o INDEX.html (the default, DIR/index.html, is "
                  "for one folder)", file=sys.stderr)
            return 2
        out = dirs[0] / "index.html"
    pages = out.parent / f"{out.stem}-runs"
    try:
        history = gather(args.runs, pages, href=quote(pages.name), trust_stored=getattr(args, "trust_stored", False))
    except HistoryError as exc:
        print(f"groundeval report: {exc}", file=sys.stderr)
        return 2
    _say_skipped("report", history)
    try:
        write_index(history, out)
    except OSError as exc:
        print(f"groundeval report: could not write {out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    from pytest_groundeval.reporting.terminal import plural

    print(f"groundeval report: wrote {out} ({plural(len(history.runs), 'run')}; their pages in {pages})")
    return 0


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "runs", help="list run records (a folder, read recursively) as a table, oldest first",
        description="Print one row per run record: when it started, run id, agent, model, branch, per task its "
        "pass rate and lead figure (with its 95% interval), and completeness; oldest first. Folders are read "
        "recursively; journals and shards' records are skipped with a line saying so (on stderr). Exit status: "
        "0 listed, 2 a file could not be read as a run record, or no record was found.")
    p.add_argument("runs", nargs="+", type=Path, metavar="DIR_OR_RECORD", help="a folder of run records, or records")
    p.add_argument("--metric", action="append", default=[], metavar="TASK.METRIC",
                   help="the figure to show for TASK (a headline metric it declares); repeatable")
    from pytest_groundeval.store.verify import TRUST_HELP

    p.add_argument("--trust-stored", action="store_true", help=TRUST_HELP)
    p.set_defaults(run=run)
    _extend_report(subparsers)


def _extend_report(subparsers: Any) -> None:
    """``groundeval report`` (``html.py``'s parser, registered before this module): add
    ``--history``, and make the history page when :func:`wants_history`, else run the report
    as it was."""
    report_parser = subparsers.choices.get("report")
    if report_parser is None:
        raise RuntimeError("groundeval: reporting.history extends the report subcommand: register "
                           "reporting.html before it (cli.SUBCOMMANDS)")
    report_parser.add_argument(
        "--history", action="store_true",
        help="write the run history page (also of one or two records); a folder or 3+ records always are")
    report_parser.epilog = ((report_parser.epilog or "") + " History: with a folder of records (read recursively), "
                            "three or more records, or --history, the page is the runs' history (oldest first, "
                            "per-task trends, each run linked to its own page written beside it in "
                            "<INDEX>-runs/; -o INDEX.html, default DIR/index.html for one folder).").strip()
    report_parser.set_defaults(run=functools.partial(_report_or, report_parser.get_default("run")))


def _report_or(single: Any, args: argparse.Namespace) -> int:
    return report(args) if wants_history(args) else single(args)


def run(args: argparse.Namespace) -> int:
    try:
        history = gather(args.runs, trust_stored=args.trust_stored)
        lines = table(history, args.metric)
    except HistoryError as exc:
        print(f"groundeval runs: {exc}", file=sys.stderr)
        return 2
    _say_skipped("runs", history)
    print("\n".join(lines))
    return 0


__all__ = ["History", "HistoryError", "RunEntry", "gather", "headline_specs", "lead_metric", "render", "report",
           "table", "wants_history", "write_index"]
