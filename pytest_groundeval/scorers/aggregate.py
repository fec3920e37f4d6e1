"""Aggregation shared by scorers: outcome counts, and pass rates with bootstrap CIs."""

from __future__ import annotations

from typing import Any

from ..model import CaseResult
from .base import bootstrap_ci, mean, prf


def counts(results: list[CaseResult]) -> tuple[list[CaseResult], dict[str, Any]]:
    """The results that count (all but skipped) and the outcome counts of a summary."""
    run = [r for r in results if r.outcome != "skipped"]
    return run, {
        "n_cases": len(run),
        "n_passed": sum(r.outcome == "passed" for r in run),
        "n_failed": sum(r.outcome == "failed" for r in run),
        "n_errors": sum(r.outcome == "error" for r in run),
        "n_skipped": len(results) - len(run),
    }


def summarize_rates(results: list[CaseResult], metrics: tuple[str, ...], *, seed: int = 0) -> dict[str, Any]:
    """Mean of each 0/1 per-case metric (a pass rate) with a seeded 95% bootstrap CI.
    A case with no score (an error) counts 0 in every metric."""
    run, summary = counts(results)
    for m in metrics:
        values = [r.metric(m) for r in run]
        summary[m] = round(mean(values), 6)
        summary[f"{m}_ci95"] = bootstrap_ci(values, seed=seed)
    return summary


def code_set_summary(tp: int, fp: int, fn: int, per_case: dict[str, list[float]], n_run: int,
                     *, seed: int = 0) -> dict[str, Any]:
    """The aggregates of a code-set task (extraction, reconciliation): micro P/R/F1 from the
    summed counts, macro means of the per-case ``precision``/``recall``/``f1``, exact-match
    and name-accuracy rates, seeded bootstrap CIs of macro-F1 and exact match."""
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
        "macro_f1_ci95": bootstrap_ci(per_case["f1"], seed=seed),
        "exact_match_ci95": bootstrap_ci(per_case["exact_match"], seed=seed),
        "tp": tp, "fp": fp, "fn": fn,
    }
