"""Repeats (``--repeat N``): each case runs N times (items ``<case>[r1]..[rN]``, each its own
result in the record, the repeat index in the model-call cache key). Per case, its pass
rate, pass^k (all N passed) and pass@k (at least one did); per task, the mean pass rate with
a 95% interval (a seeded bootstrap over cases: a case's repeats are not independent
draws; Wilson's when every case's rate is 0 or 1, as the bootstrap of identical values is a
certain-looking [1, 1]), the share of cases with pass^k and pass@k, and the share of flaky cases (passed
some repeats and failed others), each with a Wilson interval. Threshold names: ``TASK.pass_rate``, ``TASK.pass_hat_k``,
``TASK.pass_at_k`` and ``TASK.flaky`` (declared lower-is-better: a threshold on it is a maximum).
Each figure is declared (:data:`REPEAT_SPECS`), and the record carries the declarations.

``pass_hat_1`` .. ``pass_hat_K`` are tau-bench's pass^k (Yao et al. 2024, "τ-bench",
arXiv:2406.12045, section 5): for each k, the mean over cases of C(c, k) / C(n, k), a case with n results of which c
passed, i.e. the chance that k results drawn from its n all pass; K is the fewest results any
case has (every case has at least k). ``pass_hat_1`` is the mean pass rate; ``pass_hat_N``
with every case at N results is ``pass_hat_k``, the share of cases that passed every repeat.
"""

from __future__ import annotations

from typing import Any, Iterable

from pytest_groundeval.model import CaseResult, MetricSpec, RepeatCase, RepeatRecord, metric, pass_hat
from pytest_groundeval.scorers.aggregate import rate_ci

# one value per case, from its repeats (RepeatCase's fields), not per result
REPEAT_SPECS: tuple[MetricSpec, ...] = (
    metric("repeats", "count", source="repeats"),  # results per case (the most any case has)
    metric("pass_rate", "mean", source="repeats"),  # bootstrap: a case's repeats are not independent
    metric("pass_hat_k", "rate", source="repeats"),
    metric("pass_at_k", "rate", source="repeats"),
    metric("flaky", "rate", source="repeats", higher_is_better=False),
)
REPEAT_METRICS = tuple(s.name for s in REPEAT_SPECS if s.kind != "count")
PASS_HAT = "pass_hat_"  # pass_hat_<k>: tau-bench's pass^k


def pass_hat_specs(n: int) -> tuple[MetricSpec, ...]:
    """``pass_hat_1`` .. ``pass_hat_<n>``: means over cases, one value per case (bootstrap)."""
    return tuple(metric(f"{PASS_HAT}{k}", "mean", source="repeats") for k in range(1, n + 1))


def repeat_specs(figures: dict[str, Any]) -> tuple[MetricSpec, ...]:
    """The specs of a :func:`repeat_summary` (its pass^k up to the K it has)."""
    k = sum(1 for key in figures if key.startswith(PASS_HAT) and key[len(PASS_HAT):].isdigit())
    return REPEAT_SPECS + pass_hat_specs(k)


def case_figures(results: Iterable[CaseResult]) -> dict[str, RepeatCase] | None:
    by_case: dict[str, list[CaseResult]] = {}
    repeated = False
    for r in results:
        if r.outcome == "skipped":
            continue
        repeated = repeated or r.repeat is not None
        by_case.setdefault(r.case_id, []).append(r)
    if not repeated or not by_case:
        return None
    out = {}
    for case_id in sorted(by_case):
        runs = by_case[case_id]
        passed = sum(r.outcome == "passed" for r in runs)
        out[case_id] = RepeatCase(runs=len(runs), passed=passed, pass_rate=round(passed / len(runs), 6),
                                  pass_hat_k=passed == len(runs), pass_at_k=passed > 0,
                                  flaky=0 < passed < len(runs))
    return out


def repeat_summary(results: Iterable[CaseResult], *, seed: int = 0) -> dict[str, Any] | None:
    """The task summary's repeat figures (None when no result is a repeat)."""
    per_case = case_figures(results)
    if per_case is None:
        return None
    n = len(per_case)
    rates = [c.pass_rate for c in per_case.values()]
    out: dict[str, Any] = {"repeats": max(c.runs for c in per_case.values()),
                           "pass_rate": round(sum(rates) / n, 6), "pass_rate_ci95": rate_ci(rates, seed=seed)}
    for key in ("pass_hat_k", "pass_at_k", "flaky"):
        flags = [1.0 if getattr(c, key) else 0.0 for c in per_case.values()]
        out[key] = round(sum(flags) / n, 6)
        out[f"{key}_ci95"] = rate_ci(flags)  # a share of cases: Wilson
    for k in range(1, min(c.runs for c in per_case.values()) + 1):  # tau-bench's pass^k
        values = [pass_hat(c.runs, c.passed, k) for c in per_case.values()]
        out[f"{PASS_HAT}{k}"] = round(sum(values) / n, 6)
        out[f"{PASS_HAT}{k}_ci95"] = rate_ci(values, seed=seed)  # all 0/1 (e.g. every case passing): Wilson
    return out


def repeat_records(cases: Iterable[CaseResult]) -> dict[str, RepeatRecord] | None:
    """The record's ``repeats``: per task, each case's figures (None without --repeat)."""
    by_task: dict[str, list[CaseResult]] = {}
    for c in cases:
        by_task.setdefault(c.task, []).append(c)
    out = {}
    for task in sorted(by_task):
        per_case = case_figures(by_task[task])
        if per_case is not None:
            out[task] = RepeatRecord(repeats=max(c.runs for c in per_case.values()),
                                     flaky_cases=[cid for cid, c in per_case.items() if c.flaky], per_case=per_case)
    return out or None


__all__ = ["PASS_HAT", "REPEAT_METRICS", "REPEAT_SPECS", "case_figures", "pass_hat", "pass_hat_specs",
           "repeat_records", "repeat_specs", "repeat_summary"]
