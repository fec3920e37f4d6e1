"""The project's own conftest: pytester drives the plugin's own tests (tests/) in isolated
pytest runs, and the whole of ``tests/`` runs on xdist workers.

Most of ``tests/`` is whole pytest sessions in subprocesses (the plugin as a user runs it);
one at a time they leave a core idle while each one starts up. ``pytest tests`` (the README's
test command, also bare ``pytest``, whose testpaths is tests/) therefore runs on one xdist
worker per core, at most 4; choose otherwise with ``-n N`` (``-n 0``: in this process, serially)
or ``GROUNDEVAL_TESTS_WORKERS=N``. A selection (``pytest tests/test_x.py``, ``-k``, ``--lf``),
``--collect-only`` and ``--pdb`` stay in-process, and so does ``pytest evals``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

TESTS = Path(__file__).resolve().parent / "tests"


def _whole_suite(config: pytest.Config) -> bool:
    args = [a for a in config.args if not a.startswith("-")] or list(config.getini("testpaths"))
    paths = {(Path(config.invocation_params.dir) / a).resolve() for a in args}
    return paths == {TESTS} and not config.option.keyword and not config.option.markexpr \
        and not config.getoption("lf", False) and not config.getoption("failedfirst", False)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """Before xdist's own ``pytest_cmdline_main`` turns ``-n`` into workers: ``-n`` for the
    whole suite when none was given (this is an initial conftest, so the hook is called)."""
    if not config.pluginmanager.hasplugin("xdist") or hasattr(config, "workerinput"):
        return
    if config.option.numprocesses is not None or config.option.dist != "no":
        return  # the user chose
    if config.option.collectonly or config.getoption("usepdb", False) or not _whole_suite(config):
        return
    wanted = os.environ.get("GROUNDEVAL_TESTS_WORKERS")
    workers = int(wanted) if wanted and wanted.isdigit() else min(os.cpu_count() or 1, 4)
    if workers > 1:
        config.option.numprocesses = workers
