"""The CI gate: ``TASK.METRIC=VALUE`` thresholds, checked against the run's summary."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from pytest_groundeval.model import Completeness, GateRecord, ThresholdCheck
from pytest_groundeval.run.repeats import LOWER_IS_BETTER


@dataclass(frozen=True)
class Threshold:
    task: str
    metric: str  # as the user wrote it (after TASK.)
    key: str  # the summary key it names
    value: float
    # "option" (--threshold: always checked) or "ini" (the project's config: checked only when
    # the run collected items of its task, so a plain unit-test run is not gated on evals)
    origin: str = "option"

    @property
    def label(self) -> str:
        return f"{self.task}.{self.metric}"


def threshold_example(tasks: Mapping[str, Any]) -> str:
    """``TASK.METRIC=0.95`` for the first registered task (for help texts and messages)."""
    for name, cls in tasks.items():
        metric = next(iter(cls.metric_aliases), None) or cls.metrics[0]
        return f"{name}.{metric}=0.95"
    return "TASK.METRIC=0.95"


def parse_threshold(text: str, tasks: Mapping[str, Any], origin: str = "option") -> Threshold:
    """``TASK.METRIC=VALUE`` → Threshold; a ``ValueError`` with a usable message otherwise.
    ``tasks`` maps task names to Task classes (their ``metrics`` and ``resolve_metric``)."""
    name, sep, raw = text.partition("=")
    task, dot, metric = name.strip().partition(".")
    if not sep or not dot:
        raise ValueError(f"threshold {text!r}: expected TASK.METRIC=VALUE, e.g. {threshold_example(tasks)}")
    if task not in tasks:
        raise ValueError(f"threshold {text!r}: unknown task {task!r}; known: {', '.join(sorted(tasks))}")
    cls = tasks[task]
    key = cls.resolve_metric(metric)
    if key is None:
        known = sorted(set(cls.metrics) | set(cls.metric_aliases))
        raise ValueError(f"threshold {text!r}: unknown metric {metric!r} for {task}; known: {', '.join(known)}")
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"threshold {text!r}: {raw.strip()!r} is not a number") from None
    if not 0.0 <= value <= 1.0:  # also refuses nan and inf
        raise ValueError(f"threshold {text!r}: {raw.strip()} is not a rate between 0 and 1 "
                         "(every metric is one; 95% is 0.95)")
    return Threshold(task=task, metric=metric, key=key, value=value, origin=origin)


def evaluate_gate(thresholds: Iterable[Threshold], summary: dict[str, dict[str, Any]]) -> GateRecord | None:
    """Each threshold is met when the summary value is >= it. A ``--threshold`` whose task
    ran no case is missed (a gate that cannot be evaluated must not pass silently); an ini
    threshold whose task had no case in this run does not apply (the project's unit tests,
    or ``-m`` another task). No threshold that applies: no gate."""
    checks = []
    for t in thresholds:
        value = (summary.get(t.task) or {}).get(t.key)
        if t.task not in summary and t.origin == "ini":
            checks.append(ThresholdCheck(metric=t.label, key=t.key, threshold=t.value, value=None, passed=True,
                                         applied=False, reason=f"not applied: no {t.task} case in this run"))
            continue
        # a threshold is a minimum, but on a lower-is-better figure (the flaky share) a maximum
        passed = value is not None and (value <= t.value if t.key in LOWER_IS_BETTER else value >= t.value)
        checks.append(ThresholdCheck(metric=t.label, key=t.key, threshold=t.value, value=value, passed=passed,
                                     reason=None if value is not None else _no_value(t, summary.get(t.task))))
    if not any(c.applied for c in checks):
        return None
    return GateRecord(passed=all(c.passed for c in checks), thresholds=checks)


def _no_value(t: Threshold, summary: dict[str, Any] | None) -> str:
    """Why a threshold has no value: its task ran no case, or none of those that ran is one
    the metric applies to (``grounded``: an agent the harness gave no tools)."""
    ran = int((summary or {}).get("n_cases") or 0)
    if not ran:
        return f"no {t.task} case ran"
    applicable = int((summary or {}).get(f"{t.key}_n") or 0)
    from pytest_groundeval.scorers.grounding import NAME as GROUNDED

    why = (": grounded applies only to an agent the harness gave tools (see each case's details.grounded)"
           if t.key == GROUNDED else "")
    return f"{ran} {t.task} case(s) ran, {applicable} applicable to {t.key}{why}"


def run_gate(thresholds: Iterable[Threshold], summary: dict[str, dict[str, Any]],
             completeness: Completeness) -> GateRecord | None:
    """The gate of a run: the thresholds checked against its summary, and failed, whatever
    the metrics, when the run was cut short (the reporter's and ``groundeval merge``'s)."""
    gate = evaluate_gate(thresholds, summary)
    if gate is not None and completeness.cut_short:
        gate = gate.model_copy(update={"passed": False, "reason": f"the run was cut short: {completeness.reason}"})
    return gate
