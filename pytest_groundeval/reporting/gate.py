"""The CI gate: ``TASK.METRIC=VALUE`` thresholds, checked against the run's summary.

A threshold names a declared metric (``model.MetricSpec``) or one of its aliases; which way
it is met is the spec's ``higher_is_better`` as the summary declares it: a minimum, or for a
lower-is-better figure (the flaky share) a maximum. Nothing here knows a metric by its name.

A judged figure (a spec ``guarded_by`` shares of unscored items: the jury's ``judge_score``
and ``item_<id>``) is gated with those shares: a threshold on it also requires each to be at
most :data:`UNSCORED_LIMIT`, or the limit the user gave the first of them, the task's overall
share (``TASK.unscored_rate=0.3``). A judge that refuses, or garbles, the texts it should fail
(or only their harm item) leaves them unscored and the figure rests on the rest; such a gate
misses and says why."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from pytest_groundeval.model import Completeness, GateRecord, MetricSpec, TaskSummary, ThresholdCheck, resolve_metric


@dataclass(frozen=True)
class Threshold:
    task: str
    metric: str  # as the user wrote it (after TASK.)
    key: str  # the summary key it names
    value: float
    # "option" (--threshold: always checked) or "ini" (the project's config: checked only when
    # the run collected items of its task, so a plain unit-test run is not gated on evals)
    origin: str = "option"
    guards: str | None = None  # an implied limit on a share of unscored items: the judged threshold's label

    @property
    def label(self) -> str:
        return f"{self.task}.{self.metric}"


def _specs(task: Any, repeat: int = 1) -> list[MetricSpec]:
    """The metric specs of a task class (``Task.all_specs``, for a run of ``repeat`` repeats)
    or of a record's task summary."""
    if isinstance(task, TaskSummary):
        return list(task.specs.values())
    return list(task.all_specs(repeat))


def threshold_example(tasks: Mapping[str, Any]) -> str:
    """``TASK.METRIC=0.95`` for the first registered task (for help texts and messages)."""
    for name, task in tasks.items():
        specs = [s for s in _specs(task) if s.kind != "count"]
        metric = next((a for s in specs for a in s.aliases), None) or (specs[0].name if specs else "METRIC")
        return f"{name}.{metric}=0.95"
    return "TASK.METRIC=0.95"


def parse_threshold(text: str, tasks: Mapping[str, Any], origin: str = "option", repeat: int = 1) -> Threshold:
    """``TASK.METRIC=VALUE`` → Threshold; a ``ValueError`` with a usable message otherwise.
    ``tasks`` maps task names to Task classes or to a record's :class:`TaskSummary` objects
    (a record's own summary gates it without its task installed): their declared metrics."""
    name, sep, raw = text.partition("=")
    task, dot, metric = name.strip().partition(".")
    if not sep or not dot:
        raise ValueError(f"threshold {text!r}: expected TASK.METRIC=VALUE, e.g. {threshold_example(tasks)}")
    if task not in tasks:
        raise ValueError(f"threshold {text!r}: unknown task {task!r}; known: {', '.join(sorted(tasks))}")
    specs = _specs(tasks[task], repeat)
    key = resolve_metric(specs, metric)
    if key is None:
        own = specs if isinstance(tasks[task], TaskSummary) else list(tasks[task].specs)  # not the harness's
        known = sorted({n for s in own if s.kind != "count" for n in (s.name, *s.aliases)})
        raise ValueError(f"threshold {text!r}: unknown metric {metric!r} for {task}; known: {', '.join(known)}")
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"threshold {text!r}: {raw.strip()!r} is not a number") from None
    if not 0.0 <= value <= 1.0:  # also refuses nan and inf
        raise ValueError(f"threshold {text!r}: {raw.strip()} is not a rate between 0 and 1 "
                         "(every metric is one; 95% is 0.95)")
    return Threshold(task=task, metric=metric, key=key, value=value, origin=origin)


def met(value: float, threshold: float, spec: MetricSpec | None) -> bool:
    """A minimum, or a maximum where the declared metric is lower-is-better."""
    lower = spec is not None and not spec.higher_is_better
    return value <= threshold if lower else value >= threshold


def evaluate_gate(thresholds: Iterable[Threshold], summary: Mapping[str, TaskSummary]) -> GateRecord | None:
    """Each threshold is met when the summary value is on the better side of it (as the
    summary's spec of the metric declares). A ``--threshold`` whose task
    ran no case is missed (a gate that cannot be evaluated must not pass silently); an ini
    threshold whose task had no case in this run does not apply (the project's unit tests,
    or ``-m`` another task). No threshold that applies: no gate."""
    thresholds = list(thresholds)
    checks = []
    for t in [*thresholds, *implied_guards(thresholds, summary)]:
        task = summary.get(t.task)
        if task is None and t.origin == "ini":
            checks.append(ThresholdCheck(metric=t.label, key=t.key, threshold=t.value, value=None, passed=True,
                                         applied=False, reason=f"not applied: no {t.task} case in this run"))
            continue
        raw = task.value(t.key) if task is not None else None
        value = float(raw) if isinstance(raw, (int, float)) and not isinstance(raw, bool) else None
        spec = task.specs.get(t.key) if task is not None else None
        passed = value is not None and met(value, t.value, spec)
        reason = _no_value(t, task) if value is None else _guard_reason(t, value, passed)
        checks.append(ThresholdCheck(metric=t.label, key=t.key, threshold=t.value, value=value, passed=passed,
                                     reason=reason))
    if not any(c.applied for c in checks):
        return None
    return GateRecord(passed=all(c.passed for c in checks), thresholds=checks)


#: the share of a judged figure's items that may be unscored when the user set no limit of their own
UNSCORED_LIMIT = 0.10


def implied_guards(thresholds: list[Threshold], summary: Mapping[str, TaskSummary]) -> list[Threshold]:
    """For each threshold on a judged figure (its spec ``guarded_by`` shares of unscored items,
    the overall one first), each share at most the limit the user gave the first share, else
    :data:`UNSCORED_LIMIT`, with the threshold's origin; a share the user gave a threshold of
    its own is checked once, as theirs."""
    limits = {(t.task, t.key): t.value for t in thresholds}
    out = []
    for t in thresholds:
        task = summary.get(t.task)
        spec = task.specs.get(t.key) if task is not None else None
        guards = spec.guarded_by if spec is not None else []
        limit = limits.get((t.task, guards[0]), UNSCORED_LIMIT) if guards else UNSCORED_LIMIT
        for guard in guards:
            if (t.task, guard) not in limits:
                limits[(t.task, guard)] = limit
                out.append(Threshold(task=t.task, metric=guard, key=guard, value=limit, origin=t.origin,
                                     guards=t.label))
    return out


def _guard_reason(t: Threshold, value: float, passed: bool) -> str | None:
    """What an implied limit on unscored items is, and when missed, why the gate failed."""
    if t.guards is None:
        return None
    how = f"--threshold {t.task}.{t.metric}=LIMIT sets another limit"
    if passed:
        return f"gated with {t.guards}: at most {t.value:g} of its judged items unscored ({how})"
    return (f"{value:.1%} of the judged items it counts are unscored (no verdict: a judge refused, failed or "
            f"gave no usable answer, or the jury was split): {t.guards} rests on the rest and cannot pass; {how}")


def _no_value(t: Threshold, summary: TaskSummary | None) -> str:
    """Why a threshold has no value: its task ran no case, or none of those that ran is one
    the metric applies to (``grounded``: an agent the harness gave no tools; its summary then
    has no grounded figure at all)."""
    ran = summary.n_cases if summary is not None else 0
    if not ran:
        return f"no {t.task} case ran"
    applicable = summary.value(f"{t.key}_n") if summary is not None else None
    from pytest_groundeval.scorers.aggregate import GROUNDED_SPEC

    why = (": grounded applies only to an agent the harness gave tools (see each case's details.grounded)"
           if t.key == GROUNDED_SPEC.name else "")
    return f"{ran} {t.task} {'case' if ran == 1 else 'cases'} ran, {int(applicable or 0)} applicable to {t.key}{why}"


def run_gate(thresholds: Iterable[Threshold], summary: Mapping[str, TaskSummary],
             completeness: Completeness) -> GateRecord | None:
    """The gate of a run: the thresholds checked against its summary, and failed, whatever
    the metrics, when the run was cut short (the reporter's and ``groundeval merge``'s)."""
    gate = evaluate_gate(thresholds, summary)
    if gate is not None and completeness.cut_short:
        gate = gate.model_copy(update={"passed": False, "reason": f"the run was cut short: {completeness.reason}"})
    return gate
