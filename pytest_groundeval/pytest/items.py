"""Eval items: the case a pytest item evaluates, and what an item carries in its stash.

An eval item is a test function parametrized (``plugin.pytest_generate_tests``) with a
:class:`~pytest_groundeval.model.CaseRef` as its ``case``; everything that asks "is this an
eval item, and which case?" asks :func:`case_ref` (the plugin, the evaluator, the sharder,
the rerun guard, the timeout kinds, LangSmith's worker half). Imports only the model.

**Suites.** A suite is one test file's eval test function of a task: a bundled suite (a file
of the package's ``suites``, or of this source checkout's ``evals/``) is named
``groundeval.<task>``, any other by its file's dotted path from the rootdir
(``evals/test_write.py`` → ``evals.test_write``). The name is junitxml's classname.

Where a session collects more than one suite of a task (the bundled suites beside a project's
own ``./evals``), the cases' ids are namespaced by their suite, so each suite's cases run side
by side, each once under its own id in the record, shards, merge, compare, ``--resume``,
history and the rerun guard: the bundled suite's cases keep their ids as in the cases source,
every other suite's are ``<suite>/<id>`` (``evals.test_write/my-case``). A task's only suite
keeps the source's ids. So an id without a namespace is the bundled suite's case, or the case
of the task's only suite: what every record written before namespacing holds.

The item's pytest id stays the case's id in its source (the node id already names the file).
Two eval test functions of one task in one file would be one suite: a usage error says so.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

import pytest

from pytest_groundeval.model import CaseRef, in_suite

if TYPE_CHECKING:
    from pytest_groundeval.model import CaseResult

REPORT_ATTR = "groundeval"  # the attribute of a TestReport that carries its case result (plain data)
RESULT = pytest.StashKey["CaseResult"]()  # the item's case result, set by evaluate()
NEXT_ITEM = pytest.StashKey["pytest.Item | None"]()  # an xdist worker's next item (the prefetch)


def case_ref(item: Any) -> CaseRef | None:
    """The case an eval item evaluates; None for any other item."""
    callspec = getattr(item, "callspec", None)
    ref = callspec.params.get("case") if callspec is not None else None
    return ref if isinstance(ref, CaseRef) else None


SUITES = pytest.StashKey[dict[tuple[str, str], str]]()  # (task, suite) -> the test function naming it
BUNDLED_PREFIX = "groundeval."


@dataclasses.dataclass(frozen=True)
class Suite:
    """The suite an eval test function's items belong to (module docstring)."""

    name: str
    bundled: bool

    def namespace(self, refs: Iterable[CaseRef]) -> list[CaseRef]:
        """The suite's items for these refs of its task's cases source."""
        return [in_suite(r, self.name, self.bundled) for r in refs]


@functools.cache
def _bundled_dirs() -> tuple[Path, ...]:
    package = Path(__file__).resolve().parent.parent
    dirs = [package / "suites"]  # the installed wheel's
    if (package.parent / "pyproject.toml").is_file():  # a source checkout: its evals/ is the suites' source
        dirs.append(package.parent / "evals")
    return tuple(dirs)


def suite_of(rootpath: Path, path: Path, task: str) -> Suite:
    """The suite of a test file's eval test function of ``task``."""
    path = Path(path).resolve()
    if path.parent in _bundled_dirs():
        return Suite(BUNDLED_PREFIX + task, bundled=True)
    try:
        rel = path.relative_to(Path(rootpath).resolve())
    except ValueError:  # a file outside the rootdir: its module name
        rel = Path(path.name)
    return Suite(".".join(rel.with_suffix("").parts), bundled=False)


def suite_for_test(config: pytest.Config, definition: Any, task: str) -> Suite:
    """The suite of the eval test function being parametrized; a usage error when another
    function of the same task already claimed that suite (one file, two eval tests of a task)."""
    suite = suite_of(config.rootpath, definition.path, task)
    claimed = config.stash.setdefault(SUITES, {})
    function = definition.nodeid.split("[", 1)[0]
    other = claimed.setdefault((task, suite.name), function)
    if other != function:
        raise pytest.UsageError(
            f"groundeval: {other} and {function} both run {task} cases as the suite {suite.name}: their cases would "
            "have the same ids; put each eval test function of a task in its own file")
    return suite


def settle_suites(config: pytest.Config, items: list[Any]) -> None:
    """A task whose eval test functions in this session's collection are one suite that is not
    bundled: its items get their cases' source ids back (module docstring). Decided from every
    function collected (``suite_for_test``'s claims), so whichever plugin asks first (the
    evaluator, the sharder) and whatever ``-k`` / ``-m`` deselect, the ids are the same."""
    suites: dict[str, int] = {}
    for task, _ in config.stash.get(SUITES, {}):
        suites[task] = suites.get(task, 0) + 1
    for item in items:
        ref = case_ref(item)
        if ref is not None and suites.get(ref.task) == 1 and ref.source_id != ref.case_id:
            # (the dict is the item's own; the fixture reads it at setup)
            item.callspec.params["case"] = dataclasses.replace(ref, case_id=ref.source_id)


def crashed_refs(rootpath: Path, nodeid: str, find_case: Callable[[str], list[CaseRef]],
                 collected: Iterable[str] = (), source_ids: Callable[[str], set[str]] = lambda task: set()) -> list[CaseRef]:
    """The case of the eval item ``nodeid`` (a crashed xdist worker's item, known by node id
    only, on a controller that collected nothing): ``find_case`` gives the source's refs with
    that item id; each is namespaced by the suite of the node id's file when ``collected`` (the
    node ids the workers collected) shows another file with items of that task (ids among
    ``source_ids(task)``, or the task's bundled suite), as ``settle_suites`` decided there."""
    if not (nodeid.endswith("]") and "[" in nodeid):
        return []
    item_id = nodeid.split("[", 1)[1][:-1]
    path = Path(rootpath) / nodeid.split("::", 1)[0]
    files: dict[str, set[str]] = {}
    for other in collected:
        if other.endswith("]") and "[" in other:
            files.setdefault(other.split("::", 1)[0], set()).add(other.split("[", 1)[1][:-1])
    files.pop(nodeid.split("::", 1)[0], None)
    out = []
    for ref in find_case(item_id):
        suite = suite_of(rootpath, path, ref.task)
        ids = source_ids(ref.task) if files else set()
        shared = any(suite_of(rootpath, Path(rootpath) / f, ref.task).bundled and Path(f).stem == f"test_{ref.task}"
                     or (ids and items & ids) for f, items in files.items())
        out.append(suite.namespace([ref])[0] if shared else dataclasses.replace(ref, suite=suite.name))
    return out


def _prop(name: str) -> str:
    """``groundeval.<name>``, one (interned) string for every case's property of that name."""
    return sys.intern(f"groundeval.{name}")


def properties(result: "CaseResult", suite: str | None = None) -> list[tuple[str, Any]]:
    """A case's outcome and figures as ``record_property`` pairs (already redacted). The
    names are one string each for every case (they are kept on every item to the end).
    ``suite`` (the item's) becomes junitxml's classname (``junit.py``)."""
    props: list[tuple[str, Any]] = [("groundeval.task", result.task), ("groundeval.case_id", result.case_id),
                                    ("groundeval.outcome", result.outcome)]
    if suite is not None:
        props.append(("groundeval.suite", suite))
    if result.repeat is not None:
        props.append(("groundeval.repeat", result.repeat))
    if result.error is not None:
        props.append(("groundeval.error_kind", result.error.kind))
    if result.score is not None:
        props += [(_prop(name), value) for name, value in result.score.metrics.items()]
        props += [(_prop(name), "pass" if dim.passed else "fail") for name, dim in result.score.dimensions.items()]
    if result.cost_usd is not None:
        props.append(("groundeval.cost_usd", result.cost_usd))
    return props
