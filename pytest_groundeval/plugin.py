"""The pytest plugin: options, markers, cases as parametrized items, fixtures, the
reporter hooks that turn test reports into the run record, and the exit status.

pytest is the runner. Each case is one item (id = case id). Its result travels on its
own ``TestReport`` (attribute ``groundeval``), so under pytest-xdist the controller
receives it exactly as it receives junitxml's data, and builds the single record.
Nothing here knows FHIR or scoring rules: those live in ``tasks`` and ``scorers``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .agents.base import AgentSpec
from .datasets import CaseRef
from .record import (
    Threshold,
    build_record,
    evaluate_gate,
    new_run_id,
    now_iso,
    parse_threshold,
    validate_record,
    write_json_atomic,
)
from .tasks import TASKS

STATE_KEY = pytest.StashKey["GroundevalState"]()
ENTRY_KEY = pytest.StashKey[dict]()
REPORT_ATTR = "groundeval"


# ------------------------------------------------------------------ options
def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("groundeval", "groundeval: evals for healthcare AI agents")
    group.addoption("--agent", dest="groundeval_agent", default=None, metavar="NAME",
                    help="agent to evaluate: baseline (default, offline), claude, langgraph, or module:Class")
    group.addoption("--model", dest="groundeval_model", default=None,
                    help="model id for live agents (claude: default claude-opus-4-8; "
                    "langgraph: e.g. anthropic:claude-opus-4-8 or openai:NAME)")
    group.addoption("--base-url", dest="groundeval_base_url", default=None, metavar="URL",
                    help="OpenAI-compatible server for --agent=langgraph --model openai:NAME (vLLM, Ollama, llama.cpp)")
    group.addoption("--agent-timeout", dest="groundeval_agent_timeout", type=float, default=120.0,
                    metavar="SECONDS", help="timeout of one live model call (default 120)")
    group.addoption("--run-record", dest="groundeval_run_record", default=None, metavar="PATH",
                    help="where to write the JSON run record (default runs/<run_id>.json under the rootdir)")
    group.addoption("--threshold", dest="groundeval_thresholds", action="append", default=[],
                    metavar="TASK.METRIC=VALUE",
                    help="CI gate, repeatable, e.g. extraction.f1=0.95; when set, the thresholds decide the exit status")
    parser.addini("groundeval_thresholds", "CI gate thresholds, TASK.METRIC=VALUE per line", type="linelist")
    parser.addini("groundeval_agent", "default agent", default="baseline")
    for task_cls in TASKS.values():
        task_cls.add_options(group, parser)


# ------------------------------------------------------------------ session state
class GroundevalState:
    """Per-session state. On xdist workers it only evaluates; the controller records."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.is_worker = hasattr(config, "workerinput")
        self.run_id = new_run_id()
        self.started_at = now_iso()
        name = config.getoption("groundeval_agent") or config.getini("groundeval_agent")
        self.agent_spec = AgentSpec(
            name=name,
            model=config.getoption("groundeval_model"),
            base_url=config.getoption("groundeval_base_url"),
            timeout=config.getoption("groundeval_agent_timeout"),
        )
        self.tasks = {name: cls.from_config(config) for name, cls in TASKS.items()}
        raw = list(config.getini("groundeval_thresholds")) + list(config.getoption("groundeval_thresholds"))
        self.thresholds: list[Threshold] = []
        for text in raw:
            try:
                self.thresholds.append(parse_threshold(text, self.tasks))
            except ValueError as e:
                raise pytest.UsageError(f"groundeval: {e}") from None
        self._refs: dict[str, list[CaseRef]] = {}
        self.entries: dict[tuple[str, str], dict[str, Any]] = {}
        self.record: dict[str, Any] | None = None
        self.record_path: Path | None = None
        self.gate: dict[str, Any] | None = None

    # -- hooks of this object (registered as a plugin, like junitxml's LogXML) --
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Every report reaches the controller here: its own, or one sent by an xdist worker."""
        entry = getattr(report, REPORT_ATTR, None)
        if entry is not None and not self.is_worker:
            self.entries[(entry["task"], entry["case_id"])] = entry

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if not self.is_worker:
            finish_session(self, session, exitstatus)

    def refs(self, task: str) -> list[CaseRef]:
        if task not in self._refs:
            self._refs[task] = self.tasks[task].discover()
        return self._refs[task]

    def record_options(self) -> dict[str, Any]:
        c = self.config
        opts: dict[str, Any] = {name: task.options for name, task in self.tasks.items()}
        opts.update({
            "base_url": self.agent_spec.base_url,
            "agent_timeout": self.agent_spec.timeout,
            "thresholds": [f"{t.label}={t.value}" for t in self.thresholds],
            "keyword": c.getoption("keyword", None) or None,
            "markexpr": c.getoption("markexpr", None) or None,
            "numprocesses": c.getoption("numprocesses", None),
            "args": list(c.args),
        })
        return opts


def _state(config: pytest.Config) -> GroundevalState:
    return config.stash[STATE_KEY]


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(STATE_KEY, None)
    if state is not None:
        config.pluginmanager.unregister(state)


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    for name, cls in TASKS.items():
        config.addinivalue_line("markers", f"{name}: groundeval {name} eval cases ({cls.description})")
    state = GroundevalState(config)
    config.stash[STATE_KEY] = state
    config.pluginmanager.register(state, "groundeval-state")
    problem = state.agent_spec.check()
    if problem:
        raise pytest.UsageError(f"groundeval: {problem}")


# ------------------------------------------------------------------ collection
def _task_of(definition: Any) -> str | None:
    names = [name for name in TASKS if definition.get_closest_marker(name) is not None]
    if len(names) > 1:
        raise pytest.UsageError(f"{definition.nodeid}: marked with several groundeval tasks {names}")
    return names[0] if names else None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test function marked with a task marker and taking ``case`` gets one item per case.
    Only file names are listed here; the case is read when its item runs."""
    if "case" not in metafunc.fixturenames:
        return
    task = _task_of(metafunc.definition)
    if task is None:
        return
    try:
        refs = _state(metafunc.config).refs(task)
    except (FileNotFoundError, ValueError) as e:
        raise pytest.UsageError(str(e)) from None
    metafunc.parametrize("case", refs, ids=[r.case_id for r in refs])


def _case_ref(item: pytest.Item) -> CaseRef | None:
    callspec = getattr(item, "callspec", None)
    ref = callspec.params.get("case") if callspec is not None else None
    return ref if isinstance(ref, CaseRef) else None


# ------------------------------------------------------------------ fixtures
@pytest.fixture(scope="session")
def agent(pytestconfig: pytest.Config) -> Any:
    """The agent under evaluation, as chosen by ``--agent`` (override in a conftest to inject your own)."""
    from .agents.base import build_agent

    return build_agent(_state(pytestconfig).agent_spec, pytestconfig.rootpath)


@pytest.fixture
def scorer(request: pytest.FixtureRequest) -> Any:
    """The scoring function of this item's task: ``scorer(prediction, case) -> Score``."""
    ref = _case_ref(request.node)
    if ref is None:
        raise pytest.UsageError(f"{request.node.nodeid}: the scorer fixture needs a groundeval case item")
    return _state(request.config).tasks[ref.task].score


@pytest.fixture
def evaluate(request: pytest.FixtureRequest) -> Any:
    """``evaluate(case, agent, scorer)``: run the case, attach its record entry to this item's
    report, and fail the item (with the reason) unless the case passed."""
    from .evaluate import evaluate_case

    def run(case: CaseRef, agent: Any, scorer: Any = None) -> dict[str, Any]:
        task = _state(request.config).tasks[case.task]
        entry = evaluate_case(task, case, agent, scorer)
        request.node.stash[ENTRY_KEY] = entry
        if entry["outcome"] != "passed":
            label = "ERROR" if entry["outcome"] == "error" else "FAILED"
            reason = entry["error"] or (entry["score"] or {}).get("reason", "")
            pytest.fail(f"{label} {case.task}:{case.case_id}: {reason}", pytrace=False)
        return entry

    return run


# ------------------------------------------------------------------ reporting
@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    report = yield
    ref = _case_ref(item)
    if ref is None:
        return report
    entry = None
    if call.when == "call":
        entry = item.stash.get(ENTRY_KEY, None)
        if entry is None and report.failed:
            entry = _bare_entry(ref, "error", f"the test failed before evaluating the case: {report.longreprtext[-2000:]}", "internal")
        elif entry is None and report.passed:
            entry = _bare_entry(ref, "error", "the test did not call evaluate(case, agent, scorer)", "internal")
        elif entry is None and report.skipped:
            entry = _bare_entry(ref, "skipped", _skip_reason(report), "skipped")
    elif call.when == "setup" and not report.passed:
        if report.skipped:
            entry = _bare_entry(ref, "skipped", _skip_reason(report), "skipped")
        else:
            entry = _bare_entry(ref, "error", f"setup failed: {report.longreprtext[-2000:]}", "setup")
    if entry is not None:
        setattr(report, REPORT_ATTR, entry)
    return report


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    return str(longrepr[2]) if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)


def _bare_entry(ref: CaseRef, outcome: str, error: str | None, kind: str) -> dict[str, Any]:
    return {
        "case_id": ref.case_id, "task": ref.task, "outcome": outcome, "content_hash": None,
        "ground_truth": None, "predicted": None, "raw_output": None, "score": None,
        "error": error, "error_kind": kind, "duration_s": None, "usage": None,
    }


def finish_session(state: GroundevalState, session: pytest.Session, exitstatus: int) -> None:
    """Controller side, at session end: summary → gate → record (validated, written
    atomically) → exit status. With thresholds set, the gate decides the exit status."""
    if not state.entries and not state.thresholds:
        return  # no eval case ran (e.g. the project's own tests): no record
    cases = list(state.entries.values())
    summary = {
        name: task.summarize([c for c in cases if c["task"] == name])
        for name, task in state.tasks.items()
        if any(c["task"] == name for c in cases)
    }
    state.gate = evaluate_gate(state.thresholds, summary)
    record = build_record(
        run_id=state.run_id,
        started_at=state.started_at,
        agent=state.agent_spec.name,
        model=state.agent_spec.model,
        options=state.record_options(),
        cases=cases,
        summary=summary,
        gate=state.gate,
        rootdir=session.config.rootpath,
    )
    problems = validate_record(record)
    if problems:  # a bug in groundeval itself: keep the record, say so loudly
        record["schema_errors"] = problems
    path = session.config.getoption("groundeval_run_record")
    path = Path(path) if path else session.config.rootpath / "runs" / f"{state.run_id}.json"
    write_json_atomic(path, record)
    state.record, state.record_path = record, path
    if problems:
        session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
    elif state.gate is not None and exitstatus in (
        pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.NO_TESTS_COLLECTED
    ):
        session.exitstatus = pytest.ExitCode.OK if state.gate["passed"] else pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    state = config.stash.get(STATE_KEY, None)
    if state is None or state.record is None:
        return
    from .report import terminal_lines

    tr = terminalreporter
    tr.write_sep("=", "groundeval summary")
    for line in terminal_lines(state.record):
        tr.write_line(line)
    if state.record.get("schema_errors"):
        tr.write_line("groundeval: the run record does not match its schema (a groundeval bug):", red=True)
        for p in state.record["schema_errors"][:20]:
            tr.write_line(f"  {p}", red=True)
    tr.write_line(f"run record: {state.record_path}")
