"""What a task is. A task declares everything about itself; nothing outside its own module
(and its scorer) names it:

* its cases: where they live (:class:`CaseSource`: a command-line option, an ini key and a
  default), how to list them lazily (``discover``) and read one (``load``);
* the prompt and inputs the agent sees (in ``load``; never the truth);
* how an answer is parsed (``parse``) and scored (``score``; ``unparsed`` for an answer that
  cannot be parsed: a scored failure with every metric 0);
* its metrics, declared (``specs``: each summary figure's kind, direction, interval and
  threshold aliases; the record carries them, so no reader needs the task), and the
  aggregation (``summarize``);
* its offline baseline strategy (``baseline``), used by ``--agent=baseline``;
* what tool-using agents need: a system prompt, the tools for one case's inputs, and the
  tool whose last result is the answer when the agent ends without one;
* how the grounding check reads its answers (``grounding_values``, and ``grounding_matchers``
  for value kinds of its own, such as write's dose strengths);
* optionally, how the report shows one of its cases (``view``: a :class:`CaseView`, the
  coded items of the truth and of the answer), so the report knows no task's shapes.

Built-in tasks are listed in ``tasks/__init__.py``; others are found through the
``groundeval.tasks`` entry-point group (``name = "package.module:TaskClass"``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Mapping, NamedTuple

from pytest_groundeval.tasks.jsontext import one_answer
from pytest_groundeval.model import (AgentOutput, Case, CaseError, CaseRef, CaseResult, MetricSpec, ParseError,
                                     TaskSummary, resolve_metric)
from pytest_groundeval.scorers.base import Score
from pytest_groundeval.tasks.source import CaseSource

__all__ = ["Case", "CaseError", "CaseRef", "CaseSource", "CaseView", "CodedItem", "ParseError", "Task",
           "coded_items", "extract_json_object", "listed_codes_view", "require_keys", "score_details"]


class CodedItem(NamedTuple):
    """One coded item of a truth or an answer as the report shows it: a code, its display and
    (tasks that judge items) the item's verdict. (A named tuple: the report builds one per
    item of every case, and a frozen dataclass costs several times as much to make.)"""

    code: str
    display: Any = None
    verdict: str | None = None


@dataclass(frozen=True)
class CaseView:
    """What the report shows of one case in its task's terms (``Task.view``): the coded items
    of the truth and of the answer, side by side. A side is None when it holds nothing to
    compare (not the task's shape, or not answered); ``()`` when it holds no item.
    ``wrong_names``: codes whose display the scorer found wrong."""

    truth: tuple[CodedItem, ...] | None
    predicted: tuple[CodedItem, ...] | None
    wrong_names: frozenset[str] = frozenset()


def coded_items(value: Any) -> tuple[CodedItem, ...] | None:
    """A JSON list of ``{code, display[, verdict]}`` objects as coded items (an empty list:
    ``()``); None when ``value`` is not such a list (a list with none of them)."""
    if not isinstance(value, list):
        return None
    items = tuple(CodedItem(str(v.get("code")), v.get("display"),
                            None if v.get("verdict") is None else str(v.get("verdict")))
                  for v in value if isinstance(v, dict) and "code" in v)
    return items if items or not value else None


def listed_codes_view(case: Mapping[str, Any]) -> CaseView:
    """The view of a task whose truth and answer are both lists of coded items (extraction,
    reconciliation), with the codes the scorer named in ``details.wrong_names``."""
    wrong = score_details(case).get("wrong_names")
    return CaseView(coded_items(case.get("ground_truth")), coded_items(case.get("predicted")),
                    frozenset(str(x) for x in wrong or [] if isinstance(x, (str, int))) if isinstance(wrong, list)
                    else frozenset())


def score_details(case: Mapping[str, Any]) -> dict[str, Any]:
    """A record case's ``score.details`` (``{}`` when it has none)."""
    score = case.get("score")
    details = score.get("details") if isinstance(score, dict) else None
    return details if isinstance(details, dict) else {}


class Task(ABC):
    """Base class of a task type. Subclasses set the class attributes and implement the methods."""

    name: ClassVar[str]
    description: ClassVar[str]
    source: ClassVar[CaseSource]
    # what each summary figure is (``model.MetricSpec``), in the order the summary shows them
    specs: ClassVar[tuple[MetricSpec, ...]]
    # derived from ``specs``: the figures a threshold may name (``TASK.KEY``), and their aliases
    metrics: ClassVar[tuple[str, ...]]
    metric_aliases: ClassVar[dict[str, str]] = {}
    # the one figure that stands for the task (the report's strip, the history's lead column):
    # the name of a declared rate, mean or F1; marked ``headline`` on its spec in the record
    headline: ClassVar[str | None] = None
    # for tool-using agents (None: the agent's generic prompt; no tools)
    agent_system_prompt: ClassVar[str | None] = None
    answer_tool: ClassVar[str | None] = None

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        specs = cls.__dict__.get("specs")
        if specs is not None or "headline" in cls.__dict__:
            specs = cls._mark_headline(tuple(getattr(cls, "specs", ())), cls.headline)
            cls.specs = specs
            cls.metrics = tuple(s.name for s in specs if s.kind != "count")
            cls.metric_aliases = {a: s.name for s in specs if s.kind != "count" for a in s.aliases}

    @classmethod
    def _mark_headline(cls, specs: tuple[MetricSpec, ...], name: str | None) -> tuple[MetricSpec, ...]:
        """``specs`` with ``headline`` set on ``name``'s spec alone (a task's author error, named,
        when ``name`` is not one of its rates, means or un-grouped F1s)."""
        if name is not None and not any(s.name == name and s.kind in ("rate", "mean", "prf") and s.group is None
                                        for s in specs):
            raise TypeError(f"task {cls.__name__}: headline {name!r} is not one of its declared rate, mean or prf "
                            f"metrics ({', '.join(s.name for s in specs if s.kind in ('rate', 'mean', 'prf'))})")
        return tuple(s.model_copy(update={"headline": True if s.name == name else None}) for s in specs)

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    @property
    def options(self) -> dict[str, Any]:
        """This task's settings as the record shows them."""
        return {self.source.key: str(self.path)}

    # -- cases --
    @abstractmethod
    def discover(self) -> list[CaseRef]:
        """List the cases without reading their content (``FileNotFoundError`` / ``ValueError``
        with a message naming the path when the source is unusable)."""

    @abstractmethod
    def load(self, ref: CaseRef) -> Case:
        """Read one case; raise ``CaseError`` naming the file and reason when it can't be used."""

    def validated_bundles(self, ref: CaseRef) -> list[Path]:
        """The FHIR bundle files ``load`` validates (``fhir/bundles.py``), for validation ahead
        of the items (``fhir/warmup.py``); none by default."""
        return []

    # -- answers --
    @abstractmethod
    def parse(self, output: AgentOutput) -> Any:
        """Turn the agent's output into a prediction; raise ``ParseError`` otherwise."""

    @abstractmethod
    def score(self, prediction: Any, case: Case) -> Score: ...

    @abstractmethod
    def unparsed(self, case: Case, reason: str) -> Score:
        """The score of an answer that could not be parsed: failed, every metric 0."""

    def applicable_rates(self, case: Case) -> list[str] | None:
        """For a case that errored after its truth was read: the task's rates over the
        applicable cases (higher is better) that its unparsed score carries, i.e. that apply to
        this case; it counts 0 in each (``CaseResult.applicable``). None: none."""
        rates = [s.name for s in self.specs if s.among == "applicable" and s.kind == "rate" and s.higher_is_better]
        if not rates:
            return None
        try:
            metrics = self.unparsed(case, "the case errored").metrics
        except Exception:  # noqa: BLE001 - a task whose unparsed needs more than the truth: no list
            return None
        return [n for n in rates if n in metrics] or None

    @abstractmethod
    def summarize(self, results: list[CaseResult]) -> dict[str, Any]:
        """Aggregate this task's results (errors count 0 everywhere; skipped are counted apart)."""

    def summary(self, results: list[CaseResult]) -> TaskSummary:
        """The record's summary of this task: ``summarize``'s figures, and under ``--repeat`` the
        repeat figures, each declared by its spec (the task's, grounded's, the repeats')."""
        from pytest_groundeval.run.repeats import repeat_specs, repeat_summary
        from pytest_groundeval.scorers.aggregate import GROUNDED_SPEC

        figures = dict(self.summarize(results))
        specs = list(self.specs)
        if GROUNDED_SPEC.name in figures:  # tool-using agents: the cases it applies to
            specs.append(GROUNDED_SPEC)
        repeats = repeat_summary(results)  # --repeat N: pass rate, pass^k, pass@k, flaky share
        if repeats is not None:
            figures.update(repeats)
            specs += repeat_specs(repeats)
        from pydantic import ValidationError

        try:
            return TaskSummary.build(figures, specs)
        except ValidationError as e:  # a task whose summarize and specs disagree: its author's to fix
            why = "; ".join(str(err.get("msg")) for err in e.errors())
            raise TypeError(f"task {self.name!r}: its summarize() and its specs disagree: {why}") from None

    @classmethod
    def all_specs(cls, repeat: int = 1) -> tuple[MetricSpec, ...]:
        """Every spec a record of this task may carry: its own, grounded's, the repeats' (with
        pass^k up to ``repeat``, the run's ``--repeat``)."""
        from pytest_groundeval.run.repeats import REPEAT_SPECS, pass_hat_specs
        from pytest_groundeval.scorers.aggregate import GROUNDED_SPEC

        return tuple(cls.specs) + (GROUNDED_SPEC,) + tuple(REPEAT_SPECS) + pass_hat_specs(repeat if repeat > 1 else 0)

    @classmethod
    def resolve_metric(cls, key: str, repeat: int = 1) -> str | None:
        return resolve_metric(cls.all_specs(repeat), key)

    # -- agents --
    def baseline(self, inputs: dict[str, Any]) -> AgentOutput:
        """The offline, deterministic reference answer (``--agent=baseline``)."""
        raise NotImplementedError(f"task {self.name!r} has no offline baseline strategy")

    def agent_tools(self, inputs: dict[str, Any]) -> list[Any]:
        """LangChain tools a tool-using agent gets for one case (only this case's data)."""
        return []

    # -- grounding (grounding.py): which values of an answer a tool result must have supplied --
    validate_tool: ClassVar[str | None] = None  # the tool an agent must validate its answer with

    #: value kinds of this task's own -> ``match(value, result_text)``: is the value in a tool
    #: result's text? (grounding.py matches ``code`` as a token and any other kind as text)
    grounding_matchers: ClassVar[Mapping[str, Callable[[str, str], bool]]] = {}

    def grounding_values(self, prediction: Any) -> dict[str, list[str]]:
        """Kind (``code``, ``display``, ``strength``, ...) -> the parsed answer's values of it."""
        return {}

    def grounding_checks(self, prediction: Any, case: Case, steps: list[Any]) -> list[Any]:
        """The task's own ``grounded`` checks (``scorers.base.Check``) of an answer against the
        observed calls (``steps``: grounding.py's ``Step``, in the order they started; ``.ok``
        for a successful one), e.g. what an abstention must rest on (labs). None by default."""
        return []

    # -- the report --
    @classmethod
    def view(cls, case: Mapping[str, Any]) -> CaseView | None:
        """How the report shows one of this task's cases (``case``: the record's case, JSON
        data an agent partly wrote: read it defensively). None: nothing task-specific."""
        return None


def require_keys(item: Any, keys: tuple[str, ...], source: str, what: str) -> dict[str, Any]:
    """``item`` as a case object holding ``keys``, else a :class:`CaseError` naming ``source``."""
    if not isinstance(item, dict):
        raise CaseError(f"{source}: a {what} must be a JSON object")
    missing = [k for k in keys if k not in item]
    if missing:
        raise CaseError(f"{source}: {what} lacks {missing} (needs {list(keys)})")
    return item


def extract_json_object(text: str) -> dict[str, Any]:
    """The one JSON object in ``text``: bare, or in a fenced block, anywhere in the text.

    No object, or more than one top-level object, is a :class:`ParseError`
    (:func:`jsontext.one_answer`, which also gives the prose around it)."""
    return one_answer(text).obj
