"""The pytest plugin (the ``pytest11`` entry point): options, markers, cases as
parametrized items, the fixtures, and the report hook that puts each case's result on its
item's ``TestReport``.

pytest is the runner. Each case is one item (id = case id). Settings are parsed once
(``options.Settings``). Every process that runs items has an ``Evaluator``
(``evaluator.py``); only the controller has the ``Reporter`` (``reporter.py``), which turns
the reports it receives (its own, or those of xdist workers) into the journal, the record,
the gate and the terminal summary; each is found under its stash key (``keys.py``), and
what a worker says of its session travels in one typed ``WorkerOutput``
(``workeroutput.py``). Nothing here knows a task: they come from the registry.
"""

from __future__ import annotations

import gc
import os
import types
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_groundeval.pytest.keys import ERROR_ATTR, EVALUATOR, REPORTER
from pytest_groundeval.pytest.options import add_options, option_defaults
from pytest_groundeval.tasks import TaskLoadError, task_infos

if TYPE_CHECKING:
    from pytest_groundeval.model import CaseResult
    from pytest_groundeval.pytest.evaluator import Evaluator

# Start-up is lazy: registering the options and markers imports only ``options`` and the
# task declarations (``tasks/source.py``). The rest of groundeval (settings, the evaluator,
# the reporter, pydantic) is set up at configure time when the run asks for groundeval (one
# of its options given, or an xdist controller), else when collection first meets an eval
# test; a pytest run with no eval item imports nothing more (scripts/bench_startup.py).
FROZE = pytest.StashKey[bool]()
DEFAULTS = pytest.StashKey[dict]()


def _infos() -> dict[str, Any]:
    try:
        return task_infos()
    except TaskLoadError as e:
        raise _redacted(pytest.UsageError(str(e))) from None


def _registry() -> dict[str, Any]:
    from pytest_groundeval.tasks import registry

    try:
        return registry()
    except TaskLoadError as e:
        raise _redacted(pytest.UsageError(str(e))) from None


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser, _infos())


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """A clean-up registered before pytest's own (clean-ups run last-in, first-out), so it runs
    after them: pytest's final ``gc.collect()`` skips what the session froze, then this hands
    it back to the garbage collector (for a pytest run inside a longer-lived process)."""
    def unfreeze() -> None:
        if config.stash.get(FROZE, False):
            gc.unfreeze()

    config.add_cleanup(unfreeze)


def _asked_for(config: pytest.Config) -> bool:
    """Does this run ask for groundeval up front: one of its options given (their values are
    checked at start), or an xdist controller (it collects nothing itself)?"""
    if any(getattr(config.option, dest, default) != default for dest, default in option_defaults(_infos()).items()):
        return True
    return config.pluginmanager.has_plugin("dsession")


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_fixtures(config), "groundeval-fixtures")
    for name, info in _infos().items():
        config.addinivalue_line("markers", f"{name}: groundeval {name} eval cases ({info.description})")
    if _asked_for(config):
        _ensure(config)


@pytest.hookimpl(tryfirst=True)
def pytest_warning_recorded(warning_message: Any, when: str, nodeid: str, location: Any) -> None:
    """A warning, as pytest's warnings summary (and any other reporter) will show it: through
    the redaction step, in place (an agent or library that passes a key to ``warnings.warn``)."""
    from pytest_groundeval.store.redact import redact_text

    message = warning_message.message
    text = str(message)
    red = redact_text(text)
    if red != text:
        try:
            warning_message.message = type(message)(red) if isinstance(message, Warning) else red
        except Exception:  # noqa: BLE001 - a warning class with another constructor: its text alone
            warning_message.message = UserWarning(red)


def _redacted(error: pytest.UsageError) -> pytest.UsageError:
    """A usage error as the terminal may show it: through the redaction step (``redact.py``)."""
    from pytest_groundeval.store.redact import redact_text

    return pytest.UsageError(redact_text(str(error)))


def _ensure(config: pytest.Config) -> "Evaluator":
    """Set groundeval up for this session (once): settings, the evaluator, and on the
    controller the reporter. Every usage error on the way (options, the stored run, the
    preflight) goes through the redaction step."""
    evaluator = config.stash.get(EVALUATOR, None)
    if evaluator is not None:
        return evaluator
    from pytest_groundeval.store import redact

    # the session's secrets, read once (also the credentials of --model-base-url)
    redact.configure(urls=[config.getoption("groundeval_base_url", None)])
    try:
        return _set_up(config)
    except pytest.UsageError as e:
        raise _redacted(e) from None


def _set_up(config: pytest.Config) -> "Evaluator":
    from pytest_groundeval.integrations.langsmith.common import api_key as langsmith_key
    from pytest_groundeval.pytest.evaluator import Evaluator, load_stored
    from pytest_groundeval.pytest.settings import Settings
    from pytest_groundeval.pytest.reporter import Reporter
    from pytest_groundeval.pytest.shard import register_sharder
    from pytest_groundeval.pytest.workeroutput import current

    classes = _registry()
    settings = Settings.from_config(config, classes)
    problem = settings.agent.check(needs_key=settings.mode != "rescore", check_model=settings.preflight)
    if problem:
        raise pytest.UsageError(f"groundeval: {problem}")
    tasks = {name: cls(settings.task_paths[name]) for name, cls in classes.items()}
    from pytest_groundeval.fhir import bundles

    bundles.configure(config.rootpath / ".groundeval" / "bundles")  # bundle verdicts, once per content hash
    config.add_cleanup(bundles.flush)  # (written off the item path) all on disk when the session ends
    stored = load_stored(settings)
    if stored is not None and settings.mode == "resume" and not settings.is_worker:
        _lock_resumed(config, settings, stored.path)  # two resumes of one journal would both pay
        _check_resumable(config, settings, tasks, stored)
    evaluator = Evaluator(settings, tasks, stored, current(config))
    evaluator.traced = langsmith_key(os.environ) is not None  # LangSmith on: built-in agents nest their calls
    from pytest_groundeval.judges import configure as judges

    judges(config, settings, tasks, evaluator.budget)  # tasks with judged items get the jury (--judge-model)
    config.stash[EVALUATOR] = evaluator
    config.add_cleanup(evaluator.close_agent)  # (also at sessionfinish) nothing of the agent outlives the session
    _fhir_server(config, evaluator, tasks)  # a task with fhir_server = True: its server handle
    register_sharder(config, settings.shard)  # --groundeval-shard K/N, else nothing
    from pytest_groundeval.pytest.ordering import register_patient_order

    register_patient_order(config, settings.agent)  # prompt caching: a patient's cases together
    from pytest_groundeval.pytest.batching import register_batch

    register_batch(config, evaluator)  # --batch: the session's cases as one Message Batch
    from pytest_groundeval.pytest.limit import register_limit

    register_limit(config, settings.selection.get("limit"))  # --groundeval-limit N, else nothing
    # an agent chosen on the command line is checked at start; so is any agent under a budget
    # (--max-cost on an unpriced model is a usage error, --no-preflight or not: it cannot be enforced)
    chosen = (config.getoption("groundeval_agent") is not None and settings.preflight) or settings.max_cost is not None
    if chosen and settings.mode != "rescore" and not settings.is_worker and not config.option.help:
        from pytest_groundeval.run.usage import RetiredModelWarning

        for note in evaluator.preflight(settings.preflight):  # a retired model: warned (-W error: fatal), still run
            config.issue_config_time_warning(RetiredModelWarning(note), stacklevel=2)
    from pytest_groundeval.pytest.signals import install as handle_sigterm

    handle_sigterm(config)  # SIGTERM as Ctrl-C: the record of what finished
    if not settings.is_worker and settings.max_cost is not None:  # -n: one spend shared by all workers
        from pytest_groundeval.run.spend import register_spend_share

        register_spend_share(config, settings.run_record.parent if settings.run_record else settings.runs_dir)
    reporter = None
    from pytest_groundeval.store import spent as spentlog

    journal = (getattr(config, "workerinput", None) or {}).get(spentlog.WORKERINPUT)
    if settings.is_worker and journal:  # what each attempt spends, beside the controller's journal
        spentlog.open_sink(Path(journal))
    if not settings.is_worker:  # the controller (or the only process) records
        if settings.run_record is not None:  # one run per --run-record path (runlock.py)
            from pytest_groundeval.store.lock import acquire

            lock = acquire(settings.run_record)
            if lock is not None:
                config.add_cleanup(lock.release)
        reporter = Reporter(config, settings, tasks, stored, local=evaluator)
        config.pluginmanager.register(reporter, "groundeval-reporter")
        config.stash[REPORTER] = reporter
    from pytest_groundeval.pytest.crashes import register as crash_ledgers

    crash_ledgers(config, evaluator, controller=reporter is not None)  # xdist only
    from pytest_groundeval.pytest.timeouts import register as timeout_kinds

    timeout_kinds(config)  # pytest-timeout's kills are kind timeout
    from pytest_groundeval.integrations.langsmith.register import register as langsmith

    langsmith(config, settings, evaluator, reporter)  # LANGSMITH_API_KEY set: datasets, experiments, runs; else nothing
    # registered after the reporter: its session-finish (stop the calls) runs before the record
    config.pluginmanager.register(evaluator, "groundeval-evaluator")
    from pytest_groundeval.pytest.reruns import Reruns

    from pytest_groundeval.pytest.keys import RERUNS

    reruns = config.stash[RERUNS] = Reruns(config)
    config.pluginmanager.register(reruns, "groundeval-reruns")  # reruns cannot replace a result
    return evaluator


def _lock_resumed(config: pytest.Config, settings: Any, path: Path) -> None:
    """``--resume``: the lock of the journal being resumed (``store/lock.py``), held for the
    session, so a second resume of it (or the run still writing it) is a usage error."""
    from pytest_groundeval.store.lock import acquire, lock_path

    if settings.run_record is not None and lock_path(settings.run_record).absolute() == lock_path(path).absolute():
        return  # the run record's own lock (taken below) is this one
    try:
        lock = acquire(path)
    except pytest.UsageError as e:
        raise pytest.UsageError(f"groundeval: --resume {path}: another groundeval run is resuming or writing it "
                                f"({str(e).partition('another groundeval run (')[2].partition(')')[0] or 'its pid is unknown'})"
                                "; wait for it to finish") from None
    if lock is not None:
        config.add_cleanup(lock.release)


def _check_resumable(config: pytest.Config, settings: Any, tasks: Any, stored: Any) -> None:
    """``--resume``: stored results that would stand must re-derive to what was stored
    (``store/verify.py``); refused otherwise, unless ``--trust-stored`` (then warned)."""
    from pytest_groundeval.store.verify import Untrusted, check_resumable

    notes: list[str] = []
    try:
        check_resumable(stored, tasks, require_grounded=settings.require_grounded,
                        trust_stored=settings.trust_stored, warn=notes.append)
    except Untrusted as e:
        raise pytest.UsageError(f"groundeval: --resume {e}") from None
    for note in notes:
        config.issue_config_time_warning(pytest.PytestWarning(f"groundeval: --resume {note}"), stacklevel=2)


def _fhir_server(config: pytest.Config, evaluator: "Evaluator", tasks: Any) -> None:
    """The FHIR server handle of this process (``fhir/server/manager.py``), when a task uses it:
    the process starts on the first such case, and is stopped at session end (``atexit`` and
    the server's own exit on a closed stdin are the safety nets)."""
    from pytest_groundeval.run.fhircase import uses_server

    if not any(uses_server(task) for task in tasks.values()):
        return
    from pytest_groundeval.fhir.server.manager import FhirServer
    from pytest_groundeval.pytest.keys import FHIR_SERVER

    server = FhirServer(node=config.getoption("groundeval_node", None))  # None: the wheel's Node
    config.stash[FHIR_SERVER] = evaluator.fhir = server
    config.add_cleanup(server.stop)


def pytest_unconfigure(config: pytest.Config) -> None:
    from pytest_groundeval.pytest.keys import RERUNS, SHARDER

    evaluator = config.stash.get(EVALUATOR, None)
    if evaluator is None:
        return
    froze = False
    for key in (EVALUATOR, REPORTER, SHARDER, RERUNS):
        plugin = config.stash.get(key, None)
        if plugin is not None:
            froze = froze or plugin.froze
            if config.pluginmanager.is_registered(plugin):
                config.pluginmanager.unregister(plugin)
    config.stash[FROZE] = froze


# ------------------------------------------------------------------ collection
def _task_of(definition: Any, tasks: Any) -> str | None:
    names = [name for name in tasks if definition.get_closest_marker(name) is not None]
    if len(names) > 1:
        raise pytest.UsageError(f"{definition.nodeid}: marked with several groundeval tasks {names}")
    return names[0] if names else None


def _user_parametrized(metafunc: pytest.Metafunc, name: str) -> bool:
    for mark in metafunc.definition.iter_markers("parametrize"):
        names = mark.args[0] if mark.args else mark.kwargs.get("argnames", "")
        if name in ([n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)):
            return True
    return False


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test function marked with a task marker that takes ``case`` and groundeval's
    ``evaluate`` fixture gets one item per case (a test that merely shares a marker name or
    takes a ``case`` of its own is left alone). Only file names are listed here; the case is
    read when its item runs."""
    if "case" not in metafunc.fixturenames or "evaluate" not in metafunc.fixturenames:
        return
    if _user_parametrized(metafunc, "case"):
        return
    task = _task_of(metafunc.definition, _infos())
    if task is None:
        return
    evaluator = _ensure(metafunc.config)
    from pytest_groundeval.pytest.reruns import exempt_from_repeats

    exempt_from_repeats(metafunc)  # pytest-repeat: one item per case (reruns.py)
    from pytest_groundeval.pytest.items import suite_for_test

    suite = suite_for_test(metafunc.config, metafunc.definition, task)  # case ids namespaced by suite (items.py)
    try:
        refs = evaluator.refs(task, suite)
    except (FileNotFoundError, ValueError) as e:
        from pytest_groundeval.pytest.options import source_setting

        from pytest_groundeval.store.redact import redact_text

        where = source_setting(metafunc.config, evaluator.tasks[task])
        # pytest's collection error with its message alone (no traceback of pluggy's frames):
        # "ERROR collecting <file>" then the file, line and column of the bad cases file
        raise pytest.Collector.CollectError(redact_text(f"{e} [{where}]")) from None
    metafunc.parametrize("case", refs, ids=[r.item_id for r in refs])


# ------------------------------------------------------------------ fixtures
def _fixtures(config: pytest.Config) -> types.ModuleType:
    """The plugin's fixtures for this session's config, in a module object of their own
    (registered at ``pytest_configure``: global, as a plugin module's fixtures are; a conftest's
    ``agent`` or ``scorer`` still overrides them). Session-scoped, and asking for no other
    fixture, not even ``request``: pytest resolves an item's fixtures again for each item, and
    each ``request`` it resolves is a new fixture definition (its signature read), so closures
    over ``config`` spare every eval item three of them."""
    holder = types.ModuleType("pytest_groundeval.fixtures")

    @pytest.fixture(scope="session")
    def agent() -> Any:
        """The agent under evaluation, as chosen by ``--agent`` (override in a conftest to inject your own)."""
        return _ensure(config).get_agent()

    @pytest.fixture(scope="session")
    def scorer() -> Any:
        """``scorer(prediction, case) -> Score``: the scorer of the case's own task (override in a
        conftest to inject your own)."""
        return _ensure(config).score

    @pytest.fixture(scope="session")
    def evaluate() -> Any:
        """``evaluate(case, agent, scorer)``: run the case, attach its result to the running item's
        report, and fail the item (with the reason) unless the case passed."""
        return _evaluate(_ensure(config))

    holder.agent, holder.scorer, holder.evaluate = agent, scorer, evaluate
    return holder


def _evaluate(evaluator: "Evaluator") -> Any:
    from pytest_groundeval.pytest.items import RESULT
    from pytest_groundeval.pytest.outcomes import line, not_run
    from pytest_groundeval.pytest.reruns import first_result

    def run(case: Any, agent: Any, scorer: Any = None) -> "CaseResult":
        item = evaluator.current_item
        # a plugin re-running this item gets its first result again, not a new call (reruns.py)
        result = first_result(item)
        if result is None:
            result = evaluator.evaluate(case, agent, scorer)
        if item is not None:
            item.stash[RESULT] = result
        # the report says what the result says (outcomes.apply, at makereport): a case not run
        # is a skip with its reason, an errored case a pytest error, a failed one a failure
        if result.outcome == "skipped" or not_run(result):
            pytest.skip(result.reason or "skipped")
        if result.outcome != "passed":
            pytest.fail(line(result, item.config.option.tbstyle if item is not None else None), pytrace=False)
        return result

    return run


# ------------------------------------------------------------------ reporting
@pytest.hookimpl(tryfirst=True)
def pytest_report_teststatus(report: Any, config: pytest.Config) -> Any:
    """An errored eval case is a pytest error (``E``, "errors"), as the record says (``outcomes.py``)."""
    if not getattr(report, ERROR_ATTR, False):
        return None
    from pytest_groundeval.pytest.outcomes import teststatus

    return teststatus(report)


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """groundeval's terminal lines end with where the run is: the record, the HTML report, and
    ``groundeval report`` for the history (after every other plugin's summary)."""
    reporter = config.stash.get(REPORTER, None)
    if reporter is not None:
        reporter.path_lines(terminalreporter)


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    return str(longrepr[2]) if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)


def _result_for(item: pytest.Item, report: pytest.TestReport, when: str) -> "CaseResult | None":
    """The case result a report carries: the evaluated case (call), or an item pytest
    stopped before its case ran (a skip, a failing setup, a test that never evaluated)."""
    if when == "teardown" or (when == "setup" and report.passed):
        return None  # the common phases: nothing to carry, nothing imported
    from pytest_groundeval.pytest.items import RESULT, case_ref

    ref = case_ref(item)
    if ref is None:
        return None
    if when == "call":
        result = item.stash.get(RESULT, None)
        if result is not None:
            return result
    from pytest_groundeval.model import ErrorInfo
    from pytest_groundeval.run.runner import not_run
    from pytest_groundeval.pytest.timeouts import timeout_error

    timed_out = timeout_error(item, report)  # pytest-timeout (signal method) failed it
    if timed_out is not None:
        evaluator = item.config.stash.get(EVALUATOR, None)
        return evaluator.stopped(ref, timed_out) if evaluator is not None else not_run(ref, error=timed_out)
    if report.skipped:
        return not_run(ref, skip_reason=_skip_reason(report))
    if when == "call":
        message = (f"the test failed before evaluating the case: {report.longreprtext[-2000:]}" if report.failed
                   else "the test did not call evaluate(case, agent, scorer)")
        return not_run(ref, error=ErrorInfo(kind="internal", message=message))
    return not_run(ref, error=ErrorInfo(kind="internal", message=f"setup failed: {report.longreprtext[-2000:]}"))


def _redact_report(item: pytest.Item, report: pytest.TestReport) -> None:
    """An eval item's captured stdout/stderr/log and its failure report, through the
    redaction step: made on the process that ran it (an xdist worker too), so the terminal,
    junitxml and every other reader of the report get the redacted text."""
    from pytest_groundeval.pytest.items import case_ref
    from pytest_groundeval.store.redact import redact_text

    if case_ref(item) is None:
        return
    report.sections = [(title, redact_text(text)) for title, text in report.sections]
    if report.failed and report.longrepr is not None and not isinstance(report.longrepr, tuple):
        text = str(report.longrepr)
        red = redact_text(text)
        if red != text:  # only then: the report keeps its structure (and colours) otherwise
            report.longrepr = red


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    report = yield
    if item.config.stash.get(EVALUATOR, None) is None:
        return report  # groundeval was not set up: no eval item in this session
    if report.sections or report.failed:
        _redact_report(item, report)
    result = _result_for(item, report, call.when)
    if result is not None:
        from pytest_groundeval.pytest.items import RESULT
        from pytest_groundeval.pytest.outcomes import apply, item_location

        apply(report, result, lambda: item_location(item), tbstyle=item.config.option.tbstyle,
              evaluated=item.stash.get(RESULT, None) is result)
        from pytest_groundeval.pytest.items import REPORT_ATTR, case_ref, properties
        from pytest_groundeval.store.record import case_json

        result, data, blob = case_json(result)
        setattr(report, REPORT_ATTR, data)  # plain data: travels through xdist
        # junitxml's <properties> (it reads them off the teardown report, made from the item's)
        ref = case_ref(item)
        item.user_properties.extend(properties(result, ref.suite if ref is not None else None))
        reporter = item.config.stash.get(REPORTER, None)
        if reporter is not None:  # the same process: hand over the typed value as well
            reporter.hand_over(report, result, blob)
    return report
