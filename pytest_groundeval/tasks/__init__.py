"""The task registry: the built-in tasks, and any installed package's tasks found through
the ``groundeval.tasks`` entry-point group, e.g. in that package's ``pyproject.toml``::

    [project.entry-points."groundeval.tasks"]
    triage = "my_package.triage:TriageTask"

A task is a :class:`Task` subclass (see ``tasks/base.py``). Nothing outside a task's own
module and its scorer names it.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

from pytest_groundeval.tasks.source import CaseSource, TaskInfo

if TYPE_CHECKING:
    from pytest_groundeval.tasks.base import Case, ParseError, Task

ENTRY_POINT_GROUP = "groundeval.tasks"

# The built-in tasks: what every pytest run registers (options, ini keys, markers) without
# importing a task module; each task class takes its name, description and source from here.
BUILTIN: dict[str, TaskInfo] = {info.name: info for info in (
    TaskInfo(
        name="extraction",
        description="read a patient's active medications (RxNorm) out of a FHIR bundle",
        source=CaseSource(
            flag="--data-dir", ini="groundeval_data_dir", default="synthea", packaged=True, key="data_dir",
            help="folder of Synthea FHIR bundles (.json / .json.gz) for the extraction suite "
            "(default: ini groundeval_data_dir, else the bundled suite's cases)"),
        spec="pytest_groundeval.tasks.extraction:ExtractionTask",
    ),
    TaskInfo(
        name="write",
        description="write a FHIR R4B MedicationStatement from a clinical note",
        source=CaseSource(
            flag="--write-cases", ini="groundeval_write_cases", default="write_cases", packaged=True,
            key="write_cases",
            help="write cases: a folder of <case_id>.json files or one JSON file holding a list of cases "
            "(default: ini groundeval_write_cases, else the bundled suite's cases)"),
        spec="pytest_groundeval.tasks.write:WriteTask",
    ),
    TaskInfo(
        name="reconciliation",
        description="reconcile a patient-reported medication list against the FHIR record",
        source=CaseSource(
            flag="--reconciliation-cases", ini="groundeval_reconciliation_cases",
            default="reconciliation", packaged=True, key="reconciliation_cases",
            help="reconciliation cases: a folder of <case_id>.json files (each naming its bundle) or one "
            "JSON file holding a list of cases "
            "(default: ini groundeval_reconciliation_cases, else the bundled suite's cases)"),
        spec="pytest_groundeval.tasks.reconciliation:ReconciliationTask",
    ),
    TaskInfo(
        name="letter",
        description="write a patient-facing letter explaining a reconciliation's medication changes",
        source=CaseSource(
            flag="--letter-cases", ini="groundeval_letter_cases", default="reconciliation", packaged=True,
            key="letter_cases",
            help="letter cases: reconciliation cases (a folder of <case_id>.json files, each naming its bundle, "
            "or one JSON file holding a list) (default: ini groundeval_letter_cases, else the bundled "
            "reconciliation suite's cases)"),
        spec="pytest_groundeval.tasks.letter:LetterTask",
    ),
    TaskInfo(
        name="orders",
        description="act on a patient's record through a FHIR server (order a test, record a vital, stop a drug), "
        "scored by the server's state",
        source=CaseSource(
            flag="--orders-cases", ini="groundeval_orders_cases", default="orders", packaged=True,
            key="orders_cases",
            help="orders cases: a folder of <case_id>.json files (each naming its seeded bundle) or one JSON "
            "file holding a list of cases (default: ini groundeval_orders_cases, else the bundled suite's cases)"),
        spec="pytest_groundeval.tasks.orders:OrdersTask",
    ),
    TaskInfo(
        name="labs",
        description="interpret a patient's lab results and vital signs read from their FHIR record (read-only)",
        source=CaseSource(
            flag="--labs-cases", ini="groundeval_labs_cases", default="labs", packaged=True, key="labs_cases",
            help="labs cases: a folder of <case_id>.json files (each naming its bundle) or one JSON file "
            "holding a list of cases (default: ini groundeval_labs_cases, else the bundled suite's cases)"),
        spec="pytest_groundeval.tasks.labs:LabsTask",
    ),
)}


def __getattr__(name: str) -> Any:  # the Task API, imported only when asked for
    if name in ("Case", "ParseError", "Task"):
        from pytest_groundeval.tasks import base

        return getattr(base, name)
    raise AttributeError(name)


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
    from pytest_groundeval.tasks.base import Task

    if not (isinstance(obj, type) and issubclass(obj, Task)):
        raise TaskLoadError(f"groundeval: task {spec!r} ({origin}) is not a pytest_groundeval.tasks.Task subclass")
    for attr_name in ("name", "description", "source", "specs"):
        if not hasattr(obj, attr_name):
            why = (" (its metrics, each a pytest_groundeval.model.MetricSpec: what kind of figure it is, which way "
                   "is better, its interval)") if attr_name == "specs" else ""
            raise TaskLoadError(f"groundeval: task {spec!r} ({origin}) does not set {attr_name!r}{why}")
    return obj


def _entry_points() -> list[tuple[str, str]]:
    """The installed ``groundeval.tasks`` entry points, as ``(module:Class, origin)``. Most
    environments hold none: a search of each distribution's ``entry_points.txt`` text for the
    group's name says so without parsing every file (about a third of the time, on every
    pytest start-up); any mention, and ``entry_points`` itself reads them all."""
    from importlib.metadata import distributions, entry_points

    if not any(ENTRY_POINT_GROUP in (d.read_text("entry_points.txt") or "") for d in distributions()):
        return []
    return [(ep.value, f"entry point {ep.name!r} of {ep.dist.name if ep.dist else '?'}")
            for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name)]


@lru_cache(maxsize=1)
def task_infos() -> dict[str, TaskInfo]:
    """``{name: TaskInfo}`` for start-up: the built-ins as declared above (no import), and
    installed packages' tasks (their modules are imported: the class holds the facts)."""
    infos = dict(BUILTIN)
    for spec, origin in _entry_points():
        cls = _load(spec, origin)
        if cls.name in infos and infos[cls.name].spec != spec:
            raise TaskLoadError(f"groundeval: two tasks are named {cls.name!r}: "
                                f"{'built-in' if cls.name in BUILTIN else 'an entry point'} and {origin}")
        infos[cls.name] = TaskInfo(name=cls.name, description=cls.description, source=cls.source, spec=spec)
    return infos


@lru_cache(maxsize=1)
def registry() -> dict[str, type[Task]]:
    """``{name: Task subclass}``: built-ins first, then entry points, in name order."""
    found: dict[str, type[Task]] = {}
    origins: dict[str, str] = {}
    specs = [(info.spec, "built-in") for info in BUILTIN.values()] + _entry_points()
    for spec, origin in specs:
        cls = _load(spec, origin)
        if cls.name in found:
            if found[cls.name] is cls:
                continue
            raise TaskLoadError(f"groundeval: two tasks are named {cls.name!r}: {origins[cls.name]} and {origin}")
        found[cls.name], origins[cls.name] = cls, origin
    return found


__all__ = ["BUILTIN", "ENTRY_POINT_GROUP", "Case", "CaseSource", "ParseError", "Task", "TaskInfo", "TaskLoadError",
           "registry", "task_infos"]
