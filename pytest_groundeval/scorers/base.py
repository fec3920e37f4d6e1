"""Score types shared by every scorer, and the aggregation helpers (Wilson and bootstrap CIs).

A scorer turns (prediction, truth) into a :class:`Score`; it never sees pytest. ``Score``,
``Dimension`` and ``Check`` are the record's own types (``model.ScoreRecord``,
``DimensionRecord``, ``CheckRecord``): what a scorer returns is what the record holds.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

from pytest_groundeval.model import CheckRecord, DimensionRecord, ScoreRecord


#: the score types are the record's own (model.py): a scorer builds what the record holds
Check = CheckRecord
Dimension = DimensionRecord
Score = ScoreRecord


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


Z95 = 1.959964  # the standard normal's 0.975 quantile: two-sided 95%


def wilson_ci(successes: int, n: int, *, z: float = Z95) -> list[float] | None:
    """Wilson score 95% interval of a proportion (``successes`` of ``n`` cases passing).

    Unlike the bootstrap (and the normal approximation) it does not collapse at 0 or n:
    48 of 48 is [0.926, 1.0], not [1.0, 1.0]. Fewer than two cases: no interval (None);
    one case says nothing about a rate."""
    if n < 2:
        return None
    if not 0 <= successes <= n:
        raise ValueError(f"wilson_ci: {successes} successes of {n}")
    p = successes / n
    z2 = z * z
    centre = p + z2 / (2 * n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    denom = 1 + z2 / n
    lo, hi = (centre - half) / denom, (centre + half) / denom
    return [round(max(0.0, lo), 6), round(min(1.0, hi), 6)]


def bootstrap_ci(
    values: Sequence[float], *, n_resamples: int = 2000, seed: int = 0, alpha: float = 0.05
) -> list[float] | None:
    """Percentile bootstrap CI of the mean (F1-type per-case metrics); seeded so a run's
    record is reproducible. Fewer than two values: no interval (None).

    Resampling n values with replacement is a multinomial draw of how often each distinct
    value is taken, so the resample means are drawn that way: the same distribution as
    drawing indices, at a cost that depends on the number of distinct values, not on n."""
    n = len(values)
    if n < 2:
        return None
    levels: dict[float, int] = {}
    for v in values:
        levels[v] = levels.get(v, 0) + 1
    if len(levels) == 1:
        v = next(iter(levels))
        return [round(v, 6), round(v, 6)]
    import numpy as np

    keys = sorted(levels)
    p = np.array([levels[k] for k in keys], dtype=float) / n
    counts = np.random.default_rng(seed).multinomial(n, p, size=n_resamples)
    means = np.sort(counts @ np.array(keys, dtype=float) / n)
    lo = float(means[int((alpha / 2) * n_resamples)])
    hi = float(means[min(n_resamples - 1, int((1 - alpha / 2) * n_resamples))])
    return [round(lo, 6), round(hi, 6)]


def prf(tp: int, fp: int, fn: int) -> tuple[float, float, float]:
    """Precision, recall, F1 with explicit empty-set conventions: nothing to find and
    nothing claimed is perfect (1, 1, 1); claiming something when there is nothing to find
    is precision 0, recall 1 (nothing was missed), F1 0; claiming nothing when there is
    something is precision 0, recall 0."""
    if tp + fp == 0 and tp + fn == 0:
        return 1.0, 1.0, 1.0
    p = tp / (tp + fp) if tp + fp else 0.0
    r = tp / (tp + fn) if tp + fn else 1.0
    f = 2 * p * r / (p + r) if p + r else 0.0
    if tp + fn == 0:
        f = 0.0
    return p, r, f


def rate(flags: Iterable[bool]) -> float:
    flags = list(flags)
    return sum(1 for f in flags if f) / len(flags) if flags else 0.0
