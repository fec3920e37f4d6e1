"""``groundeval compare BASE NEW``: did NEW get worse than BASE, case by case?

Two runs (records or journals) of the same cases are paired by task and case id. For each
task compared (the tasks both runs hold) and each of its metrics: the base and new figures
(the task's own ``summarize`` over the paired cases), the delta with a 95% interval (paired
bootstrap, seeded), and a paired test with its p-value:

* a metric that is pass/fail per case (0 or 1, one result per case in both runs: ``pass``,
  the share of cases passed, and rates such as exact match or a pass/fail dimension): exact
  McNemar, a two-sided binomial test on the discordant pairs (b: 1 in BASE and 0 in NEW, c
  the other way), computed exactly;
* every other metric (F1, precision, recall, name accuracy; any metric once cases repeat): a
  paired bootstrap. Cases are resampled with replacement (the same resample for both runs)
  and the metric recomputed: a rate or a macro mean as the mean of the per-case values, a
  micro figure from the summed per-case counts through the scorers' own ``prf`` (the counts
  of each case are what the task's ``summarize`` makes of that case alone, so an errored case
  counts as it does in the record). Each such decomposition is checked to reproduce the
  task's ``summarize`` on the full sample; where it does not, each resample is summed up by
  ``summarize`` itself (slower, same figures). p-value: twice the share of resampled deltas
  on the other side of 0 (a delta of 0 counts as the other side), at most 1. It is an
  approximation, liberal when only a few cases changed (all in one direction, k cases:
  about ``2 * exp(-k)``, where McNemar on the same cases gives ``2 ** (1 - k)``).

The 95% interval of every delta is the percentile interval of the paired bootstrap.

A *regression* is a metric where NEW is lower than BASE (every metric is higher-is-better)
with p < alpha. The cases that flipped (pass → fail, fail → pass) are listed with the reason
of NEW's outcome.

Repeats (``--repeat N``: several results per case, told apart by ``repeat``): a case's pass
rate is its passed results over its results (one result: 0 or 1), a task's ``pass`` the mean
of its cases' pass rates; the other metrics are the task's summarize over every result. The
bootstrap resamples whole cases (all their repeats). McNemar needs one result per case on
both sides; with repeats ``pass`` is tested by the paired bootstrap instead. A case
"flipped" when its pass rate went down (pass → fail) or up (fail → pass).

Refusals (exit 2): runs over different case sets, or a case id whose content hash differs
between the runs (not the same case), unless ``--intersect`` (then the cases both hold with
the same content are compared, and the output says how many were left out). Skipped results
are left out; a case with no other result on one side is left out of the pairing.

Exit status: 0 compared, 1 with ``--fail-on-regression`` when a regression is significant,
2 refused (or unreadable input, or a usage error).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence


from pytest_groundeval.model import CaseResult
from pytest_groundeval.scorers.base import prf

DEFAULT_ALPHA = 0.05
DEFAULT_SEED = 0
DEFAULT_RESAMPLES = 2000
PASS = "pass"
CI_LEVEL = 0.95
EXAMPLES = 3  # case ids a refusal names per problem
REASON_CHARS = 200  # a flipped case's reason in text / markdown (JSON: whole)
PRF_SUFFIXES = ("precision", "recall", "f1")  # prf()'s order
TOLERANCE = 2e-6  # a decomposition reproduces a summary figure (rounded to 6 digits)


class CompareError(Exception):
    """The runs cannot be compared (the message says why and what to do)."""


# ---------------------------------------------------------------- the result
@dataclass
class RunInfo:
    path: str
    kind: str  # "record" or "journal"
    run_id: str | None
    agent: str | None
    model: str | None
    cut_short: bool | None  # None: a journal (it does not say)
    cut_short_reason: str | None = None


@dataclass
class MetricComparison:
    metric: str
    base: float | None
    new: float | None
    delta: float | None
    ci95: list[float] | None  # of the delta (paired bootstrap, percentile)
    test: str | None  # "mcnemar" | "bootstrap" | None (nothing to test)
    p_value: float | None
    regression: bool = False  # NEW lower, p < alpha
    improvement: bool = False  # NEW higher, p < alpha
    discordant: dict[str, int] | None = None  # McNemar: b (pass -> fail), c (fail -> pass)


@dataclass
class Flip:
    case_id: str
    base_pass_rate: float
    new_pass_rate: float
    new_outcome: str
    reason: str  # of NEW's outcome


@dataclass
class TaskComparison:
    task: str
    n_cases: int  # cases paired
    metrics: list[MetricComparison]
    pass_to_fail: list[Flip]
    fail_to_pass: list[Flip]
    repeats: bool = False  # some case holds several results
    notes: list[str] = field(default_factory=list)
    # what each run paid for the paired cases: {"base"|"new": {input_tokens, output_tokens, cost_usd}}
    usage: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass
class Regression:
    task: str
    metric: str
    base: float
    new: float
    delta: float
    test: str
    p_value: float
    n_resamples: int

    @property
    def label(self) -> str:
        return f"{self.task}.{self.metric}"

    def describe(self) -> str:
        p = _fmt_p(self.p_value, self.n_resamples, self.test)
        return (f"{self.label}: {_fmt(self.base)} -> {_fmt(self.new)} (delta {_fmt(self.delta, signed=True)}, "
                f"{self.test} p{'' if p.startswith('<') else '='}{p})")


@dataclass
class Comparison:
    base: RunInfo
    new: RunInfo
    alpha: float
    seed: int
    n_resamples: int
    tasks: list[TaskComparison]
    left_out: dict[str, dict[str, int]] = field(default_factory=dict)  # --intersect: per task, why
    warnings: list[str] = field(default_factory=list)

    @property
    def regressions(self) -> list[Regression]:
        return [Regression(t.task, m.metric, m.base, m.new, m.delta, m.test, m.p_value,  # type: ignore[arg-type]
                           self.n_resamples)
                for t in self.tasks for m in t.metrics if m.regression]

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["regressions"] = [{**asdict(r), "label": r.label} for r in self.regressions]
        return data


# ---------------------------------------------------------------- reading
@dataclass
class LoadedRun:
    info: RunInfo
    cases: dict[tuple[str, str], list[CaseResult]]  # (task, case id) -> its results (repeats)


def read_run(path: Path) -> LoadedRun:
    """A run record or journal (``store.read``), with every result of each case (several
    once a record holds repeats)."""
    from pytest_groundeval.store import Journal, StoreError, read

    path = Path(path)
    try:
        stored = read(path)
    except StoreError as e:
        raise CompareError(str(e)) from None
    if isinstance(stored, Journal):
        asked = stored.requested or {}
        info = RunInfo(str(path), "journal", stored.run_id, stored.answered_by or asked.get("agent"),
                       stored.answered_model or asked.get("model"), None)
    else:
        comp = stored.completeness
        info = RunInfo(str(path), "record", stored.run_id, stored.agent, stored.model, comp.cut_short, comp.reason)
    cases: dict[tuple[str, str], dict[Any, CaseResult]] = {}
    for c in stored.cases:
        cases.setdefault(c.key, {})[c.repeat] = c
    return LoadedRun(info, {k: list(v.values()) for k, v in sorted(cases.items())})


# ---------------------------------------------------------------- exact McNemar
def mcnemar_p(b: int, c: int) -> float:
    """Exact two-sided McNemar p-value: the discordant pairs b and c under Binomial(b + c, 1/2),
    twice the smaller tail, at most 1 (no discordant pair: 1)."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(b, c) + 1))
    return min(1.0, 2 * tail / 2 ** n)


# ---------------------------------------------------------------- pairing
def _hashes(results: list[CaseResult]) -> set[str]:
    return {r.content_hash for r in results if r.content_hash is not None}


def _content_differs(base: list[CaseResult], new: list[CaseResult]) -> bool:
    """Both runs name the case's content, and not the same (a case with no hash, as a case
    file that could not be read, cannot be told apart)."""
    hb, hn = _hashes(base), _hashes(new)
    return bool(hb and hn and hb != hn)


def _examples(ids: Sequence[str]) -> str:
    shown = ", ".join(ids[:EXAMPLES])
    return shown + (f", ... ({len(ids) - EXAMPLES} more)" if len(ids) > EXAMPLES else "")


def pair(base: LoadedRun, new: LoadedRun, *, intersect: bool) -> tuple[
        dict[str, list[tuple[str, list[CaseResult], list[CaseResult]]]], dict[str, dict[str, int]], list[str]]:
    """The paired cases per common task (case-id order), what ``--intersect`` left out, and
    notes; a :class:`CompareError` when the case sets or contents differ (without ``--intersect``)."""
    tasks_b = {t for t, _ in base.cases}
    tasks_n = {t for t, _ in new.cases}
    common = sorted(tasks_b & tasks_n)
    notes = [f"task {t} is only in {side}: not compared"
             for side, only in (("BASE", tasks_b - tasks_n), ("NEW", tasks_n - tasks_b)) for t in sorted(only)]
    if not common:
        raise CompareError(f"BASE ({base.info.path}) and NEW ({new.info.path}) have no task in common "
                           f"(BASE: {', '.join(sorted(tasks_b)) or 'no case'}; "
                           f"NEW: {', '.join(sorted(tasks_n)) or 'no case'}): "
                           "nothing to compare")
    paired: dict[str, list[tuple[str, list[CaseResult], list[CaseResult]]]] = {}
    left_out: dict[str, dict[str, int]] = {}
    problems: list[str] = []
    for task in common:
        ids_b = {i for t, i in base.cases if t == task}
        ids_n = {i for t, i in new.cases if t == task}
        only_b, only_n = sorted(ids_b - ids_n), sorted(ids_n - ids_b)
        changed = sorted(i for i in ids_b & ids_n if _content_differs(base.cases[(task, i)], new.cases[(task, i)]))
        if only_b or only_n:
            parts = [f"{len(x)} only in {side} (e.g. {_examples(x)})"
                     for side, x in (("BASE", only_b), ("NEW", only_n)) if x]
            problems.append(f"{task}: different case sets: " + "; ".join(parts))
        if changed:
            problems.append(f"{task}: {len(changed)} case(s) with a different content hash (not the same case "
                            f"under the same id; e.g. {_examples(changed)})")
        keep = sorted((ids_b & ids_n) - set(changed))
        if only_b or only_n or changed:
            left_out[task] = {"only_in_base": len(only_b), "only_in_new": len(only_n), "content_differs": len(changed),
                              "compared": len(keep)}
        paired[task] = [(i, base.cases[(task, i)], new.cases[(task, i)]) for i in keep]
    if problems and not intersect:
        kept = sum(len(v) for v in paired.values())
        raise CompareError(
            "BASE and NEW are not runs of the same cases:\n  " + "\n  ".join(problems)
            + f"\nre-run both over the same cases, or pass --intersect to compare the {kept} case(s) both hold "
            "with the same content")
    return paired, left_out, notes


# ---------------------------------------------------------------- per-case columns and the bootstrap
@dataclass
class _Plan:
    """How a metric is recomputed from per-case sums: a mean (column / weight), or one of
    prf()'s figures from three count columns, or (``summarize``) by the task's summarize."""

    kind: str  # "mean" | "prf" | "summarize"
    cols: tuple[str, ...] = ()
    index: int = 0
    per: str = "weight"  # a mean's denominator: per result ("weight"), or per case ("cases")


def _per_case_metric_names(results: list[CaseResult]) -> set[str]:
    return {k for r in results if r.score is not None for k in r.score.metrics}


def _plan(metric: str, per_case: set[str], single_summary_keys: set[str]) -> _Plan:
    if metric == PASS:  # the mean of the per-case pass rates
        return _Plan("mean", ("rate",), per="cases")
    for k, suffix in enumerate(PRF_SUFFIXES):
        if not metric.endswith("_" + suffix):
            continue
        prefix = metric[: -len(suffix) - 1]
        if prefix == "macro" and suffix in per_case:  # mean of the per-case figure
            return _Plan("mean", (f"m:{suffix}",))
        if prefix == "micro" and {"tp", "fp", "fn"} <= single_summary_keys:  # summed counts, as summarize
            return _Plan("prf", ("s:tp", "s:fp", "s:fn"), k)
        if {f"{prefix}_tp", f"{prefix}_fp", f"{prefix}_fn"} <= per_case:
            return _Plan("prf", (f"m:{prefix}_tp", f"m:{prefix}_fp", f"m:{prefix}_fn"), k)
    if metric in per_case:
        return _Plan("mean", (f"m:{metric}",))
    return _Plan("summarize")


def _columns(cases: list[list[CaseResult]], cols: list[str], task: Any) -> "Any":
    """An (n cases × columns) array: ``weight`` (results), ``cases`` (1), ``rate`` (the share
    of the case's results that passed),
    ``m:NAME`` (a per-case metric summed over the case's results; an unscored one counts 0),
    ``s:NAME`` (the task's summary of the case's results alone)."""
    import numpy as np

    out = np.zeros((len(cases), len(cols)))
    for i, results in enumerate(cases):
        single = task.summarize(results) if task is not None and any(c.startswith("s:") for c in cols) else {}
        for j, col in enumerate(cols):
            if col == "weight":
                out[i, j] = len(results)
            elif col == "cases":
                out[i, j] = 1
            elif col == "rate":
                out[i, j] = sum(r.outcome == "passed" for r in results) / len(results)
            elif col.startswith("m:"):
                out[i, j] = sum(r.metric(col[2:]) for r in results)
            else:
                out[i, j] = float(single.get(col[2:]) or 0)
    return out


def _statistic(plan: _Plan, sums: Any, col: dict[str, int]) -> Any:
    """The metric for each row of ``sums`` (one row per resample: column sums)."""
    import numpy as np

    if plan.kind == "mean":
        return sums[:, col[plan.cols[0]]] / sums[:, col[plan.per]]
    tp, fp, fn = (sums[:, col[c]] for c in plan.cols)
    return np.array([prf(int(round(a)), int(round(b)), int(round(c)))[plan.index] for a, b, c in zip(tp, fp, fn)])


def _ci_and_p(diffs: Any, observed: float) -> tuple[list[float], float]:
    """Percentile 95% interval of the resampled deltas, and the two-sided bootstrap p-value
    (twice the share of resampled deltas on the other side of 0 than the observed one; a
    delta at 0 counts as the other side; at most 1)."""
    import numpy as np

    d = np.sort(diffs)
    n = len(d)
    a = 1 - CI_LEVEL
    lo, hi = float(d[int((a / 2) * n)]), float(d[min(n - 1, int((1 - a / 2) * n))])
    if observed > 0:
        p = 2 * float(np.mean(d <= 0))
    elif observed < 0:
        p = 2 * float(np.mean(d >= 0))
    else:
        p = 1.0
    return [round(lo, 6), round(hi, 6)], min(1.0, p)


def _reason(results: list[CaseResult], passed: bool) -> tuple[str, str]:
    """NEW's outcome and its reason (with repeats: the first result of that direction)."""
    pick = next((r for r in results if (r.outcome == "passed") == passed), results[0])
    kind = f" ({pick.error.kind})" if pick.error is not None else ""
    return pick.outcome, f"{pick.outcome}{kind}: {pick.reason}"


def _task_class(name: str) -> Any:
    from pytest_groundeval.tasks import registry

    cls = registry().get(name)
    if cls is None:
        return None
    try:
        return cls(Path("."))
    except Exception:  # noqa: BLE001 - a task that cannot be built here: compared on pass rate only
        return None


def compare_task(task_name: str, pairs: list[tuple[str, list[CaseResult], list[CaseResult]]], *, alpha: float,
                 seed: int, n_resamples: int, metrics: Sequence[str] | None = None) -> TaskComparison:
    """One task's comparison over its paired cases (skipped results left out)."""
    import numpy as np

    task = _task_class(task_name)
    notes: list[str] = []
    kept = [(i, [r for r in b if r.outcome != "skipped"], [r for r in n if r.outcome != "skipped"])
            for i, b, n in pairs]
    skipped = [i for i, b, n in kept if not b or not n]
    if skipped:
        notes.append(f"{len(skipped)} case(s) skipped in one run left out (e.g. {_examples(skipped)})")
    kept = [k for k in kept if k[1] and k[2]]
    base_cases, new_cases = [b for _, b, _ in kept], [n for _, _, n in kept]
    repeats = any(len(x) > 1 for x in base_cases + new_cases)

    names: list[str] = [PASS]
    if task is None:
        notes.append(f"task {task_name} is not installed here: only its pass rate is compared")
    else:
        names += [m for m in type(task).metrics if m != PASS]
    if metrics is not None:
        names = [m for m in names if m in metrics]

    flat_b = [r for rs in base_cases for r in rs]
    flat_n = [r for rs in new_cases for r in rs]
    summ_b = task.summarize(flat_b) if task is not None and kept else {}
    summ_n = task.summarize(flat_n) if task is not None and kept else {}
    per_case = _per_case_metric_names(flat_b) | _per_case_metric_names(flat_n)
    single_keys = set(task.summarize(base_cases[0])) if task is not None and kept else set()

    def value(summ: dict[str, Any], rows: list[list[CaseResult]], m: str) -> float | None:
        if m == PASS:
            rates = [sum(r.outcome == "passed" for r in rs) / len(rs) for rs in rows]
            return round(sum(rates) / len(rates), 6) if rates else None
        v = summ.get(m)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    rows: list[MetricComparison] = []
    if not kept:
        notes.append("no case to compare")
        for m in names:
            rows.append(MetricComparison(m, None, None, None, None, None, None))
        return TaskComparison(task_name, 0, rows, [], [], repeats, notes)

    plans = {m: _plan(m, per_case, single_keys) for m in names}
    cols = sorted({"weight", "cases", *(c for p in plans.values() for c in p.cols)})
    col = {c: j for j, c in enumerate(cols)}
    a_b, a_n = _columns(base_cases, cols, task), _columns(new_cases, cols, task)
    whole = np.ones((1, len(kept)))
    for m, p in plans.items():  # a decomposition must reproduce the task's own figure on the full sample
        if p.kind == "summarize" or m == PASS:
            continue
        for a, summ, rs in ((a_b, summ_b, base_cases), (a_n, summ_n, new_cases)):
            v = value(summ, rs, m)
            if v is None or abs(float(_statistic(p, whole @ a, col)[0]) - v) > TOLERANCE:
                plans[m] = _Plan("summarize")
                break

    rng = np.random.default_rng(seed)
    n = len(kept)
    weights = rng.multinomial(n, np.full(n, 1.0 / n), size=n_resamples)  # each row: how often each case is drawn
    s_b, s_n = weights @ a_b, weights @ a_n
    slow: dict[str, tuple[Any, Any]] = {}
    slow_metrics = [m for m, p in plans.items() if p.kind == "summarize"]
    if slow_metrics and task is not None:
        sb, sn = {m: [] for m in slow_metrics}, {m: [] for m in slow_metrics}
        for w in weights:
            rb = [r for k, times in enumerate(w) for _ in range(times) for r in base_cases[k]]
            rn = [r for k, times in enumerate(w) for _ in range(times) for r in new_cases[k]]
            xb, xn = task.summarize(rb), task.summarize(rn)
            for m in slow_metrics:
                sb[m].append(float(xb.get(m) or 0.0))
                sn[m].append(float(xn.get(m) or 0.0))
        slow = {m: (np.array(sb[m]), np.array(sn[m])) for m in slow_metrics}

    binary = all(len(x) == 1 for x in base_cases + new_cases)
    for m in names:
        vb, vn = value(summ_b, base_cases, m), value(summ_n, new_cases, m)
        if vb is None or vn is None:
            rows.append(MetricComparison(m, vb, vn, None, None, None, None))
            continue
        delta = round(vn - vb, 6)
        p = plans[m]
        if p.kind == "summarize":
            db, dn = slow[m]
        else:
            db, dn = _statistic(p, s_b, col), _statistic(p, s_n, col)
        ci, p_boot = _ci_and_p(dn - db, delta)
        row = MetricComparison(m, vb, vn, delta, ci, "bootstrap", p_boot)
        if binary and p.kind == "mean":  # pass/fail per case (0 or 1, one result each): exact McNemar
            xb, xn = a_b[:, col[p.cols[0]]], a_n[:, col[p.cols[0]]]
            if np.isin(xb, (0.0, 1.0)).all() and np.isin(xn, (0.0, 1.0)).all():
                b, c = int(((xb == 1) & (xn == 0)).sum()), int(((xb == 0) & (xn == 1)).sum())
                row.test, row.p_value, row.discordant = "mcnemar", mcnemar_p(b, c), {"b": b, "c": c}
        significant = row.p_value is not None and row.p_value < alpha
        row.regression = significant and delta < 0
        row.improvement = significant and delta > 0
        rows.append(row)

    worse: list[Flip] = []
    better: list[Flip] = []
    for i, b, nw in kept:
        rb = sum(r.outcome == "passed" for r in b) / len(b)
        rn = sum(r.outcome == "passed" for r in nw) / len(nw)
        if rn != rb:
            outcome, why = _reason(nw, passed=rn > rb)
            (worse if rn < rb else better).append(Flip(i, round(rb, 6), round(rn, 6), outcome, why))
    if repeats:
        notes.append("repeated results: per-case pass rates compared by paired bootstrap (McNemar needs one "
                     "result per case)")
    return TaskComparison(task_name, n, rows, worse, better, repeats, notes,
                          usage={"base": _usage(flat_b), "new": _usage(flat_n)})


def _usage(results: list[CaseResult]) -> dict[str, Any]:
    """Tokens and cost of these results (cost None when any result with usage is unpriced)."""
    tin = sum(int(r.usage.input_tokens or 0) for r in results if r.usage is not None)
    tout = sum(int(r.usage.output_tokens or 0) for r in results if r.usage is not None)
    priced = [r.cost_usd for r in results if r.cost_usd is not None]
    unpriced = any(r.usage is not None and r.cost_usd is None for r in results)
    return {"input_tokens": tin, "output_tokens": tout,
            "cost_usd": None if unpriced else round(sum(priced), 6)}


def _usage_line(t: TaskComparison) -> str | None:
    if not t.usage or not any(u["input_tokens"] or u["output_tokens"] for u in t.usage.values()):
        return None

    def one(u: dict[str, Any]) -> str:
        cost = "cost unknown" if u["cost_usd"] is None else f"${u['cost_usd']:.4f}"
        return f"{u['input_tokens']:,} in / {u['output_tokens']:,} out, {cost}"

    return f"tokens: base {one(t.usage['base'])}; new {one(t.usage['new'])}"


def compare(base: LoadedRun, new: LoadedRun, *, alpha: float = DEFAULT_ALPHA, seed: int = DEFAULT_SEED,
            n_resamples: int = DEFAULT_RESAMPLES, intersect: bool = False,
            metrics: dict[str, set[str]] | None = None) -> Comparison:
    """BASE against NEW (``metrics``: per task, the metrics to compare; None: all)."""
    paired, left_out, notes = pair(base, new, intersect=intersect)
    warnings = list(notes)
    for side, run in (("BASE", base), ("NEW", new)):
        if run.info.cut_short:
            why = run.info.cut_short_reason or "no reason given"
            warnings.append(f"{side} ({run.info.path}) was cut short ({why}): it does not hold every case it was "
                            "asked to run")
        elif run.info.kind == "journal":
            warnings.append(f"{side} ({run.info.path}) is a journal: its run may not have finished")
    for task, why in left_out.items():
        warnings.append(f"--intersect: {task}: compared {why['compared']} case(s); left out "
                        f"{why['only_in_base']} only in BASE, {why['only_in_new']} only in NEW, "
                        f"{why['content_differs']} with different content")
    if metrics is not None:
        warnings += [f"--metric names task {t}, which is not compared" for t in sorted(set(metrics) - set(paired))]
    tasks = [compare_task(t, ps, alpha=alpha, seed=seed, n_resamples=n_resamples,
                          metrics=None if metrics is None else sorted(metrics.get(t, set())))
             for t, ps in paired.items() if metrics is None or t in metrics]
    return Comparison(base.info, new.info, alpha, seed, n_resamples, tasks, left_out, warnings)


def compare_paths(base: Path, new: Path, **kw: Any) -> Comparison:
    return compare(read_run(base), read_run(new), **kw)


# ---------------------------------------------------------------- rendering
def _fmt(v: float | None, *, signed: bool = False) -> str:
    if v is None:
        return "-"
    return f"{v:+.3f}" if signed else f"{v:.3f}"


def _fmt_p(p: float | None, n_resamples: int | None = None, test: str | None = None) -> str:
    if p is None:
        return "-"
    if p == 0 and test == "bootstrap" and n_resamples:
        return f"<{1 / n_resamples:.2g}"
    return f"{p:.3g}"


def _fmt_ci(ci: list[float] | None) -> str:
    return f"[{ci[0]:+.3f}, {ci[1]:+.3f}]" if ci else "-"


def _verdict(m: MetricComparison) -> str:
    return "REGRESSION" if m.regression else ("improved" if m.improvement else "")


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 3] + "..."


def _run_line(run: RunInfo) -> str:
    bits = [run.path, f"run {run.run_id or '?'}", f"agent {run.agent or '?'}"]
    if run.model:
        bits.append(f"model {run.model}")
    if run.kind == "journal":
        bits.append("(journal)")
    return "  ".join(bits)


def _method(c: Comparison) -> str:
    return (f"exact McNemar on pass/fail metrics, paired bootstrap ({c.n_resamples} resamples, seed {c.seed}) on the "
            f"others; 95% interval of the delta by the bootstrap; regression: lower with p < {c.alpha:g}")


def render_text(c: Comparison, *, max_flips: int = 20) -> str:
    out = ["groundeval compare", f"  base: {_run_line(c.base)}", f"  new:  {_run_line(c.new)}",
           f"  {_method(c)}"]
    out += [f"  warning: {w}" for w in c.warnings]
    for t in c.tasks:
        out += ["", f"{t.task}: {t.n_cases} case(s) paired"]
        out += [f"  note: {n}" for n in t.notes]
        if _usage_line(t):
            out.append(f"  {_usage_line(t)}")
        width = max([len("metric")] + [len(m.metric) for m in t.metrics])
        out.append(f"  {'metric':<{width}}  {'base':>6}  {'new':>6}  {'delta':>7}  {'95% CI':<18}  {'test':<9}  "
                   f"{'p':>8}")
        for m in t.metrics:
            out.append(f"  {m.metric:<{width}}  {_fmt(m.base):>6}  {_fmt(m.new):>6}  {_fmt(m.delta, signed=True):>7}  "
                       f"{_fmt_ci(m.ci95):<18}  {m.test or '-':<9}  {_fmt_p(m.p_value, c.n_resamples, m.test):>8}"
                       f"  {_verdict(m)}".rstrip())
        for title, flips in (("pass -> fail", t.pass_to_fail), ("fail -> pass", t.fail_to_pass)):
            out.append(f"  {title}: {len(flips)}")
            for f in flips[:max_flips]:
                rates = "" if not t.repeats else f" (pass rate {f.base_pass_rate:.2f} -> {f.new_pass_rate:.2f})"
                out.append(f"    {f.case_id}{rates}: {_short(f.reason)}")
            if len(flips) > max_flips:
                out.append(f"    ... and {len(flips) - max_flips} more (--max-flips, or --format json for all)")
    regs = c.regressions
    out.append("")
    if regs:
        out.append(f"{len(regs)} regression(s) significant at alpha {c.alpha:g}:")
        out += [f"  {r.describe()}" for r in regs]
    else:
        out.append(f"no regression significant at alpha {c.alpha:g}")
    return "\n".join(out) + "\n"


def _md_cell(text: str) -> str:
    return " ".join(str(text).split()).replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;")


def _md_code(text: str) -> str:
    return "`" + str(text).replace("`", "'") + "`"


def _md_run(run: RunInfo) -> str:
    bits = [f"run {_md_code(run.run_id or '?')}", f"agent {_md_code(run.agent or '?')}"]
    if run.model:
        bits.append(f"model {_md_code(run.model)}")
    if run.kind == "journal":
        bits.append("(journal)")
    return ", ".join(bits)


def render_markdown(c: Comparison, *, max_flips: int = 20) -> str:
    regs = c.regressions
    head = (f"**{len(regs)} regression(s)** significant at alpha {c.alpha:g}" if regs
            else f"No regression significant at alpha {c.alpha:g}")
    out = ["### groundeval compare", "", f"**base**: {_md_run(c.base)}  ", f"**new**: {_md_run(c.new)}", "",
           head + (":" if regs else "."), ""]
    if regs:
        out += [f"- {_md_cell(r.describe())}" for r in regs] + [""]
    out += [f"> **warning**: {_md_cell(w)}" for w in c.warnings] + ([""] if c.warnings else [])
    for t in c.tasks:
        out += [f"#### {_md_cell(t.task)} ({t.n_cases} cases)", ""]
        out += [f"_{_md_cell(n)}_" for n in t.notes] + ([""] if t.notes else [])
        if _usage_line(t):
            out += [_md_cell(_usage_line(t)), ""]
        out += ["| metric | base | new | delta | 95% CI | test | p | |", "|---|---:|---:|---:|---|---|---:|---|"]
        for m in t.metrics:
            verdict = {"REGRESSION": "**regression**", "improved": "improved"}.get(_verdict(m), "")
            out.append(f"| {_md_cell(m.metric)} | {_fmt(m.base)} | {_fmt(m.new)} | {_fmt(m.delta, signed=True)} | "
                       f"{_fmt_ci(m.ci95)} | {m.test or '-'} | {_md_cell(_fmt_p(m.p_value, c.n_resamples, m.test))} | "
                       f"{verdict} |")
        out.append("")
        for title, flips in (("pass → fail", t.pass_to_fail), ("fail → pass", t.fail_to_pass)):
            if not flips:
                out += [f"{title}: none", ""]
                continue
            out += [f"<details><summary>{title}: {len(flips)}</summary>", ""]
            for f in flips[:max_flips]:
                rates = "" if not t.repeats else f" (pass rate {f.base_pass_rate:.2f} → {f.new_pass_rate:.2f})"
                out.append(f"- {_md_code(f.case_id)}{rates}: {_md_cell(_short(f.reason))}")
            if len(flips) > max_flips:
                out.append(f"- ... and {len(flips) - max_flips} more")
            out += ["", "</details>", ""]
    out.append(f"<sub>{_md_cell(_method(c))}</sub>")
    return "\n".join(out) + "\n"


def render(c: Comparison, fmt: str, *, max_flips: int = 20) -> str:
    if fmt == "json":
        return json.dumps(c.to_json(), indent=2) + "\n"
    if fmt == "markdown":
        return render_markdown(c, max_flips=max_flips)
    return render_text(c, max_flips=max_flips)


# ---------------------------------------------------------------- the subcommand
def _metric_filter(texts: list[str] | None) -> dict[str, set[str]] | None:
    """``--metric TASK.METRIC`` (aliases as for thresholds; ``TASK.pass`` always) → per task."""
    if not texts:
        return None
    from pytest_groundeval.tasks import registry

    chosen: dict[str, set[str]] = {}
    for text in texts:
        task, _, metric = text.partition(".")
        cls = registry().get(task)
        name = PASS if metric == PASS else (cls.resolve_metric(metric) if cls is not None else None)
        if not task or name is None:
            known = f" ({', '.join((PASS,) + tuple(m for m in cls.metrics if m != PASS))})" if cls is not None else ""
            raise CompareError(f"--metric {text!r}: not a TASK.METRIC of an installed task{known}")
        chosen.setdefault(task, set()).add(name)
    return chosen


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "compare", help="compare two runs (records or journals) of the same cases, with paired tests",
        description="Compare NEW against BASE (run records or journals) per task and metric: base, new, delta "
        "with a 95% interval, the cases that flipped, and a paired test per metric (exact McNemar on "
        "pass/fail, seeded paired bootstrap on the others). Refuses runs over different case sets or "
        "contents unless --intersect. Exit status: 0 compared, 1 a significant regression with "
        "--fail-on-regression, 2 refused.")
    p.add_argument("base", type=Path, metavar="BASE", help="the reference run (runs/*.json or *.jsonl)")
    p.add_argument("new", type=Path, metavar="NEW", help="the run compared with it")
    p.add_argument("--format", choices=("text", "markdown", "json"), default="text",
                   help="text (default), markdown (a PR comment) or json")
    p.add_argument("--alpha", type=float, default=DEFAULT_ALPHA,
                   help=f"significance level of a regression (default {DEFAULT_ALPHA})")
    p.add_argument("--fail-on-regression", action="store_true",
                   help="exit 1 when a regression is significant at --alpha (and name it)")
    p.add_argument("--intersect", action="store_true",
                   help="compare the cases both runs hold with the same content, instead of refusing")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"bootstrap seed (default {DEFAULT_SEED})")
    p.add_argument("--resamples", type=int, default=DEFAULT_RESAMPLES,
                   help=f"bootstrap resamples (default {DEFAULT_RESAMPLES})")
    p.add_argument("--metric", dest="metrics", action="append", default=None, metavar="TASK.METRIC",
                   help="compare (and test) only these metrics, repeatable (default: every metric of every task)")
    p.add_argument("--max-flips", type=int, default=20,
                   help="flipped cases listed per direction in text / markdown (default 20; json: all)")
    p.set_defaults(run=run)
    return p


def run(args: argparse.Namespace) -> int:
    if not 0 < args.alpha < 1 or args.resamples < 1 or args.max_flips < 0:
        print("groundeval compare: --alpha must be in (0, 1), --resamples at least 1, --max-flips at least 0",
              file=sys.stderr)
        return 2
    try:
        metrics = _metric_filter(args.metrics)
    except CompareError as e:
        print(f"groundeval compare: {e}", file=sys.stderr)
        return 2
    try:
        result = compare_paths(args.base, args.new, alpha=args.alpha, seed=args.seed, n_resamples=args.resamples,
                               intersect=args.intersect, metrics=metrics)
    except CompareError as e:
        print(f"groundeval compare: refused: {e}", file=sys.stderr)
        return 2
    sys.stdout.write(render(result, args.format, max_flips=args.max_flips))
    regs = result.regressions
    if args.fail_on_regression and regs:
        print(f"groundeval compare: FAILED: {len(regs)} regression(s) significant at alpha {args.alpha:g}: "
              + "; ".join(r.describe() for r in regs), file=sys.stderr)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``groundeval compare ...`` on its own (as ``cli.main(["compare", ...])`` runs it)."""
    parser = argparse.ArgumentParser(prog="groundeval")
    sub = parser.add_subparsers(dest="command", required=True)
    add_parser(sub)
    try:
        args = parser.parse_args(["compare", *(argv or [])])
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
