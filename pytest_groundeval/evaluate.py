"""Evaluating one case, as values: load → agent call → parse → score.

Pure of pytest. The plugin's items only *report* what this returns, and the agent call
(:func:`prepare_and_call`) is separate from scoring (:func:`finish`), so calls can run
ahead of the items, concurrently, while each item still scores and reports in order.
Every outcome is a value: ``passed`` / ``failed`` / ``error`` / ``skipped``, with a reason.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from .agents.base import AgentOutput, call_agent
from .calls import AgentCallError, CallPolicy, call_with_policy
from .datasets import CaseError, CaseRef
from .tasks.base import Case, ParseError, Task
from .usage import Budget, cost_usd


def new_entry(ref: CaseRef, outcome: str = "error") -> dict[str, Any]:
    return {
        "case_id": ref.case_id, "task": ref.task, "outcome": outcome, "content_hash": None,
        "ground_truth": None, "predicted": None, "raw_output": None, "score": None,
        "error": None, "duration_s": None, "usage": None,
    }


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


@dataclass
class Called:
    """What the (prefetchable) first half produced: the loaded case and the agent's output,
    or an entry that already says why the case cannot go on."""

    entry: dict[str, Any]
    case: Case | None = None
    output: AgentOutput | None = None
    started: float = field(default_factory=time.perf_counter)


def load_case(task: Task, ref: CaseRef, entry: dict[str, Any]) -> Case | None:
    try:
        case = task.load(ref)
    except CaseError as exc:
        entry.update(error=str(exc), error_kind="case")
        return None
    except Exception as exc:  # a bug in a task must not lose the case either
        entry.update(error=f"internal error: {_error_text(exc)}", error_kind="internal",
                     traceback=traceback.format_exc(limit=8))
        return None
    entry["content_hash"] = case.content_hash
    entry["ground_truth"] = case.truth
    return case


def prepare_and_call(task: Task, ref: CaseRef, agent: Any, policy: CallPolicy | None = None,
                     budget: Budget | None = None) -> Called:
    """Load the case and call the agent (with timeout/retries when a policy is given)."""
    called = Called(entry=new_entry(ref))
    entry = called.entry
    case = called.case = load_case(task, ref, entry)
    if case is None:
        return called
    if budget is not None and not budget.try_start():
        entry.update(outcome="skipped", error_kind="budget",
                     error=f"not run: --max-cost {budget.max_cost:g} USD reached (spent {budget.spent:.4f})")
        return called
    fn = lambda: call_agent(agent, task.name, case.prompt, case.inputs)  # noqa: E731
    try:
        if policy is None:
            called.output = fn()
        else:
            called.output, attempts = call_with_policy(fn, policy)
            entry["attempts"] = len(attempts)
            if len(attempts) > 1:
                entry["attempt_log"] = attempts
    except AgentCallError as exc:
        entry.update(error=f"agent {getattr(agent, 'name', agent)!r} failed after {len(exc.attempts)} "
                     f"attempt(s): {exc}", error_kind="agent", error_class=exc.error_class,
                     attempts=len(exc.attempts), attempt_log=exc.attempts)
    except Exception as exc:  # the agent (or its API) failed: an error, not a wrong answer
        entry.update(error=f"agent {getattr(agent, 'name', agent)!r} raised {_error_text(exc)}",
                     error_kind="agent", error_class=type(exc).__name__)
    if called.output is not None:
        out = called.output
        entry["raw_output"] = out.text
        entry["usage"] = out.usage
        model = out.model or getattr(agent, "model", None)
        entry["cost_usd"] = cost_usd(model, out.usage)
        if budget is not None:
            budget.add(entry["cost_usd"])
        if out.transcript is not None:
            entry["transcript"] = out.transcript
            entry["steps"] = out.steps
        if out.resource is not None:
            entry["structured_output"] = out.resource
    return called


def score_output(task: Task, case: Case, entry: dict[str, Any], text: str | None, structured: Any,
                 scorer: Any = None) -> dict[str, Any]:
    """Parse and score an agent output into ``entry`` (also used by --rescore)."""
    try:
        try:
            prediction = task.parse(text or "", structured)
        except ParseError as exc:
            # the model answered, but not in the required form: a failed case (scored 0),
            # kept apart from errors (the case or the API could not be run at all)
            entry.update(outcome="failed", error=f"parse error: {exc}", error_kind="parse",
                         predicted=None, score=None)
            return entry
        entry["predicted"] = prediction
        score = (scorer or task.score)(prediction, case)
        entry["score"] = score.to_dict()
        entry["outcome"] = "passed" if score.passed else "failed"
        entry["error"] = None
        entry.pop("error_kind", None)
    except CaseError as exc:  # e.g. a broken expected block discovered while scoring
        entry.update(outcome="error", error=str(exc), error_kind="case")
    except Exception as exc:
        entry.update(outcome="error", error=f"internal error: {_error_text(exc)}", error_kind="internal",
                     traceback=traceback.format_exc(limit=8))
    return entry


def finish(task: Task, called: Called, scorer: Any = None) -> dict[str, Any]:
    entry = called.entry
    if called.output is not None and called.case is not None:
        score_output(task, called.case, entry, called.output.text, called.output.resource, scorer)
    entry["duration_s"] = round(time.perf_counter() - called.started, 6)
    return entry


def evaluate_case(task: Task, ref: CaseRef, agent: Any, scorer: Any = None,
                  policy: CallPolicy | None = None, budget: Budget | None = None) -> dict[str, Any]:
    """Run one case end to end and return its record entry (JSON-ready)."""
    return finish(task, prepare_and_call(task, ref, agent, policy, budget), scorer)
