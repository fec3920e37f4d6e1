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
from .calls import CallPolicy
from .concurrency import Prefetcher
from .datasets import CaseRef
from .evaluate import Called, finish, new_entry, prepare_and_call
from .record import (
    Journal,
    StoredRun,
    Threshold,
    find_run,
    load_run,
    build_record,
    evaluate_gate,
    new_run_id,
    now_iso,
    parse_threshold,
    sort_cases,
    validate_record,
    write_json_atomic,
)
from .resume import is_finished, reuse_stored
from .tracing import Tracer
from .tasks import TASKS
from .usage import Budget, budget_record, total_usage

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
    group.addoption("--agent-timeout", dest="groundeval_agent_timeout", type=float, default=None,
                    metavar="SECONDS", help="timeout of one agent call, per attempt (default 120; alias --timeout)")
    try:  # pytest-timeout owns --timeout when it is installed; then use --agent-timeout
        group.addoption("--timeout", dest="groundeval_timeout_alias", type=float, default=None,
                        metavar="SECONDS", help="same as --agent-timeout")
    except ValueError:
        pass
    group.addoption("--retries", dest="groundeval_retries", type=int, default=4, metavar="N",
                    help="retries of a transient failure (rate limit, overload, network) per call (default 4)")
    group.addoption("--retry-base-delay", dest="groundeval_retry_base_delay", type=float, default=1.0,
                    metavar="SECONDS", help="first backoff delay, doubled per retry, with jitter (default 1)")
    group.addoption("--concurrency", dest="groundeval_concurrency", type=int, default=None, metavar="N",
                    help="agent calls in flight per pytest process (default 8 for live agents, 1 offline)")
    group.addoption("--max-cost", dest="groundeval_max_cost", type=float, default=None, metavar="USD",
                    help="stop launching model calls once this much has been spent (per process under -n)")
    group.addoption("--resume", dest="groundeval_resume", default=None, metavar="RUN",
                    help="a record/journal path or 'last': re-run only the cases that run did not finish")
    group.addoption("--rescore", dest="groundeval_rescore", default=None, metavar="RUN",
                    help="a record/journal path or 'last': re-score its stored outputs, no agent call")
    group.addoption("--model-cache", dest="groundeval_model_cache", default="off",
                    choices=("off", "read", "write", "readwrite", "strict"),
                    help="model-call cache mode (default off; strict: a miss is an error)")
    group.addoption("--model-cache-dir", dest="groundeval_model_cache_dir", default=None, metavar="DIR",
                    help="model-call cache folder (default .groundeval/cache under the rootdir)")
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
        timeout = config.getoption("groundeval_agent_timeout") or getattr(
            config.option, "groundeval_timeout_alias", None) or 120.0
        cache_dir = config.getoption("groundeval_model_cache_dir")
        self.agent_spec = AgentSpec(
            name=name,
            model=config.getoption("groundeval_model"),
            base_url=config.getoption("groundeval_base_url"),
            timeout=timeout,
            cache_mode=config.getoption("groundeval_model_cache"),
            cache_dir=str(Path(cache_dir) if cache_dir else config.rootpath / ".groundeval" / "cache"),
        )
        self.policy = CallPolicy(
            timeout=timeout,
            max_attempts=max(0, config.getoption("groundeval_retries")) + 1,
            base_delay=config.getoption("groundeval_retry_base_delay"),
        )
        max_cost = config.getoption("groundeval_max_cost")
        workers = config.workerinput.get("workercount", 1) if self.is_worker else 1
        self.budget = Budget(max_cost / workers if max_cost is not None and workers else max_cost)
        self.max_cost = max_cost
        self.stored: StoredRun | None = None
        self.mode = "run"
        for mode in ("resume", "rescore"):
            spec = config.getoption(f"groundeval_{mode}")
            if spec:
                if self.stored is not None:
                    raise pytest.UsageError("groundeval: --resume and --rescore cannot be combined")
                try:
                    self.stored = load_run(find_run(spec, config.rootpath / "runs"))
                except (OSError, ValueError, KeyError) as e:
                    raise pytest.UsageError(f"groundeval: --{mode} {spec}: {e}") from None
                self.mode = mode
        if self.mode == "resume" and (self.stored.agent, self.stored.model) != (name, self.agent_spec.model):
            raise pytest.UsageError(
                f"groundeval: --resume {self.stored.path}: that run used agent {self.stored.agent!r} "
                f"model {self.stored.model!r}; this session asks for {name!r} model {self.agent_spec.model!r}"
            )
        self._agent: Any = None
        self.prefetcher: Prefetcher | None = None
        self._prefetch_decided = False
        self._order: dict[Any, int] = {}
        self.journal: Journal | None = None
        self.tracer: Tracer | None = None if self.is_worker else Tracer.from_env()
        self.tasks = {name: cls.from_config(config) for name, cls in TASKS.items()}
        raw = list(config.getini("groundeval_thresholds")) + list(config.getoption("groundeval_thresholds"))
        self.thresholds: list[Threshold] = []
        for text in raw:
            try:
                self.thresholds.append(parse_threshold(text, self.tasks))
            except ValueError as e:
                raise pytest.UsageError(f"groundeval: {e}") from None
        self._refs: dict[str, list[CaseRef]] = {}
        self.ref_by_key: dict[tuple[str, str], CaseRef] = {}
        self.concurrency = 1
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
            if self.journal is None:
                self.journal = Journal(self.record_path_for().with_suffix(".jsonl"), self.header())
            self.journal.append(entry)
            if self.tracer is not None:
                if not self.tracer.started:  # lazily: sessions without eval cases open no LangSmith run
                    self.tracer.start(self.header())
                self.tracer.log_case(entry)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> None:
        self._order = {item: i for i, item in enumerate(session.items)}

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> None:
        if _case_ref(item) is None:
            return
        if not self._prefetch_decided:
            self._decide_prefetch(item)
        if self.prefetcher is None:
            return
        if item.session.shouldfail or item.session.shouldstop:
            self.prefetcher.stop()
            return
        self.prefetcher.advance(self._upcoming(item, nextitem))

    @pytest.hookimpl(wrapper=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> Any:
        if self.prefetcher is not None:
            self.prefetcher.stop()
        if not self.is_worker:
            finish_session(self, session, exitstatus)
        if self.journal is not None:
            self.journal.close()
        return (yield)

    # -- the agent, concurrency, resume / rescore --
    def get_agent(self) -> Any:
        if self._agent is None:
            from .agents.base import build_agent

            self._agent = build_agent(self.agent_spec, self.config.rootpath)
        return self._agent

    def _decide_prefetch(self, item: pytest.Item) -> None:
        self._prefetch_decided = True
        if self.mode == "rescore":
            return
        defs = item._fixtureinfo.name2fixturedefs.get("agent") or ()
        if not defs or defs[-1].baseid != "":
            return  # a conftest injects its own agent: calls happen in the item, as written
        try:
            agent = self.get_agent()
        except Exception:
            return  # the agent fixture will raise the same error, per item
        n = self.config.getoption("groundeval_concurrency")
        if n is None:
            n = getattr(agent, "concurrency", None) or (8 if self.agent_spec.is_live else 1)
        if n > 1:
            self.prefetcher = Prefetcher(self._call, n)
            self.concurrency = n

    def _call(self, key: tuple[str, str]) -> Called:
        ref = self.ref_by_key[key]
        return prepare_and_call(self.tasks[ref.task], ref, self.get_agent(), self.policy, self.budget)

    def _upcoming(self, item: pytest.Item, nextitem: pytest.Item | None) -> list[tuple[str, str]]:
        window = self.prefetcher.lookahead if self.prefetcher else 0
        items = item.session.items
        interactor = next((p for p in self.config.pluginmanager.get_plugins()
                           if type(p).__name__ == "WorkerInteractor"), None)
        if interactor is not None:  # xdist worker: this item, the next one, then our queue
            with interactor.torun.lock() as pending:
                indices = [i for i in list(pending)[:window] if isinstance(i, int)]
            chosen = [item, nextitem] + [items[i] for i in indices]
        else:
            start = self._order.get(item, 0)
            chosen = items[start:start + window]
        keys = []
        for it in chosen:
            ref = _case_ref(it) if it is not None else None
            if ref is not None and not self.satisfied_without_call(ref):
                keys.append((ref.task, ref.case_id))
        return keys

    def satisfied_without_call(self, ref: CaseRef) -> bool:
        if self.mode == "rescore":
            return True
        stored = self.stored.cases.get((ref.task, ref.case_id)) if self.stored else None
        return stored is not None and is_finished(stored)

    def evaluate(self, ref: CaseRef, agent: Any, scorer: Any) -> dict[str, Any]:
        task = self.tasks[ref.task]
        if self.stored is not None:
            entry = reuse_stored(task, ref, self.stored, rescore=self.mode == "rescore", scorer=scorer)
            if entry is not None:
                return entry
        if self.prefetcher is not None and agent is self._agent:
            called = self.prefetcher.take((ref.task, ref.case_id))
        else:
            called = prepare_and_call(task, ref, agent, self.policy, self.budget)
        return finish(task, called, scorer)

    def header(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "started_at": self.started_at, "agent": self.agent_spec.name,
                "model": self.agent_spec.model, "options": self.record_options()}

    def record_path_for(self) -> Path:
        path = self.config.getoption("groundeval_run_record")
        return Path(path) if path else self.config.rootpath / "runs" / f"{self.run_id}.json"

    def refs(self, task: str) -> list[CaseRef]:
        if task not in self._refs:
            self._refs[task] = self.tasks[task].discover()
            for ref in self._refs[task]:
                self.ref_by_key[(ref.task, ref.case_id)] = ref
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
            "concurrency": self.concurrency,
            "retries": self.policy.max_attempts - 1,
            "max_cost_usd": self.max_cost,
            "model_cache": self.agent_spec.cache_mode,
            "resumed_from": self.stored.run_id if self.mode == "resume" else None,
            "rescored_from": self.stored.run_id if self.mode == "rescore" else None,
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
    problem = state.agent_spec.check(needs_key=state.mode != "rescore")
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
    return _state(pytestconfig).get_agent()


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
    def run(case: CaseRef, agent: Any, scorer: Any = None) -> dict[str, Any]:
        entry = _state(request.config).evaluate(case, agent, scorer)
        request.node.stash[ENTRY_KEY] = entry
        if entry["outcome"] == "skipped":
            pytest.skip(entry["error"] or "skipped")
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
        if entry is not None:
            pass
        elif report.failed:
            entry = _bare_entry(ref, "error", f"the test failed before evaluating the case: {report.longreprtext[-2000:]}", "internal")
        elif report.passed:
            entry = _bare_entry(ref, "error", "the test did not call evaluate(case, agent, scorer)", "internal")
        elif report.skipped:
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
    return {**new_entry(ref, outcome), "error": error, "error_kind": kind}


def finish_session(state: GroundevalState, session: pytest.Session, exitstatus: int) -> None:
    """Controller side, at session end: summary → gate → record (validated, written
    atomically) → exit status. With thresholds set, the gate decides the exit status."""
    if not state.entries and not state.thresholds:
        return  # no eval case ran (e.g. the project's own tests): no record
    # in case-id order: aggregates (bootstrap resamples, float sums) must not depend on the
    # order results arrived in (xdist workers finish in any order)
    cases = sort_cases(state.entries.values())
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
    record["usage"] = total_usage(cases)
    record["budget"] = budget_record(state.max_cost, cases, record["usage"])
    if state.gate is not None and record["budget"] and record["budget"]["stopped"]:
        state.gate["passed"] = False
        state.gate["reason"] = "--max-cost stopped the run before every case ran"
    problems = validate_record(record)
    if problems:  # a bug in groundeval itself: keep the record, say so loudly
        record["schema_errors"] = problems
    path = state.record_path_for()
    write_json_atomic(path, record)
    if state.tracer is not None and state.tracer.started:
        state.tracer.finish(record)
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
    line = state.tracer.warning_line() if state.tracer is not None else None
    if line:
        tr.write_line(line, yellow=True)
