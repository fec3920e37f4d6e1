"""The typed values of a run: what a case is, what an agent answered, what one case
produced (:class:`CaseResult`), and the run record (:class:`RunRecord`).

Pure of pytest and FHIR. ``record.schema.json`` is generated from :class:`RunRecord`
(``python -m pytest_groundeval.model > pytest_groundeval/record.schema.json``); a test fails
when the committed file and the generated one differ.

Outcomes and error kinds each have one meaning, everywhere:

* outcome ``passed`` / ``failed``: the case was scored (a ``score`` is present). An answer
  that cannot be parsed is a scored ``failed`` (every metric 0, the reason in the score).
* outcome ``error``: the case could not be scored; ``error.kind`` says why:
  ``case`` (the case file is unusable), ``agent`` (the agent or its API failed after
  retries), ``timeout`` (the agent did not answer within ``--agent-timeout``, after
  retries), ``budget`` (not run: ``--max-cost`` was reached), ``crash`` (the pytest-xdist
  worker running it died in this case's own call, test or scoring: segfault, ``os._exit``),
  ``interrupted`` (not run to the end through no fault of its own: another case's call crashed
  the xdist worker it was in flight on), ``internal`` (a groundeval bug; ``error.traceback``
  is set).
* outcome ``skipped``: pytest skipped the item (``skip_reason``); not in any denominator.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Iterable, Literal, Mapping, Union

from pydantic import (BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationInfo, WithJsonSchema,
                      model_serializer, model_validator)

SCHEMA_VERSION = "2.0"
#: the validation context of a record, journal or shard read back from a file (``store/files.py``):
#: what was written before a field existed is read in its own words (``ErrorInfo.not_run``)
STORED: dict[str, Any] = {"stored": True}
NOT_RUN = "not run"  # how the message of a case not run begins, for people (``ErrorInfo.not_run`` for programs)

Outcome = Literal["passed", "failed", "error", "skipped"]
ErrorKind = Literal["case", "agent", "timeout", "budget", "crash", "interrupted", "internal", "server"]
#: kinds a --resume runs again (the infrastructure may do better next time)
RETRYABLE_KINDS = frozenset({"agent", "timeout", "budget", "crash", "interrupted", "server"})


class CaseError(Exception):
    """The case file is unusable (unreadable, malformed, unresolvable reference).

    Raised by a task while loading or scoring a case; recorded as outcome ``error`` with
    kind ``case`` and this message, which names the file and what to fix."""


class ParseError(Exception):
    """The agent's output could not be read as an answer: a scored failure, not an error."""


# ---------------------------------------------------------------- cases and answers
@dataclass(frozen=True)
class CaseRef:
    """A lazy pointer to one case: cheap to create, holds no file content.

    ``index`` selects one case inside a multi-case file. ``case_id`` is the case's id in the
    run (its record, shards, resume, compare): a case of a suite other than the task's bundled
    one is namespaced by its suite, ``<suite>/<id in the cases source>`` (``pytest/items.py``);
    ``suite`` names the suite whose test function made the item."""

    task: str
    case_id: str
    path: Path
    index: int | None = None
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    repeat: int | None = None  # with --repeat N: which run of the case (1..N)
    suite: str | None = field(default=None, compare=False, hash=False)

    @property
    def source_id(self) -> str:
        """The case's id in its cases source: ``case_id`` without its suite's namespace."""
        prefix = f"{self.suite}/" if self.suite else None
        return self.case_id[len(prefix):] if prefix and self.case_id.startswith(prefix) else self.case_id

    @property
    def key(self) -> tuple:
        """One item's identity: the case, and with ``--repeat`` which repeat of it."""
        return (self.task, self.case_id) if self.repeat is None else (self.task, self.case_id, self.repeat)

    @property
    def item_id(self) -> str:
        """The pytest id of its item: the case's id in its source (the node id names the suite's
        file), and ``[rK]`` for repeat K."""
        return self.source_id if self.repeat is None else f"{self.source_id}[r{self.repeat}]"

    def __repr__(self) -> str:  # shows up in pytest -v / --collect-only output
        return f"CaseRef({self.task}:{self.item_id})"


def in_suite(ref: CaseRef, suite: str, bundled: bool = False) -> CaseRef:
    """``ref`` (as its cases source lists it) as a case of the suite ``suite``: a bundled
    suite's case keeps its id, any other suite's is ``<suite>/<id>`` (``pytest/items.py``)."""
    return replace(ref, suite=suite, case_id=ref.case_id if bundled else f"{suite}/{ref.case_id}")


def source_ref(refs: Mapping[str, CaseRef], case_id: str) -> CaseRef | None:
    """The case a record's ``case_id`` names among a source's refs (by their ids there): the id
    itself (a bundled suite's case, or a record written before ids were namespaced), else
    ``<suite>/<id>`` as that suite's case."""
    ref = refs.get(case_id)
    if ref is None and "/" in case_id:
        suite, _, own = case_id.partition("/")
        found = refs.get(own)
        ref = in_suite(found, suite) if found is not None else None
    return ref


@dataclass
class Case:
    """A loaded case. ``inputs`` is everything the agent may see (never the truth)."""

    ref: CaseRef
    prompt: str
    inputs: dict[str, Any]
    truth: Any
    content_hash: str

    @property
    def case_id(self) -> str:
        return self.ref.case_id


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Usage(_Model):
    """Tokens of one case (all model calls summed). Agents may add integer counters.

    Anthropic's convention: ``input_tokens`` excludes prompt-cache tokens, which are counted
    apart (``cache_creation_input_tokens`` written, of which ``cache_creation_1h_input_tokens``
    with the 1-hour TTL; ``cache_read_input_tokens`` read) and priced at their own rates."""

    model_config = ConfigDict(extra="allow")

    # counts are non-negative integers, strictly: not -1000 ("credit" against --max-cost),
    # not 2.5, not True, not "300" (an agent answering in an odd encoding)
    input_tokens: int | None = Field(default=None, ge=0, strict=True)
    output_tokens: int | None = Field(default=None, ge=0, strict=True)
    cache_creation_input_tokens: int | None = Field(default=None, ge=0, strict=True)
    cache_creation_1h_input_tokens: int | None = Field(default=None, ge=0, strict=True)
    cache_read_input_tokens: int | None = Field(default=None, ge=0, strict=True)
    model_calls: int | None = Field(default=None, ge=0, strict=True)
    cache_hits: int | None = Field(default=None, ge=0, strict=True)
    cached_usage: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _counts_are_counts(self) -> "Usage":
        for key, value in (self.model_extra or {}).items():  # an agent's own counters
            if isinstance(value, (bool, int, float)) and (type(value) is not int or value < 0):
                raise ValueError(f"{key} must be a non-negative integer count, not {value!r}")
        return self

    @model_serializer(mode="wrap")
    def _known_counts_only(self, handler: Any) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items() if v is not None}


class _Step(BaseModel):
    """A step of the transcript an agent reports about itself. Written back as it was given:
    only the keys it had (a step cut by ``bounds.py`` keeps its ``groundeval_truncated`` key)."""

    model_config = ConfigDict(extra="allow")

    @model_serializer(mode="wrap")
    def _as_given(self, handler: Any) -> dict[str, Any]:
        data = handler(self)
        given = self.model_fields_set | set(self.model_extra or {})
        return {k: v for k, v in data.items() if k in given}


class ReportedToolCall(_Step):
    """A tool call a model asked for, as the agent reports it (``invalid_tool_calls``: with the
    ``error`` that made it invalid). A cut list ends with a marker string instead."""

    name: str | None = None
    args: Any = None
    id: str | None = None
    error: str | None = None


class AgentMessageStep(_Step):
    """``type: ai``: one message of the model (its text, the tool calls it asked for, its usage)."""

    type: Literal["ai"]
    content: Any = None  # the message's text (an agent of its own may report its content blocks)
    tool_calls: list[ReportedToolCall | str] = Field(default_factory=list)
    invalid_tool_calls: list[ReportedToolCall | str] | None = None
    usage: dict[str, Any] | None = None


class ToolResultStep(_Step):
    """``type: tool``: what a tool returned to the model (``status``: set when not success)."""

    type: Literal["tool"]
    tool: str | None = None
    tool_call_id: str | None = None
    result: Any = None
    status: str | None = None


def _step_kind(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return kind if kind in ("ai", "tool") else "other"


#: a step of an agent's own transcript: a model message, a tool result, or (an agent with its
#: own format) anything else, kept as given
_OTHER_STEP = {"description": "any other step (an agent's own format; bounds.py's step of type groundeval), "
               "kept as given", "not": {"type": "object", "required": ["type"],
                                        "properties": {"type": {"enum": ["ai", "tool"]}}}}
ReportedStep = Annotated[
    Union[Annotated[AgentMessageStep, Tag("ai")], Annotated[ToolResultStep, Tag("tool")],
          Annotated[Any, WithJsonSchema(_OTHER_STEP), Tag("other")]],
    Discriminator(_step_kind),
]


@dataclass
class AgentOutput:
    """What an agent returned for one case.

    ``structured`` is an answer the agent already holds as data (e.g. the resource its
    tools built); the task decides whether and how to use it when parsing. ``extra``: the
    agent's notes; ``answer_source`` (which answer rule applied) is kept in the case's
    result, the rest (counts the transcript already shows, the agent's settings) is not."""

    text: str
    usage: dict[str, Any] | None = None
    structured: Any = None
    transcript: list[dict[str, Any]] | None = None
    steps: int | None = None
    model: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def coerce(cls, value: Any) -> "AgentOutput":
        if isinstance(value, AgentOutput):
            return value
        if isinstance(value, str):
            return cls(text=value)
        if isinstance(value, dict) and isinstance(value.get("text"), str):
            known = {k: value.get(k) for k in ("usage", "structured", "transcript", "steps", "model")}
            return cls(text=value["text"], **known)
        if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
            return cls(text=value[0], usage=value[1])
        raise TypeError(
            f"agent returned {type(value).__name__}; run(prompt) must return a str, "
            "an AgentOutput, a dict with a 'text' key, or a (text, usage) tuple"
        )


# ---------------------------------------------------------------- one case's result
class CheckRecord(_Model):
    """One sub-check of a dimension: a verdict and a human-readable reason
    (``Check(name, passed, reason)``, positionally too)."""

    name: str
    passed: bool
    reason: str = ""

    def __init__(self, name: str, passed: bool, reason: str = "", **data: Any) -> None:
        super().__init__(name=name, passed=passed, reason=reason, **data)


class DimensionRecord(_Model):
    """An independent pass/fail dimension (write: schema, coding, constraints, safety;
    ``grounded``), named by its key in the score."""

    passed: bool
    reason: str
    checks: list[CheckRecord] = Field(default_factory=list)

    @classmethod
    def from_checks(cls, name: str, checks: list[CheckRecord]) -> "DimensionRecord":
        """Passed when every check passed; the reason lists the failed checks (``ok``: none).
        ``name``: the key the score will hold it under (said here for the reader of a scorer)."""
        failed = [f"{c.name}: {c.reason}" for c in checks if not c.passed]
        return cls(passed=not failed, reason="; ".join(failed) if failed else "ok", checks=checks)


JudgeVerdict = Literal["met", "not_met"]


class JudgeCall(_Model):
    """One judge's answer to one judged rubric item (``judges/``): its verdict and rationale,
    or, when it gave none, why (``error``: the call failed after retries, the reply was not
    the asked-for JSON, the budget was reached, a strict cache miss). No verdict is never a
    ``not_met``, nor is the judge left out: it still counts in the seated jury, so an item's
    verdict needs more than half of all seated judges (``judges.jury.majority``)."""

    judge: str  # the judge's label (its model, and its place among the run's judges)
    verdict: JudgeVerdict | None = None
    rationale: str | None = None
    error: str | None = None
    cached: bool = False  # answered from the model-call cache (costs nothing)


class JudgedItem(_Model):
    """A judged rubric item of one case (HealthBench style: a yes/no question with points,
    negative for harmful content): every judge's call, the majority verdict, or why none
    (``unscored``: no judge, a tie, no judge answered). An unscored item is never a fail: it
    leaves the judge score's numerator and denominator."""

    id: str
    question: str
    points: float
    verdict: JudgeVerdict | None = None
    unscored: str | None = None
    calls: list[JudgeCall] = Field(default_factory=list)


class JuryRecord(_Model):
    """The jury's work on one case: the judges (labels, in order), each judged item, the
    score (met positive points minus met negative points over all scored positive points,
    clipped to 0..1; None when no positive item was scored), and the judges' own spend,
    apart from the agent's."""

    judges: list[str] = Field(default_factory=list)
    items: list[JudgedItem] = Field(default_factory=list)
    score: float | None = None
    calls: int = 0
    cache_hits: int = 0
    usage: Usage | None = None
    cost_usd: float | None = None


class ScoreRecord(_Model):
    """A scorer's verdict on one case (the one score type: scorers build it, the record holds
    it): per-case metrics (what aggregates are built from), independent pass/fail dimensions
    with a reason per check, details, and the reason."""

    passed: bool
    metrics: dict[str, float] = Field(default_factory=dict)
    dimensions: dict[str, DimensionRecord] = Field(default_factory=dict)
    details: dict[str, Any] = Field(default_factory=dict)
    reason: str = ""
    # tasks with judged rubric items (letter): the jury's verdicts (absent from other tasks' scores)
    jury: JuryRecord | None = Field(default=None, exclude_if=lambda v: v is None)


class ErrorInfo(_Model):
    """Why a case was not scored. ``not_run``: the harness never ran the case to its answer
    (``--max-cost`` had no room for it, the stop after identical agent errors, a missing
    prerequisite such as the FHIR server, another case's crash): pytest's skip, still an error of
    the run. Its message begins "not run" for people; this field is the fact, whatever wraps
    the message."""

    kind: ErrorKind
    message: str
    error_class: str | None = None
    traceback: str | None = None  # internal errors: groundeval's; agent errors: the agent's own
    not_run: bool = False

    @classmethod
    def never_run(cls, kind: ErrorKind, why: str) -> "ErrorInfo":
        """The error of a case the harness did not run, and why (``not run: <why>``)."""
        return cls(kind=kind, message=f"{NOT_RUN}: {why}", not_run=True)

    @model_validator(mode="before")
    @classmethod
    def _not_run_in_words(cls, data: Any, info: ValidationInfo) -> Any:
        """A stored error written before ``not_run`` existed said it by its message alone: one
        whose message begins "not run" is read as not run (only when read back from a file,
        :data:`STORED`; an error made in this version says it itself)."""
        if (isinstance(data, dict) and "not_run" not in data and info.context is not None
                and info.context.get("stored") and str(data.get("message", "")).startswith(NOT_RUN)):
            data = {**data, "not_run": True}
        return data


class Attempt(_Model):
    attempt: int
    error_class: str | None = None
    error: str | None = None
    transient: bool | None = None
    status: int | None = None
    duration_s: float
    retry_in_s: float | None = None


class ToolCall(_Model):
    """One call of a harness tool as the harness observed it (toolcalls.py): the evidence
    ``grounded`` is judged from. ``status``: ``ok``; ``error`` (an error value: LangChain's
    ``ToolMessage.status`` "error", or the tool's ``{"error": ...}`` / ``"ok": false``);
    ``raised``; ``unfinished`` (no result when the attempt ended). ``started`` / ``ended``:
    ticks of the case's log clock; ``step``: the agent framework's step (LangGraph superstep)."""

    seq: int
    tool: str
    args: Any = None
    result: Any = None
    status: Literal["ok", "error", "raised", "unfinished"]
    step: int | None = None
    started: int
    ended: int | None = None


class RefusedConnection(_Model):
    """A connection to a case's MCP socket the harness refused unanswered
    (``integrations/mcp/host.py``): from a process that is not the case's agent command nor one
    it started (another case's command under ``--concurrency``, a server detached from its
    client), or without the case's token. Nothing it asked ran; a case whose tools were reached
    only so is not grounded. ``pid``: the connecting process (None: unknown); ``command``: its
    command line as ``/proc`` gave it when it connected (bounded)."""

    pid: int | None = None
    command: str | None = None
    reason: str


class FhirExchange(_Model):
    """One request an agent made to its case's FHIR server, with the server's response
    (``fhir/server``: the server logs every request; this is that log, per case)."""

    seq: int = Field(ge=1)  # order of arrival on the case's server
    method: str  # GET, POST, PUT, PATCH, DELETE
    path: str  # relative to the case's FHIR base, e.g. "ServiceRequest?patient=Patient/abc"
    status: int  # the HTTP status the server answered
    request: Any = None  # the request body (JSON), when there was one
    response: Any = None  # the response body (JSON), bounded like any output (bounds.py)
    refused: str | None = None  # why the harness's checks refused it before the store saw it (write cap, binding)


class FhirChange(_Model):
    """One resource the case's server holds differently after the agent than before."""

    kind: Literal["created", "updated", "deleted"]
    resource_type: str
    id: str
    before: dict[str, Any] | None = None  # None: created
    after: dict[str, Any] | None = None  # None: deleted


class FhirActivity(_Model):
    """What an agent did on its case's FHIR server (a task with ``fhir_server = True``): every request
    and response, and the state diff (what was created, changed or deleted, server metadata
    such as ``meta.versionId``/``lastUpdated`` left out). Scorers of server-state tasks read
    this, so a ``--rescore`` needs nothing but the record."""

    base_url: str  # the case's FHIR base the agent was given (its port differs run to run)
    requests: list[FhirExchange] = Field(default_factory=list)
    changes: list[FhirChange] = Field(default_factory=list)
    requests_cut: int = Field(default=0, ge=0)  # requests beyond the log's bound (counted, not kept)


class CaseResult(_Model):
    """Everything one case produced. The only producers are ``runner.run_case`` and
    ``runner.reuse`` (and ``runner.not_run`` for items pytest stopped before the case)."""

    case_id: str
    task: str
    outcome: Outcome
    content_hash: str | None = None
    ground_truth: Any = None
    predicted: Any = None
    raw_output: str | None = None
    structured_output: Any = None
    score: ScoreRecord | None = None
    error: ErrorInfo | None = None
    # an errored case whose truth was read: the rates over the applicable cases (``among:
    # applicable``) its score would have carried (``Task.applicable_rates``); it counts 0 in
    # each, as it does in every rate over all cases (``applicable_value``)
    applicable: list[str] | None = None
    skip_reason: str | None = None
    duration_s: float | None = None
    usage: Usage | None = None
    cost_usd: float | None = None
    agent: str | None = None  # the agent that answered, as it names itself
    model: str | None = None  # the model it reports using
    attempts: int = 0
    attempt_log: list[Attempt] = Field(default_factory=list)
    # what the harness observed (toolcalls.py): every call of the tools it gave the agent, in
    # order; None when it gave the agent no tools ([]: tools given, none called)
    transcript: list[ToolCall] | None = None
    tools_offered: list[str] | None = None  # the harness tools the agent was given
    # connections to the case's MCP socket refused as not the case's agent's (mcp/host.py); None: none
    refused_connections: list[RefusedConnection] | None = None
    # the transcript the agent returned itself (AgentOutput.transcript): shown, never evidence
    agent_reported: list[ReportedStep] | None = None
    # which of the agent's answer rules gave the scored answer (AgentOutput.extra["answer_source"]:
    # the langgraph agent's final_message / last_tool_resource / none); None: the agent did not say
    answer_source: str | None = None
    fhir: FhirActivity | None = None  # a server-state task's case: its FHIR requests and state diff
    steps: int | None = None
    resumed_from: str | None = None
    rescored_from: str | None = None
    warnings: list[str] = Field(default_factory=list)  # e.g. agent-supplied usage that was dropped
    truncated: list[str] = Field(default_factory=list)  # what bounds.py cut of the agent's output (where, how much)
    repeat: int | None = None  # with --repeat N: which run of the case this result is (1..N)

    @model_validator(mode="before")
    @classmethod
    def _reported_is_not_observed(cls, data: Any) -> Any:
        """A record written before the harness observed tool calls stored the agent's own
        transcript under ``transcript``: read back, it is what the agent reported."""
        if isinstance(data, dict) and isinstance(data.get("transcript"), list) and not data.get("tools_offered") \
                and data.get("agent_reported") is None:
            data = {**data, "agent_reported": data["transcript"] or None, "transcript": None}
        return data

    @model_validator(mode="after")
    def _one_meaning(self) -> "CaseResult":
        scored = self.outcome in ("passed", "failed")
        if scored and (self.score is None or self.error is not None):
            raise ValueError(f"{self.task}:{self.case_id}: a {self.outcome} case has a score and no error")
        if scored and self.score.passed != (self.outcome == "passed"):
            raise ValueError(f"{self.task}:{self.case_id}: outcome {self.outcome} contradicts its score")
        if self.outcome == "error" and (self.error is None or self.score is not None):
            raise ValueError(f"{self.task}:{self.case_id}: an errored case has an error and no score")
        if self.applicable is not None and self.outcome != "error":
            raise ValueError(f"{self.task}:{self.case_id}: only an errored case lists the rates it counts 0 in")
        if self.outcome == "skipped" and (self.skip_reason is None or self.score is not None):
            raise ValueError(f"{self.task}:{self.case_id}: a skipped case has a skip reason and no score")
        return self

    @property
    def key(self) -> tuple[str, str]:
        """The case (all its repeats share it)."""
        return (self.task, self.case_id)

    @property
    def result_key(self) -> tuple:
        """This one result: the case, and with ``--repeat`` its repeat (as ``CaseRef.key``)."""
        return (self.task, self.case_id) if self.repeat is None else (self.task, self.case_id, self.repeat)

    @property
    def error_kind(self) -> str | None:
        return self.error.kind if self.error is not None else None

    @property
    def reason(self) -> str:
        if self.error is not None:
            return self.error.message
        if self.score is not None:
            return self.score.reason
        return self.skip_reason or ""

    def applicable_value(self, name: str) -> float | None:
        """The case's value of a figure over the applicable cases (``among: applicable``): its
        score's, 0 for an errored case whose truth says the figure applies (``applicable``: an
        agent that errors on the cases it would fail cannot leave their denominators), None
        where it does not apply."""
        if self.score is not None:
            value = self.score.metrics.get(name)
            return None if value is None else float(value)
        if self.outcome == "error" and self.applicable and name in self.applicable:
            return 0.0
        return None

    def metric(self, name: str, default: float = 0.0) -> float:
        """A per-case metric; an unscored case counts 0 (it stays in every denominator)."""
        if self.score is None:
            return default
        return float(self.score.metrics.get(name, default))

    @property
    def finished(self) -> bool:
        """Has a verdict another call would not change for infrastructure reasons."""
        return self.outcome in ("passed", "failed") or (
            self.outcome == "error" and self.error is not None and self.error.kind not in RETRYABLE_KINDS)


# ---------------------------------------------------------------- the run record
class ThresholdCheck(_Model):
    metric: str
    key: str
    threshold: float
    value: float | None
    passed: bool
    applied: bool = True  # False: an ini threshold of a task with no case in this run
    reason: str | None = None


class GateRecord(_Model):
    passed: bool
    thresholds: list[ThresholdCheck]
    reason: str | None = None


class ShardRecord(_Model):
    """``--groundeval-shard K/N``: this record holds shard ``index`` of ``count`` of a run's
    eval cases (``shard.py``); what ``groundeval merge`` checks the shards against."""

    index: int = Field(ge=1)  # K, 1-based
    count: int = Field(ge=1)  # N
    selection_size: int = Field(ge=0)  # eval items the whole selection holds, every shard together
    selection_sha256: str  # of that selection's sorted (task, case id) keys (shard.selection_digest)


class Completeness(_Model):
    """Did this record see every case it was asked to run?"""

    selected: int | None  # eval items selected to run (None: no process reported it)
    deselected: int  # eval items collected but deselected (-k, -m, --lf, ...)
    recorded: int  # case results in this record
    subset: bool  # the user ran a subset on purpose (-k, -m, --lf, node ids): allowed, shown
    selection: dict[str, Any]
    cut_short: bool  # the run stopped before every selected case had a result
    reason: str | None = None  # why it was cut short (-x / --maxfail, interrupt, budget, crash)
    shard: ShardRecord | None = None  # one shard of a sharded run (--groundeval-shard K/N); None: the whole


class UnfinishedUsage(_Model):
    """``--resume``: what the resumed run's cases that never finished had paid before the
    kill (written beside its journal as each attempt reported it, ``store/spent.py``); part
    of the run's ``input_tokens``, ``output_tokens`` and ``cost_usd``."""

    cases: int  # cases with an attempt started in the killed session and no result there
    attempts_cut: int  # attempts the kill cut before their end: what they spent after their last report is unknown
    input_tokens: int
    output_tokens: int
    cost_usd: float | None  # None: the model is not priced (or a usage is not token counts)


class RunUsage(_Model):
    input_tokens: int
    output_tokens: int
    cost_usd: float
    cases_priced: int
    cases_unpriced: int
    cases_unreported: int = 0  # the agent ran but reported no usage: cost unknown, not $0
    prices_as_of: str  # the price table's date
    prices_source: str | None = None  # where its prices come from (URL); absent in records before it
    unfinished: UnfinishedUsage | None = None  # --resume: the killed session's unfinished cases (counted above)


class BudgetRecord(_Model):
    max_cost_usd: float
    spent_usd: float
    stopped: bool
    cases_not_run: int


class LangSmithExperiment(_Model):
    """One suite's experiment in LangSmith (``integrations/langsmith/``)."""

    task: str
    dataset: str  # the suite's dataset, groundeval/<task>
    dataset_id: str
    experiment: str  # the experiment's (project's) name
    experiment_id: str
    url: str | None = None  # the experiment in the LangSmith app (its dataset's compare view)


class LangSmithRecord(_Model):
    """With ``LANGSMITH_API_KEY`` set: where this run went in LangSmith."""

    experiments: list[LangSmithExperiment] = Field(default_factory=list)
    errors: int = 0  # failed LangSmith calls, every process together (the eval is unaffected)
    warning: str | None = None  # the terminal's warning line, when there were errors


SummaryValue = float | int | list[float] | None

MetricKind = Literal["rate", "mean", "prf", "count", "custom"]
IntervalKind = Literal["wilson", "bootstrap", "none"]
PRF_FIGURES = ("precision", "recall", "f1")


class UnscoredCounts(_Model):
    """What a case with no score (an error) adds to a count metric: the number of its truth
    items (those whose ``where`` keys hold those values), at least ``at_least``. An errored
    case's missed items this way stay in a micro figure's denominator."""

    where: dict[str, str] = Field(default_factory=dict)
    at_least: int = Field(default=0, ge=0)

    def count(self, truth: Any) -> int:
        items = [t for t in truth if isinstance(t, dict)] if isinstance(truth, list) else []
        found = sum(1 for t in items if all(t.get(k) == v for k, v in self.where.items()))
        return max(found, self.at_least)


class MetricSpec(_Model):
    """What one summary figure of a task is: how it is built from the cases, which way is
    better, its interval. Declared by each task (``Task.specs``) and by the harness (repeats,
    grounded), carried by the record (``summary.<task>.specs``), so that every reader of the
    record (compare, gate, terminal, HTML, LangSmith) knows a figure's kind without the task.

    kinds:

    * ``rate``: the share of cases (results) whose per-case value ``of`` is 1 (0 or 1 per case:
      a pass/fail check); paired test exact McNemar; Wilson interval.
    * ``mean``: the mean of a per-case value ``of`` (any number: a macro F1, name accuracy);
      paired test the paired bootstrap; bootstrap interval (Wilson's when every per-case value
      is 0 or 1: the percentile bootstrap of identical values has no width, a certain-looking
      [1, 1] for a perfect run).
    * ``prf``: ``figure`` (precision, recall or F1) of the summed per-case ``counts``
      (tp, fp, fn: ``count`` metrics of the same task); paired bootstrap.
    * ``count``: a sum of the per-case value ``of`` (``unscored``: what an errored case adds),
      or a number about the run (``repeats``); not compared, never a threshold.
    * ``custom``: the task's own aggregation; compared only as figures (no paired test without
      the task's code).

    ``among``: a rate or mean over every case (an errored case counts 0) or only the cases
    whose score carries ``of`` (``applicable``: grounded; their number is ``<name>_n``).
    ``source``: per-case values from the case's ``score.metrics`` or, under ``--repeat``, from
    the case's repeats (``repeats.py``: one value per case, not per result).
    ``guarded_by``: a judged figure's shares of unscored items (the overall share first), gated
    with it (``gate.py``)."""

    name: str
    kind: MetricKind
    higher_is_better: bool = True
    interval: IntervalKind = "none"
    of: str | None = None  # the per-case value (rate, mean, count); None: the metric's own name
    counts: list[str] | None = None  # prf: the count metrics tp, fp, fn (in that order)
    figure: Literal["precision", "recall", "f1"] | None = None  # prf: which of the three
    among: Literal["cases", "applicable"] = "cases"
    source: Literal["score", "repeats"] = "score"
    unscored: UnscoredCounts | None = None  # count: what an unscored case adds (None: 0)
    group: str | None = None  # the class a per-class breakdown shows it under (a verdict)
    aliases: list[str] = Field(default_factory=list)  # other threshold names (``f1`` for ``micro_f1``)
    headline: bool | None = None  # True on the one figure that stands for the task (``Task.headline``)
    # a judged figure: the lower-is-better shares of its items left unscored (the task's
    # ``unscored_rate`` first, then each item's) that a gate on it also checks (reporting/gate.py:
    # at most 10 % unless the user gates the first)
    guarded_by: list[str] = Field(default_factory=list)

    @model_serializer(mode="wrap")
    def _set_fields_only(self, handler: Any) -> dict[str, Any]:
        """A spec as it is declared: unset options (null, empty) left out of the record."""
        return {k: v for k, v in handler(self).items() if v is not None and v != [] and v != {}}

    @model_validator(mode="after")
    def _consistent(self) -> "MetricSpec":
        if self.kind == "prf":
            if self.counts is None or len(self.counts) != 3 or self.figure is None:
                raise ValueError(f"metric {self.name}: a prf figure names its three counts (tp, fp, fn) and "
                                 "which figure it is")
        elif self.counts is not None or self.figure is not None:
            raise ValueError(f"metric {self.name}: only a prf figure has counts and a figure")
        if self.unscored is not None and self.kind != "count":
            raise ValueError(f"metric {self.name}: only a count says what an unscored case adds")
        if self.among == "applicable" and self.kind not in ("rate", "mean"):
            raise ValueError(f"metric {self.name}: only a rate or a mean is over the applicable cases")
        if self.kind in ("count", "custom") and self.interval != "none":
            raise ValueError(f"metric {self.name}: a {self.kind} has no interval")
        if self.name in self.guarded_by:
            raise ValueError(f"metric {self.name}: a figure cannot be its own unscored share")
        return self

    @property
    def per_case(self) -> str:
        """The per-case value a rate, mean or count is built from."""
        return self.of or self.name

    @property
    def compared(self) -> bool:
        """Figures ``groundeval compare`` tests (counts are the parts of others)."""
        return self.kind != "count"


def metric(name: str, kind: MetricKind, **kw: Any) -> MetricSpec:
    """A spec with the interval its kind has by default (rate: Wilson, mean: bootstrap)."""
    kw.setdefault("interval", {"rate": "wilson", "mean": "bootstrap"}.get(kind, "none"))
    return MetricSpec(name=name, kind=kind, **kw)


def headline_of(specs: Iterable[MetricSpec]) -> str | None:
    """The one figure that stands for a task (the HTML report's strip, the history's lead
    column): the spec its task declared ``headline``; for a record whose task declared none,
    its overall F1 (a ``prf`` of figure ``f1`` outside a breakdown), else its ``pass`` rate,
    else its first rate or mean with an interval, else its first rate, mean or F1."""
    usable = [s for s in specs if s.kind in ("rate", "mean", "prf") and s.group is None]
    for rule in (lambda s: s.headline is True, lambda s: s.kind == "prf" and s.figure == "f1",
                 lambda s: s.name == "pass" and s.kind == "rate", lambda s: s.kind != "prf" and s.interval != "none",
                 lambda s: True):
        found = next((s.name for s in usable if rule(s)), None)
        if found is not None:
            return found
    return None


def prf_specs(prefix: str, counts: tuple[str, str, str], *, group: str | None = None,
              aliases: dict[str, list[str]] | None = None) -> list[MetricSpec]:
    """``<prefix>_precision``, ``_recall``, ``_f1`` of the summed ``counts`` (``aliases``: per
    figure, its other threshold names)."""
    return [MetricSpec(name=f"{prefix}_{f}", kind="prf", counts=list(counts), figure=f, group=group,
                       aliases=(aliases or {}).get(f, []))
            for f in PRF_FIGURES]


def per_case_counts(specs: Iterable[MetricSpec]) -> frozenset[str]:
    """The per-case metrics that are raw counts (what ``count`` specs sum): kept in the record,
    not scores (LangSmith feedback leaves them out)."""
    return frozenset(s.per_case for s in specs if s.kind == "count" and s.source == "score")


class LegacySummaryError(ValueError):
    """A record written before records declared their metrics (no ``summary.<task>.specs``)."""


def require_specs(record: Any, path: Any) -> None:
    """A :class:`LegacySummaryError` naming ``path`` and what to do when a task's summary in
    ``record`` (the record as JSON data) declares no metric specs: such a record is refused,
    not read by guessing kinds from metric names."""
    summary = record.get("summary") if isinstance(record, dict) else None
    old = sorted(t for t, s in (summary or {}).items() if isinstance(s, dict) and "specs" not in s)
    if old:
        raise LegacySummaryError(
            f"{path}: written before run records declared their metrics (the summary of {', '.join(old)} has no "
            "specs), so what kind each figure is cannot be read from it; re-score it with this groundeval "
            f"(no agent call): pytest evals --rescore {path} --run-record NEW.json, and use NEW.json")


COUNT_KEYS = ("n_cases", "n_passed", "n_failed", "n_errors", "n_skipped")


class TaskSummary(_Model):
    """One task's summary: the outcome counts, each declared metric's figure under its own
    name (``micro_f1``), its 95% interval as ``<name>_ci95`` (metrics with an interval; null
    over fewer than two cases), ``<name>_n`` for a metric over the applicable cases, and
    ``specs``: what each figure is. No other key: a figure the specs do not declare is refused."""

    model_config = ConfigDict(extra="allow")
    __pydantic_extra__: dict[str, SummaryValue] = Field(init=False)

    n_cases: int = Field(ge=0)
    n_passed: int = Field(ge=0)
    n_failed: int = Field(ge=0)
    n_errors: int = Field(ge=0)
    n_skipped: int = Field(ge=0)
    specs: dict[str, MetricSpec]

    @model_validator(mode="after")
    def _only_declared_figures(self) -> "TaskSummary":
        allowed = set()
        for name, spec in self.specs.items():
            if spec.name != name:
                raise ValueError(f"specs[{name!r}] is the spec of {spec.name!r}")
            allowed.add(name)
            if spec.interval != "none":
                allowed.add(f"{name}_ci95")
            if spec.among == "applicable":
                allowed.add(f"{name}_n")
        extra = set(self.model_extra or {})
        undeclared = sorted(extra - allowed)
        if undeclared:
            raise ValueError(f"summary figures no spec declares: {', '.join(undeclared)}")
        missing = sorted(n for n in self.specs if n not in extra)
        if missing:
            raise ValueError(f"declared metrics without a figure: {', '.join(missing)}")
        return self

    @classmethod
    def build(cls, figures: dict[str, Any], specs: Iterable[MetricSpec]) -> "TaskSummary":
        """A summary from a task's ``summarize`` output and its specs (in declaration order)."""
        return cls.model_validate({**figures, "specs": {s.name: s for s in specs}})

    @model_serializer(mode="wrap")
    def _figures_first(self, handler: Any) -> dict[str, Any]:
        """The record's order: the counts, the figures, then what each figure is."""
        data = handler(self)
        specs = data.pop("specs")
        return {**data, "specs": specs}

    def value(self, name: str) -> SummaryValue:
        return (self.model_extra or {}).get(name)

    def ci95(self, name: str) -> list[float] | None:
        ci = (self.model_extra or {}).get(f"{name}_ci95")
        return ci if isinstance(ci, list) else None

    def figures(self) -> dict[str, SummaryValue]:
        """Every figure (the declared metrics, their intervals and applicable counts)."""
        return dict(self.model_extra or {})

    def resolve(self, key: str) -> str | None:
        """A threshold's metric name (or one of its aliases) as the declared metric's name."""
        return resolve_metric(self.specs.values(), key)


def resolve_metric(specs: Iterable[MetricSpec], key: str) -> str | None:
    """The declared metric ``key`` names: an alias first (``f1`` is ``micro_f1``), else its own
    name; None when no spec has it (counts are never thresholds)."""
    specs = [s for s in specs if s.kind != "count"]
    alias = next((s.name for s in specs if key in s.aliases), None)
    return alias or next((s.name for s in specs if s.name == key), None)


def pass_hat(runs: int, passed: int, k: int) -> float | None:
    """tau-bench's pass^k of one case (Yao et al. 2024, section 5): C(passed, k) / C(runs, k),
    the chance that k of its runs drawn without replacement all passed (None: fewer than k)."""
    from math import comb

    return comb(passed, k) / comb(runs, k) if 1 <= k <= runs else None


class RepeatCase(_Model):
    """One case under ``--repeat N`` (``repeats.py``)."""

    runs: int
    passed: int
    pass_rate: float
    pass_hat_k: bool  # every repeat passed
    pass_at_k: bool  # at least one did
    flaky: bool  # some passed, some did not

    def value(self, name: str) -> float | None:
        """A per-case figure by name: a field, or ``pass_hat_<k>`` (tau-bench's pass^k of this
        case, C(passed, k) / C(runs, k); None with fewer than k runs)."""
        if name.startswith("pass_hat_") and name[9:].isdigit():
            return pass_hat(self.runs, self.passed, int(name[9:]))
        return float(getattr(self, name))


class RepeatRecord(_Model):
    """One task under ``--repeat N``: each case's figures (the summary has the task's)."""

    repeats: int
    flaky_cases: list[str]
    per_case: dict[str, RepeatCase]


class RecordOptions(_Model):
    """What a run was asked to do, as far as it changes what the record means (``--agent`` and
    ``--model`` are the record's ``requested``). Besides these keys, one per task the run
    knew: that task's settings (e.g. ``"<task>": {"data_dir": "..."}``, ``Task.options``)."""

    model_config = ConfigDict(extra="allow")
    __pydantic_extra__: dict[str, dict[str, Any]] = Field(init=False)  # per task: its settings

    base_url: str | None = None  # --model-base-url
    agent_timeout: float | None = None  # --agent-timeout (seconds)
    max_tokens: int | None = None  # the cap on tokens per model call the agent applied (--model-max-tokens)
    tool_choice: str | None = None  # --model-tool-choice, sent to an OpenAI-compatible server with tools
    thresholds: list[str] = Field(default_factory=list)  # the gate's TASK.METRIC=VALUE (option and ini)
    keyword: str | None = None  # -k
    markexpr: str | None = None  # -m
    numprocesses: int | str | None = None  # xdist's -n
    concurrency: int = 1  # agent calls in flight per process
    retries: int = 0  # --agent-retries
    max_cost_usd: float | None = None  # --max-cost
    model_cache: str | None = None  # --model-cache mode
    prompt_cache: bool | None = None  # Anthropic prompt caching asked for (--no-prompt-cache: false)
    batch: bool | None = None  # --batch: the cases sent as one Message Batch (half price)
    resumed_from: str | None = None  # --resume: the stored run's id
    rescored_from: str | None = None  # --rescore: the stored run's id
    shard: str | None = None  # --groundeval-shard K/N
    repeat: int = 1  # --repeat N
    require_grounded: bool = False  # --require-grounded
    args: list[str] = Field(default_factory=list)  # pytest's positional arguments (paths, node ids)
    merged_from: list[str] | None = None  # groundeval merge: the shards' run ids (absent otherwise)

    @model_serializer(mode="wrap")
    def _merged_only(self, handler: Any) -> dict[str, Any]:
        data = handler(self)
        if data.get("merged_from") is None:
            data.pop("merged_from", None)
        return data


class GitInfo(_Model):
    """The working tree a run was made from, read as the ``langsmith`` SDK reads it for an
    experiment's ``git`` block (``langsmith.env.get_git_info``): ``git rev-parse HEAD``, ``git
    rev-parse --abbrev-ref HEAD`` (``HEAD`` when detached) and whether ``git status
    --porcelain`` lists anything (uncommitted or untracked files)."""

    commit: str | None = None
    branch: str | None = None
    dirty: bool | None = None


class RunRecord(_Model):
    """``runs/<run_id>.json``: one session's cases, summary, usage, budget and gate."""

    schema_version: Literal["2.0"] = SCHEMA_VERSION
    run_id: str
    started_at: str
    finished_at: str
    git_sha: str | None
    git: GitInfo | None = None  # commit, branch, dirty (None: not in a git work tree, or an older record)
    agent: str  # the agent that answered, as it names itself (several: comma-separated)
    model: str | None  # the model the agent reports using (else the one asked for)
    requested: dict[str, str | None]  # what --agent / --model asked for (what --resume matches)
    options: RecordOptions
    versions: dict[str, str | None]
    summary: dict[str, TaskSummary]  # per task: its figures and what each is (its specs)
    cases: list[CaseResult]
    completeness: Completeness
    usage: RunUsage
    budget: BudgetRecord | None = None
    gate: GateRecord | None = None
    langsmith: LangSmithRecord | None = None  # with LANGSMITH_API_KEY set (integrations/langsmith/)
    repeats: dict[str, RepeatRecord] | None = None  # with --repeat N: per task, each case's figures
    # executions of a case after its first in this session (a plugin re-ran its item: reruns.py),
    # with their usage (counted in ``usage``), never in ``cases`` or the summary: the first result stands
    reruns: list[CaseResult] | None = None


ReviewVerdict = Literal["pass", "fail"]


class Review(_Model):
    """A person's verdict on one case result of a run (``groundeval review``), kept beside its
    record in ``<record>.reviews.jsonl`` (``store/reviews.py``), one per line, never in the
    record: the scorer's verdicts and figures stay as they were. ``dimension`` None: the
    verdict on the case (its outcome); else on that dimension of its score. ``original``: the
    scorer's verdict on the same thing when the review was written. The latest review of a
    thing stands; earlier ones stay in the file (who said what, when)."""

    run_id: str  # the record's run (a review of another run is not this record's)
    task: str
    case_id: str
    repeat: int | None = None  # with --repeat N: which result of the case
    content_hash: str | None = None  # the case's content when reviewed (the same case, not only the same id)
    dimension: str | None = None
    verdict: ReviewVerdict
    original: ReviewVerdict
    reason: str = Field(min_length=1)
    by: str = Field(min_length=1)
    at: str  # when, ISO 8601 UTC

    @property
    def result_key(self) -> tuple:
        """The result reviewed, as ``CaseResult.result_key``."""
        return (self.task, self.case_id) if self.repeat is None else (self.task, self.case_id, self.repeat)

    @property
    def what(self) -> str:
        """``case`` or ``dimension <D>``."""
        return "case" if self.dimension is None else f"dimension {self.dimension}"


def record_schema() -> dict[str, Any]:
    schema = RunRecord.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://github.com/groundeval/groundeval/record.schema.json"
    return schema


def schema_text() -> str:
    import json

    return json.dumps(record_schema(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":  # regenerate the committed schema
    import sys

    sys.stdout.write(schema_text())
