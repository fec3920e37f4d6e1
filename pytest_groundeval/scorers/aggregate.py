"""Aggregation shared by scorers: outcome counts, pass rates with Wilson score intervals,
F1-type means with seeded bootstrap intervals. A summary over fewer than two cases has no
interval: its ``*_ci95`` keys are null."""

from __future__ import annotations

from typing import Any

from pytest_groundeval.model import CaseResult, MetricSpec, UnscoredCounts, metric, prf_specs
from pytest_groundeval.scorers.base import bootstrap_ci, mean, prf, wilson_ci


def counts(results: list[CaseResult]) -> tuple[list[CaseResult], dict[str, Any]]:
    """The results that count (all but skipped) and the outcome counts of a summary."""
    run = [r for r in results if r.outcome != "skipped"]
    summary = {
        "n_cases": len(run),
        "n_passed": sum(r.outcome == "passed" for r in run),
        "n_failed": sum(r.outcome == "failed" for r in run),
        "n_errors": sum(r.outcome == "error" for r in run),
        "n_skipped": len(results) - len(run),
    }
    summary.update(grounded_summary(run))
    return run, summary


# grounded (grounding.py): a rate over the cases it applies to (tool-using agents), their number grounded_n
GROUNDED_SPEC = metric("grounded", "rate", among="applicable")


def grounded_summary(run: list[CaseResult]) -> dict[str, Any]:
    """``grounded`` (grounding.py): the rate over the cases it applies to (a ``grounded``
    metric: tool-using agents), ``grounded_n`` of them, its Wilson interval; nothing when it
    applies to none. A single-call case is neither a pass nor a fail here; an errored case counts
    0 when the harness had given its agent tools (``CaseResult.applicable``)."""
    values = [v for r in run if (v := r.applicable_value("grounded")) is not None]
    if not values:
        return {}
    return {"grounded": round(mean(values), 6), "grounded_ci95": rate_ci(values), "grounded_n": len(values)}


def rate_ci(values: list[float], *, seed: int = 0) -> list[float] | None:
    """The 95% interval of a mean of per-case values in [0, 1]: Wilson's when every value is 0
    or 1 (a proportion of cases passing; and the percentile bootstrap of identical values is a
    zero-width, certain-looking interval: 168 of 168 would be [1, 1], not [0.978, 1]), else
    the seeded bootstrap's; None under two cases."""
    if all(v in (0.0, 1.0) for v in values):
        return wilson_ci(int(sum(values)), len(values))
    return bootstrap_ci(values, seed=seed)


def summarize_rates(results: list[CaseResult], metrics: tuple[str, ...], *, seed: int = 0) -> dict[str, Any]:
    """Mean of each 0/1 per-case metric (a pass rate) with its Wilson 95% interval (a metric
    with other values: a seeded bootstrap interval). A case with no score (an error) counts 0
    in every metric."""
    run, summary = counts(results)
    for m in metrics:
        values = [r.metric(m) for r in run]
        summary[m] = round(mean(values), 6)
        summary[f"{m}_ci95"] = rate_ci(values, seed=seed)
    return summary


def code_set_summary(tp: int, fp: int, fn: int, per_case: dict[str, list[float]], n_run: int,
                     *, seed: int = 0) -> dict[str, Any]:
    """The aggregates of a code-set task (extraction, reconciliation): micro P/R/F1 from the
    summed counts, macro means of the per-case ``precision``/``recall``/``f1``, exact-match
    and name-accuracy rates; the interval of macro-F1 (:func:`rate_ci`: the seeded bootstrap,
    or Wilson's when every case's F1 is 0 or 1, so a perfect run is not a certain [1, 1]) and
    the Wilson interval of exact match (a proportion of cases)."""
    micro_p, micro_r, micro_f = prf(tp, fp, fn) if n_run else (0.0, 0.0, 0.0)
    return {
        "micro_precision": round(micro_p, 6),
        "micro_recall": round(micro_r, 6),
        "micro_f1": round(micro_f, 6),
        "macro_precision": round(mean(per_case["precision"]), 6),
        "macro_recall": round(mean(per_case["recall"]), 6),
        "macro_f1": round(mean(per_case["f1"]), 6),
        "exact_match": round(mean(per_case["exact_match"]), 6),
        "name_accuracy": round(mean(per_case["name_accuracy"]), 6),
        "macro_f1_ci95": rate_ci(per_case["f1"], seed=seed),
        "exact_match_ci95": rate_ci(per_case["exact_match"], seed=seed),
        "tp": tp, "fp": fp, "fn": fn,
    }


def code_set_specs() -> list[MetricSpec]:
    """What :func:`code_set_summary`'s figures are: micro P/R/F1 of the summed counts (``f1``,
    ``precision``, ``recall`` their aliases), macro means of the per-case figures (macro-F1
    with its bootstrap interval), exact match (a rate), name accuracy (a mean), and the counts
    (an errored case's truth items, at least one, are missed)."""
    return [
        *prf_specs("micro", ("tp", "fp", "fn"), aliases={f: [f] for f in ("precision", "recall", "f1")}),
        metric("macro_precision", "mean", of="precision", interval="none"),
        metric("macro_recall", "mean", of="recall", interval="none"),
        metric("macro_f1", "mean", of="f1"),
        metric("exact_match", "rate"),
        metric("name_accuracy", "mean", interval="none"),
        metric("tp", "count"), metric("fp", "count"),
        metric("fn", "count", unscored=UnscoredCounts(at_least=1)),
    ]
