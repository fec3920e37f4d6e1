"""Prices that are right: exact model ids (no prefix matching across generations), the
prompt-cache rates, the table's date and source in the record, and an unpriced model is
cost null and, with --max-cost, a usage error at start (a budget that cannot be enforced)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import anthropic
import pytest
from conftest import SMALL_SET, read_record

from pytest_groundeval.run import usage as usage_mod
from pytest_groundeval.agents.claude import ClaudeAgent
from pytest_groundeval.model import Usage
from pytest_groundeval.store.record import validate_record
from pytest_groundeval.run.usage import cost_usd, price_for, price_table, priced_name, unpriced_budget

N = len(SMALL_SET)
TOKENS = {"input_tokens": 12_345, "output_tokens": 6_789}

# Anthropic's list prices, USD per million tokens (input, output), as published at
# https://platform.claude.com/docs/en/about-claude/pricing and each model's page
# (https://platform.claude.com/docs/en/models/<model>/overview), read 2026-12-04 — written here
# by hand, not read from the table, so a wrong table entry fails.
LIST_PRICES = {
    "claude-opus-5-5": (4.0, 20.0),
    "claude-opus-5": (5.0, 25.0),
    "claude-sonnet-5-5": (2.0, 10.0),
    "claude-sonnet-5": (2.0, 10.0),
    "claude-opus-4-7": (5.0, 25.0),
    "claude-opus-4-6": (5.0, 25.0),
    "claude-sonnet-4-6": (3.0, 15.0),
    "claude-opus-4-1": (15.0, 75.0),
    "claude-opus-4-5": (5.0, 25.0),
    "claude-sonnet-4-5": (3.0, 15.0),
    "claude-haiku-4-5": (1.0, 5.0),
    "claude-opus-4-0": (15.0, 75.0),
    "claude-sonnet-4-0": (3.0, 15.0),
    "claude-3-5-haiku-20241022": (0.8, 4.0),
    "claude-opus-4-8": (5.0, 25.0),  # the claude / langgraph agents' default model
}


def expected(rates: tuple[float, float], input_tokens: int, output_tokens: int) -> float:
    return input_tokens / 1e6 * rates[0] + output_tokens / 1e6 * rates[1]


# ---------------------------------------------------------------- exact entries
@pytest.mark.parametrize("model", ["claude-opus-4-1", "claude-opus-4-5", "claude-sonnet-4-5", "claude-haiku-4-5"])
def test_the_four_named_models_cost_their_list_price(model):
    cost = cost_usd(model, TOKENS)
    assert cost == pytest.approx(expected(LIST_PRICES[model], **TOKENS), abs=1e-8)
    # a worked figure, for the eye: 12,345 in + 6,789 out
    figures = {"claude-opus-4-1": 0.694350, "claude-opus-4-5": 0.231450,
               "claude-sonnet-4-5": 0.138870, "claude-haiku-4-5": 0.046290}
    assert cost == pytest.approx(figures[model], abs=1e-6)


@pytest.mark.parametrize("model", sorted(LIST_PRICES))
def test_every_listed_model_costs_its_list_price_and_every_entry_is_checked(model):
    assert cost_usd(model, TOKENS) == pytest.approx(expected(LIST_PRICES[model], **TOKENS), abs=1e-8)


def test_every_table_entry_is_checked_by_hand():
    unchecked = set(price_table()["models"]) - set(LIST_PRICES)
    assert not unchecked, unchecked


@pytest.mark.parametrize("model, as_priced", [
    ("claude-opus-4-1-20250805", "claude-opus-4-1"),
    ("claude-opus-4-20250514", "claude-opus-4-0"),  # Opus 4 is $15/$75, not Opus 4.5's $5/$25
    ("claude-opus-4-5-20251101", "claude-opus-4-5"),
    ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
    ("claude-sonnet-4-20250514", "claude-sonnet-4-0"),
    ("claude-haiku-4-5-20251001", "claude-haiku-4-5"),
    ("claude-3-5-haiku-latest", "claude-3-5-haiku-20241022"),
    ("anthropic:claude-opus-4-1", "claude-opus-4-1"),  # --agent=langgraph --model anthropic:…
    ("anthropic:claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
    ("anthropic:claude-opus-4-8", "claude-opus-4-8"),
])
def test_snapshot_ids_and_the_provider_prefix_are_documented_aliases(model, as_priced):
    assert priced_name(model) == as_priced
    assert cost_usd(model, TOKENS) == pytest.approx(expected(LIST_PRICES[as_priced], **TOKENS), abs=1e-8)


@pytest.mark.parametrize("model", [
    "claude-opus-4-1-something-new",  # a future snapshot: not priced as Opus 4.1 (or anything)
    "claude-opus-4",  # not an API id: Opus 4.0 ($15) or 4.5 ($5)? no guess
    "claude-opus-4-5-preview",
    "claude-sonnet-4",
    "claude-haiku-4",
    "claude-opus-4-8-fast",
    "claude-haiku-5-5",  # a real model, priced by each request's prompt length: unpriced, not a guessed band
    "claude-opus-5.5",  # not an API id (dots)
    "claude-opus-5-5-fast",
    "claude-sonnet-5-0",
    "openai:claude-sonnet-4-5",  # another provider's endpoint: its prices are not Anthropic's
    "CLAUDE-OPUS-4-1",
    " claude-opus-4-1",
    "",
    None,
])
def test_lookalike_names_are_unpriced_not_another_generation(model):
    assert priced_name(model) is None and price_for(model) is None
    assert cost_usd(model, TOKENS) is None


def test_the_table_has_exact_entries_only(tmp_path, monkeypatch):
    table = price_table()
    assert table["models"], "an empty table prices nothing"
    for name, entry in table["models"].items():
        assert set(entry) - {"retired"} == set(usage_mod.RATES), name  # no "match": "prefix", no extras
    for alias, target in table["aliases"].items():
        assert target in table["models"] and alias not in table["models"]
    # the loader refuses a prefix entry rather than ignoring it
    bad = json.loads(usage_mod.PRICES_PATH.read_text())
    bad["models"]["claude-opus-4"] = {**bad["models"]["claude-opus-4-5"], "match": "prefix"}
    (tmp_path / "prices.json").write_text(json.dumps(bad))
    monkeypatch.setattr(usage_mod, "PRICES_PATH", tmp_path / "prices.json")
    price_table.cache_clear()
    try:
        with pytest.raises(ValueError, match="claude-opus-4"):
            price_table()
    finally:
        monkeypatch.undo()
        price_table.cache_clear()


# ---------------------------------------------------------------- prompt-cache rates
# cache rates a model's page lists apart from the usual 0.1x read (Opus 5.5: $0.20 on $4 input)
CACHE_READ = {"claude-opus-5-5": 0.20}


def test_every_entry_has_anthropics_cache_multipliers():
    """5-minute writes 1.25x input, 1-hour writes 2x (every model listed today), reads 0.1x
    but where the model's page lists its own (written here by hand)."""
    for name, p in price_table()["models"].items():
        assert p["cache_write_5m_per_mtok"] == pytest.approx(1.25 * p["input_per_mtok"]), name
        assert p["cache_write_1h_per_mtok"] == pytest.approx(2.0 * p["input_per_mtok"]), name
        assert p["cache_read_per_mtok"] == pytest.approx(CACHE_READ.get(name, 0.1 * p["input_per_mtok"])), name
    # Opus 5.5 (its page: $4 in, $20 out, $5 / $8 cache writes, $0.20 cache reads)
    u = {"input_tokens": 10_000, "output_tokens": 2_000, "cache_creation_input_tokens": 30_000,
         "cache_creation_1h_input_tokens": 10_000, "cache_read_input_tokens": 500_000}
    assert cost_usd("claude-opus-5-5", u) == pytest.approx(
        (10_000 * 4 + 2_000 * 20 + 20_000 * 5 + 10_000 * 8 + 500_000 * 0.2) / 1e6, abs=1e-8)  # 0.36


def test_cache_tokens_are_priced_at_their_own_rates():
    u = {"input_tokens": 2_000, "output_tokens": 500, "cache_creation_input_tokens": 40_000,
         "cache_read_input_tokens": 300_000}
    # Opus 4.5: input $5, output $25, 5m write $6.25, read $0.50 per MTok
    assert cost_usd("claude-opus-4-5", u) == pytest.approx(
        (2_000 * 5 + 500 * 25 + 40_000 * 6.25 + 300_000 * 0.5) / 1e6, abs=1e-8)  # 0.4225
    # Opus 4.1: $15 / $75, writes $18.75, reads $1.50
    assert cost_usd("claude-opus-4-1", u) == pytest.approx(
        (2_000 * 15 + 500 * 75 + 40_000 * 18.75 + 300_000 * 1.5) / 1e6, abs=1e-8)  # 1.2675
    # the 1-hour share of the writes at 2x input
    one_hour = {**u, "cache_creation_1h_input_tokens": 10_000}
    assert cost_usd("claude-sonnet-4-5", one_hour) == pytest.approx(
        (2_000 * 3 + 500 * 15 + 30_000 * 3.75 + 10_000 * 6 + 300_000 * 0.3) / 1e6, abs=1e-8)
    # a cached read is cheaper than the same tokens uncached, a write dearer
    plain = cost_usd("claude-haiku-4-5", {"input_tokens": 100_000, "output_tokens": 0})
    read = cost_usd("claude-haiku-4-5", {"input_tokens": 0, "output_tokens": 0, "cache_read_input_tokens": 100_000})
    write = cost_usd("claude-haiku-4-5", {"input_tokens": 0, "output_tokens": 0,
                                          "cache_creation_input_tokens": 100_000})
    assert read == pytest.approx(plain / 10) and write == pytest.approx(plain * 1.25)


def test_cache_counts_that_are_not_token_counts_are_unpriced():
    assert cost_usd("claude-opus-4-5", {**TOKENS, "cache_read_input_tokens": -5}) is None
    assert cost_usd("claude-opus-4-5", {**TOKENS, "cache_creation_input_tokens": 10,
                                        "cache_creation_1h_input_tokens": 11}) is None
    with pytest.raises(ValueError):
        Usage.model_validate({"input_tokens": 1, "cache_read_input_tokens": -1})
    with pytest.raises(ValueError):
        Usage.model_validate({"input_tokens": 1, "cache_creation_input_tokens": "many"})
    u = Usage.model_validate({"input_tokens": 1, "output_tokens": 2, "cache_read_input_tokens": 3,
                              "cache_creation_input_tokens": 4, "cache_creation_1h_input_tokens": 0})
    assert u.model_dump() == {"input_tokens": 1, "output_tokens": 2, "cache_read_input_tokens": 3,
                              "cache_creation_input_tokens": 4, "cache_creation_1h_input_tokens": 0}


class _CachingMessages:
    def create(self, model, max_tokens, messages):
        usage = SimpleNamespace(input_tokens=1_200, output_tokens=300, cache_creation_input_tokens=8_000,
                                cache_read_input_tokens=50_000,
                                cache_creation=SimpleNamespace(ephemeral_5m_input_tokens=6_000,
                                                               ephemeral_1h_input_tokens=2_000))
        return SimpleNamespace(content=[SimpleNamespace(type="text", text="{}")], model="claude-opus-4-1-20250805",
                               usage=usage)


def test_the_claude_agent_records_cache_tokens_and_they_are_priced():
    agent = ClaudeAgent("claude-opus-4-1", client=SimpleNamespace(messages=_CachingMessages()))
    out = agent.run("prompt")
    assert out.usage == {"input_tokens": 1_200, "output_tokens": 300, "model_calls": 1,
                         "cache_creation_input_tokens": 8_000, "cache_read_input_tokens": 50_000,
                         "cache_creation_1h_input_tokens": 2_000}
    Usage.model_validate(out.usage)
    # served as the dated snapshot id: priced as Opus 4.1
    assert cost_usd(out.model, out.usage) == pytest.approx(
        (1_200 * 15 + 300 * 75 + 6_000 * 18.75 + 2_000 * 30 + 50_000 * 1.5) / 1e6, abs=1e-8)  # 0.288
    # a response without prompt caching records no cache fields
    plain = SimpleNamespace(create=lambda **kw: SimpleNamespace(
        content=[], model=None, usage=SimpleNamespace(input_tokens=1, output_tokens=2,
                                                      cache_creation_input_tokens=None,
                                                      cache_read_input_tokens=None, cache_creation=None)))
    out = ClaudeAgent("claude-haiku-4-5", client=SimpleNamespace(messages=plain)).run("p")
    assert out.usage == {"input_tokens": 1, "output_tokens": 2, "model_calls": 1}


# ---------------------------------------------------------------- unpriced: null, and no budget
AGENTS = '''
import json
from pytest_groundeval.tasks.extraction import active_medications

def _answer(prompt):
    return json.dumps({"active_medications": active_medications(json.JSONDecoder().raw_decode(prompt.split("Bundle:\\n", 1)[1])[0],
                                                                "prompt")})

class Reporting:
    """Reports the model it used and its tokens, per answer (model unknown at start)."""
    name = "reporting"
    def run(self, prompt):
        return {"text": _answer(prompt), "model": "claude-opus-4", "usage": {"input_tokens": 1000, "output_tokens": 10}}

class Unpriced:
    name = "unpriced"
    model = "gpt-unlisted-1"
    def run(self, prompt):
        return {"text": _answer(prompt), "usage": {"input_tokens": 1000, "output_tokens": 10}}

class DefaultUnpriced:
    name = "default-unpriced"
    default_model = "claude-opus-4-1-something-new"
    def run(self, prompt):
        return _answer(prompt)

class Priced:
    name = "priced"
    model = "claude-haiku-4-5-20251001"
    def run(self, prompt):
        return {"text": _answer(prompt), "usage": {"input_tokens": 1000, "output_tokens": 10}}
'''


def _run(p: pytest.Pytester, *args: str) -> pytest.RunResult:
    return p.runpytest("--data-dir", "data", "--run-record", "record.json", "-p", "no:cacheprovider", *args)


@pytest.fixture
def project(evalproject):
    evalproject.makepyfile(price_agents=AGENTS)
    return evalproject


def test_an_unpriced_model_costs_null_not_zero(project):
    _run(project, "--agent=price_agents:Reporting").assert_outcomes(passed=N)
    rec = read_record(project)
    for c in rec["cases"]:
        assert c["model"] == "claude-opus-4" and c["usage"]["input_tokens"] == 1000
        assert c["cost_usd"] is None  # unknown, not free
    assert rec["usage"]["cases_unpriced"] == N and rec["usage"]["cases_priced"] == 0
    _run(project, "--agent=price_agents:Priced").assert_outcomes(passed=N)
    rec = read_record(project)
    assert all(c["cost_usd"] == pytest.approx((1000 * 1 + 10 * 5) / 1e6) for c in rec["cases"])
    assert rec["usage"]["cases_priced"] == N and rec["usage"]["cost_usd"] == pytest.approx(N * 0.00105)


UNKNOWN = "not a Claude model id groundeval knows"  # --model checked at start (issue 30 item 5): before the budget


@pytest.mark.parametrize("args, model, said", [
    (("--agent=price_agents:Unpriced",), "gpt-unlisted-1", "has no price"),
    (("--agent=price_agents:DefaultUnpriced",), "claude-opus-4-1-something-new", "has no price"),
    (("--agent=claude", "--model", "claude-opus-4-1-something-new"), "claude-opus-4-1-something-new", UNKNOWN),
    (("--agent=claude", "--model", "claude-opus-4"), "claude-opus-4", UNKNOWN),
    (("--agent=langgraph", "--model", "anthropic:claude-opus-4"), "anthropic:claude-opus-4", UNKNOWN),
    (("--agent=claude", "--model", "claude-haiku-5-5"), "claude-haiku-5-5", "has no price"),  # known, unpriced
    (("--agent=chat", "--model", "openai:gpt-test"), "openai:gpt-test", "has no price"),  # a local server's name
])
@pytest.mark.parametrize("checks", [(), ("--no-preflight",)], ids=["preflight", "no-preflight"])
def test_an_unpriced_model_with_max_cost_is_a_usage_error_at_start(project, monkeypatch, args, model, said, checks):
    """``--no-preflight`` skips the checks that the agent builds, its server answers and its
    model id is known, not the price a budget needs: without one, no call may start either."""
    from openai_loopback import OpenAILoopback

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-not-used")
    monkeypatch.setattr(anthropic, "Anthropic", lambda **kw: pytest.fail("no call may start"))
    said = "has no price" if checks else said  # (the model id is not checked)
    with OpenAILoopback() as api:  # answers the start's check of --model-base-url (the openai: model's server)
        base = ("--model-base-url", api.url) if model.startswith("openai:") else ()
        result = _run(project, *args, *base, "--max-cost", "5", *checks)
    assert not [path for path in api.requests if "/chat/completions" in path or "/batches" in path]  # no call
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    if said == UNKNOWN:
        assert f"--model {model}: {UNKNOWN}" in err and "prices.json" in err
        assert not (project.path / "record.json").exists()
        return
    assert f"model {model!r} has no price" in err and "prices.json" in err
    assert "budget cannot be enforced" in err
    # the prices it was looked up in: OpenAI's for an openai: name, Anthropic's for an anthropic: one,
    # both for a bare one
    assert (price_table()["source"] in err) is not model.startswith("openai:")
    assert (price_table()["openai"]["source"] in err) is not model.startswith("anthropic:")
    assert not (project.path / "record.json").exists()
    # without a budget the same model runs (its cost is null)
    if "price_agents" in args[0]:
        _run(project, *args).assert_outcomes(passed=N)


def test_max_cost_is_allowed_for_a_priced_model_and_for_the_baseline(project, monkeypatch):
    _run(project, "--agent=price_agents:Priced", "--max-cost", "5").assert_outcomes(passed=N)
    assert read_record(project)["budget"]["spent_usd"] == pytest.approx(N * 0.00105)
    # the offline baseline is not a model: it costs nothing, and a budget holds
    result = _run(project, "--agent=baseline", "--max-cost", "0.01")
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED)
    rec = read_record(project)
    assert rec["usage"]["cost_usd"] == 0 and rec["budget"]["spent_usd"] == 0 and not rec["budget"]["stopped"]
    assert unpriced_budget(None, 1.0, "baseline") is None and unpriced_budget("claude-opus-4-8", 1.0) is None
    # any other agent without a model cannot be priced (tests/run/test_deadline_budget.py runs it)
    assert "names no model" in unpriced_budget(None, 1.0, "silent (m:Silent)")
    assert unpriced_budget("claude-opus-4", None) is None  # no budget: nothing to enforce


# ---------------------------------------------------------------- the record says which prices
def test_the_record_carries_the_price_tables_date_and_source(project):
    _run(project, "--agent=price_agents:Priced").assert_outcomes(passed=N)
    rec = read_record(project)
    assert validate_record(rec) == []
    table = price_table()
    assert rec["usage"]["prices_as_of"] == table["as_of"]
    assert rec["usage"]["prices_source"] == table["source"]
    assert table["source"].startswith("https://") and "pricing" in table["source"]
    assert len(table["as_of"]) == 10 and table["as_of"][4] == "-"  # an ISO date


# ---------------------------------------------------------------- retired models
# as Anthropic's pages say, read 2026-12-04: Sonnet 4.5 "retires on November 30, 2026" (its
# model page); Opus 4.1 "(retired, except on Bedrock and Google Cloud)" and Opus 4 "(retired,
# except on Google Cloud)" (the pricing page, no date). Written by hand, not read from the table.
RETIRED = {"claude-sonnet-4-5": "2026-11-30", "claude-opus-4-1": True, "claude-opus-4-0": True}


def test_the_retired_models_are_marked_and_still_priced():
    marks = {n: e["retired"] for n, e in price_table()["models"].items() if "retired" in e}
    assert marks == RETIRED
    for name in RETIRED:  # a retired model prices the runs made with it before
        assert price_for(name) is not None and set(price_for(name)) == set(usage_mod.RATES)
        assert cost_usd(name, TOKENS) == pytest.approx(expected(LIST_PRICES[name], **TOKENS), abs=1e-8)
    assert cost_usd("claude-sonnet-4-5-20250929", TOKENS) == pytest.approx(0.138870, abs=1e-6)  # its snapshot id


def test_retirement_says_when_and_where():
    from datetime import date

    from pytest_groundeval.run.usage import retirement

    note = retirement("claude-sonnet-4-5-20250929", today=date(2026, 12, 4))
    assert note.startswith("model claude-sonnet-4-5-20250929 (claude-sonnet-4-5) was retired on 2026-11-30")
    assert "model-deprecations" in note and "fail" in note
    assert retirement("claude-sonnet-4-5", today=date(2026, 11, 1)).startswith(
        "model claude-sonnet-4-5 retires on 2026-11-30")  # a date ahead: not yet retired
    assert retirement("anthropic:claude-opus-4-1").startswith("model anthropic:claude-opus-4-1 (claude-opus-4-1) is "
                                                              "retired on Anthropic's API")
    for model in ("claude-opus-5-5", "claude-opus-4-8", "claude-haiku-4-5", "claude-haiku-5-5", "gpt-x", None):
        assert retirement(model) is None


@pytest.mark.parametrize("mark", ["yes", "2026-13-01", "30 November 2026", False, 20261130])
def test_the_loader_refuses_a_retired_mark_that_is_not_true_or_a_date(tmp_path, monkeypatch, mark):
    bad = json.loads(usage_mod.PRICES_PATH.read_text())
    bad["models"]["claude-opus-4-5"] = {**bad["models"]["claude-opus-4-5"], "retired": mark}
    (tmp_path / "prices.json").write_text(json.dumps(bad))
    monkeypatch.setattr(usage_mod, "PRICES_PATH", tmp_path / "prices.json")
    price_table.cache_clear()
    try:
        with pytest.raises(ValueError, match="claude-opus-4-5.*retired"):
            price_table()
    finally:
        monkeypatch.undo()
        price_table.cache_clear()


RETIRED_AGENT = '''
from price_agents import _answer

class Retired:
    name = "retired"
    model = "claude-sonnet-4-5-20250929"
    def run(self, prompt):
        return {"text": _answer(prompt), "usage": {"input_tokens": 1000, "output_tokens": 10}}
'''


def test_a_new_run_on_a_retired_model_is_warned_and_still_priced(project):
    project.makepyfile(retired_agent=RETIRED_AGENT)
    result = _run(project, "--agent=retired_agent:Retired")
    result.assert_outcomes(passed=N, warnings=1)
    out = result.stdout.str()
    assert "RetiredModelWarning: groundeval: --agent=retired_agent:Retired: model claude-sonnet-4-5-20250929 " \
           "(claude-sonnet-4-5) was retired on 2026-11-30" in out
    rec = read_record(project)
    assert all(c["cost_usd"] == pytest.approx((1000 * 3 + 10 * 15) / 1e6) for c in rec["cases"])
    # a model that is not retired: no warning
    plain = _run(project, "--agent=price_agents:Priced")
    plain.assert_outcomes(passed=N)
    assert "RetiredModelWarning" not in plain.stdout.str()


# ---------------------------------------------------------------- OpenAI's prices (--agent=chat --model openai:NAME)
# OpenAI's list prices (Standard tier), USD per million tokens (input, cached input, output),
# as quoted from https://developers.openai.com/api/docs/pricing, read 2026-12-07 — written here
# by hand, not read from the table, so a wrong table entry fails.
OPENAI_LIST_PRICES = {
    "gpt-4.1": (2.0, 0.5, 8.0),
    "gpt-4.1-mini": (0.4, 0.1, 1.6),
    "gpt-4.1-nano": (0.1, 0.025, 0.4),
    "gpt-4o-mini": (0.15, 0.075, 0.6),
}


def test_every_openai_entry_is_checked_by_hand_and_costs_its_list_price():
    section = price_table()["openai"]
    assert set(section["models"]) == set(OPENAI_LIST_PRICES)
    assert section["source"].startswith("https://") and "pricing" in section["source"]
    for name, (tin, cached, tout) in OPENAI_LIST_PRICES.items():
        assert cost_usd(f"openai:{name}", TOKENS) == pytest.approx(expected((tin, tout), **TOKENS), abs=1e-8)
        # OpenAI bills cache writes as input and reads at its "cached input" rate
        u = {"input_tokens": 1_000, "output_tokens": 100, "cache_read_input_tokens": 9_000,
             "cache_creation_input_tokens": 500}
        assert cost_usd(f"openai:{name}", u) == pytest.approx(
            (1_000 * tin + 100 * tout + 9_000 * cached + 500 * tin) / 1e6, abs=1e-8)
        # a batch result at half (OpenAI's Batch API: 50% off)
        batched = {**TOKENS, "model_calls": 1, "batch_calls": 1}
        assert cost_usd(f"openai:{name}", batched) == pytest.approx(expected((tin, tout), **TOKENS) / 2, abs=1e-8)
    assert cost_usd("openai:gpt-4.1-mini", TOKENS) == pytest.approx(0.0158004, abs=1e-7)  # 12,345 in + 6,789 out


@pytest.mark.parametrize("model, as_priced", [
    ("openai:gpt-4.1-mini", "gpt-4.1-mini"),
    ("gpt-4.1-mini", "gpt-4.1-mini"),  # what the API answers with: a bare id
    ("gpt-4.1-mini-2025-04-14", "gpt-4.1-mini"),  # a dated snapshot
    ("openai:gpt-4o-mini-2024-07-18", "gpt-4o-mini"),
    ("openai:gpt-4.1", "gpt-4.1"),
])
def test_openai_ids_and_their_snapshots_are_priced(model, as_priced):
    assert priced_name(model) == as_priced
    assert price_for(model) == price_for(f"openai:{as_priced}")


@pytest.mark.parametrize("model", [
    "anthropic:gpt-4.1-mini",  # another provider's endpoint
    "openai:claude-opus-4-8",
    "openai:gpt-test",  # a name a local server makes up
    "openai:gpt-4o",  # not listed (its price differs by snapshot): no guess
    "gpt-4.1-mini-2025",
    "openai:gpt-4.1-mini-fast",
    "openai:",
])
def test_openai_lookalikes_and_other_providers_are_unpriced(model):
    assert priced_name(model) is None and price_for(model) is None and cost_usd(model, TOKENS) is None


@pytest.mark.parametrize("model, cited", [
    ("openai:gpt-test", {"OpenAI"}),
    ("openai:claude-opus-4-8", {"OpenAI"}),  # a Claude id at OpenAI's endpoint: OpenAI's prices are the ones
    ("anthropic:gpt-4.1-mini", {"Anthropic"}),
    ("anthropic:claude-opus-4-1-something-new", {"Anthropic"}),
    ("gpt-unlisted-1", {"Anthropic", "OpenAI"}),  # a bare id is looked up in both
    ("claude-opus-4-1-something-new", {"Anthropic", "OpenAI"}),
])
def test_an_unpriced_models_budget_error_cites_the_prices_it_was_looked_up_in(model, cited):
    table = price_table()
    sections = {"Anthropic": table, "OpenAI": table["openai"]}
    assert table["source"] != table["openai"]["source"]
    why = unpriced_budget(model, 5.0)
    assert why is not None and f"model {model!r} has no price" in why
    for who, section in sections.items():
        assert (f"{who}'s prices as of {section['as_of']}, from {section['source']}" in why) is (who in cited), why
        assert (section["source"] in why) is (who in cited), why


def test_openai_ids_are_not_claude_ids_and_never_retired():
    from pytest_groundeval.agents.spec import known_claude_models
    from pytest_groundeval.run.usage import retirement

    assert not [m for m in known_claude_models() if m.startswith("gpt")]
    assert retirement("openai:gpt-4.1") is None and retirement("gpt-4.1-mini-2025-04-14") is None


@pytest.mark.parametrize("change, says", [
    (lambda t: t["openai"]["aliases"].update({"claude-haiku-4-5": "gpt-4.1"}), "listed by Anthropic's and OpenAI's"),
    (lambda t: t["openai"]["models"]["gpt-4.1"].update({"retired": True}), "openai: model 'gpt-4.1' needs exactly"),
    (lambda t: t["openai"]["aliases"].update({"gpt-4.1-x": "gpt-9"}), "openai: alias 'gpt-4.1-x'"),
])
def test_the_loader_refuses_a_bad_openai_section(tmp_path, monkeypatch, change, says):
    bad = json.loads(usage_mod.PRICES_PATH.read_text())
    change(bad)
    (tmp_path / "prices.json").write_text(json.dumps(bad))
    monkeypatch.setattr(usage_mod, "PRICES_PATH", tmp_path / "prices.json")
    price_table.cache_clear()
    try:
        with pytest.raises(ValueError, match=says):
            price_table()
    finally:
        monkeypatch.undo()
        price_table.cache_clear()
