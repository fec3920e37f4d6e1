"""Token usage and cost: a committed per-model price table and a run budget (``--max-cost``).

Why a hand-kept table (``prices.json``) and not the ``genai-prices`` package (pydantic's
price database, which would be a bundled snapshot): its Anthropic entries match model names
by rules (``starts_with: claude-opus-4`` and the like), the very prefix matching that priced
Opus 4.1 as Opus 4.5 here; its optional ``UpdatePrices`` swaps in prices fetched from GitHub
while a process runs, so a cost could depend on when a run happened; its ``input_tokens``
means all input, cache included, unlike the Anthropic usage our agents record; and it is one
more dependency (with its HTTP client, and a lock change) for the ten Claude ids the built-in agents
call. This table names each model by its exact API id plus an explicit alias list, and every
run record carries its ``as_of`` date and ``source`` URL; a model it does not list costs
``null``, never a neighbour's price.
"""

from __future__ import annotations

import json
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any

from .model import BudgetRecord, CaseResult, RunUsage

PRICES_PATH = Path(__file__).with_name("prices.json")
PROVIDER_PREFIX = "anthropic:"  # how --agent=langgraph names Anthropic models ("anthropic:claude-…")
RATES = ("input_per_mtok", "output_per_mtok", "cache_write_5m_per_mtok", "cache_write_1h_per_mtok",
         "cache_read_per_mtok")


@lru_cache(maxsize=1)
def price_table() -> dict[str, Any]:
    table = json.loads(PRICES_PATH.read_text())
    for name, entry in table["models"].items():
        missing = [r for r in RATES if not isinstance(entry.get(r), (int, float))]
        if missing or set(entry) - set(RATES):
            raise ValueError(f"{PRICES_PATH}: model {name!r} needs exactly the rates {', '.join(RATES)}")
    for alias, target in table.get("aliases", {}).items():
        if target not in table["models"] or alias in table["models"]:
            raise ValueError(f"{PRICES_PATH}: alias {alias!r} must name a listed model, not be one")
    return table


def price_source() -> dict[str, str]:
    """The table's date and where its prices come from (what a record carries)."""
    table = price_table()
    return {"as_of": table["as_of"], "source": table["source"]}


def priced_name(model: str | None) -> str | None:
    """The table entry ``model`` is priced by: its exact id or a listed alias, with an
    optional ``anthropic:`` prefix. Nothing else (no prefix or family matching)."""
    if not isinstance(model, str) or not model:
        return None
    name = model[len(PROVIDER_PREFIX):] if model.startswith(PROVIDER_PREFIX) else model
    table = price_table()
    if name in table["models"]:
        return name
    return table.get("aliases", {}).get(name)


def price_for(model: str | None) -> dict[str, Any] | None:
    name = priced_name(model)
    return price_table()["models"][name] if name is not None else None


def _count(usage: dict[str, Any], key: str) -> float | None:
    value = usage.get(key)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        return None
    return value


def cost_usd(model: str | None, usage: dict[str, Any] | None) -> float | None:
    """Cost of one case's usage, or None when the model is not in the table or usage is unknown.

    Anthropic's usage convention: ``input_tokens`` are the uncached input tokens;
    ``cache_creation_input_tokens`` (written to the prompt cache, of which
    ``cache_creation_1h_input_tokens`` with the 1-hour TTL, the rest 5-minute) and
    ``cache_read_input_tokens`` (read from it) are counted apart and priced at their rates."""
    if not usage:
        return None
    price = price_for(model)
    tin, tout = usage.get("input_tokens"), usage.get("output_tokens")
    if price is None or not isinstance(tin, (int, float)) or not isinstance(tout, (int, float)):
        return None
    write, write_1h, read = (_count(usage, k) for k in (
        "cache_creation_input_tokens", "cache_creation_1h_input_tokens", "cache_read_input_tokens"))
    if write is None or write_1h is None or read is None or write_1h > write:
        return None  # not token counts: unknown, not a guess
    total = (tin * price["input_per_mtok"] + tout * price["output_per_mtok"]
             + (write - write_1h) * price["cache_write_5m_per_mtok"]
             + write_1h * price["cache_write_1h_per_mtok"]
             + read * price["cache_read_per_mtok"])
    return round(total / 1e6, 8)


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
    prices = price_source()
    return RunUsage(input_tokens=tin, output_tokens=tout, cost_usd=round(cost, 6), cases_priced=priced,
                    cases_unpriced=unpriced, prices_as_of=prices["as_of"], prices_source=prices["source"])


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


def unpriced_budget(model: str | None, max_cost: float | None) -> str | None:
    """Why ``--max-cost`` cannot be enforced for ``model`` (known at start), else None.
    No model (the offline baseline) costs nothing: that budget holds."""
    if max_cost is None or not model or priced_name(model) is not None:
        return None
    return (f"--max-cost {max_cost:g}: model {model!r} has no price in {PRICES_PATH} "
            f"(prices as of {price_table()['as_of']}, from {price_table()['source']}), so its cost "
            "cannot be counted and the budget cannot be enforced; use a listed model id or alias, "
            "add the model to that table, or drop --max-cost")
