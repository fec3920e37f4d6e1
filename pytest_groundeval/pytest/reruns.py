"""Reruns cannot replace a result (pytest-rerunfailures, pytest-retry), and repeats cannot
multiply one (pytest-repeat).

A case's result is its first execution's. A plugin that re-runs failed tests would turn an
agent that is wrong on its first try and right on its second into a pass (and call the agent
again, its usage unrecorded). Flakiness is what ``--repeat`` measures; transient agent errors
are what ``--agent-retries`` handles. So:

1. Eval items opt out of both plugins through their documented per-test marker: ``flaky``
   with ``condition=False`` (rerunfailures and pytest-retry both skip a test whose marker
   condition is false, whatever ``--reruns``, ``--force-reruns``, ``--reruns-mode append`` or
   ``--retries`` say, in ini ``addopts`` too), put first among the item's own markers so it is
   the one both read. One terminal line says so when such a plugin is set to rerun.
2. An item whose call phase runs again in the same process anyway (a plugin that ignores the
   marker) does not call the agent again: ``evaluate`` reports the item's first result again
   (:func:`first_result`), and no call is prefetched for it.
3. A report for a case that already has a result (another process ran it again:
   pytest-rerunfailures reschedules the item of a crashed xdist worker) is made to agree with
   the first result (outcome, longrepr, junitxml properties) before pytest's counts, junitxml,
   the exit status or the reporter see it; the reporter keeps that execution apart, with its
   usage (``RunRecord.reruns``), never as the case's result.
4. pytest-repeat (``--count N``, or a ``repeat(N)`` marker on the test) would make N items of
   each case under ids ``<case>-1-N`` ...: one case, one result, so N - 1 of them would be
   "selected cases with no result" and the record would say the run was cut short, and no
   repeat would be measured. An eval test function gets ``repeat(1)`` first among its markers
   (pytest-repeat's own per-test setting, read before its ``--count``), so each case is one
   item; one terminal line says so (a ``repeat`` marker of the test's own: a warning naming
   the test) and points at ``--repeat N``, which runs each case N times and reports pass^k.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import pytest

from pytest_groundeval.pytest.items import REPORT_ATTR, RESULT, case_ref, properties
from pytest_groundeval.pytest.keys import REPORTER

if TYPE_CHECKING:
    from pytest_groundeval.model import CaseResult

#: the plugins that re-run failed tests, by module (whatever name they were registered under)
RERUN_PLUGINS = MappingProxyType({"pytest_rerunfailures": "pytest-rerunfailures",
                                  "pytest_retry.retry_plugin": "pytest-retry"})
#: their shared per-test marker, as both read it: no reruns, no retries, and a false condition
#: (the one switch each honours even under --force-reruns / --reruns-mode append)
EXEMPT = MappingProxyType({"reruns": 0, "retries": 0, "condition": False})


#: the plugin that repeats every test (module name) and its distribution name
REPEAT_PLUGIN = ("pytest_repeat", "pytest-repeat")


def repeat_loaded(config: pytest.Config) -> bool:
    return any(getattr(p, "__name__", None) == REPEAT_PLUGIN[0] for p in config.pluginmanager.get_plugins())


def repeat_setting(config: pytest.Config) -> str | None:
    """pytest-repeat's ``--count N`` when it is loaded and N > 1, as the user wrote it."""
    if not repeat_loaded(config):
        return None
    try:
        count = int(config.getoption("count"))
    except (ValueError, TypeError):
        return None
    return f"--count {count}" if count > 1 else None


def exempt_from_repeats(metafunc: pytest.Metafunc) -> None:
    """An eval test function is run once per case whatever pytest-repeat is told (module
    docstring, 4); called from groundeval's ``pytest_generate_tests``, which pluggy runs before
    pytest-repeat's (``trylast``). Without pytest-repeat nothing is marked (``repeat`` is then
    no registered marker: ``--strict-markers`` would refuse it)."""
    if not repeat_loaded(metafunc.config):
        return
    own = metafunc.definition.get_closest_marker("repeat")
    if own is not None and own.args and own.args[0] != 1:
        import warnings

        warnings.warn(pytest.PytestWarning(
            f"groundeval: {metafunc.definition.nodeid}: the test's repeat({own.args[0]}) marker does not repeat eval "
            "cases (one case, one result); --repeat N runs each case N times and reports pass^k"), stacklevel=1)
    metafunc.definition.add_marker(pytest.mark.repeat(1), append=False)


def first_result(item: pytest.Item | None) -> "CaseResult | None":
    """The result this item's case already produced in this session (its call phase ran
    before), else None."""
    return item.stash.get(RESULT, None) if item is not None else None


def rerun_plugins(config: pytest.Config) -> list[str]:
    """The rerun plugins loaded in this session (distribution names)."""
    loaded = {getattr(p, "__name__", None) for p in config.pluginmanager.get_plugins()}
    return [dist for module, dist in RERUN_PLUGINS.items() if module in loaded]


def _value(config: pytest.Config, option: str, ini: str | None) -> int | None:
    try:
        value = config.getoption(option)
    except ValueError:  # the plugin is not loaded
        return None
    if value is None and ini is not None:
        try:
            value = int(config.getini(ini))
        except (TypeError, ValueError):
            return None
    return value


def rerun_settings(config: pytest.Config) -> list[str]:
    """The session's settings that would re-run failed tests, as a user writes them."""
    found = []
    for option, ini, flag in (("force_reruns", None, "--force-reruns"), ("reruns", "reruns", "--reruns"),
                              ("retries", "retries", "--retries")):
        value = _value(config, option, ini)
        if value:
            found.append(f"{flag} {value}")
    return found


def _key(data: Any) -> tuple | None:
    try:
        task, case_id, repeat = data["task"], data["case_id"], data.get("repeat")
    except (TypeError, KeyError):
        return None
    return (task, case_id) if repeat is None else (task, case_id, repeat)


def _props_key(props: list[tuple[str, Any]]) -> tuple | None:
    found = {k: v for k, v in props if k in ("groundeval.task", "groundeval.case_id", "groundeval.repeat")}
    if "groundeval.task" not in found or "groundeval.case_id" not in found:
        return None
    return _key({"task": found["groundeval.task"], "case_id": found["groundeval.case_id"],
                 "repeat": found.get("groundeval.repeat")})


class Reruns:
    """Registered in every process groundeval is set up in (``plugin._ensure``)."""

    froze = False  # (plugin.pytest_unconfigure reads it off every groundeval plugin)

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.plugins = rerun_plugins(config)
        self.settings = rerun_settings(config) if self.plugins else []
        self.repeat = repeat_setting(config)  # pytest-repeat's --count N (N > 1), else None
        self.attr = REPORT_ATTR
        self.reporter = config.stash.get(REPORTER, None)  # the controller's, else None
        self.again: set[tuple] = set()  # (controller) cases reported more than once

    # -- 1. the marker --
    @pytest.hookimpl(tryfirst=True)  # before pytest-retry marks every item flaky(retries=N)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        """Where a plugin would re-run an eval item (a rerun setting, or a ``flaky`` marker of
        the test's own), the item gets the opt-out; elsewhere the plugins leave it alone as it is
        (a marked item takes pytest-rerunfailures' own protocol, a status-DB round trip per item
        under xdist)."""
        if not self.plugins:
            return
        mark = pytest.mark.flaky(**EXEMPT)
        for item in items:
            if case_ref(item) is not None and (self.settings or item.get_closest_marker("flaky") is not None):
                item.add_marker(mark, append=False)  # before any flaky marker of the test's own

    # -- 3. a later report of a case agrees with its first result --
    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> Any:
        if self.reporter is not None:
            self._agree(report, self.reporter.results)
        return (yield)

    def _agree(self, report: pytest.TestReport, results: dict[tuple, "CaseResult"]) -> None:
        data = getattr(report, self.attr, None)
        if data is not None:
            key = _key(data)
            first = results.get(key) if key is not None else None
            if first is None:
                return  # the case's first report (the common path: one lookup)
            self.again.add(key)
            _set_outcome(report, first)
        elif self.again and report.when == "teardown" and report.user_properties:
            key = _props_key(report.user_properties)
            first = results.get(key) if key is not None else None
            if first is not None and key in self.again:
                # junitxml reads a testcase's properties off its teardown report

                suite = dict(report.user_properties).get("groundeval.suite")
                report.user_properties = [(k, v) for k, v in report.user_properties
                                          if not str(k).startswith("groundeval.")] + properties(first, suite)

    # -- the one terminal line --
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        reporter = self.reporter
        if reporter is None or reporter.record is None:
            return  # no eval case ran
        if self.again:
            from pytest_groundeval.reporting.terminal import plural

            later = len(reporter.record.reruns or [])
            terminalreporter.write_line(
                f"groundeval: {plural(len(self.again), 'case')} ran again (a plugin re-ran the item): each keeps its first "
                f"result; {plural(later, 'later execution')} with an agent call are in the record's reruns, with their usage",
                yellow=True)
        if self.repeat is not None:
            terminalreporter.write_line(
                f"groundeval: eval cases are not repeated by {REPEAT_PLUGIN[1]} ({self.repeat}): each case runs once "
                "and has one result; --repeat N runs each case N times and reports pass^k", yellow=True)
        if not self.settings:
            return  # no rerun asked for
        terminalreporter.write_line(
            f"groundeval: eval cases are not re-run by {' / '.join(self.plugins)} ({', '.join(self.settings)}): "
            "a case's first result stands; --repeat N measures flakiness, --agent-retries N retries "
            "transient agent errors", yellow=True)


def _set_outcome(report: pytest.TestReport, first: "CaseResult") -> None:
    """The report of a later execution says what the case's first result says."""
    from pytest_groundeval.pytest.outcomes import ERROR_ATTR, not_run
    from pytest_groundeval.store.record import escape_unencodable
    from pytest_groundeval.store.redact import redact_text

    if report.outcome not in ("passed", "failed", "skipped"):
        return  # a plugin's own outcome for an attempt it will repeat ("rerun", "retried"): not counted
    if first.outcome == "passed":
        report.outcome, report.longrepr = "passed", None
    elif first.outcome == "skipped" or not_run(first):  # (a case not run is a skip: outcomes.py)
        path, lineno = report.location[0], report.location[1]
        report.outcome, report.longrepr = "skipped", (str(path), lineno if lineno is not None else -1,
                                                      f"Skipped: {first.reason}")
    else:
        label = "ERROR" if first.outcome == "error" else "FAILED"
        report.outcome = "failed"
        if first.outcome == "error":
            setattr(report, ERROR_ATTR, True)  # a pytest error, as its first report was
        report.longrepr = redact_text(escape_unencodable(
            f"{label} {first.task}:{first.case_id}: {first.reason} (its first result: this case ran again, "
            "which cannot replace it)"))
