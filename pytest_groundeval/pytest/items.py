"""Eval items: the case a pytest item evaluates, and what an item carries in its stash.

An eval item is a test function parametrized (``plugin.pytest_generate_tests``) with a
:class:`~pytest_groundeval.model.CaseRef` as its ``case``; everything that asks "is this an
eval item, and which case?" asks :func:`case_ref` (the plugin, the evaluator, the sharder,
the rerun guard, the timeout kinds, LangSmith's worker half). Imports only the model.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import pytest

from pytest_groundeval.model import CaseRef

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


def _prop(name: str) -> str:
    """``groundeval.<name>``, one (interned) string for every case's property of that name."""
    return sys.intern(f"groundeval.{name}")


def properties(result: "CaseResult") -> list[tuple[str, Any]]:
    """A case's outcome and figures as ``record_property`` pairs (already redacted). The
    names are one string each for every case (they are kept on every item to the end)."""
    props: list[tuple[str, Any]] = [("groundeval.task", result.task), ("groundeval.case_id", result.case_id),
                                    ("groundeval.outcome", result.outcome)]
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
