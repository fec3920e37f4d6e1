"""``groundeval compare BASE NEW``: did NEW get worse than BASE, case by case?

Two runs (records or journals) of the same cases are paired by task and case id. For each
task compared (the tasks both runs hold) and each of its metrics: the base and new figures
over the paired cases, the delta with a 95% interval (paired bootstrap, seeded), and a paired
test with its p-value. What a metric is comes from the runs alone: each record's summary
declares its figures (``model.MetricSpec``: kind, direction, interval; a journal's header the
same), so a run compares without its task installed, and nothing is guessed from a name:

* ``pass`` (every task: the share of cases passed, from the outcomes) and every declared
  ``rate`` (pass/fail per case: exact match, a write dimension, grounded, pass^k, flaky): exact
  McNemar, a two-sided binomial test on the discordant pairs (b: 1 in BASE and 0 in NEW, c the
  other way), computed exactly, when every case has one result on both sides;
* a declared ``mean`` (macro F1, name accuracy, the repeats' pass rate), whatever its per-case
  values happen to be (all 0 or 1 included), a ``prf`` figure (micro / per-verdict P/R/F1 of the
  summed counts), and a rate once cases repeat: the paired bootstrap. Cases are resampled with
  replacement (the same resample for both runs) and the figure recomputed from its spec: a rate
  or mean as the mean of the per-case values (over the applicable cases, for a rate declared
  so), a prf figure through the scorers' own ``prf`` from the summed per-case counts (an
  errored case adding what its count's spec says: its truth items, missed). p-value: twice
  the share of resampled deltas on the other side of 0 (a delta of 0 counts as the other side),
  at most 1. It is an approximation, liberal when only a few cases changed (all in one
  direction, k cases: about ``2 * exp(-k)``, where McNemar on the same cases gives
  ``2 ** (1 - k)``).
* a ``custom`` figure (only its task's code computes it): the records' figures, no test;
  ``count`` figures are parts of others and are not compared.

Over the whole of a record's cases each recomputed figure must be the record's own: where it
is not (a wrong spec, an edited record) a note says so; the figures compared are the cases'.

The 95% interval of every delta is the percentile interval of the paired bootstrap.

A *regression* is a metric worse in NEW than in BASE (lower, or higher for a metric declared
lower-is-better: the flaky share) with p < alpha. The cases that flipped (pass → fail,
fail → pass) are listed with the reason of NEW's outcome.

Repeats (``--repeat N``: several results per case, told apart by ``repeat``): a case's pass
rate is its passed results over its results (one result: 0 or 1), a task's ``pass`` the mean
of its cases' pass rates; the other figures are over every result. The bootstrap resamples
whole cases (all their repeats). McNemar needs one result per case on both sides; with
repeats ``pass`` is tested by the paired bootstrap instead. A case "flipped" when its pass
rate went down (pass → fail) or up (fail → pass).

Records written before records declared their metrics (no ``summary.<task>.specs``), and
journals before their headers did, are refused with what to do (re-score or resume them with
this groundeval), never read by guessing.

Refusals (exit 2): runs over different case sets, or a case id whose content hash differs
between the runs (not the same case), unless ``--intersect`` (then the cases both hold with
the same content are compared, and the output says how many were left out). Skipped results
are left out; a case with no other result on one side is left out of the pairing.

Human reviews (``groundeval review``, ``store/reviews.py``: beside a record, never in it) of
the paired cases are listed per task with who and why, and NEW's beside each flipped case; the
figures stay the scorer's unless ``--with-reviews``, which compares the reviewed verdicts
(``reviews.reviewed``: a case review sets the outcome, a dimension review that dimension) and
so gates ``--fail-on-regression`` on them, and says so in the output. A reviews file that
cannot be read refuses the comparison like an unreadable record.

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

from pytest_groundeval.model import CaseResult, MetricSpec, TaskSummary, resolve_metric
from pytest_groundeval.reporting.terminal import plural
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
    reviews: int = 0  # standing human reviews beside the record (groundeval review)
    reviewed: bool = False  # --with-reviews: its figures are over the reviewed verdicts


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
    reviewed: str | None = None  # NEW's standing human review of the case (who, why), beside the scorer's


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
    # the standing human reviews of the paired cases (groundeval review), both runs', beside the scorer's
    reviews: list[dict[str, Any]] = field(default_factory=list)


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
    # per task, what each figure is, as the run declares it (a record's summary, a journal's header)
    specs: dict[str, dict[str, MetricSpec]] = field(default_factory=dict)
    summary: dict[str, TaskSummary] = field(default_factory=dict)  # a record's own (a journal has none)
    # per task, its settings as the run recorded them (``options.<task>``: cases, a jury, ...)
    task_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    # a record's standing human reviews (store/reviews.py), per case result; and the reader's warnings
    reviews: dict[tuple, Any] = field(default_factory=dict)
    review_warnings: list[str] = field(default_factory=list)


def read_run(path: Path, *, with_reviews: bool = False, trust_stored: bool = False) -> LoadedRun:
    """A run record or journal (``store.read``), with every result of each case (several
    once a record holds repeats), and a record's human reviews (``store/reviews.py``).
    ``with_reviews``: its cases as the reviews say (the record unchanged; its own summary is
    then not the figures' check, as it is the scorer's)."""
    from pytest_groundeval.store import StoreError
    from pytest_groundeval.store.verify import read_verified, to_stderr

    path = Path(path)
    try:  # nothing stored is taken as read: its cases re-derived, its summary computed again
        stored = read_verified(path, trust_stored=trust_stored, warn=to_stderr)
    except StoreError as e:
        raise CompareError(str(e)) from None
    return loaded_run(stored, str(path), reviews_at=path, with_reviews=with_reviews)


def loaded_run(stored: Any, path: str, *, reviews_at: Path | None = None, with_reviews: bool = False) -> LoadedRun:
    """A run already read (a ``RunRecord`` or a ``Journal``, as ``store.read`` returns them),
    ``path`` naming it in messages: what :func:`read_run` returns for its file (the HTML report
    compares the records it was given through this). ``reviews_at``: the record file whose
    human reviews (beside it) are read; None: none."""
    from pytest_groundeval.store import Journal
    from pytest_groundeval.store.reviews import ReviewError, Reviews, read_reviews, reviewed

    summary: dict[str, TaskSummary] = {}
    if isinstance(stored, Journal):
        if stored.cases and stored.specs is None:
            raise CompareError(f"{path}: a journal written before journals declared their metrics, so what kind "
                               "each figure is cannot be read from it; compare its run's record, or finish the run "
                               f"with this groundeval (pytest evals --resume {path}) and compare the record it writes")
        specs = {t: {s.name: s for s in v} for t, v in (stored.specs or {}).items()}
        asked = stored.requested or {}
        info = RunInfo(str(path), "journal", stored.run_id, stored.answered_by or asked.get("agent"),
                       stored.answered_model or asked.get("model"), None)
    else:
        summary = dict(stored.summary)
        specs = {t: dict(v.specs) for t, v in summary.items()}
        comp = stored.completeness
        info = RunInfo(str(path), "record", stored.run_id, stored.agent, stored.model, comp.cut_short, comp.reason)
    try:
        reviews = (read_reviews(reviews_at, stored) if reviews_at is not None and not isinstance(stored, Journal)
                   else Reviews(Path(reviews_at or path)))
    except ReviewError as e:
        raise CompareError(str(e)) from None
    standing = reviews.standing
    info.reviews = sum(len(r.all()) for r in standing.values())
    info.reviewed = with_reviews and info.reviews > 0
    if info.reviewed:
        summary = {}  # the scorer's figures: not those of the reviewed cases
    cases: dict[tuple[str, str], dict[Any, CaseResult]] = {}
    for c in stored.cases:
        cases.setdefault(c.key, {})[c.repeat] = reviewed(c, standing.get(c.result_key)) if info.reviewed else c
    extra = stored.options.model_extra if hasattr(stored.options, "model_extra") else stored.options
    task_options = {t: dict(v) for t, v in (extra or {}).items() if isinstance(v, dict)}
    return LoadedRun(info, {k: list(v.values()) for k, v in sorted(cases.items())}, specs, summary, task_options,
                     standing, reviews.warnings)


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
            problems.append(f"{task}: {plural(len(changed), 'case')} with a different content hash (not the same case "
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
            + f"\nre-run both over the same cases, or pass --intersect to compare the {plural(kept, 'case')} both hold "
            "with the same content")
    return paired, left_out, notes


# ---------------------------------------------------------------- per-case columns and the bootstrap
# compare's own ``pass``: the share of cases passed, from each result's outcome (every task has it)
PASS_SPEC = MetricSpec(name=PASS, kind="rate", interval="wilson")


def _specs_to_compare(base: dict[str, MetricSpec], new: dict[str, MetricSpec], metrics: Sequence[str] | None,
                      notes: list[str]) -> tuple[list[MetricSpec], dict[str, MetricSpec]]:
    """The metrics compared (``pass`` first, then every declared figure that is not a count, in
    BASE's order, then NEW's own), and every spec by name (the counts a prf figure sums)."""
    specs = {**base, **new}
    for name in sorted(set(base) & set(new)):
        if base[name] != new[name]:
            notes.append(f"{name} is declared differently in BASE and NEW: compared as NEW declares it")
    chosen = [PASS_SPEC] + [s for name, s in specs.items() if s.compared and name != PASS]
    if metrics is not None:
        chosen = [s for s in chosen if s.name in metrics]
    return chosen, specs


def _value_of(spec: MetricSpec, r: CaseResult) -> float | None:
    """A result's per-case value of a rate or mean (None: not applicable to it)."""
    if spec is PASS_SPEC:
        return 1.0 if r.outcome == "passed" else 0.0
    if spec.among == "applicable":
        return r.applicable_value(spec.per_case)  # an errored case counts 0 where its truth says it applies
    return r.metric(spec.per_case)  # an unscored case counts 0


def _count_of(name: str, r: CaseResult, specs: dict[str, MetricSpec]) -> float:
    """A result's part of a count: its per-case count, or, unscored, what the count's spec says
    an unscored case adds (its truth items, say: missed)."""
    spec = specs.get(name)
    if r.score is None:
        return float(spec.unscored.count(r.ground_truth)) if spec is not None and spec.unscored is not None else 0.0
    return r.metric(spec.per_case if spec is not None else name)


def _columns(spec: MetricSpec, cases: list[list[CaseResult]], specs: dict[str, MetricSpec]) -> Any:
    """Per case, the sums a figure is a function of: (value, weight) for a rate or a mean, the
    three counts for a prf figure; None when some case has no value (repeats figures of a run
    without repeats). ``pass`` and repeats figures have one value per case (its pass rate, its
    repeats' flags); other figures one per result (all of a case's repeats)."""
    import numpy as np

    out = np.zeros((len(cases), 3 if spec.kind == "prf" else 2))
    for i, results in enumerate(cases):
        if spec.kind == "prf":
            out[i] = [sum(_count_of(c, r, specs) for r in results) for c in spec.counts or ()]
        elif spec.source == "repeats":
            from pytest_groundeval.run.repeats import case_figures

            figures = case_figures(results)
            value = next(iter(figures.values())).value(spec.per_case) if figures is not None else None
            if value is None:  # no repeats, or fewer results than a pass^k needs
                return None
            out[i] = [value, 1.0]
        elif spec is PASS_SPEC:
            out[i] = [sum(_value_of(spec, r) for r in results) / len(results), 1.0]
        else:
            values = [v for v in (_value_of(spec, r) for r in results) if v is not None]
            out[i] = [sum(values), len(values)]
    return out


def _statistic(spec: MetricSpec, sums: Any) -> Any:
    """The figure for each row of ``sums`` (one row per resample: column sums); NaN where a
    mean has nothing to be over."""
    import numpy as np

    if spec.kind == "prf":
        k = ("precision", "recall", "f1").index(spec.figure)
        return np.array([prf(int(round(a)), int(round(b)), int(round(c)))[k] for a, b, c in sums])
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(sums[:, 1] > 0, sums[:, 0] / np.where(sums[:, 1] > 0, sums[:, 1], 1), np.nan)


def _ci_and_p(diffs: Any, observed: float) -> tuple[list[float], float]:
    """Percentile 95% interval of the resampled deltas, and the two-sided bootstrap p-value
    (twice the share of resampled deltas on the other side of 0 than the observed one; a
    delta at 0 counts as the other side; at most 1). Resamples where the figure is undefined
    on a side (a mean over no applicable case) are left out."""
    import numpy as np

    d = np.sort(diffs[~np.isnan(diffs)])
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


def _mcnemar(spec: MetricSpec, col_b: Any, col_n: Any) -> tuple[int, int] | None:
    """The rule for the exact test: a rate (pass/fail per case) with one 0/1 value per case on
    both sides (the cases a rate over applicable cases applies to on both), b and c its
    discordant pairs; None when the declared kind or the data do not allow it (a mean, however
    its values fall; a case with several results: repeats)."""
    import numpy as np

    if spec.kind != "rate":
        return None
    both = (col_b[:, 1] > 0) & (col_n[:, 1] > 0)
    if not (col_b[both, 1] == 1).all() or not (col_n[both, 1] == 1).all():
        return None  # several results per case
    xb, xn = col_b[both, 0], col_n[both, 0]
    if not (np.isin(xb, (0.0, 1.0)).all() and np.isin(xn, (0.0, 1.0)).all()):
        return None  # a rate whose per-case values are not 0 or 1: its spec is wrong; bootstrap
    return int(((xb == 1) & (xn == 0)).sum()), int(((xb == 0) & (xn == 1)).sum())


def _reproduces(spec: MetricSpec, observed: float | None, summary: TaskSummary | None) -> bool:
    """The rule that keeps a declaration honest: over the whole of a record's cases, the figure
    recomputed from its spec is the record's own (rounded to 6 digits)."""
    if summary is None or spec is PASS_SPEC or spec.name not in summary.specs:
        return True
    recorded = summary.value(spec.name)
    if observed is None or not isinstance(recorded, (int, float)):
        return observed is None and recorded is None
    return abs(observed - float(recorded)) <= TOLERANCE


def _reason(results: list[CaseResult], passed: bool) -> tuple[str, str]:
    """NEW's outcome and its reason (with repeats: the first result of that direction)."""
    pick = next((r for r in results if (r.outcome == "passed") == passed), results[0])
    kind = f" ({pick.error.kind})" if pick.error is not None else ""
    return pick.outcome, f"{pick.outcome}{kind}: {pick.reason}"


def _flips(kept: list[tuple[str, list[CaseResult], list[CaseResult]]]) -> tuple[list[Flip], list[Flip]]:
    """The cases whose pass rate went down (pass -> fail) and up (fail -> pass)."""
    worse: list[Flip] = []
    better: list[Flip] = []
    for i, b, nw in kept:
        rb = sum(r.outcome == "passed" for r in b) / len(b)
        rn = sum(r.outcome == "passed" for r in nw) / len(nw)
        if rn != rb:
            outcome, why = _reason(nw, passed=rn > rb)
            (worse if rn < rb else better).append(Flip(i, round(rb, 6), round(rn, 6), outcome, why))
    return worse, better


def _unskipped(pairs: list[tuple[str, list[CaseResult], list[CaseResult]]], notes: list[str]) -> list[
        tuple[str, list[CaseResult], list[CaseResult]]]:
    """The pairs without skipped results; a case skipped on one side is left out, with a note."""
    kept = [(i, [r for r in b if r.outcome != "skipped"], [r for r in n if r.outcome != "skipped"])
            for i, b, n in pairs]
    skipped = [i for i, b, n in kept if not b or not n]
    if skipped:
        notes.append(f"{plural(len(skipped), 'case')} skipped in one run left out (e.g. {_examples(skipped)})")
    return [k for k in kept if k[1] and k[2]]


def _custom_row(spec: MetricSpec, summaries: tuple[TaskSummary | None, TaskSummary | None],
                notes: list[str]) -> MetricComparison:
    """A figure only its task can compute: the records' own figures when they are over exactly
    the paired cases, never a test."""
    vb, vn = (s.value(spec.name) if s is not None else None for s in summaries)
    ok = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (vb, vn))
    notes.append(f"{spec.name} is a custom figure: compared without a paired test (only its task computes it)")
    if not ok:
        return MetricComparison(spec.name, None, None, None, None, None, None)
    return MetricComparison(spec.name, float(vb), float(vn), round(float(vn) - float(vb), 6), None, None, None)


def _compare_metric(spec: MetricSpec, cases: tuple[list[list[CaseResult]], list[list[CaseResult]]],
                    by_name: dict[str, MetricSpec], weights: Any,
                    summaries: tuple[TaskSummary | None, TaskSummary | None], alpha: float,
                    notes: list[str]) -> MetricComparison:
    """One metric: its figures over the paired cases as its spec says, the bootstrap's interval
    and p, McNemar where the declared kind allows it, and a regression or improvement in the
    declared direction."""
    import numpy as np

    if spec.kind == "custom":
        return _custom_row(spec, summaries, notes)
    col_b, col_n = (_columns(spec, side, by_name) for side in cases)
    whole = np.ones((1, len(cases[0])))
    figures = [None if c is None else float(_statistic(spec, whole @ c)[0]) for c in (col_b, col_n)]
    vb, vn = (None if v is None or np.isnan(v) else round(v, 6) for v in figures)
    if vb is None or vn is None:
        return MetricComparison(spec.name, vb, vn, None, None, None, None)
    delta = round(vn - vb, 6)
    for side, v, summ in (("BASE", vb, summaries[0]), ("NEW", vn, summaries[1])):
        if not _reproduces(spec, v, summ):
            notes.append(f"{spec.name}: {side}'s cases give {v} as its spec declares the figure, its summary "
                         f"says {summ.value(spec.name)}: a wrong spec or an edited record (compared from the cases)")
    ci, p_boot = _ci_and_p(_statistic(spec, weights @ col_n) - _statistic(spec, weights @ col_b), delta)
    row = MetricComparison(spec.name, vb, vn, delta, ci, "bootstrap", p_boot)
    discordant = _mcnemar(spec, col_b, col_n)
    if discordant is not None:
        b, c = discordant
        row.test, row.p_value, row.discordant = "mcnemar", mcnemar_p(b, c), {"b": b, "c": c}
    significant = row.p_value is not None and row.p_value < alpha
    worse = delta < 0 if spec.higher_is_better else delta > 0  # the declared direction
    row.regression = significant and worse
    row.improvement = significant and not worse and delta != 0
    return row


def compare_task(task_name: str, pairs: list[tuple[str, list[CaseResult], list[CaseResult]]], *,
                 specs: tuple[dict[str, MetricSpec], dict[str, MetricSpec]], alpha: float, seed: int,
                 n_resamples: int, metrics: Sequence[str] | None = None,
                 summaries: tuple[TaskSummary | None, TaskSummary | None] = (None, None)) -> TaskComparison:
    """One task's comparison over its paired cases (skipped results left out), every figure
    computed as BASE's and NEW's declared specs say (``specs``); ``summaries``: the records'
    own summaries when the pairing holds every case of both (each recomputed figure is checked
    against them)."""
    import numpy as np

    notes: list[str] = []
    kept = _unskipped(pairs, notes)
    base_cases, new_cases = [b for _, b, _ in kept], [n for _, _, n in kept]
    repeats = any(len(x) > 1 for x in base_cases + new_cases)
    chosen, by_name = _specs_to_compare(specs[0], specs[1], metrics, notes)
    flat_b = [r for rs in base_cases for r in rs]
    flat_n = [r for rs in new_cases for r in rs]
    if not kept:
        notes.append("no case to compare")
        return TaskComparison(task_name, 0, [MetricComparison(s.name, None, None, None, None, None, None)
                                             for s in chosen], [], [], repeats, notes)

    # the records' own figures are over exactly these results only when nothing was left out
    summaries = tuple(summ if summ is not None and summ.n_cases == len(flat) else None
                      for summ, flat in zip(summaries, (flat_b, flat_n)))
    n = len(kept)
    weights = np.random.default_rng(seed).multinomial(n, np.full(n, 1.0 / n), size=n_resamples)  # a row: draws per case
    rows = [_compare_metric(spec, (base_cases, new_cases), by_name, weights, summaries, alpha, notes)
            for spec in chosen]

    worse_flips, better_flips = _flips(kept)
    if repeats:
        notes.append("repeated results: per-case pass rates compared by paired bootstrap (McNemar needs one "
                     "result per case)")
    return TaskComparison(task_name, n, rows, worse_flips, better_flips, repeats, notes,
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
        warnings.append(f"--intersect: {task}: compared {plural(why['compared'], 'case')}; left out "
                        f"{why['only_in_base']} only in BASE, {why['only_in_new']} only in NEW, "
                        f"{why['content_differs']} with different content")
    if metrics is not None:
        warnings += [f"--metric names task {t}, which is not compared" for t in sorted(set(metrics) - set(paired))]
    for t in paired:  # a task run with other settings (another jury, say) is another measurement: name it
        b, n = base.task_options.get(t, {}), new.task_options.get(t, {})
        for key in sorted(k for k in set(b) | set(n) if b.get(k) != n.get(k) and not _is_path_option(k)):
            warnings.append(f"{t}: the runs differ in {key}: BASE {b.get(key)!r}, NEW {n.get(key)!r} "
                            "(the figures measure different set-ups)")
    tasks = [compare_task(t, ps, specs=(base.specs.get(t, {}), new.specs.get(t, {})), alpha=alpha, seed=seed,
                          n_resamples=n_resamples,
                          metrics=None if metrics is None else _resolve(t, metrics.get(t, set()), base, new),
                          summaries=(base.summary.get(t), new.summary.get(t)))
             for t, ps in paired.items() if metrics is None or t in metrics]
    warnings += _review_notes(base, new)
    for t in tasks:
        _attach_reviews(t, paired[t.task], base, new)
    return Comparison(base.info, new.info, alpha, seed, n_resamples, tasks, left_out, warnings)


def _review_notes(base: LoadedRun, new: LoadedRun) -> list[str]:
    """What the figures are over, when a run has human reviews (``groundeval review``)."""
    notes = [w for run in (base, new) for w in run.review_warnings]
    counts = [f"{side} {run.info.reviews}" for side, run in (("BASE", base), ("NEW", new)) if run.info.reviews]
    if not counts:
        return notes
    if base.info.reviewed or new.info.reviewed:
        notes.append(f"--with-reviews: figures, tests and the regression gate are over the reviewed verdicts "
                     f"(standing reviews: {', '.join(counts)}); the records' scores are unchanged")
    else:
        notes.append(f"human reviews ({', '.join(counts)}) are listed beside the scorer's verdicts; the figures "
                     "are the scorer's (--with-reviews to compare the reviewed verdicts)")
    return notes


def _attach_reviews(t: TaskComparison, pairs: list[tuple[str, list[CaseResult], list[CaseResult]]],
                    base: LoadedRun, new: LoadedRun) -> None:
    """The standing reviews of the task's paired cases, both runs', and NEW's beside each flip."""
    from pytest_groundeval.store.reviews import describe

    by_case: dict[str, list[Any]] = {}
    for case_id, rb, rn in pairs:
        for side, run, results in (("base", base, rb), ("new", new, rn)):
            for r in results:
                for review in (run.reviews.get(r.result_key).all() if run.reviews.get(r.result_key) else []):
                    t.reviews.append({"side": side, **review.model_dump(mode="json"), "text": describe(review)})
                    if side == "new" and review.dimension is None:
                        by_case.setdefault(case_id, []).append(review)
    for flip in t.pass_to_fail + t.fail_to_pass:
        if flip.case_id in by_case:
            flip.reviewed = "; ".join(f"reviewed {r.verdict} by {r.by}: {r.reason}" for r in by_case[flip.case_id])


def _is_path_option(key: str) -> bool:
    """Where a task's cases were read from (``data_dir``, ``cases``...): the case contents,
    compared by hash, say whether they are the same cases; the folder may well differ."""
    return key.endswith(("_dir", "_path", "cases", "_file"))


def compare_paths(base: Path, new: Path, *, with_reviews: bool = False, trust_stored: bool = False,
                  **kw: Any) -> Comparison:
    return compare(read_run(base, with_reviews=with_reviews, trust_stored=trust_stored),
                   read_run(new, with_reviews=with_reviews, trust_stored=trust_stored), **kw)


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
    reviewed = "; over the reviewed verdicts (--with-reviews)" if c.base.reviewed or c.new.reviewed else ""
    return (f"exact McNemar on rates (pass/fail per case), paired bootstrap ({c.n_resamples} resamples, seed {c.seed}) "
            f"on the others, as each run declares its metrics; 95% interval of the delta by the bootstrap; regression: "
            f"worse with p < {c.alpha:g}{reviewed}")


def render_text(c: Comparison, *, max_flips: int = 20) -> str:
    out = ["groundeval compare", f"  base: {_run_line(c.base)}", f"  new:  {_run_line(c.new)}",
           f"  {_method(c)}"]
    out += [f"  warning: {w}" for w in c.warnings]
    for t in c.tasks:
        out += ["", f"{t.task}: {plural(t.n_cases, 'case')} paired"]
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
                if f.reviewed and f.reviewed not in (f.reason or ""):  # (--with-reviews: the reason says it)
                    out.append(f"      {_short(f.reviewed)}")
            if len(flips) > max_flips:
                out.append(f"    ... and {len(flips) - max_flips} more (--max-flips, or --format json for all)")
        if t.reviews:
            out.append(f"  human reviews: {len(t.reviews)} (scorer's verdict -> reviewer's)")
            out += [f"    [{r['side']}] {_short(r['text'])}" for r in t.reviews]
    regs = c.regressions
    out.append("")
    if regs:
        out.append(f"{plural(len(regs), 'regression')} significant at alpha {c.alpha:g}:")
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
    head = (f"**{plural(len(regs), 'regression')}** significant at alpha {c.alpha:g}" if regs
            else f"No regression significant at alpha {c.alpha:g}")
    out = ["### groundeval compare", "", f"**base**: {_md_run(c.base)}  ", f"**new**: {_md_run(c.new)}", "",
           head + (":" if regs else "."), ""]
    if regs:
        out += [f"- {_md_cell(r.describe())}" for r in regs] + [""]
    out += [f"> **warning**: {_md_cell(w)}" for w in c.warnings] + ([""] if c.warnings else [])
    for t in c.tasks:
        out += [f"#### {_md_cell(t.task)} ({t.n_cases} case{'' if t.n_cases == 1 else 's'})", ""]
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
                seen = (f" — _{_md_cell(_short(f.reviewed))}_"
                        if f.reviewed and f.reviewed not in (f.reason or "") else "")
                out.append(f"- {_md_code(f.case_id)}{rates}: {_md_cell(_short(f.reason))}{seen}")
            if len(flips) > max_flips:
                out.append(f"- ... and {len(flips) - max_flips} more")
            out += ["", "</details>", ""]
        if t.reviews:
            out += [f"<details><summary>human reviews: {len(t.reviews)}</summary>", ""]
            out += [f"- {r['side']}: {_md_cell(_short(r['text']))}" for r in t.reviews]
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
    """``--metric TASK.METRIC`` (repeatable) → per task the names asked for (resolved against
    the runs' declared metrics once they are read: aliases as for thresholds, ``pass`` always)."""
    if not texts:
        return None
    chosen: dict[str, set[str]] = {}
    for text in texts:
        task, _, metric = text.partition(".")
        if not task or not metric:
            raise CompareError(f"--metric {text!r}: expected TASK.METRIC")
        chosen.setdefault(task, set()).add(metric)
    return chosen


def _resolve(task: str, asked: set[str], base: LoadedRun, new: LoadedRun) -> list[str]:
    """The declared metrics ``--metric`` names for ``task`` (a CompareError for one neither
    run declares)."""
    specs = list({**base.specs.get(task, {}), **new.specs.get(task, {})}.values())
    names = []
    for metric in sorted(asked):
        name = PASS if metric == PASS else resolve_metric(specs, metric)
        if name is None:
            known = ", ".join([PASS] + [s.name for s in specs if s.compared and s.name != PASS])
            raise CompareError(f"--metric {task}.{metric}: not a metric these runs declare for {task} ({known})")
        names.append(name)
    return names


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "compare", help="compare two runs (records or journals) of the same cases, with paired tests",
        description="Compare NEW against BASE (run records or journals) per task and metric: base, new, delta "
        "with a 95% interval, the cases that flipped, and a paired test per metric as the runs declare it (exact "
        "McNemar on rates, seeded paired bootstrap on means and P/R/F1). Refuses runs over different case sets or "
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
    p.add_argument("--with-reviews", action="store_true",
                   help="compare (and gate on) the human reviews' verdicts (groundeval review) where they stand, "
                   "instead of the scorer's; without it reviews are only listed")
    p.add_argument("--intersect", action="store_true",
                   help="compare the cases both runs hold with the same content, instead of refusing")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"bootstrap seed (default {DEFAULT_SEED})")
    p.add_argument("--resamples", type=int, default=DEFAULT_RESAMPLES,
                   help=f"bootstrap resamples (default {DEFAULT_RESAMPLES})")
    p.add_argument("--metric", dest="metrics", action="append", default=None, metavar="TASK.METRIC",
                   help="compare (and test) only these metrics, repeatable (default: every metric of every task)")
    from pytest_groundeval.store.verify import TRUST_HELP

    p.add_argument("--trust-stored", action="store_true", help=TRUST_HELP)
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
                               intersect=args.intersect, metrics=metrics, with_reviews=args.with_reviews,
                               trust_stored=args.trust_stored)
    except CompareError as e:
        print(f"groundeval compare: refused: {e}", file=sys.stderr)
        return 2
    sys.stdout.write(render(result, args.format, max_flips=args.max_flips))
    regs = result.regressions
    if args.fail_on_regression and regs:
        print(f"groundeval compare: FAILED: {plural(len(regs), 'regression')} significant at alpha {args.alpha:g}: "
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
