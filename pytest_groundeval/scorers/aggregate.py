"""Aggregation shared by scorers: outcome counts, and pass rates with bootstrap CIs."""

from __future__ import annotations

from typing import Any

from ..model import CaseResult
from .base import bootstrap_ci, mean


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
