"""Agreement between judges: pairwise Cohen's kappa and Krippendorff's alpha (nominal), both
over verdicts that may be missing (a judge that gave no verdict on a unit is left out of
that unit, never counted as a disagreement or as ``not_met``).

* Cohen's kappa (Cohen, 1960) of two judges over the units both gave a verdict on:
  ``(p_o - p_e) / (1 - p_e)``, ``p_o`` the share of those units they agree on, ``p_e`` the
  agreement expected from each judge's own label shares. Undefined (None) with no shared
  unit, or when ``p_e`` is 1 (both judges always gave the same single label: agreement that
  says nothing about the judges).
* Krippendorff's alpha (Krippendorff, 2011, "Computing Krippendorff's alpha-reliability"),
  nominal, for any number of judges with missing verdicts: ``1 - D_o / D_e`` from the
  coincidence matrix of the units with at least two verdicts. Undefined (None) when fewer
  than two verdicts are pairable or every pairable verdict has one value (``D_e`` = 0).

Both are 1 for perfect agreement, about 0 for agreement at chance, negative below it.
"""

from __future__ import annotations

from collections import Counter
from itertools import combinations
from typing import Hashable, Sequence

Label = Hashable


def cohen_kappa(a: Sequence[Label | None], b: Sequence[Label | None]) -> float | None:
    """Cohen's kappa of two judges' verdicts on the same units (None: no verdict)."""
    if len(a) != len(b):
        raise ValueError("cohen_kappa: the two judges rated different numbers of units")
    pairs = [(x, y) for x, y in zip(a, b) if x is not None and y is not None]
    n = len(pairs)
    if n == 0:
        return None
    po = sum(x == y for x, y in pairs) / n
    ca, cb = Counter(x for x, _ in pairs), Counter(y for _, y in pairs)
    pe = sum(ca[k] * cb[k] for k in set(ca) | set(cb)) / (n * n)
    if pe >= 1.0:
        return None
    return (po - pe) / (1 - pe)


def pairwise_kappas(ratings: Sequence[Sequence[Label | None]]) -> list[float | None]:
    """Cohen's kappa of every pair of judges (``ratings[j][u]``: judge j's verdict on unit u),
    in the order of :func:`itertools.combinations`."""
    return [cohen_kappa(ratings[i], ratings[j]) for i, j in combinations(range(len(ratings)), 2)]


def krippendorff_alpha(units: Sequence[Sequence[Label | None]]) -> float | None:
    """Krippendorff's alpha, nominal (``units[u]``: every judge's verdict on unit u, None for
    missing)."""
    coincidence: Counter[tuple[Label, Label]] = Counter()
    for unit in units:
        values = [v for v in unit if v is not None]
        m = len(values)
        if m < 2:
            continue
        for i, x in enumerate(values):
            for j, y in enumerate(values):
                if i != j:
                    coincidence[(x, y)] += 1.0 / (m - 1)
    n_c: Counter[Label] = Counter()
    for (x, _), w in coincidence.items():
        n_c[x] += w
    n = sum(n_c.values())
    if n < 2:
        return None
    d_o = sum(w for (x, y), w in coincidence.items() if x != y) / n
    d_e = sum(n_c[x] * n_c[y] for x in n_c for y in n_c if x != y) / (n * (n - 1))
    if d_e == 0:
        return None
    return 1.0 - d_o / d_e


__all__ = ["cohen_kappa", "krippendorff_alpha", "pairwise_kappas"]
