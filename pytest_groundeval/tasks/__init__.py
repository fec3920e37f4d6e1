"""The task registry: the built-in tasks, and any installed package's tasks found through
the ``groundeval.tasks`` entry-point group, e.g. in that package's ``pyproject.toml``::

    [project.entry-points."groundeval.tasks"]
    triage = "my_package.triage:TriageTask"

A task is a :class:`Task` subclass (see ``tasks/base.py``). Nothing outside a task's own
module and its scorer names it.
"""

from __future__ import annotations

from functools import lru_cache

from .base import Case, CaseSource, ParseError, Task

ENTRY_POINT_GROUP = "groundeval.tasks"
BUILTIN = (
    "pytest_groundeval.tasks.extraction:ExtractionTask",
    "pytest_groundeval.tasks.write:WriteTask",
    "pytest_groundeval.tasks.reconciliation:ReconciliationTask",
)


class TaskLoadError(Exception):
    """A registered task cannot be loaded (names the entry point and what is wrong)."""


def _load(spec: str, origin: str) -> type[Task]:
    import importlib

    module_name, _, attr = spec.partition(":")
    try:
        obj = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except Exception as e:  # noqa: BLE001 - reported with its origin
        raise TaskLoadError(f"groundeval: task {spec!r} ({origin}) cannot be loaded: {type(e).__name__}: {e}") from e
    if not (isinstance(obj, type) and issubclass(obj, Task)):
        raise TaskLoadError(f"groundeval: task {spec!r} ({origin}) is not a pytest_groundeval.tasks.Task subclass")
    for attr_name in ("name", "description", "source", "metrics"):
        if not hasattr(obj, attr_name):
            raise TaskLoadError(f"groundeval: task {spec!r} ({origin}) does not set {attr_name!r}")
    return obj


@lru_cache(maxsize=1)
def registry() -> dict[str, type[Task]]:
    """``{name: Task subclass}``: built-ins first, then entry points, in name order."""
    from importlib.metadata import entry_points

    found: dict[str, type[Task]] = {}
    origins: dict[str, str] = {}
    specs = [(spec, "built-in") for spec in BUILTIN]
    specs += [(ep.value, f"entry point {ep.name!r} of {ep.dist.name if ep.dist else '?'}")
              for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name)]
    for spec, origin in specs:
        cls = _load(spec, origin)
        if cls.name in found:
            if found[cls.name] is cls:
                continue
            raise TaskLoadError(f"groundeval: two tasks are named {cls.name!r}: {origins[cls.name]} and {origin}")
        found[cls.name], origins[cls.name] = cls, origin
    return found


__all__ = ["ENTRY_POINT_GROUP", "Case", "CaseSource", "ParseError", "Task", "TaskLoadError", "registry"]
