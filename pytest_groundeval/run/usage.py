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
``null``, never a neighbour's price. Its ``openai`` section holds OpenAI's list prices for a few
models ``--agent=chat`` calls there (``--model openai:NAME``, ``--batch`` through OpenAI's Batch
API), in the same five rates, with its own date and source.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
from datetime import date
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterable

from pytest_groundeval.model import BudgetRecord, CaseResult, RunUsage, UnfinishedUsage

PRICES_PATH = Path(__file__).with_name("prices.json")
PROVIDER_PREFIX = "anthropic:"  # how --agent=langgraph names Anthropic models ("anthropic:claude-…")
RATES = ("input_per_mtok", "output_per_mtok", "cache_write_5m_per_mtok", "cache_write_1h_per_mtok",
         "cache_read_per_mtok")


RETIRED = "retired"  # an entry's mark: true, or the ISO date Anthropic retired the model on


class RetiredModelWarning(UserWarning):
    """A run asks for a model Anthropic has retired (``prices.json``: ``retired``)."""


def _retired_ok(value: Any) -> bool:
    if value is True:
        return True
    try:
        return isinstance(value, str) and date.fromisoformat(value).isoformat() == value
    except ValueError:
        return False


OPENAI = "openai"  # the table's section of OpenAI's list prices (``--agent=chat --model openai:NAME``)
OPENAI_PREFIX = "openai:"


def _check_section(section: dict[str, Any], where: str, marks: tuple[str, ...] = (RETIRED,)) -> None:
    for name, entry in section["models"].items():
        missing = [r for r in RATES if not isinstance(entry.get(r), (int, float))]
        if missing or set(entry) - set(RATES) - set(marks):
            raise ValueError(f"{PRICES_PATH}: {where}model {name!r} needs exactly the rates {', '.join(RATES)}"
                             + (f" (and optionally {RETIRED!r})" if marks else ""))
        if RETIRED in entry and not _retired_ok(entry[RETIRED]):
            raise ValueError(f"{PRICES_PATH}: {where}model {name!r}: {RETIRED!r} is true or a YYYY-MM-DD date, "
                             f"not {entry[RETIRED]!r}")
    for alias, target in section.get("aliases", {}).items():
        if target not in section["models"] or alias in section["models"]:
            raise ValueError(f"{PRICES_PATH}: {where}alias {alias!r} must name a listed model, not be one")


@lru_cache(maxsize=1)
def price_table() -> dict[str, Any]:
    table = json.loads(PRICES_PATH.read_text())
    _check_section(table, "")
    openai = table.get(OPENAI)
    if openai is not None:
        _check_section(openai, f"{OPENAI}: ", marks=())  # retirement() speaks of Anthropic's API
        both = ({*table["models"], *table.get("aliases", {})} & {*openai["models"], *openai.get("aliases", {})})
        if both:  # a bare id is looked up in both sections: it must name one model
            raise ValueError(f"{PRICES_PATH}: {', '.join(sorted(both))} listed by Anthropic's and OpenAI's prices")
    return table


def price_source(models: Iterable[str | None] = ()) -> dict[str, str]:
    """The table's date and where its prices come from (what a record carries): OpenAI's
    section's when OpenAI's prices priced every one of ``models`` that is priced (the
    priced cases' models), the table's (Anthropic's) otherwise."""
    table = price_table()
    used = [found[0] for found in map(_priced, models) if found is not None]
    section = table.get(OPENAI) if used and all(s is table.get(OPENAI) for s in used) else table
    return {"as_of": section["as_of"], "source": section["source"]}


def _sections(model: str) -> list[tuple[dict[str, Any], str]]:
    """Where ``model`` may be priced, and the id to look up there: ``anthropic:NAME`` in
    Anthropic's prices, ``openai:NAME`` in OpenAI's, a bare id in either (their ids differ)."""
    table = price_table()
    openai = [table[OPENAI]] if OPENAI in table else []
    if model.startswith(PROVIDER_PREFIX):
        return [(table, model[len(PROVIDER_PREFIX):])]
    if model.startswith(OPENAI_PREFIX):
        return [(section, model[len(OPENAI_PREFIX):]) for section in openai]
    return [(section, model) for section in (table, *openai)]


def _priced(model: str | None) -> tuple[dict[str, Any], str] | None:
    """The table section ``model`` is priced in and its entry's id: its exact id or a listed alias, with an
    optional provider prefix. Nothing else (no prefix or family matching)."""
    if not isinstance(model, str) or not model:
        return None
    for section, name in _sections(model):
        if name in section["models"]:
            return section, name
        if name in section.get("aliases", {}):
            return section, section["aliases"][name]
    return None


def priced_name(model: str | None) -> str | None:
    """The table entry ``model`` is priced by (see :func:`_priced`), or None."""
    found = _priced(model)
    return found[1] if found else None


def price_for(model: str | None) -> dict[str, Any] | None:
    """The model's five rates (its retirement mark left out: a retired model is priced)."""
    found = _priced(model)
    if found is None:
        return None
    section, name = found
    return {k: v for k, v in section["models"][name].items() if k in RATES}


def retirement(model: str | None, today: date | None = None) -> str | None:
    """Why a new run should not count on ``model``: Anthropic has retired it (as of ``today``),
    or has set the date it retires on; None for a model the table does not mark (or does not
    list). A retired model keeps its price: runs made before its retirement still cost it."""
    found = _priced(model)
    if found is None:
        return None
    section, name = found
    mark = section["models"][name].get(RETIRED)
    if mark is None:
        return None
    label = name if name == model else f"{model} ({name})"
    where = f"{PRICES_PATH.name}, from {price_table().get('sources', {}).get('deprecations', price_table()['source'])}"
    if mark is True:
        return f"model {label} is retired on Anthropic's API ({where}): calls to it there fail"
    on = date.fromisoformat(mark)
    if on > (today or date.today()):
        return f"model {label} retires on {mark} on Anthropic's API ({where})"
    return f"model {label} was retired on {mark} on Anthropic's API ({where}): calls to it there fail"


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
    ``cache_read_input_tokens`` (read from it) are counted apart and priced at their rates.
    A case answered by a Message Batch (``batch_calls`` equal to ``model_calls``) costs half
    of all of it (``run/batch.py``); a mix of batched and direct calls cannot be told apart
    in summed tokens: unknown."""
    if not usage:
        return None
    factor = batch_factor(usage)
    if factor is None:
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
    return round(factor * total / 1e6, 8)


def batch_factor(usage: dict[str, Any]) -> float | None:
    """1 for direct calls, the batch discount for a case all of whose calls a batch answered,
    None for a mix."""
    batched = usage.get("batch_calls")
    if not batched:
        return 1.0
    from pytest_groundeval.run.batch import BATCH_DISCOUNT

    return BATCH_DISCOUNT if batched == usage.get("model_calls") else None


OFFLINE_AGENTS = ("baseline",)  # how the record names the built-in agents that call no model


def costs_nothing(agent_label: str | None) -> bool:
    """The built-in offline baseline: no model, no usage, no cost (a user agent named
    "baseline" is recorded as "baseline (module:Class)", so it is not taken for it)."""
    return agent_label in OFFLINE_AGENTS


def unreported(case: CaseResult) -> bool:
    """The agent ran for this case and reported no usage: its cost is unknown, not $0."""
    return case.usage is None and case.cost_usd is None and case.attempts > 0 and case.agent is not None \
        and not costs_nothing(case.agent)


def total_usage(cases: list[CaseResult]) -> RunUsage:
    tin = tout = 0
    cost = 0.0
    priced = unpriced = silent = 0
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
        elif unreported(c):
            silent += 1
    prices = price_source(c.model for c in cases if c.cost_usd is not None)
    return RunUsage(input_tokens=tin, output_tokens=tout, cost_usd=round(cost, 6), cases_priced=priced,
                    cases_unpriced=unpriced, cases_unreported=silent, prices_as_of=prices["as_of"],
                    prices_source=prices["source"])


def with_unfinished(usage: RunUsage, model: str | None, spent: list[dict[str, Any]], cut: int,
                    cases: int) -> RunUsage:
    """``usage`` plus what a killed session's unfinished cases had paid (``store/spent.py``:
    each attempt's last reported usage; ``cut`` attempts ended by the kill)."""
    if not cases:
        return usage
    costs = [cost_usd(model, u) for u in spent]
    return add_unfinished(usage, UnfinishedUsage(
        cases=cases, attempts_cut=cut, input_tokens=sum(int(u.get("input_tokens") or 0) for u in spent),
        output_tokens=sum(int(u.get("output_tokens") or 0) for u in spent),
        cost_usd=None if None in costs else round(sum(c for c in costs if c is not None), 8)))


def add_unfinished(usage: RunUsage, lost: UnfinishedUsage | None) -> RunUsage:
    """``usage`` with ``lost`` counted in, and added to its ``unfinished`` (a merge of shards)."""
    if lost is None:
        return usage
    had = usage.unfinished
    both = lost if had is None else UnfinishedUsage(
        cases=had.cases + lost.cases, attempts_cut=had.attempts_cut + lost.attempts_cut,
        input_tokens=had.input_tokens + lost.input_tokens, output_tokens=had.output_tokens + lost.output_tokens,
        cost_usd=None if had.cost_usd is None or lost.cost_usd is None else round(had.cost_usd + lost.cost_usd, 8))
    return usage.model_copy(update={
        "input_tokens": usage.input_tokens + lost.input_tokens, "output_tokens": usage.output_tokens + lost.output_tokens,
        "cost_usd": round(usage.cost_usd + (lost.cost_usd or 0.0), 6), "unfinished": both})


class LocalSpend:
    """The budget's state in this process only (a plain run, or no xdist): what was spent,
    the highest cost seen for one case, and the reservations of the calls in flight.
    ``transact`` is called with the budget's lock held. :class:`spend.SpendFile` is the same
    state in a file every xdist worker shares."""

    shared = False

    def __init__(self) -> None:
        self.state: dict[str, Any] = new_state()

    def transact(self, fn: Callable[[dict[str, Any]], Any]) -> Any:
        return fn(self.state)


def new_state() -> dict[str, Any]:
    return {"spent": 0.0, "seen": None, "flight": {}, "stop": None}


class Budget:
    """``--max-cost``: a call is admitted only with room for it reserved, so the spend ends
    at most one call's cost over the cap (serial, with ``--concurrency`` and, through a
    shared :class:`spend.SpendFile`, across xdist workers).

    Until a case's cost has been seen, calls start one at a time (nobody knows what the
    next one costs). After that each call in flight reserves the highest cost seen for one
    case (at least ``floor``: the agent's ``max_tokens`` at its model's output price), and a
    call starts only while what was spent plus what is reserved is below the cap; else it
    waits for a call in flight to settle, and is refused once the spend reached the cap.
    A call admitted at ``spent + reserved < cap`` ends the run at most at ``cap`` plus its own
    cost. An answer whose cost cannot be counted stops the budget (no further call): it can
    no longer be enforced, and saying so beats spending on."""

    POLL_S = 0.05  # how often a call waiting for room re-reads a shared spend file

    def __init__(self, max_cost: float | None, share: Any = None, floor: float | None = None) -> None:
        self.max_cost = max_cost
        self.floor = floor
        self._ledger = share if share is not None else LocalSpend()
        self._cond = threading.Condition()
        self._ids = itertools.count(1)
        self._refused: dict[tuple, str] = {}  # case key -> why it may not start (refuse)

    @property
    def spent(self) -> float:
        with self._cond:
            return float(self._ledger.transact(lambda st: st["spent"]))

    def refuse(self, key: tuple, why: str) -> None:
        """The call of case ``key`` (``CaseRef.key``) may not start: the room for it was
        decided ahead (``--batch``: the batch submitted at collection had none for it)."""
        self._refused[key] = why

    def reserve(self, key: tuple | None = None) -> tuple[str | None, str | None]:
        """Wait for room for one call (of case ``key``): ``(ticket, None)`` to start it,
        ``(None, why)`` when it may not start. Pass the ticket to :meth:`settle` when the call
        is over."""
        if key is not None and key in self._refused:
            return None, self._refused[key]
        if self.max_cost is None:
            return "", None
        ticket = f"{os.getpid()}-{next(self._ids)}"
        with self._cond:
            while True:
                verdict, why = self._ledger.transact(lambda st: self._admit(st, ticket))
                if verdict != "wait":
                    return (ticket, None) if verdict == "start" else (None, why)
                # a settle in this process notifies; one in another worker is seen on re-reading
                self._cond.wait(self.POLL_S if self._ledger.shared else 1.0)

    def _admit(self, st: dict[str, Any], ticket: str) -> tuple[str, str | None]:
        cap = float(self.max_cost)  # type: ignore[arg-type]
        if st["stop"]:
            return "refuse", f"--max-cost {cap:g} USD can no longer be enforced: {st['stop']}"
        if st["spent"] >= cap:
            return "refuse", f"--max-cost {cap:g} USD reached (spent {st['spent']:.4f})"
        flight = st["flight"]
        if flight:
            if st["seen"] is None:
                return "wait", None  # no cost seen yet: one call at a time
            if st["spent"] + sum(r["amount"] for r in flight.values()) >= cap:
                return "wait", None  # no room while the calls in flight may spend their reservations
        amount = max(st["seen"] or 0.0, self.floor or 0.0)
        flight[ticket] = {"pid": os.getpid(), "amount": amount}
        return "start", None

    def settle(self, ticket: str | None, cost: float | None, uncounted: str | None = None) -> None:
        """The call ``ticket`` is over and cost ``cost`` (None: nothing known spent);
        ``uncounted``: why an answered call's cost could not be counted (stops the budget)."""
        if self.max_cost is None or ticket is None:
            return

        def apply(st: dict[str, Any]) -> None:
            st["flight"].pop(ticket, None)
            if cost:
                st["spent"] += cost
                st["seen"] = max(st["seen"] or 0.0, cost)
            if uncounted and not st["stop"]:
                st["stop"] = uncounted

        with self._cond:
            self._ledger.transact(apply)
            self._cond.notify_all()


def call_floor(agent: Any) -> float | None:
    """The least one call of ``agent`` may cost: its ``max_tokens`` at its model's output
    price (None when either is unknown)."""
    max_tokens = getattr(agent, "max_tokens", None)
    price = price_for(getattr(agent, "model", None))
    if price is None or isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens <= 0:
        return None
    from pytest_groundeval.run.batch import BATCH_DISCOUNT

    factor = BATCH_DISCOUNT if getattr(agent, "batches", None) is not None else 1.0  # --batch: half price
    return factor * max_tokens * price["output_per_mtok"] / 1e6


def budget_record(max_cost: float | None, cases: list[CaseResult], usage: RunUsage) -> BudgetRecord | None:
    """What ``--max-cost`` did, from the cases themselves (so it is right under xdist too)."""
    if max_cost is None:
        return None
    not_run = sum(c.error_kind == "budget" for c in cases)
    return BudgetRecord(max_cost_usd=max_cost, spent_usd=usage.cost_usd, stopped=not_run > 0,
                        cases_not_run=not_run)


def unpriced_budget(model: str | None, max_cost: float | None, agent_label: str | None = None) -> str | None:
    """Why ``--max-cost`` cannot be enforced for an agent using ``model`` (known at start),
    else None. The offline baseline costs nothing: that budget holds. Any other agent must
    name a priced model (a ``model`` attribute), or its spend cannot be counted."""
    if max_cost is None or costs_nothing(agent_label):
        return None
    if not model:
        return (f"--max-cost {max_cost:g}: the agent names no model (no `model` or `default_model` "
                f"attribute), so the tokens it reports cannot be priced and the budget cannot be "
                f"enforced; give it a `model` attribute with a model id listed in {PRICES_PATH}, "
                "or drop --max-cost")
    if priced_name(model) is not None:
        return None
    return (f"--max-cost {max_cost:g}: model {model!r} has no price in {PRICES_PATH} "
            f"({_looked_up(model)}), so its cost cannot be counted and the budget cannot be enforced; "
            "use a listed model id or alias, add the model to that table, or drop --max-cost")


def _looked_up(model: str) -> str:
    """The table's sections ``model`` is looked up in (:func:`_sections`: ``openai:NAME``
    OpenAI's, ``anthropic:NAME`` Anthropic's, a bare id both), each with its date and source."""
    openai = price_table().get(OPENAI)
    cited = [f"{'OpenAI' if section is openai else 'Anthropic'}'s prices as of {section['as_of']}, "
             f"from {section['source']}" for section, _ in _sections(model)]
    return "; ".join(cited) or "it holds no OpenAI prices"
