"""Token usage and cost: a committed per-model price table and a run budget (``--max-cost``)."""

from __future__ import annotations

import json
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any

from .model import BudgetRecord, CaseResult, RunUsage

PRICES_PATH = Path(__file__).with_name("prices.json")


@lru_cache(maxsize=1)
def price_table() -> dict[str, Any]:
    return json.loads(PRICES_PATH.read_text())


def price_for(model: str | None) -> dict[str, Any] | None:
    if not model:
        return None
    name = model.split(":", 1)[1] if ":" in model else model  # "anthropic:claude-…" → "claude-…"
    models = price_table()["models"]
    if name in models:
        return models[name]
    best = None
    for key, entry in models.items():
        if entry.get("match") == "prefix" and name.startswith(key) and (best is None or len(key) > len(best[0])):
            best = (key, entry)
    return best[1] if best else None


def cost_usd(model: str | None, usage: dict[str, Any] | None) -> float | None:
    """Cost of one case's usage, or None when the model is not in the table or usage is unknown."""
    if not usage:
        return None
    price = price_for(model)
    tin, tout = usage.get("input_tokens"), usage.get("output_tokens")
    if price is None or not isinstance(tin, (int, float)) or not isinstance(tout, (int, float)):
        return None
    return round(tin / 1e6 * price["input_per_mtok"] + tout / 1e6 * price["output_per_mtok"], 8)


def total_usage(cases: list[CaseResult]) -> RunUsage:
    tin = tout = 0
    cost = 0.0
    priced = unpriced = 0
    for c in cases:
        u = c.usage
        if u is not None:
            tin += int(u.input_tokens or 0)
            tout += int(u.output_tokens or 0)
        if c.cost_usd is not None:
            cost += c.cost_usd
            priced += 1
        elif u is not None:
            unpriced += 1
    return RunUsage(input_tokens=tin, output_tokens=tout, cost_usd=round(cost, 6), cases_priced=priced,
                    cases_unpriced=unpriced, prices_as_of=price_table()["as_of"])


class Budget:
    """Thread-safe spend counter. Once ``spent >= max_cost`` no new call is launched."""

    def __init__(self, max_cost: float | None) -> None:
        self.max_cost = max_cost
        self.spent = 0.0
        self._lock = threading.Lock()

    def try_start(self) -> bool:
        with self._lock:
            return self.max_cost is None or self.spent < self.max_cost

    def add(self, cost: float | None) -> None:
        if cost:
            with self._lock:
                self.spent += cost


def budget_record(max_cost: float | None, cases: list[CaseResult], usage: RunUsage) -> BudgetRecord | None:
    """What ``--max-cost`` did, from the cases themselves (so it is right under xdist too)."""
    if max_cost is None:
        return None
    not_run = sum(c.error_kind == "budget" for c in cases)
    return BudgetRecord(max_cost_usd=max_cost, spent_usd=usage.cost_usd, stopped=not_run > 0,
                        cases_not_run=not_run)
