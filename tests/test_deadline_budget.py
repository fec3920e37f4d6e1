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
from pytest_groundeval.calls import AgentCallError, CallPolicy, CallTimeout, call_with_policy  # noqa: E402
from pytest_groundeval.model import AgentOutput  # noqa: E402
from pytest_groundeval.runner import run_case  # noqa: E402
from pytest_groundeval.usage import Budget, cost_usd  # noqa: E402

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

class Priced:
    """Answers right after 0.2 s; each call costs 100k input tokens of claude-sonnet-4-5 ($0.30)."""
    name = "priced"
    model = "claude-sonnet-4-5"
    def run(self, prompt):
        time.sleep(0.2)
        truth = active_medications(json.loads(prompt.split("Bundle:\\n", 1)[1]), "p")
        return {"text": json.dumps({"active_medications": truth}),
                "usage": {"input_tokens": 100_000, "output_tokens": 0}}
'''


@pytest.mark.parametrize("concurrency", [1, 4])
def test_the_budget_overshoots_by_at_most_the_calls_in_flight(pytester, concurrency):
    """--max-cost $1 with $0.30 calls: the budget is checked before each call starts, so the
    spend stops at the first call that reaches it plus the calls already in flight."""
    import json
    import shutil

    from conftest import EVAL_FILE, SYNTHEA

    pytester.makepyfile(test_evals=EVAL_FILE, priced=PRICED_AGENT)
    data = pytester.mkdir("data")
    for path in sorted(SYNTHEA.glob("*.json"))[:20]:
        shutil.copy(path, data / path.name)
    result = pytester.runpytest_subprocess("--data-dir", "data", "--agent=priced:Priced", "--max-cost", "1",
                                           "--concurrency", str(concurrency), "--run-record", "record.json",
                                           "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    rec = json.loads((pytester.path / "record.json").read_text())
    per_call = cost_usd("claude-sonnet-4-5", {"input_tokens": 100_000, "output_tokens": 0})
    called = [c for c in rec["cases"] if c["outcome"] == "passed"]
    spent = rec["budget"]["spent_usd"]
    assert spent == pytest.approx(per_call * len(called))
    assert 1.0 <= spent <= 1.0 + per_call * concurrency  # the call that reached it, plus those in flight
    assert rec["budget"]["stopped"] and rec["budget"]["cases_not_run"] == 20 - len(called)
    result.stdout.fnmatch_lines(["*max-cost*"])
