"""The jury (``jury.py``) and its agreement figures (``agreement.py``), and how a session
gets one: :func:`configure` builds the jury from ``--judge-model`` / ``--judge-base-url`` and
hands it to every task that declares judged items (``Task.judged_items``); without
``--judge-model`` those items are unscored and the terminal says so once. Knows no task.
"""

from __future__ import annotations

from typing import Any, Mapping

NO_JURY = "no --judge-model was given: judged items are unscored (the checkable items stand alone)"


def labels(models: list[str]) -> list[str]:
    """Each judge's label: its model string, numbered when the same model sits twice."""
    out = []
    for i, m in enumerate(models):
        out.append(m if models.count(m) == 1 else f"{m}#{models[:i + 1].count(m)}")
    return out


def build_jury(settings: Any, budget: Any = None) -> Any:
    """The session's jury (None without ``--judge-model``): each judge under the agent's call
    policy, the session's budget and model-call cache."""
    models = list(getattr(settings, "judge_models", ()) or ())
    if not models:
        return None
    from pytest_groundeval.agents.spec import model_cache
    from pytest_groundeval.judges.jury import Judge, Jury

    cache = model_cache(settings.agent)
    judges = [Judge(label, model, base_url=settings.judge_base_url, timeout=settings.agent.timeout, cache=cache)
              for label, model in zip(labels(models), models)]
    return Jury(judges, policy=settings.policy, budget=budget)


def _calibration_path(task: Any, value: str, rootdir: Any) -> Any:
    """The calibration file of ``--judge-calibrate [PATH]`` for a task, checked at start."""
    from pathlib import Path

    import pytest

    from pytest_groundeval.judges.calibration import load

    if value == "default":
        from pytest_groundeval.tasks.resources import data_path

        path = data_path(*task.calibration_default.split("/"))
    else:
        path = Path(value) if Path(value).is_absolute() else Path.cwd() / value
    try:
        load(path)
    except ValueError as e:
        raise pytest.UsageError(f"groundeval: {e}") from None
    return path


class _Note:
    """Prints, once at the end, that judged items went unscored for want of a jury."""

    def __init__(self, config: Any, tasks: list[str]) -> None:
        self.config = config
        self.tasks = tasks

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        from pytest_groundeval.pytest.keys import REPORTER

        reporter = self.config.stash.get(REPORTER, None)
        record = getattr(reporter, "record", None)
        if record is None:
            return
        ran = [t for t in self.tasks if t in record.summary and record.summary[t].n_cases]
        if ran:
            terminalreporter.write_line(f"groundeval {', '.join(ran)}: {NO_JURY}")


def configure(config: Any, settings: Any, tasks: Mapping[str, Any], budget: Any = None) -> None:
    """Give every task with judged items the session's jury; with none, register the note."""
    judged = [name for name, task in tasks.items() if getattr(task, "judged_items", None)]
    if not judged:
        return
    jury = build_jury(settings, budget)
    calibrate = getattr(settings, "judge_calibrate", None)
    for name in judged:
        tasks[name].jury = jury
        if calibrate:
            tasks[name].calibration = _calibration_path(tasks[name], calibrate, getattr(settings, "rootdir", None))
    if jury is None and not getattr(settings, "is_worker", False):
        config.pluginmanager.register(_Note(config, judged), "groundeval-jury-note")
