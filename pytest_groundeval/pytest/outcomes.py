"""pytest's words for a case's outcome, the same as the record's.

=================  ========================  =====================================
record              groundeval's terminal     pytest (letter, count, junitxml)
=================  ========================  =====================================
``passed``          passed                    ``.`` passed
``failed``          failed                    ``F`` failed, ``<failure>``
``error``           errors                    ``E`` errors, ``<error>``
``error``, not run  not run                   ``s`` skipped (the reason), ``<skipped>``
``skipped``         skipped                   ``s`` skipped, ``<skipped>``
=================  ========================  =====================================

A case **not run** is an errored case whose error says so (``ErrorInfo.not_run``; its message
begins "not run" for people): the harness never asked the agent, or was stopped before its
answer (``--max-cost`` had no room for it, with ``--batch`` too, the stop after
identical agent errors, a task's prerequisite missing such as its FHIR server, another
case's crash): pytest skips it, with that reason. It still counts in the record's
``n_errors`` and as 0 in the rates, so the gate and the exit status do not change
(``reporter.py``: a run with a case not run never exits 0 by itself).

An errored case is a test that failed in its call phase, as pytest reports it (so ``-x``,
``--maxfail`` and the exit status count it); :func:`teststatus` (the public
``pytest_report_teststatus`` hook) files it under pytest's "error" category, as pytest
files a failing fixture: the letter ``E``, the word ``ERROR``, the count "errors". The
report carries that as one plain attribute (:data:`ERROR_ATTR`), so it holds through
pytest-xdist and for every later reader of the report (the short test summary asks again).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from pytest_groundeval.pytest.keys import ERROR_ATTR  # True on the report of an errored eval case
from pytest_groundeval.reporting.terminal import agent_frame, not_run  # the record's words

if TYPE_CHECKING:
    import pytest

    from pytest_groundeval.model import CaseResult
def line(result: "CaseResult", tbstyle: str | None = None) -> str:
    """What pytest says of a failed or errored case (its short test summary's message): the
    reason, where the agent failed (from the kept traceback), and that traceback when ``--tb``
    asks for one."""
    from pytest_groundeval.store.record import escape_unencodable
    from pytest_groundeval.store.redact import redact_text

    text = result.reason or result.outcome
    error = result.error
    if error is not None and error.kind == "agent" and error.traceback:
        where = agent_frame(error.traceback)
        text += f" (at {where})" if where else ""
        if tbstyle in ("long", "short", "native"):
            text += "\n" + error.traceback  # the agent's own traceback, as --tb asked
    return redact_text(escape_unencodable(text))


def apply(report: "pytest.TestReport", result: "CaseResult", where: Callable[[], tuple[str, int]], *,
          tbstyle: str | None = None, evaluated: bool = False) -> None:
    """The call report of an eval item (or xdist's report of its crash) says what its result
    says. ``where``: gives the test's file and line (a skip's location, as pytest's own skip
    marks give it; asked for only when the case is skipped). ``evaluated``: the item's ``evaluate`` produced ``result`` and raised for it (its
    message becomes the case's line); otherwise pytest's own report (a traceback of the test's
    own, pytest-timeout's) is kept, only classified."""
    if report.when not in ("call", "???") or result.outcome == "passed":  # (xdist's crash reports: "???")
        return
    if result.outcome == "skipped" or not_run(result):
        path, lineno = where()  # (asked only for a skip)
        report.outcome, report.longrepr = "skipped", (path, lineno, f"Skipped: {result.reason or 'skipped'}")
        return
    if report.skipped:
        return  # pytest skipped it (a skip of the test's own): its report stands
    report.outcome = "failed"
    if evaluated:
        report.longrepr = line(result, tbstyle)
    if result.outcome == "error":
        setattr(report, ERROR_ATTR, True)


def item_location(item: "pytest.Item") -> tuple[str, int]:
    """Where an item's test is, as a skip report says it (file, 1-based line)."""
    path, lineno = item.reportinfo()[:2]
    return str(path), (lineno if lineno is not None else -1) + 1


def teststatus(report: "pytest.TestReport") -> tuple[str, str, tuple[str, dict[str, bool]]] | None:
    """``pytest_report_teststatus`` for an errored eval case: pytest's "error" category."""
    if report.failed and getattr(report, ERROR_ATTR, False) and not hasattr(report, "wasxfail"):
        return "error", "E", ("ERROR", {"red": True})
    return None


__all__ = ["ERROR_ATTR", "apply", "item_location", "line", "not_run", "teststatus"]
