"""The session's groundeval objects, each under its own ``pytest.StashKey`` on
``config.stash`` (as pytest's junitxml keeps its ``LogXML``): found by key, never by plugin
name or through a process global, so nested sessions (pytester) each see their own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_groundeval.pytest.crashes import CrashLedgers
    from pytest_groundeval.integrations.langsmith.controller import LangSmithController
    from pytest_groundeval.integrations.langsmith.worker import LangSmithWorker
    from pytest_groundeval.pytest.evaluator import Evaluator
    from pytest_groundeval.pytest.reporter import Reporter
    from pytest_groundeval.pytest.reruns import Reruns
    from pytest_groundeval.pytest.shard import Sharder
    from pytest_groundeval.pytest.workeroutput import WorkerOutput
    from pytest_groundeval.fhir.server.manager import FhirServer

EVALUATOR = pytest.StashKey["Evaluator"]()  # every process that runs items (and the controller)
REPORTER = pytest.StashKey["Reporter"]()  # the controller (or the only process) only
SHARDER = pytest.StashKey["Sharder"]()  # --groundeval-shard K/N
CRASHES = pytest.StashKey["CrashLedgers"]()  # an xdist controller: what a dead worker was doing
LANGSMITH_WORKER = pytest.StashKey["LangSmithWorker"]()  # LangSmith on, where items run
LANGSMITH_CONTROLLER = pytest.StashKey["LangSmithController"]()  # LangSmith on, the controller
RERUNS = pytest.StashKey["Reruns"]()  # every process groundeval is set up in
#: on a TestReport (not a stash: the report travels through xdist as plain data): True for an
#: errored eval case, which pytest then counts as an error (outcomes.py)
ERROR_ATTR = "groundeval_error"
WORKER_OUTPUT = pytest.StashKey["WorkerOutput"]()  # what this process reports of its session (workeroutput.py)
FHIR_SERVER = pytest.StashKey["FhirServer"]()  # a process whose tasks use the FHIR server (started on first use)


def listing_only(config: pytest.Config) -> bool:
    """A session that collects and lists, running no item: ``--collect-only``, ``--fixtures``,
    ``--fixtures-per-test`` (nothing to record, prefetch or report)."""
    option = config.option
    return bool(getattr(option, "collectonly", False) or getattr(option, "showfixtures", False)
                or getattr(option, "show_fixtures_per_test", False))
