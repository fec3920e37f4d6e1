"""pytest-timeout on eval items: a case it stops is kind ``timeout`` with one line naming the
timeout (a retryable kind: ``--resume`` runs it again), not an ``internal`` error carrying the
stack dump of every thread.

Through pytest-timeout's own hooks (``pytest_timeout_set_timer`` / ``_cancel_timer``):

* ``signal`` method: pytest-timeout's SIGALRM handler fails the test from inside the agent
  call; the timer's settings are noted on the item, and the report hook (:func:`timeout_error`)
  turns that failure into the case's ``timeout``.
* ``thread`` method: pytest-timeout dumps the stacks and ends the process (``os._exit``), so
  the case must be written down before: for eval items this plugin runs the timer, and when
  it fires it writes the case (in the journal of a single-process run; in the crash ledger of
  an xdist worker, which the controller reads when the worker dies, ``crashes.py``), then hands
  over to pytest-timeout's own ``timeout_timer`` (dump, exit).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from pytest_groundeval.pytest.items import case_ref
from pytest_groundeval.pytest.keys import EVALUATOR, REPORTER
from pytest_groundeval.model import CaseRef, ErrorInfo

ARMED = pytest.StashKey[tuple]()  # (timeout seconds, method) of the item's pytest-timeout timer
TIMER = pytest.StashKey[threading.Timer]()
MARK = "from pytest-timeout."  # the end of pytest-timeout's failure message (signal method)


def _message(timeout: float, method: str) -> str:
    return (f"pytest-timeout: the test ran longer than its timeout of {timeout:g} s ({method} method); "
            "--resume runs it again")


def timeout_error(item: pytest.Item, report: pytest.TestReport) -> ErrorInfo | None:
    """The ``timeout`` of an eval item that pytest-timeout's signal method failed, else None."""
    armed = item.stash.get(ARMED, None)
    if armed is None or not report.failed:
        return None
    text = report.longreprtext
    if f"Timeout (>{armed[0]}s) {MARK}" not in text:
        return None
    return ErrorInfo(kind="timeout", message=_message(*armed), error_class="Timeout")


class TimeoutKinds:
    @pytest.hookimpl(optionalhook=True, tryfirst=True)
    def pytest_timeout_set_timer(self, item: pytest.Item, settings: Any) -> bool | None:
        ref = case_ref(item)
        if ref is None:
            return None  # not an eval item: pytest-timeout as always
        method = settings.method
        if method == "signal" and threading.current_thread() is not threading.main_thread():
            method = "thread"  # what pytest-timeout does off the main thread
        item.stash[ARMED] = (settings.timeout, method)
        if method != "thread":
            return None  # pytest-timeout's SIGALRM fails the test; timeout_error classifies it
        timer = threading.Timer(settings.timeout, self._expired, (item, ref, settings))
        timer.daemon = True
        timer.name = f"groundeval-timeout {item.nodeid}"
        item.stash[TIMER] = timer
        timer.start()
        return True

    @pytest.hookimpl(optionalhook=True, tryfirst=True)
    def pytest_timeout_cancel_timer(self, item: pytest.Item) -> bool | None:
        timer = item.stash.get(TIMER, None)
        if timer is None:
            return None
        del item.stash[TIMER]
        timer.cancel()
        return True

    def _expired(self, item: pytest.Item, ref: CaseRef, settings: Any) -> None:
        import pytest_timeout

        if settings.disable_debugger_detection or not pytest_timeout.is_debugging():
            message = _message(settings.timeout, "thread")
            try:
                evaluator = item.config.stash.get(EVALUATOR, None)
                ledger = evaluator.ledger if evaluator is not None else None
                if ledger is not None:  # an xdist worker: the controller reads it when this process is gone
                    ledger.timed_out(ref, message)
                reporter = item.config.stash.get(REPORTER, None)
                if reporter is not None:  # the only process: the case goes in the journal
                    from pytest_groundeval.store.record import case_json
                    from pytest_groundeval.run.runner import not_run

                    error = ErrorInfo(kind="timeout", message=message, error_class="Timeout")
                    result, _, blob = case_json(evaluator.stopped(ref, error) if evaluator is not None
                                                else not_run(ref, error=error))
                    reporter._journal(blob)
            except Exception:  # noqa: BLE001 - the process ends next whatever happens here
                pass
        pytest_timeout.timeout_timer(item, settings)  # pytest-timeout's own: the stacks, then os._exit(1)


def register(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin("timeout"):
        return
    plugin = TimeoutKinds()
    config.pluginmanager.register(plugin, "groundeval-timeout")
    config.add_cleanup(lambda: config.pluginmanager.is_registered(plugin) and config.pluginmanager.unregister(plugin))
