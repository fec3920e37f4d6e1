"""LangSmith in a pytest session: which halves a process gets (``register``).

With ``LANGSMITH_API_KEY`` set (and LangSmith's own ``LANGSMITH_TRACING`` not off) every
process groundeval is set up in gets the worker half (``worker.py``: it acts where items
run), and the process that makes the record also gets the controller half
(``controller.py``); each is under its own stash key (``pytest/keys.py``). Without the key
nothing is registered and nothing imported.
"""

from __future__ import annotations

import os
import uuid
from typing import Any, Mapping

import pytest

from pytest_groundeval.integrations.langsmith.common import WORKER_KEY, _relative, _scrub, api_key, git_metadata
from pytest_groundeval.pytest.keys import LANGSMITH_CONTROLLER, LANGSMITH_WORKER


def register(config: pytest.Config, settings: Any, evaluator: Any, reporter: Any = None,
             environ: Mapping[str, str] = os.environ) -> Any:
    """The session's worker half (registered; the evaluator hands its case traces to the
    runner), and with a ``reporter`` the controller half; None without LangSmith."""
    key = api_key(environ)
    if key is None:
        return None
    from pytest_groundeval.integrations.langsmith.worker import LangSmithWorker

    given = (getattr(config, "workerinput", None) or {}).get(WORKER_KEY)
    if isinstance(given, Mapping):  # an xdist worker: as its controller named the session
        run_id, prefix, metadata = str(given["run_id"]), str(given["prefix"]), dict(given["metadata"])
    else:
        from pytest_groundeval.store.record import git_info

        run_id = reporter.run_id if reporter is not None else \
            "xdist-" + (environ.get("PYTEST_XDIST_TESTRUNUID") or uuid.uuid4().hex)[:12]
        prefix = (environ.get("LANGSMITH_EXPERIMENT") or "").strip() or settings.agent.name
        git = reporter.git if reporter is not None else git_info(settings.rootdir)  # the record's, read now
        metadata = {"groundeval_run_id": run_id, "agent": settings.agent.name, "model": settings.agent.model,
                    "mode": settings.mode, "stored_run": settings.stored_spec,
                    "git_sha": git.commit if git is not None else None,
                    # the SDK's experiment block (evaluate(): metadata["git"]), its commit, branch and dirty
                    "git": git_metadata(git),
                    # as evaluate(..., num_repetitions=N) sends it: N results per example (--repeat N)
                    "num_repetitions": settings.repeat,
                    "record_path": _relative(reporter.path, settings.rootdir) if reporter is not None else None}
    session = {"api_key": key, "endpoint": (environ.get("LANGSMITH_ENDPOINT") or "").strip() or None,
               "run_id": run_id, "prefix": prefix, "metadata": _scrub(metadata)}
    worker = LangSmithWorker(evaluator=evaluator, **session)
    config.pluginmanager.register(worker, "groundeval-langsmith")
    config.stash[LANGSMITH_WORKER] = worker
    evaluator.observe(tracer=worker.case_trace)
    if reporter is not None:
        from pytest_groundeval.integrations.langsmith.controller import LangSmithController

        controller = LangSmithController(local=worker, **session)
        config.pluginmanager.register(controller, "groundeval-langsmith-controller")
        config.stash[LANGSMITH_CONTROLLER] = controller
    return worker
