"""One case, as values: load → call → parse → score, producing a :class:`CaseResult`.

Pure of pytest. The call half (:func:`call_case`) is separate from the pure finish
(:func:`finish_case`), so calls can run ahead of the items, concurrently, while each item
still scores and reports in order. :func:`run_case` is both halves in one; :func:`reuse`
takes a case from a stored run (``--resume`` / ``--rescore``); :func:`not_run` records an
item pytest stopped before its case ran. These are the only producers of a CaseResult.
"""

from __future__ import annotations

import dataclasses
import time
import contextlib
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

from pydantic import ValidationError

from pytest_groundeval.run.bounds import MAX_DEPTH, MAX_STEP, MAX_STEPS, answer_was_cut, bound, bound_output, too_deep, usage_beyond
from pytest_groundeval.run.errortext import error_line
from pytest_groundeval.run.calls import AgentCallError, AgentCrash, CallPolicy, call_with_policy, is_timeout, repeat_of, spending_into
from pytest_groundeval.model import (
    AgentOutput,
    Case,
    CaseError,
    CaseRef,
    CaseResult,
    ErrorInfo,
    ParseError,
    ScoreRecord,
    Usage,
)
from pytest_groundeval.tasks.base import Task
from pytest_groundeval.run import fhircase
from pytest_groundeval.store import spent as spentlog
from pytest_groundeval.run.toolcalls import ToolLog, observe
from pytest_groundeval.run.usage import Budget, cost_usd, costs_nothing


def _text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


MAX_MESSAGE = 2000
MAX_TRACEBACK = 8000


def _short(text: str) -> str:
    """An error message for the record and the terminal, truncated when an agent's is huge."""
    return text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE] + f" ... [{len(text) - MAX_MESSAGE} more characters]"


def _agent_traceback(exc: BaseException) -> str:
    """The user agent's own traceback (the last frames), kept in the record; an agent in the
    agent host: the host's frames (agents/host.py)."""
    remote = getattr(exc, "remote_frames", None)
    frames = remote if isinstance(remote, str) else "".join(traceback.format_tb(exc.__traceback__, limit=-12))
    if len(frames) > MAX_TRACEBACK:
        frames = "...\n" + frames[-MAX_TRACEBACK:]
    return "Traceback (most recent call last):\n" + frames + _short(f"{type(exc).__name__}: {exc}")


def _internal(what: str, exc: BaseException) -> ErrorInfo:
    return ErrorInfo(kind="internal", message=f"internal error {what}: {_text(exc)}",
                     error_class=type(exc).__name__, traceback=traceback.format_exc(limit=8))


def agent_name(agent: Any) -> str:
    """How the record names an agent: its own ``name``, and its class where that says more."""
    name = getattr(agent, "name", None)
    cls = type(agent)
    path = getattr(agent, "agent_class", None) or f"{cls.__module__}:{cls.__qualname__}"  # (agents/host.py)
    if not isinstance(name, str) or not name:
        return path
    return name if path.startswith("pytest_groundeval.") else f"{name} ({path})"


class _NoTrace:
    """No tracing: nothing to enter."""

    __slots__ = ()

    def attempt(self) -> contextlib.nullcontext:
        return _NULL


_NULL = contextlib.nullcontext()
NO_TRACE = _NoTrace()


def _no_trace(case: Case) -> Any:
    return NO_TRACE


def _nothing(ref: CaseRef) -> None:
    return None


def _no_one(ref: CaseRef, tools: list[str]) -> None:
    return None


@dataclass(frozen=True)
class CallObservers:
    """What watches an agent call, handed in by the process that runs it (the pytest
    evaluator), never found through a global: ``trace(case)`` opens the case's root run
    (LangSmith's worker half, ``integrations/langsmith/worker.py``; enter ``.attempt()``
    around each attempt on the thread running it), ``agent_thread(ref)`` notes the thread
    that calls the agent (an xdist worker's crash ledger, ``pytest/ledger.py``), and
    ``tools_offered(ref, names)`` that the harness gave the agent tools (the same ledger: a case
    whose worker dies after it counts 0 in ``grounded``)."""

    trace: Callable[[Case], Any] = _no_trace
    agent_thread: Callable[[CaseRef], None] = _nothing
    tools_offered: Callable[[CaseRef, list[str]], None] = _no_one


UNOBSERVED = CallObservers()


def call_agent(agent: Any, task: Task, case: Case, observers: CallObservers = UNOBSERVED) -> AgentOutput:
    """Built-in agents implement ``run_case(task, prompt, inputs)`` (the task supplies their
    strategy, system prompt and tools); any other agent gets ``run(prompt)``. With
    ``--repeat``, the repeat is known to the model-call cache while the agent runs."""
    observers.agent_thread(case.ref)  # an xdist worker notes which thread calls the agent (ledger.py)
    with repeat_of(case.ref.repeat), fhircase.fhir_base_of(case.inputs.get("fhir_base_url")):
        if hasattr(agent, "run_case"):
            return AgentOutput.coerce(agent.run_case(task, case.prompt, case.inputs))
        return AgentOutput.coerce(agent.run(case.prompt))


@dataclass
class Called:
    """What the prefetchable half produced: the loaded case and the agent's answer, or the
    error that stops the case."""

    ref: CaseRef
    case: Case | None = None
    output: AgentOutput | None = None
    error: ErrorInfo | None = None
    fields: dict[str, Any] = field(default_factory=dict)
    started: float = field(default_factory=time.perf_counter)
    agent_s: float | None = None  # how long the agent itself took (all attempts; _agent_time)
    observed: ToolLog | None = None  # the harness's log of the answering attempt's tool calls
    failed_usage: list[dict[str, Any]] = field(default_factory=list)  # what failed attempts spent
    uncounted: str | None = None  # why the answer's spend could not be counted (usage dropped)


def load_case(task: Task, ref: CaseRef) -> tuple[Case | None, ErrorInfo | None]:
    problem = ref.meta.get("problem")
    if problem:  # found when the cases were listed (e.g. two cases share an id)
        return None, ErrorInfo(kind="case", message=problem)
    try:
        return task.load(ref), None
    except CaseError as exc:
        return None, ErrorInfo(kind="case", message=str(exc))
    except Exception as exc:  # a bug in a task must not lose the case either
        return None, _internal(f"loading {ref.task}:{ref.case_id}", exc)


def call_case(task: Task, ref: CaseRef, agent: Any, policy: CallPolicy | None = None,
              budget: Budget | None = None, observers: CallObservers = UNOBSERVED, *, server: Any = None) -> Called:
    """Load the case and call the agent (with timeout/retries when a policy is given).
    ``server``: the process's FHIR server (``fhir/server/manager.py``), for a task with
    ``fhir_server = True`` (the hook: ``run/fhircase.py``)."""
    called = Called(ref=ref)
    case, called.error = load_case(task, ref)
    if case is None:
        return called
    called.case = case
    called.fields.update(content_hash=case.content_hash, ground_truth=case.truth)
    opened = None
    if fhircase.uses_server(task):
        case, opened, called.error = fhircase.open_case(server, task, case)
        called.case = case
        if called.error is not None:
            return called
    ticket = None
    if budget is not None:  # room for this call reserved, or it does not start (usage.Budget)
        ticket, why = budget.reserve(ref.key)
        if ticket is None:
            called.error = ErrorInfo.never_run("budget", why)
            if opened is not None:  # its repository was made for nothing: dropped
                opened.server.close_case(opened.handle)
            return called
    try:
        output = _call_agent(called, task, case, agent, policy, observers)
        if output is not None:
            _take_output(called, output, agent, budget)
    finally:
        if budget is not None:
            budget.settle(ticket, called.fields.get("cost_usd"), _uncounted(called, agent, budget))
        if opened is not None:
            _close_fhir(called, opened, fhircase.log_is_evidence(task))
    return called


def _close_fhir(called: Called, opened: Any, log_is_evidence: bool = False) -> None:
    """The case's FHIR activity on the result and on the case; a server that died during the
    case makes it a ``server`` error. Request and response bodies within groundeval's bounds:
    a write's body cut to them, like a log the server cut, is partial evidence for a task scored
    from the log (``log_is_evidence``), so the case is a ``server`` error, not scored
    (``fhircase.partial``)."""
    called.case, activity, error = fhircase.close_case(opened, called.case)  # type: ignore[arg-type]
    cuts: list[str] = []
    for i, exchange in enumerate(activity.requests):
        for key in ("request", "response"):
            kept, found = bound(getattr(exchange, key), MAX_STEP, f"fhir.requests[{i}].{key}")
            if found:
                setattr(exchange, key, kept)
                cuts += found
    if cuts:
        called.fields["truncated"] = list(called.fields.get("truncated") or []) + cuts
    called.fields["fhir"] = activity
    why = fhircase.partial(called.case, activity, cuts) if error is None and log_is_evidence else None  # type: ignore[arg-type]
    if why is not None:
        error = ErrorInfo(kind="server", message=why)
    if error is not None:
        called.error = error


def _uncounted(called: Called, agent: Any, budget: Budget) -> str | None:
    """Why this call's spend could not be counted toward ``--max-cost`` (which then stops),
    or None. A failed call that reported nothing is taken to have spent nothing known."""
    if budget.max_cost is None:
        return None
    if called.uncounted is None and called.fields.get("cost_usd") is not None:
        return None
    label = agent_name(agent)
    if called.uncounted is not None:
        return called.uncounted
    if costs_nothing(label):
        return None
    usage = called.fields.get("usage")
    where = f"{called.ref.task}:{called.ref.item_id}"
    if usage is None:
        if called.output is None:
            return None
        return f"agent {label!r} reported no token usage for {where}, so its cost is unknown"
    model = called.fields.get("model") or getattr(agent, "model", None)
    return f"{where} used model {model!r}, which has no price in the price table, so its cost is unknown"


def _call_agent(called: Called, task: Task, case: Case, agent: Any, policy: CallPolicy | None,
                observers: CallObservers = UNOBSERVED) -> AgentOutput | None:
    """The agent's answer, or None with ``called.error`` set (kind agent or timeout). What
    failed attempts spent (``exc.usage`` on the exception, as the LangGraph agent sets it,
    and the usage an API error's body reports) is charged to the case and, through
    :func:`call_case`, to the budget all the same."""
    name = getattr(agent, "name", None) or type(agent).__name__
    spent: list[float] = []  # the agent's own time per attempt, measured where it runs
    logs: dict[int, tuple[AgentOutput, ToolLog]] = {}
    # what each attempt spent: the agent's running tally (calls.spending_into), or what its
    # exception says; an attempt the harness stopped waiting for is read as it stands then
    tallies: list[dict[str, Any]] = []
    attempt_logs: list[ToolLog] = []  # each attempt's observed log, in the order they started
    trace = observers.trace(case)  # LangSmith's root run of the case (langsmith/worker.py); a no-op without it

    def offered_to(names: list[str]) -> None:
        observers.tools_offered(case.ref, names)

    def attempt() -> AgentOutput:
        began = time.perf_counter()
        tally: dict[str, Any] = {}
        tallies.append(tally)
        number, key = len(tallies), called.ref.key
        # written beside the journal as it goes (store/spent.py): a kill mid-case loses no spend
        tally["on_spent"] = lambda usage: spentlog.spent(key, number, _valid_usage(usage))
        spentlog.sent(key, number)
        log: ToolLog | None = None
        try:
            # on the thread that calls: the agent's own runs nest under the case; the harness
            # records every call of the tools it hands the agent (toolcalls.py), per attempt,
            # and what the attempt spends (calls.spending_into)
            with trace.attempt(), observe(on_offer=offered_to) as log, spending_into(tally):
                attempt_logs.append(log)  # read as it stands when the harness stops waiting (a timeout)
                output = call_agent(agent, task, case, observers)
            logs[id(output)] = (output, log)  # the answering attempt's log, whichever thread ran it
            tally["answered"] = True
            spentlog.spent(key, number, _valid_usage(output.usage), done=True)
            return output
        except BaseException as exc:
            usage = _failed_usage(exc)
            if usage:
                tally["usage"] = usage
            spentlog.spent(key, number, _valid_usage(tally.get("usage")), done=True)
            raise
        finally:
            spent.append(_agent_time(tally, time.perf_counter() - began))

    def failed() -> list[dict[str, Any]]:  # (what an agent reported: counted only if it is token counts)
        return [u for t in list(tallies) if not t.get("answered") and (u := _valid_usage(t.get("usage")))]

    def logs_of_failed() -> list[ToolLog]:
        # (called when every attempt failed) each attempt's log, those the harness stopped
        # waiting for included (still running: what they had been given and refused so far);
        # kept here, not in the tally an agent can reach (calls.attempt_tally)
        return list(attempt_logs)

    def offered_before_failing() -> list[str] | None:
        return next((log.offered for log in reversed(logs_of_failed()) if log.offered), None)

    def refused_before_failing() -> list[dict[str, Any]] | None:
        return [r for log in logs_of_failed() for r in log.refused or []] or None

    try:
        _prepare(agent)
        if policy is None:
            output = attempt()
            attempts: list[dict[str, Any]] = [{"attempt": 1, "duration_s": round(spent[0], 6)}]
        else:
            output, attempts = call_with_policy(attempt, policy)
    except AgentCallError as exc:
        timed_out = is_timeout(exc.last)
        crashed = isinstance(exc.last, AgentCrash)  # the agent host died (agents/host.py)
        called.error = ErrorInfo(
            kind="crash" if crashed else "timeout" if timed_out else "agent", error_class=exc.error_class,
            message=_short(f"agent {name!r} failed after {len(exc.attempts)} attempt(s): {exc}"),
            traceback=None if timed_out else _agent_traceback(exc.last))
        called.fields.update(attempts=len(exc.attempts), attempt_log=exc.attempts, agent=agent_name(agent),
                             tools_offered=offered_before_failing(), refused_connections=refused_before_failing())
        _keep_partial(called, exc.last, logs_of_failed(), tallies, name)
        _charge(called, failed(), agent)
        return None
    except Exception as exc:  # the agent (or its API) failed: an error, not a wrong answer
        called.error = ErrorInfo(kind="crash" if isinstance(exc, AgentCrash) else "agent",
                                 message=_short(f"agent {name!r} raised {error_line(exc)}"),
                                 error_class=type(exc).__name__, traceback=_agent_traceback(exc))
        called.fields.update(attempts=1, agent=agent_name(agent), tools_offered=offered_before_failing(),
                             refused_connections=refused_before_failing())
        _keep_partial(called, exc, logs_of_failed(), tallies, name)
        _charge(called, failed(), agent)
        return None
    called.agent_s = sum(spent)
    called.observed = logs[id(output)][1] if id(output) in logs else None
    called.fields.update(attempts=len(attempts), attempt_log=attempts if len(attempts) > 1 else [])
    called.failed_usage = failed()
    return output


def _agent_time(tally: dict[str, Any], measured: float) -> float:
    """An attempt's time: the agent's own as its host measured it (``calls.report_agent_time``:
    without the round trip and the wait behind the host's other calls), else as measured here."""
    own = tally.get("agent_seconds")
    return own if isinstance(own, float) and 0.0 <= own <= measured else measured


def _keep_partial(called: Called, exc: BaseException, logs: list[ToolLog], tallies: list[dict[str, Any]],
                  name: str) -> None:
    """A case that got no answer keeps what its last attempt did before it failed or timed out,
    for inspection (an errored case is never scored): the harness's log of its tool calls
    (``transcript``), the agent's own account (``agent_reported``: the exception's
    ``transcript``, else what the agent reported as it went, ``calls.report_spent``) and its
    model calls (``steps``), within groundeval's bounds."""
    observed, cuts = _bounded_calls(logs[-1].transcript() if logs else None)
    reported = getattr(exc, "transcript", None)
    if not isinstance(reported, list) and tallies:
        reported = tallies[-1].get("transcript")
    steps = getattr(exc, "steps", None)
    if isinstance(reported, list):
        kept = bound_output(AgentOutput(text="", transcript=reported))
        reported = kept.output.transcript
        cuts = [("agent_reported" + c[len("transcript"):]) if c.startswith("transcript") else c
                for c in kept.listed] + cuts
        if not isinstance(steps, int):
            steps = sum(1 for step in reported or [] if isinstance(step, dict) and step.get("type") == "ai")
    if cuts:
        called.fields["truncated"] = list(called.fields.get("truncated") or []) + cuts
    called.fields.update(transcript=observed, steps=steps if isinstance(steps, int) else None,
                         agent_reported=_reported_steps(called, reported, name) if isinstance(reported, list) else None)


def _prepare(agent: Any) -> None:
    """An agent's ``prepare()`` (SDK imports, clients), before the attempt's clock starts: the
    timeout is the model's to use, and a timeout must not interrupt an import half-way
    (a module left half-initialised fails every later call)."""
    prepare = getattr(agent, "prepare", None)
    if callable(prepare):
        prepare()


def _valid_usage(raw: Any) -> dict[str, Any] | None:
    """Token counts from an agent, or None when they are not token counts."""
    if raw is None or usage_beyond(raw):
        return None
    try:
        return Usage.model_validate(raw).model_dump()
    except ValidationError:
        return None


def _failed_usage(exc: BaseException) -> dict[str, Any] | None:
    """What a failed attempt spent: ``exc.usage`` (the requests that answered before it
    failed), plus the usage an API error reports in its body (an SDK ``APIStatusError``'s
    ``body``, Anthropic or OpenAI naming), where the server sent one."""
    parts = [u for u in (_valid_usage(getattr(exc, "usage", None)), _body_usage(exc)) if u]
    return _sum_usage(parts) if parts else None


def _body_usage(exc: BaseException) -> dict[str, Any] | None:
    body = getattr(exc, "body", None)
    raw = body.get("usage") if isinstance(body, dict) else None
    if not isinstance(raw, dict):
        return None
    if "prompt_tokens" in raw or "completion_tokens" in raw:  # OpenAI's names
        raw = {"input_tokens": raw.get("prompt_tokens", 0), "output_tokens": raw.get("completion_tokens", 0)}
    return _valid_usage({k: raw[k] for k in ("input_tokens", "output_tokens") if k in raw})


def _sum_usage(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Token counts of several attempts added up (integer counters; the rest from the last)."""
    total: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            if isinstance(value, int) and not isinstance(value, bool) and isinstance(total.get(key, 0), int):
                total[key] = total.get(key, 0) + value
            else:
                total[key] = value
    return total


def _charge(called: Called, failed_usage: list[dict[str, Any]], agent: Any) -> None:
    """A case that got no answer still paid for its failed attempts: usage and cost (the
    budget is settled from them by :func:`call_case`)."""
    if not failed_usage:
        return
    usage = _sum_usage(failed_usage)
    model = getattr(agent, "model", None)
    cost = cost_usd(model, usage)
    called.fields.update(usage=Usage.model_validate(usage), cost_usd=cost)


def _take_output(called: Called, output: AgentOutput, agent: Any, budget: Budget | None) -> None:
    """The output within groundeval's bounds (``bounds.py``: an answer that had to be cut is
    an ``agent`` error, kept as cut), usage (typed: anything but token counts is dropped with
    a warning), cost, and the answer. Usage and cost cover every attempt, the failed ones included."""
    name = getattr(agent, "name", None) or type(agent).__name__
    kept = bound_output(output)
    output = kept.output
    # the agent's own transcript is stored as agent_reported: its cuts are named so; the
    # record's transcript is the harness's observed log, bounded here (a cut: not grounded)
    cuts = [("agent_reported" + c[len("transcript"):]) if c.startswith("transcript") else c for c in kept.listed]
    observed, observed_cuts = _bounded_calls(called.observed.transcript() if called.observed is not None else None)
    if cuts or observed_cuts:
        called.fields["truncated"] = cuts + observed_cuts
    if kept.answer_cut:
        called.error = ErrorInfo(kind="agent", message=_short(
            f"agent {name!r} answered beyond groundeval's output bounds ({'; '.join(kept.cuts[:3])}): not scored, "
            "since a cut answer could score better than the whole one; the record keeps what fits, marked truncated"))
    try:
        if kept.usage_problem:
            raise ValueError(kept.usage_problem)
        usage = Usage.model_validate(output.usage) if output.usage is not None else None
    except (ValidationError, ValueError) as exc:  # bookkeeping, not the answer: dropped, with a warning on the case
        uncounted = (" (its cost cannot be counted: --max-cost starts no further call)"
                     if budget is not None and budget.max_cost else "")
        why = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
        shown = repr(output.usage) if not kept.usage_problem else type(output.usage).__name__
        called.fields.setdefault("warnings", []).append(
            _short(f"usage dropped: agent {name!r} returned usage that is not token counts: {shown} ({why}){uncounted}"))
        usage = None
        output = dataclasses.replace(output, usage=None)
        called.uncounted = (f"agent {name!r} returned usage that is not token counts for "
                            f"{called.ref.task}:{called.ref.item_id}, so its cost is unknown")
    model = output.model or getattr(agent, "model", None)
    paid = output.usage
    if called.failed_usage:
        paid = _sum_usage([*called.failed_usage, *([usage.model_dump()] if usage is not None else [])])
        usage = Usage.model_validate(paid)
    cost = cost_usd(model, paid)
    called.output = output
    source = (output.extra or {}).get("answer_source")
    notes = (output.extra or {}).get("warnings")  # the agent's own (e.g. a model call stopped at max_tokens)
    if isinstance(notes, list) and notes:
        called.fields.setdefault("warnings", []).extend(_short(str(n)) for n in notes[:10])
    called.fields.update(raw_output=output.text, usage=usage, cost_usd=cost, agent=agent_name(agent),
                         model=model if isinstance(model, str) else None,
                         structured_output=output.structured, steps=output.steps, transcript=observed,
                         tools_offered=called.observed.offered if called.observed is not None else None,
                         refused_connections=called.observed.refused if called.observed is not None else None,
                         agent_reported=_reported_steps(called, output.transcript, name),
                         answer_source=source if isinstance(source, str) else None)


_STEPS: Any = None


def _reported_steps(called: Called, steps: Any, name: str) -> list[Any] | None:
    """The agent's own transcript as typed steps (model.ReportedStep); one that is not in that
    shape (an ``ai`` step whose tool calls are not a list, say) is dropped with a warning: it is
    shown, never evidence, so the case is scored all the same."""
    global _STEPS
    if steps is None:
        return None
    if _STEPS is None:
        from pydantic import TypeAdapter

        from pytest_groundeval.model import ReportedStep

        _STEPS = TypeAdapter(list[ReportedStep])
    try:
        return _STEPS.validate_python(steps)
    except ValidationError as exc:
        first = exc.errors()[0]
        called.fields.setdefault("warnings", []).append(_short(
            f"transcript dropped: agent {name!r} reported steps not in the transcript's shape "
            f"({'.'.join(map(str, first['loc']))}: {first['msg']})"))
        return None


def _bounded_calls(calls: list[dict[str, Any]] | None) -> tuple[list[dict[str, Any]] | None, list[str]]:
    """The observed calls within groundeval's bounds (bounds.py: at most MAX_STEPS calls, each
    call's args and result MAX_STEP characters), and what was cut (named ``transcript...``)."""
    if calls is None:
        return None, []
    kept, cuts = [], []
    for i, call in enumerate(calls):
        if i >= MAX_STEPS:
            cuts.append(f"transcript: {len(calls)} calls, kept {MAX_STEPS} (more than {MAX_STEPS} calls)")
            break
        call = dict(call)
        for key in ("args", "result"):
            call[key], found = bound(call.get(key), MAX_STEP, f"transcript[{i}].{key}")
            cuts += found
        kept.append(call)
    return kept, cuts


def _transcript_cut(truncated: list[str] | None) -> str | None:
    """The first cut of the observed log (the record's ``truncated``), if any."""
    return next((c for c in truncated or [] if c.startswith("transcript")), None)


def score_case(task: Task, case: Case, output: AgentOutput, scorer: Any = None, *,
               require_grounded: bool = False, observed: list[dict[str, Any]] | None = None,
               offered: list[str] | None = None, transcript_cut: str | None = None,
               refused: list[Any] | None = None) -> dict[str, Any]:
    """Parse and score an answer: the fields ``outcome``, ``predicted``, ``score`` / ``error``.
    The ``grounded`` dimension (grounding.py) is added beside the scorer's, judged from
    ``observed`` (the harness's log of the tool calls, toolcalls.py) for an agent the harness
    gave ``offered`` tools; ``output.transcript`` (the agent's own account) is never used."""
    try:
        try:
            prediction = task.parse(output)
        except ParseError as exc:
            # the model answered, but not in the required form: a scored failure, every metric 0
            score = task.unparsed(case, str(exc))
            _add_grounded(score, task, None, observed, offered, require_grounded, transcript_cut, case, refused,
                          unparsed=str(exc))
            return {"outcome": "failed", "predicted": None, "score": ScoreRecord.model_validate(score)}
        if too_deep(prediction):  # e.g. a JSON text answer nested past what a record can hold
            return {"outcome": "error", "error": ErrorInfo(kind="agent", message=(
                f"the answer is nested deeper than {MAX_DEPTH} levels (groundeval's output bounds): not scored"))}
        score = (scorer or task.score)(prediction, case)
        _add_grounded(score, task, prediction, observed, offered, require_grounded, transcript_cut, case, refused)
        record = ScoreRecord.model_validate(score)  # a Score is one (a scorer of its own may return its dict)
        return {"outcome": "passed" if record.passed else "failed", "predicted": prediction, "score": record}
    except CaseError as exc:  # e.g. a broken expected block discovered while scoring
        return {"outcome": "error", "error": ErrorInfo(kind="case", message=str(exc))}
    except Exception as exc:
        return {"outcome": "error", "error": _internal(f"scoring {case.ref.task}:{case.case_id}", exc)}


def _add_grounded(score: Any, task: Task, prediction: Any, observed: list[dict[str, Any]] | None,
                  offered: list[str] | None, required: bool, transcript_cut: str | None = None,
                  case: Case | None = None, refused: list[Any] | None = None, unparsed: str | None = None) -> None:
    """A tool-using agent's case: the ``grounded`` dimension and metric (a fail changes the
    pass only when ``required``); an agent given no harness tools: ``details.grounded`` says
    not applicable, and under ``--require-grounded`` the case fails saying why."""
    from pytest_groundeval.scorers.grounding import NAME, grounded, no_tools

    values = task.grounding_values(prediction) if prediction is not None else {}
    found = grounded(observed, values, offered=offered, refused=refused, must_validate=getattr(task, "validate_tool", None),
                     answer_tool=getattr(task, "answer_tool", None), truncated=transcript_cut,
                     matchers=getattr(task, "grounding_matchers", None),
                     writers=getattr(task, "grounding_writers", ()), record_readers=getattr(task, "grounding_readers", ()),
                     task_checks=(lambda steps: task.grounding_checks(prediction, case, steps))
                     if prediction is not None and case is not None else None,
                     unparsed=unparsed, inputs=case.inputs if case is not None else None)
    if not found.applicable:
        if observed is None and not offers_tools(task):  # no tools at all
            found.reason = no_tools(task.name)
        score.details[NAME] = found.reason
        if required and score.passed:
            score.passed = False
            score.reason = f"not grounded (--require-grounded): {found.reason}"
        return
    score.dimensions[NAME] = found.dimension()
    score.metrics[NAME] = 1.0 if found.passed else 0.0
    if found.ungrounded:
        score.details["ungrounded"] = found.ungrounded
    if required and not found.passed and score.passed:
        score.passed = False
        score.reason = f"ungrounded (--require-grounded): {found.reason}"


# fields whose default is None: a None given for one is left out (the same value, the same
# record), so a kept result's set of given fields stays small (pydantic keeps one per result)
_NONE_BY_DEFAULT = frozenset(name for name, f in CaseResult.model_fields.items()
                             if not f.is_required() and f.default is None)


def _result(ref: CaseRef, fields: dict[str, Any], duration: float | None) -> CaseResult:
    fields = {k: v for k, v in fields.items() if v is not None or k not in _NONE_BY_DEFAULT}
    try:
        return CaseResult(case_id=ref.case_id, task=ref.task, repeat=ref.repeat, duration_s=duration, **fields)
    except ValidationError as exc:  # e.g. a scorer's metric that is not a number
        kept = {k: fields.get(k) for k in ("content_hash", "ground_truth", "raw_output", "usage", "cost_usd")}
        return CaseResult(case_id=ref.case_id, task=ref.task, repeat=ref.repeat, outcome="error", duration_s=duration,
                          error=_internal(f"recording {ref.task}:{ref.case_id}", exc), **kept)


def finish_case(task: Task, called: Called, scorer: Any = None, *, require_grounded: bool = False) -> CaseResult:
    fields = dict(called.fields)
    if called.error is not None:
        fields.update(outcome="error", error=called.error)
        if called.case is not None:  # its truth was read: the rates over applicable cases it counts 0 in
            # (and grounded, for a tool-using agent that failed after the harness gave it tools)
            fields["applicable"] = zero_rates(task.applicable_rates(called.case), bool(fields.get("tools_offered")))
    else:
        observed = fields.get("transcript")
        fields.update(score_case(task, called.case, called.output, scorer,  # type: ignore[arg-type]
                                 require_grounded=require_grounded, observed=observed,
                                 offered=fields.get("tools_offered"), refused=fields.get("refused_connections"),
                                 transcript_cut=_transcript_cut(fields.get("truncated"))))
    return _result(called.ref, fields, round(time.perf_counter() - called.started, 6))


def run_case(task: Task, ref: CaseRef, agent: Any, scorer: Any = None, policy: CallPolicy | None = None,
             budget: Budget | None = None, *, require_grounded: bool = False, server: Any = None) -> CaseResult:
    """Run one case end to end."""
    return finish_case(task, call_case(task, ref, agent, policy, budget, server=server), scorer,
                       require_grounded=require_grounded)


def not_run(ref: CaseRef, *, skip_reason: str | None = None, error: ErrorInfo | None = None,
            task: Task | None = None, tool_using: bool | None = None,
            tools_offered: list[str] | None = None) -> CaseResult:
    """An item pytest skipped, or whose test failed before or without running the case (its
    worker crashed, pytest-timeout killed it). ``task``: the case is read again for the rates
    over applicable cases it counts 0 in (``CaseResult.applicable``: a crash cannot take a case
    out of their denominators). ``tool_using`` (the run's agent kind takes the harness's tools:
    ``AgentSpec.tool_using``) or ``tools_offered`` (the dead worker's ledger saw the tools given):
    on a task that offers tools the case counts 0 in ``grounded`` too, so an agent cannot leave
    the rate by crashing (or hanging) on the cases it would fail."""
    if skip_reason is not None:
        return CaseResult(case_id=ref.case_id, task=ref.task, repeat=ref.repeat, outcome="skipped",
                          skip_reason=skip_reason)
    rates = zero_rates(applicable_of(task, ref) if task is not None else None,
                       bool(tools_offered) or bool(tool_using and task is not None and offers_tools(task)))
    return CaseResult(case_id=ref.case_id, task=ref.task, repeat=ref.repeat, outcome="error", error=error,
                      applicable=rates, tools_offered=tools_offered or None)


def zero_rates(rates: list[str] | None, tool_use: bool) -> list[str] | None:
    """What an errored case counts 0 in (``CaseResult.applicable``): the task's rates over the
    applicable cases it is one of, and ``grounded`` when its agent took (or, by its kind, takes)
    the harness's tools. None: nothing."""
    out = list(rates or [])
    if tool_use:
        from pytest_groundeval.scorers.grounding import NAME as GROUNDED

        out.append(GROUNDED)
    return out or None


def offers_tools(task: Task) -> bool:
    """The task gives a tool-using agent tools (it defines ``agent_tools``)."""
    return getattr(type(task), "agent_tools", Task.agent_tools) is not Task.agent_tools


def applicable_of(task: Task, ref: CaseRef) -> list[str] | None:
    """The rates over applicable cases an errored case counts 0 in, from its truth (None: the
    task has none, or the case cannot be read)."""
    if not any(s.among == "applicable" for s in task.specs):
        return None  # nothing to read the case for
    case, _ = load_case(task, ref)
    try:
        return task.applicable_rates(case) if case is not None else None
    except Exception:  # noqa: BLE001 - the error being recorded matters more
        return None


def reuse(task: Task, ref: CaseRef, old: CaseResult | None, run_id: str | None, *, rescore: bool,
          scorer: Any = None, source: str = "the stored run", require_grounded: bool = False) -> CaseResult | None:
    """``--resume``: the stored result when that run finished the case with the same content
    (None: run it). ``--rescore``: the stored answer parsed and scored again, no agent call."""
    from pytest_groundeval.store.resume import stands

    started = time.perf_counter()
    case, error = load_case(task, ref)
    if not rescore:
        if not stands(old, case.content_hash if case is not None else None):
            return None
        return old.model_copy(update={"resumed_from": run_id})  # type: ignore[union-attr]
    if old is None:
        error = ErrorInfo(kind="case", message=f"not in {source}: nothing to re-score")
    elif case is not None and old.content_hash != case.content_hash:
        error = ErrorInfo(kind="case", message=(f"case content changed since run {run_id} (content hash "
                                                "differs); re-run it instead of re-scoring"))
    if error is not None or case is None:
        return CaseResult(case_id=ref.case_id, task=ref.task, repeat=ref.repeat, outcome="error", error=error,
                          content_hash=case.content_hash if case else None, rescored_from=run_id)
    return rescored(task, case, old, run_id, scorer=scorer, require_grounded=require_grounded, started=started)


def rescored(task: Task, case: Case, old: CaseResult, run_id: str | None, *, scorer: Any = None,
             require_grounded: bool = False, started: float | None = None) -> CaseResult:
    """The stored result ``old`` of the loaded ``case`` (same content) scored again from its
    stored answer and FHIR activity, no agent call (``--rescore``; ``store/verify.py``)."""
    started = time.perf_counter() if started is None else started
    ref = case.ref
    if (old.raw_output is None and old.structured_output is None) or answer_was_cut(old) or (
            old.error is not None and old.error.kind == "server"):
        # the stored case never got an answer (API error, budget), or only a cut one, or its FHIR
        # server's evidence was lost or cut (it died, the log's bound): keep it as it was
        return old.model_copy(update={"rescored_from": run_id})
    output = AgentOutput(text=old.raw_output or "", structured=old.structured_output, transcript=old.agent_reported)
    fields = old.model_dump(exclude={"case_id", "task", "repeat", "outcome", "predicted", "score", "error",
                                     "duration_s"})
    fields.update(ground_truth=case.truth, rescored_from=run_id)
    if fhircase.uses_server(task):  # the stored FHIR activity on the case, for the scorer (no server)
        case = fhircase.rescored_case(case, old.fhir)
        why = fhircase.partial(case, old.fhir, old.truncated) if fhircase.log_is_evidence(task) else None
        if why is not None:  # a cut log is no evidence to score on, now as then
            fields.update(outcome="error", applicable=zero_rates(task.applicable_rates(case), bool(fields.get("tools_offered"))),
                          error=ErrorInfo(kind="server", message=why))
            return _result(ref, fields, round(time.perf_counter() - started, 6))
    observed = [c.model_dump() for c in old.transcript] if old.transcript is not None else None
    fields.update(score_case(task, case, output, scorer, require_grounded=require_grounded,
                             observed=observed, offered=old.tools_offered, refused=old.refused_connections,
                             transcript_cut=_transcript_cut(old.truncated)))
    return _result(ref, fields, round(time.perf_counter() - started, 6))
