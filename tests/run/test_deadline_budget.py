"""Bounded time and money (issue 8, item 3): the harness's deadline is passed down into a
LangGraph run, so no model call starts after the harness gave up on the attempt; and what
failed attempts spent counts toward the case's cost and the budget."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

pytest.importorskip("langchain.agents", reason="langchain not installed")

from langchain_core.messages import BaseMessage  # noqa: E402
from test_langgraph_agent import WRITE, ScriptedChatModel, call  # noqa: E402

from pytest_groundeval.agents.langgraph_agent import LangGraphAgent  # noqa: E402
from pytest_groundeval.run.calls import AgentCallError, CallPolicy, CallTimeout, call_with_policy  # noqa: E402
from pytest_groundeval.model import AgentOutput  # noqa: E402
from pytest_groundeval.run.runner import run_case  # noqa: E402
from pytest_groundeval.run.usage import Budget, cost_usd  # noqa: E402

PRICED = "claude-sonnet-4-5"


class CountingModel(ScriptedChatModel):
    """A scripted model that notes when each call starts (monotonic) and never answers:
    every step is another tool call, so only a limit ends the run."""

    starts: list[float] = []

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any):
        self.starts.append(time.monotonic())
        return super()._generate(messages, stop, run_manager, **kw)


def looping_agent() -> tuple[LangGraphAgent, CountingModel]:
    model = CountingModel(script=[lambda m: call("lookup_medication_code", {"query": "ibuprofen"})],
                          delay=0.25, starts=[])
    # the agent's own limits are far away: only the harness's deadline can stop it early
    return LangGraphAgent(model=model, run_timeout=60, recursion_limit=200), model


def _gave_up_at(fn) -> float:
    with pytest.raises(AgentCallError) as info:
        call_with_policy(fn, CallPolicy(timeout=0.9, max_attempts=1))
    assert isinstance(info.value.last, CallTimeout)
    return time.monotonic()


@pytest.mark.parametrize("where", ["main-thread", "prefetch-thread"])
def test_no_model_call_starts_after_the_harness_gave_up(where):
    """Events, not clocks: after the harness gave up, the test waits for the graph's own
    thread to end (it ends once its next model call is refused) and then counts; no sleep
    stands in for "had the run gone on", and no call count depends on the machine's speed."""
    before = set(threading.enumerate())
    agent, model = looping_agent()

    def attempt() -> Any:
        return agent.run_case(WRITE, "note", {})

    if where == "main-thread":  # serial runs: SIGALRM interrupts the wait
        gave_up = _gave_up_at(attempt)
    else:  # --concurrency / -n: the attempt runs off the main thread, on a reused thread
        box: dict[str, float] = {}
        t = threading.Thread(target=lambda: box.update(at=_gave_up_at(attempt)))
        t.start()
        t.join()
        gave_up = box["at"]
    graphs = [th for th in set(threading.enumerate()) - before if th.name == "groundeval-langgraph"]
    for th in graphs:  # the graph's thread ends on its own: its next model call is refused
        th.join(120)
        assert not th.is_alive(), "the graph's thread is still running after the harness gave up"
    assert model.starts, "the graph never called the model"
    assert max(model.starts) <= gave_up, "the graph kept calling the model after the deadline"


class FailsThenAnswers:
    """First attempt spends tokens and fails (transient), the second answers."""

    name = "fails-then-answers"
    model = PRICED

    def __init__(self, always_fail: bool = False) -> None:
        self.calls = 0
        self.always_fail = always_fail

    def run(self, prompt: str) -> AgentOutput:
        self.calls += 1
        if self.always_fail or self.calls == 1:
            exc = ConnectionError("overloaded half-way through")
            exc.usage = {"input_tokens": 300_000, "output_tokens": 1000}  # what it had spent
            raise exc
        return AgentOutput(text='{"resourceType": "MedicationStatement"}',
                           usage={"input_tokens": 1000, "output_tokens": 200})


def _ref(case_id: str = "ibuprofen-two-tablets"):
    return next(r for r in WRITE.discover() if r.case_id == case_id)


def test_a_failed_attempt_is_charged_to_the_case_and_the_budget():
    budget = Budget(100.0)
    policy = CallPolicy(timeout=None, max_attempts=2, base_delay=0.0)
    result = run_case(WRITE, _ref(), FailsThenAnswers(), policy=policy, budget=budget)
    assert result.attempts == 2
    assert (result.usage.input_tokens, result.usage.output_tokens) == (301_000, 1200)
    expected = cost_usd(PRICED, {"input_tokens": 301_000, "output_tokens": 1200})
    assert expected and result.cost_usd == pytest.approx(expected)
    assert budget.spent == pytest.approx(expected)


def test_a_case_that_never_answered_still_paid_and_stops_the_budget():
    budget = Budget(cost_usd(PRICED, {"input_tokens": 400_000, "output_tokens": 0}))
    policy = CallPolicy(timeout=None, max_attempts=2, base_delay=0.0)
    first = run_case(WRITE, _ref(), FailsThenAnswers(always_fail=True), policy=policy, budget=budget)
    assert first.outcome == "error" and first.error.kind == "agent"
    assert first.usage.input_tokens == 600_000 and first.cost_usd and first.cost_usd > budget.max_cost
    second = run_case(WRITE, _ref("aspirin-active-daily"), FailsThenAnswers(), policy=policy, budget=budget)
    assert second.outcome == "error" and second.error.kind == "budget"


def test_what_a_langgraph_run_spent_before_its_deadline_is_charged():
    agent, model = looping_agent()
    agent.model = PRICED
    budget = Budget(100.0)
    result = run_case(WRITE, _ref(), agent, policy=CallPolicy(timeout=0.9, max_attempts=1), budget=budget)
    assert result.outcome == "error" and result.error.kind == "timeout"
    calls = len(model.starts)
    assert result.usage is not None and result.usage.input_tokens >= 100 * (calls - 1)
    assert result.cost_usd and budget.spent == pytest.approx(result.cost_usd)


def test_a_model_call_inside_the_graph_is_refused_once_the_deadline_has_passed():
    """The guard the graph runs with: a model call (any node, any middleware) that would
    start after the deadline raises instead of reaching the model."""
    from pytest_groundeval.agents.langgraph_agent import _deadline_guard

    model = CountingModel(script=[call("lookup_medication_code", {"query": "x"})], starts=[])
    running = _deadline_guard(time.monotonic() + 60, threading.Event())
    model.invoke("hello", config={"callbacks": [running]})
    assert len(model.starts) == 1
    for guard in (_deadline_guard(time.monotonic() - 0.01, threading.Event()),  # passed
                  _deadline_guard(time.monotonic() + 60, _set(threading.Event()))):  # harness gave up
        with pytest.raises(CallTimeout, match="no further model call"):
            model.invoke("hello", config={"callbacks": [guard]})
    assert len(model.starts) == 1


def _set(event: threading.Event) -> threading.Event:
    event.set()
    return event


PRICED_AGENT = '''
import json, time
from pytest_groundeval.tasks.extraction import active_medications

def _answer(prompt):
    truth = active_medications(json.JSONDecoder().raw_decode(prompt.split("Bundle:\\n", 1)[1])[0], "p")
    return json.dumps({"active_medications": truth})

class Priced:
    """Answers right after 0.2 s; each case costs 300k input tokens of claude-sonnet-4-5 ($0.90)."""
    name = "priced"
    model = "claude-sonnet-4-5"
    def run(self, prompt):
        time.sleep(0.2)
        return {"text": _answer(prompt), "usage": {"input_tokens": 300_000, "output_tokens": 0}}

class Silent:
    """A priced model, but it reports no usage at all."""
    name = "silent"
    model = "claude-sonnet-4-5"
    def run(self, prompt):
        return _answer(prompt)

class Nameless:
    """Reports tokens, but names no model: its cost cannot be priced."""
    name = "nameless"
    def run(self, prompt):
        return {"text": _answer(prompt), "usage": {"input_tokens": 300_000, "output_tokens": 0}}
'''

PER_CASE = cost_usd("claude-sonnet-4-5", {"input_tokens": 300_000, "output_tokens": 0})


def _budget_project(pytester, n: int = 20) -> None:
    import shutil

    from conftest import EVAL_FILE, SYNTHEA

    pytester.makepyfile(test_evals=EVAL_FILE, priced=PRICED_AGENT)
    data = pytester.mkdir("data")
    for path in sorted(SYNTHEA.glob("*.json"))[:n]:
        shutil.copy(path, data / path.name)


def _run_budget(pytester, *args: str):
    return pytester.runpytest_subprocess("--data-dir", "data", "--run-record", "record.json",
                                         "-p", "no:cacheprovider", "-p", "no:randomly", *args)


@pytest.mark.parametrize("how", [("--concurrency", "1"), ("--concurrency", "8"), ("-n", "2"),
                                 ("-n", "2", "--concurrency", "8")], ids=" ".join)
def test_the_budget_overshoots_by_at_most_one_calls_cost(pytester, how):
    """--max-cost $1 with $0.90 cases: the first call runs alone (no price known yet), the
    second starts with nothing in flight and $0.90 < $1 spent, then the spend has reached
    the cap and nothing else starts: $1.80, never more than $1 + $0.90, however many calls
    could be in flight (8 threads, or 2 xdist workers sharing the spend)."""
    import json

    assert PER_CASE == pytest.approx(0.90)
    _budget_project(pytester)
    result = _run_budget(pytester, "--agent=priced:Priced", "--max-cost", "1", *how)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    rec = json.loads((pytester.path / "record.json").read_text())
    called = [c for c in rec["cases"] if c["outcome"] == "passed"]
    spent = rec["budget"]["spent_usd"]
    assert spent == pytest.approx(PER_CASE * len(called))
    assert 1.0 <= spent <= 1.0 + PER_CASE  # the cap, plus at most one call's cost
    assert len(called) == 2
    assert rec["budget"]["stopped"] and rec["budget"]["cases_not_run"] == 20 - len(called)
    not_run = [c for c in rec["cases"] if c["outcome"] == "error"]
    assert {c["error"]["kind"] for c in not_run} == {"budget"}
    assert all("--max-cost 1 USD reached (spent 1.8" in c["error"]["message"] for c in not_run)
    result.stdout.fnmatch_lines(["*max-cost*"])
    assert not list(pytester.path.glob(".groundeval-spend-*")), "the spend file outlived the session"


def test_a_budget_the_run_can_reach_is_spent_up_to_it_with_calls_in_flight():
    """Eight threads at once on a $5 cap, $0.90 a call: every call starts only with room
    reserved, the spend ends between the cap and the cap plus one call, and the budget is
    not given up early (calls wait for room rather than being refused)."""
    budget = Budget(5.0)
    go = threading.Barrier(8)
    started: list[int] = []
    lock = threading.Lock()

    def worker() -> None:
        go.wait()
        while True:
            ticket, why = budget.reserve()
            if ticket is None:
                assert "reached" in why
                return
            with lock:
                started.append(1)
            time.sleep(0.01)  # a call takes a while (widens the window an unreserved budget overshoots in)
            budget.settle(ticket, PER_CASE)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert 5.0 <= budget.spent <= 5.0 + PER_CASE
    assert len(started) == 6  # 5 x $0.90 = $4.50 < $5 starts the sixth; then $5.40 stops all


def _state(spent=0.0, seen=None, flight=(), stop=None):
    return {"spent": spent, "seen": seen, "stop": stop,
            "flight": {f"1-{i}": {"pid": 1, "amount": a} for i, a in enumerate(flight)}}


@pytest.mark.parametrize("state, floor, verdict", [
    (_state(), None, "start"),  # nothing spent, nothing in flight
    (_state(flight=[0.0]), None, "wait"),  # no price seen yet: one call at a time
    (_state(flight=[0.0]), 0.1, "wait"),  # max_tokens x output price is not the input's cost: still one at a time
    (_state(spent=0.9, seen=0.9), None, "start"),  # room below the cap, nothing in flight
    (_state(spent=0.9, seen=0.9, flight=[0.9]), None, "wait"),  # 0.9 + 0.9 >= 1: wait for it to settle
    (_state(spent=0.2, seen=0.3, flight=[0.3, 0.3]), None, "start"),  # 0.2 + 0.6 < 1
    (_state(spent=0.2, seen=0.3, flight=[0.3, 0.3, 0.3]), None, "wait"),  # 0.2 + 0.9 >= 1
    (_state(spent=1.0, seen=0.9), None, "refuse"),  # the cap is reached
    (_state(spent=0.0, seen=0.9, stop="case x: no usage"), None, "refuse"),  # cannot be enforced
])
def test_when_a_call_may_start(state, floor, verdict):
    budget = Budget(1.0, floor=floor)
    got, why = budget._admit(state, "me")
    assert got == verdict
    assert ("me" in state["flight"]) == (verdict == "start")
    if verdict == "start":  # it reserves the highest cost seen (at least the floor)
        assert state["flight"]["me"]["amount"] == max(state["seen"] or 0.0, floor or 0.0)
    if verdict == "refuse":
        assert why and "--max-cost 1 USD" in why


def test_the_reservation_is_at_least_max_tokens_at_the_output_price():
    from pytest_groundeval.agents.claude import ClaudeAgent
    from pytest_groundeval.run.usage import call_floor

    assert call_floor(ClaudeAgent(model="claude-sonnet-4-5", max_tokens=4096)) == pytest.approx(4096 * 15 / 1e6)
    assert call_floor(ClaudeAgent(model="claude-unlisted", max_tokens=4096)) is None
    budget = Budget(1.0, floor=0.5)
    state = _state(spent=0.0, seen=0.01)
    assert budget._admit(state, "a")[0] == "start" and state["flight"]["a"]["amount"] == 0.5
    assert budget._admit(state, "b")[0] == "start"  # 0.5 < 1
    assert budget._admit(state, "c")[0] == "wait"  # 1.0 reserved: no room


def test_a_crashed_workers_reservation_does_not_hold_the_budget(tmp_path):
    import json
    import subprocess
    import sys

    from pytest_groundeval.run.spend import SpendFile

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    dead = int(gone.stdout)
    path = tmp_path / "spend.json"
    path.write_text(json.dumps(_state(spent=0.2, seen=0.3)
                               | {"flight": {f"{dead}-1": {"pid": dead, "amount": 0.3}}}))
    budget = Budget(1.0, share=SpendFile(path))
    ticket, why = budget.reserve()  # the dead worker's call is not in flight any more
    assert ticket is not None and why is None
    assert list(json.loads(path.read_text())["flight"]) == [ticket]
    budget.settle(ticket, 0.3)
    assert json.loads(path.read_text())["flight"] == {} and budget.spent == pytest.approx(0.5)


@pytest.mark.parametrize("count", [-1_000_000, 2.5, "300000", True, None], ids=["negative", "fractional",
                                                                                   "string", "bool", "none"])
def test_token_counts_must_be_non_negative_integers(count):
    """-1,000,000 input tokens would be $3 of credit against the cap; 2.5, "300000" and True are
    not counts. Each is dropped with a warning, its cost unknown, and the budget, which can no
    longer be enforced, starts no further call. (None is a missing count: unknown, as before.)"""
    budget = Budget(100.0)
    agent = FailsThenAnswers()
    agent.calls = 1  # it answers
    bad = {"input_tokens": count, "output_tokens": 10} if count is not None else {"output_tokens": 10}

    class Reporting(FailsThenAnswers):
        def run(self, prompt: str) -> AgentOutput:
            return AgentOutput(text='{"resourceType": "MedicationStatement"}', usage=bad)

    result = run_case(WRITE, _ref(), Reporting(), budget=budget)
    assert result.outcome in ("passed", "failed")  # the answer is still scored
    if count is None:  # a missing count is unknown: not priced, not a warning
        assert result.cost_usd is None and result.warnings == []
    else:
        assert result.usage is None and result.cost_usd is None
        (warning,) = result.warnings
        assert "not token counts" in warning and "no further call" in warning
    assert budget.spent == 0.0
    nxt = run_case(WRITE, _ref("aspirin-active-daily"), Reporting(), budget=budget)
    assert nxt.outcome == "error" and nxt.error.kind == "budget"
    assert "can no longer be enforced" in nxt.error.message and "ibuprofen-two-tablets" in nxt.error.message


def test_good_token_counts_are_counted():
    budget = Budget(100.0)
    result = run_case(WRITE, _ref(), FailsThenAnswers(), policy=CallPolicy(timeout=None, max_attempts=2,
                                                                           base_delay=0.0), budget=budget)
    assert result.usage.input_tokens == 301_000 and result.warnings == []
    assert budget.spent == pytest.approx(result.cost_usd)
    assert run_case(WRITE, _ref("aspirin-active-daily"), FailsThenAnswers(), budget=budget,
                    policy=CallPolicy(timeout=None, max_attempts=2, base_delay=0.0)).error is None


def test_a_budget_for_an_agent_that_cannot_be_priced_is_a_usage_error_at_start(pytester):
    _budget_project(pytester, 2)
    result = _run_budget(pytester, "--agent=priced:Nameless", "--max-cost", "0.01")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--agent=priced:Nameless*--max-cost 0.01*names no model*cannot be priced*"])
    assert not (pytester.path / "record.json").exists()
    # without a budget it runs (and says its cost is unknown: its tokens have no price)
    assert _run_budget(pytester, "--agent=priced:Nameless").ret == pytest.ExitCode.OK


def test_unreported_usage_is_cost_unknown_not_zero(pytester):
    import json

    _budget_project(pytester, 3)
    result = _run_budget(pytester, "--agent=priced:Silent")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["tokens: 0 in, 0 out; cost unknown: 3 cases without reported usage*"])
    result.stdout.no_fnmatch_line("*cost $0.0000*")
    rec = json.loads((pytester.path / "record.json").read_text())
    assert all(c["usage"] is None and c["cost_usd"] is None for c in rec["cases"])
    assert rec["usage"]["cases_unreported"] == 3 and rec["usage"]["cases_priced"] == 0
    # under a budget, the first answer without usage stops it: it can no longer be enforced
    result = _run_budget(pytester, "--agent=priced:Silent", "--max-cost", "5")
    rec = json.loads((pytester.path / "record.json").read_text())
    outcomes = [c["outcome"] for c in rec["cases"]]
    assert outcomes.count("passed") == 1 and outcomes.count("error") == 2
    assert all("reported no token usage" in c["error"]["message"] for c in rec["cases"] if c["outcome"] == "error")
    assert rec["budget"]["stopped"]


def test_the_baseline_still_costs_nothing(pytester):
    _budget_project(pytester, 2)
    result = _run_budget(pytester, "--agent=baseline", "--max-cost", "0.01")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["tokens: 0 in, 0 out; cost $0.0000"])


def test_bad_usage_on_the_answer_stops_the_budget_even_when_failed_attempts_were_priced():
    """A failed attempt's good usage is priced; the answer's usage is not counts. The case's
    cost is then only part of what it spent: the budget stops rather than trust it."""
    class Mixed(FailsThenAnswers):
        def run(self, prompt: str) -> AgentOutput:
            out = super().run(prompt)  # the first call raises with good usage
            return AgentOutput(text=out.text, usage={"input_tokens": -5, "output_tokens": 1})

    budget = Budget(100.0)
    policy = CallPolicy(timeout=None, max_attempts=2, base_delay=0.0)
    first = run_case(WRITE, _ref(), Mixed(), policy=policy, budget=budget)
    assert first.cost_usd is not None and first.warnings  # the failed attempt's part, priced
    nxt = run_case(WRITE, _ref("aspirin-active-daily"), Mixed(), policy=policy, budget=budget)
    assert nxt.error is not None and nxt.error.kind == "budget"
    assert "not token counts" in nxt.error.message and "ibuprofen-two-tablets" in nxt.error.message


def test_a_case_has_a_deadline_across_attempts_by_default(pytester):
    """One hung case costs at most the default --case-deadline (5 minutes), not 5 attempts of
    --agent-timeout (10 minutes); the help says so."""
    from pytest_groundeval.pytest.options import DEFAULT_AGENT_TIMEOUT, DEFAULT_CASE_DEADLINE
    from pytest_groundeval.pytest.settings import Settings
    from pytest_groundeval.pytest.plugin import _registry

    config = pytester.parseconfigure("-p", "no:cacheprovider")
    policy = Settings.from_config(config, _registry()).policy
    assert policy.case_deadline == DEFAULT_CASE_DEADLINE == 300
    assert policy.case_deadline < policy.max_attempts * DEFAULT_AGENT_TIMEOUT
    assert "default 300, 5 minutes" in " ".join(pytester.runpytest("--help").stdout.str().split())
