"""The side of the plugin that evaluates: in every process that runs items (the only
process of a plain run, each xdist worker). It lists cases for collection, owns the
agent, the budget share and the prefetcher, reuses stored results (resume / rescore),
and turns an item into a :class:`CaseResult` with :mod:`runner`. It never writes the
record: results travel on the items' test reports to the controller's reporter.

Public pytest/xdist APIs only: the agent an item really got is read from
``item.funcargs`` after setup (so a conftest that overrides the ``agent`` fixture runs
its calls inline, as written); under xdist a worker knows only its current and next item
(``pytest_runtest_protocol(item, nextitem)``), so it keeps at most those two calls in
flight rather than reading xdist's private queue.
"""

from __future__ import annotations

import collections
import dataclasses

import gc
import threading
from pathlib import Path
from typing import Any, Mapping

import pytest

from pytest_groundeval.pytest.keys import listing_only
from pytest_groundeval.run.concurrency import Prefetcher
from pytest_groundeval.store.files import StoredRun, find_run, load_stored as read_stored
from pytest_groundeval.model import CaseRef, CaseResult, ErrorInfo
from pytest_groundeval.pytest.items import NEXT_ITEM, Suite, case_ref, settle_suites
from pytest_groundeval.pytest.settings import Settings
from pytest_groundeval.pytest.reruns import first_result
from pytest_groundeval.pytest.workeroutput import WorkerOutput, publish
from pytest_groundeval.run.runner import (Called, CallObservers, agent_name, call_case, finish_case,
                                          load_case, not_run, reuse)
from pytest_groundeval.store.resume import needs_call
from pytest_groundeval.tasks.base import Task
from pytest_groundeval.run.usage import Budget, call_floor, retirement, unpriced_budget


def load_stored(settings: Settings) -> StoredRun | None:
    spec = settings.stored_spec
    if not spec:
        return None
    try:
        stored = read_stored(find_run(spec, settings.runs_dir))
    except (OSError, ValueError, KeyError) as e:
        raise pytest.UsageError(f"groundeval: --{settings.mode} {spec}: {e}") from None
    if settings.mode == "resume" and stored.folded_into is not None:
        raise pytest.UsageError(
            f"groundeval: --resume {stored.path}: a resume of this journal already finished its run into the "
            f"complete record {stored.folded_into}; resuming it again would pay for those cases twice. Use that "
            f"record (--rescore {stored.folded_into} re-scores it without a call)")
    if settings.mode == "resume" and (stored.agent, stored.model) != (settings.agent.name, settings.agent.model):
        raise pytest.UsageError(
            f"groundeval: --resume {stored.path}: that run used agent {stored.agent!r} model {stored.model!r}; "
            f"this session asks for {settings.agent.name!r} model {settings.agent.model!r}"
        )
    return stored


def make_budget(settings: Settings) -> Budget:
    """``--max-cost``: in an xdist worker, on the session's shared spend file (spend.py)."""
    if settings.max_cost is None:
        return Budget(None)
    if settings.is_worker:
        from pytest_groundeval.run.spend import SpendFile

        if settings.spend_file is None:
            raise pytest.UsageError("groundeval: --max-cost under xdist needs the controller's spend file, "
                                    "and this worker was given none (is groundeval installed where the "
                                    "controller runs?)")
        return Budget(settings.max_cost, share=SpendFile(settings.spend_file))
    return Budget(settings.max_cost)


def probe_url(url: str, timeout: float = 3.0) -> str | None:
    """None when something answers HTTP at ``url`` (any status: a 401 is a server there),
    else why not. Credentials in the URL are not sent (nor needed to be answered)."""
    import urllib.error
    import urllib.parse
    import urllib.request

    parts = urllib.parse.urlsplit(url)
    if parts.username is not None or parts.password is not None:  # urllib reads user:pass@ as a host name
        parts = parts._replace(netloc=parts.netloc.rpartition("@")[2])
    try:
        urllib.request.urlopen(urllib.parse.urlunsplit(parts).rstrip("/") + "/models",  # noqa: S310
                               timeout=timeout).close()
    except urllib.error.HTTPError:
        return None  # a server answered (401, 404, ...): it is there
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        if isinstance(reason, TimeoutError) and _accepts(parts, timeout):
            return None  # it took the connection and is busy (a local server still generating): it is there
        return f"{type(reason).__name__}: {reason}"
    return None


def _accepts(parts: Any, timeout: float) -> bool:
    """Something takes TCP connections at the URL's host and port."""
    import socket

    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        socket.create_connection((parts.hostname, port), timeout=timeout).close()
    except (OSError, ValueError):
        return False
    return True


class Evaluator:
    """Per-process evaluation state, registered as a plugin for its hooks."""

    def __init__(self, settings: Settings, tasks: Mapping[str, Task], stored: StoredRun | None,
                 output: WorkerOutput | None = None) -> None:
        self.settings = settings
        self.tasks = tasks
        self.stored = stored
        self.budget = make_budget(settings)
        self._agent: Any = None
        self._injected: dict[Any, tuple[Any, Any]] = {}  # a fixture's agent: (it, its hosted stand-in or error)
        self._hosts: dict[Any, Any] = {}  # the hosted stand-ins, by spec or by class and state (agents/host.moved)
        self._refs: dict[str, list[CaseRef]] = {}
        self._by_key: dict[tuple[str, str], CaseRef] = {}
        self.prefetcher: Prefetcher | None = None
        self._plan: list[tuple[str, str]] = []  # keys to call, in run order (serial runs)
        self._position: dict[tuple[str, str], int] = {}
        self._prefetch_decided = False
        self.concurrency = 1
        self.current_item: pytest.Item | None = None
        self.froze = False  # gc.freeze() was called (undone at unconfigure)
        self.stop_reason: str | None = None  # set when calls stop (identical agent errors)
        self._streak: tuple[Any, int] = (None, 0)
        self.selected: int | None = None  # eval items selected to run in this process's collection
        self.deselected = 0
        self.ledger: Any = None  # crashes.WorkerLedger in an xdist worker: the calls in flight
        self.tracer: Any = None  # case -> its LangSmith root run (langsmith/worker.py), when LangSmith is on
        self.traced = False  # LangSmith is on: built-in agents wrap their SDK clients for it
        # the cases whose agent the harness gave tools, lately (a pytest-timeout that stops a case
        # mid-call makes its result without the runner: it still counts 0 in grounded)
        self._offered: "collections.OrderedDict[tuple, list[str]]" = collections.OrderedDict()
        self._offered_lock = threading.Lock()
        self.observers: CallObservers = CallObservers(tools_offered=self._note_offered)  # observe()
        self._output = output if output is not None else WorkerOutput()  # this process's session (workeroutput.py)
        self.fhir: Any = None  # the FHIR server handle, when a task uses it (plugin._fhir_server; keys.FHIR_SERVER)

    def observe(self, *, tracer: Any = None, ledger: Any = None) -> None:
        """Hand the calls their observers: LangSmith's case traces, the crash ledger."""
        if tracer is not None:
            self.tracer = tracer
        if ledger is not None:
            self.ledger = ledger
        ledger = self.ledger

        def offered(ref: CaseRef, tools: list[str]) -> None:
            self._note_offered(ref, tools)
            if ledger is not None:
                ledger.on_tools_offered(ref, tools)

        self.observers = CallObservers(
            **({"trace": self.tracer} if self.tracer is not None else {}),
            **({"agent_thread": self.ledger.on_agent_thread} if self.ledger is not None else {}),
            tools_offered=offered)

    OFFERED_KEPT = 1024  # far more cases than are ever in flight at once

    def _note_offered(self, ref: CaseRef, tools: list[str]) -> None:
        with self._offered_lock:
            self._offered[tuple(ref.key)] = list(tools)
            while len(self._offered) > self.OFFERED_KEPT:
                self._offered.popitem(last=False)

    def tools_offered(self, ref: CaseRef) -> list[str] | None:
        """The tools the harness gave ``ref``'s agent in this process, if it did lately."""
        with self._offered_lock:
            return self._offered.get(tuple(ref.key))

    def stopped(self, ref: CaseRef, error: ErrorInfo) -> CaseResult:
        """The result of a case stopped from outside its agent call in this process
        (pytest-timeout): 0 in its task's rates over applicable cases and, when the run's agent
        takes tools or was given them here, in ``grounded``."""
        return not_run(ref, error=error, task=self.tasks.get(ref.task), tool_using=self.settings.agent.tool_using,
                       tools_offered=self.tools_offered(ref))

    def output(self) -> WorkerOutput:
        """What this process reports of its session (the same value an xdist worker sends)."""
        return self._output

    # -- collection --
    def refs(self, task: str, suite: Suite | None = None) -> list[CaseRef]:
        """The task's cases (its source's ids), or with ``suite`` that suite's items of them
        (ids namespaced by the suite: ``items.Suite``)."""
        if task not in self._refs:
            refs = self.tasks[task].discover()
            n = self.settings.repeat
            if n > 1:  # --repeat N: N items per case, r1..rN
                refs = [dataclasses.replace(r, repeat=k) for r in refs for k in range(1, n + 1)]
            self._refs[task] = refs
            self._by_key.update((r.key, r) for r in refs)
        if suite is None:
            return self._refs[task]
        refs = suite.namespace(self._refs[task])
        self._by_key.update((r.key, r) for r in refs)
        return refs

    # -- the agent --
    def preflight(self, checks: bool = True) -> list[str]:
        """At start, once: the chosen agent can be built, its server answers, and with
        ``--max-cost`` its model has a price; else one usage error, not one traceback per case.
        Returns what to warn of: a model Anthropic has retired (``prices.json``).
        ``checks=False`` (``--no-preflight``): the price only, which a budget cannot do without
        (an agent that cannot be built is then its cases' error; the model asked for is priced)."""
        spec = self.settings.agent
        if checks and spec.base_url:
            why = probe_url(spec.base_url)
            if why is not None:
                raise pytest.UsageError(f"groundeval: --model-base-url {spec.base_url}: nothing answers there "
                                        f"({why}); start the server, or skip this check with --no-preflight")
        try:
            agent = self.get_agent()
        except Exception as e:  # noqa: BLE001 - reported once, with its cause
            if checks:
                raise pytest.UsageError(
                    f"groundeval: --agent={spec.name} cannot be built: {type(e).__name__}: {e}") from None
            agent = None
        # a budget in USD needs the model's price: the model asked for, or the one the agent says it uses
        model = next((m for m in (getattr(agent, "model", None), getattr(agent, "default_model", None), spec.model)
                      if isinstance(m, str) and m), None)
        problem = unpriced_budget(model, self.settings.max_cost, agent_name(agent))
        if problem is not None:
            raise pytest.UsageError(f"groundeval: --agent={spec.name}: {problem}")
        retired = retirement(model)
        return [f"groundeval: --agent={spec.name}: {retired}; its price still applies to the tokens "
                "reported (a partner platform may still serve it)"] if retired else []

    # -- the agent --
    def get_agent(self) -> Any:
        if self._agent is None:
            from pytest_groundeval.agents.base import build_agent

            self._agent = build_agent(self.settings.agent, self.settings.rootdir, traced=self.traced)
            self.budget.floor = call_floor(self._agent)  # a call costs at least its max_tokens of output
        return self._agent

    def hosted(self, agent: Any) -> Any:
        """A fixture's own agent (a conftest's ``agent``) in an agent host, as ``--agent=module:Class``
        (``agents/host.moved``: the same object, the same host all session), or the error that
        says why it cannot be; as it is with ``--agent-in-process``, or when it is groundeval's
        own (a built-in agent's class, as ``--agent=claude``)."""
        if (agent is self._agent or self.settings.agent.in_process or getattr(agent, "hosted", False)
                or (not isinstance(agent, str) and type(agent).__module__.startswith("pytest_groundeval."))):
            return agent
        key = agent if isinstance(agent, str) else id(agent)
        if key not in self._injected:  # (the object is kept: its id stays its own)
            from pytest_groundeval.agents.host import NotMovable, moved

            try:
                self._injected[key] = (agent, moved(agent, self.settings.rootdir, self._hosts))
            except NotMovable as exc:
                self._injected[key] = (agent, ErrorInfo(kind="agent", message=str(exc)))
        return self._injected[key][1]

    def close_agent(self) -> None:
        """The agent's processes end (an agent in the agent host: the host and every process
        it started; agents/host.py)."""
        for agent in [self._agent, *self._hosts.values()]:
            close = getattr(agent, "close", None) if getattr(agent, "hosted", False) else None
            if close is not None:
                close()

    def needs_call(self, ref: CaseRef) -> bool:
        """The one rule (store/resume.py), with the case's content hash (loaded only when a
        stored result could stand)."""
        old = self.stored.cases.get(ref.key) if self.stored else None
        current = None
        if self.settings.mode == "resume" and old is not None and old.finished:
            case, _ = load_case(self.tasks[ref.task], ref)
            current = case.content_hash if case is not None else None
        return needs_call(self.settings.mode, old, current)

    # -- prefetching (hooks) --
    @pytest.hookimpl(trylast=True)
    @pytest.hookimpl(tryfirst=True)  # over everything collected: before -k / -m and the shards choose
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        if items:
            settle_suites(items[0].config, items)  # ids namespaced only where suites share a task

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        refs = [ref for ref in map(case_ref, session.items) if ref is not None]
        self.selected = len(refs)
        publish(session.config, selected=self.selected)
        called = [ref for ref in refs if self.needs_call(ref)]
        keys = [ref.key for ref in called]
        self._plan = keys
        if called and self.settings.mode != "rescore" and not listing_only(session.config):
            self._validate_ahead(session.config, called)
        self._position = {k: i for i, k in enumerate(keys)}
        if refs:
            # what collection built lives until the end: keep the cyclic garbage collector from
            # re-scanning it on every allocation burst of a case (reference counting still frees)
            gc.freeze()
            self.froze = True

    def _validate_ahead(self, config: pytest.Config, refs: list[CaseRef]) -> None:
        """The cold bundles of these cases validated off the item path (``fhir/warmup.py``).
        Not for an agent that takes every case's built Bundle (the baseline, a tool-using
        kind): building it in the item is its one validation."""
        if self.settings.agent.name == "baseline" or self.settings.agent.tool_using:
            return
        from pytest_groundeval.fhir import warmup

        ahead = warmup.start(path for ref in refs for path in self.tasks[ref.task].validated_bundles(ref))
        if ahead is not None:
            config.add_cleanup(ahead.stop)

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        n = sum(1 for item in items if case_ref(item) is not None)
        if n:
            self.deselected += n
            publish(items[0].config, deselected=self.deselected)

    def find_case(self, case_id: str) -> list[CaseRef]:
        """The items with this id (a case id, ``[rK]`` for a repeat) in any task (for a crash
        report, which names only a node id)."""
        found = []
        for task in self.tasks:
            try:
                found += [r for r in self.refs(task) if r.item_id == case_id]
            except (FileNotFoundError, ValueError):
                continue
        return found

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Any:
        result = yield
        ref = case_ref(item)
        if ref is not None and self.settings.mode != "rescore":
            self._after_setup(item, ref)
        return result

    def _after_setup(self, item: pytest.Item, ref: CaseRef) -> None:
        agent = getattr(item, "funcargs", {}).get("agent")
        ours = self._agent is not None and agent is self._agent
        if not self._prefetch_decided:
            self._prefetch_decided = True
            if ours:
                n = self.settings.default_concurrency(agent)
                if self.settings.is_worker:
                    n = min(n, 2)  # a worker knows only its current and next item
                if n > 1:
                    self.prefetcher = Prefetcher(self._call, n, latency=lambda called: called.agent_s)
                    self.concurrency = n
        if self.prefetcher is None or first_result(item) is not None:
            return  # (a re-run of an item that has its result: nothing to call, reruns.py)
        if not ours or item.session.shouldfail or item.session.shouldstop:
            self.prefetcher.stop()  # an injected agent, -x / --maxfail: no more calls ahead
            return
        if not self.prefetcher.idle:  # (an instant agent: calls run inline, no plan to keep)
            self.prefetcher.advance(self._upcoming(item, ref))

    def _upcoming(self, item: pytest.Item, ref: CaseRef) -> list[tuple[str, str]]:
        if self.settings.is_worker:
            nxt = item.stash.get(NEXT_ITEM, None)
            keys = [ref.key]
            nref = case_ref(nxt) if nxt is not None else None
            if nref is not None and self.needs_call(nref):
                keys.append(nref.key)
            return keys
        start = self._position.get(ref.key)
        if start is None:
            return []
        return self._plan[start:start + self.prefetcher.lookahead]  # type: ignore[union-attr]

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> None:
        self.current_item = item  # the item whose test calls evaluate() (items run one at a time)
        if self.settings.is_worker:
            item.stash[NEXT_ITEM] = nextitem

    def _call(self, key: tuple[str, str]) -> Called:
        ref = self._by_key[key]
        return self._calling(ref, lambda: call_case(self.tasks[ref.task], ref, self.get_agent(), self.settings.policy,
                                                    self.budget, self.observers, server=self.fhir))

    def _calling(self, ref: CaseRef, call: Any) -> Called:
        """An agent call, in the crash ledger of an xdist worker (crashes.py): which call was in
        flight on which thread if the process dies."""
        return call() if self.ledger is None else self.ledger.call(ref, call)

    # -- one item --
    def score(self, prediction: Any, case: Any) -> Any:
        """The default scorer: the case's own task's."""
        return self.tasks[case.ref.task].score(prediction, case)

    def evaluate(self, ref: CaseRef, agent: Any, scorer: Any = None) -> CaseResult:
        task = self.tasks[ref.task]
        if self.stored is not None:
            old = self.stored.cases.get(ref.key)
            result = reuse(task, ref, old, self.stored.run_id, rescore=self.settings.mode == "rescore",
                           scorer=scorer, source=f"the stored run {Path(self.stored.path).name}",
                           require_grounded=self.settings.require_grounded)
            if result is not None:
                return result
        if self.stop_reason is not None:
            return not_run(ref, error=ErrorInfo.never_run("agent", self.stop_reason))
        if self.prefetcher is not None and agent is self._agent and not self.prefetcher.stopped:
            called = self.prefetcher.take(ref.key)
        elif isinstance(agent := self.hosted(agent), ErrorInfo):
            return not_run(ref, error=agent)
        else:
            called = self._calling(ref, lambda: call_case(task, ref, agent, self.settings.policy, self.budget,
                                                              self.observers, server=self.fhir))
        result = finish_case(task, called, scorer, require_grounded=self.settings.require_grounded)
        self._watch_errors(result)
        return result

    def _watch_errors(self, result: CaseResult) -> None:
        """N identical agent errors in a row (a dead server, a bad key) stop further calls."""
        limit = self.settings.max_consecutive_errors
        if result.error is None or result.error.kind not in ("agent", "timeout") or not limit:
            self._streak = (None, 0)
            return
        from pytest_groundeval.run.errortext import signature as normalised

        # errors that differ only by ids and numbers (a server's bodies naming each call) are one
        signature = (result.error.kind, result.error.error_class, normalised(result.error.message))
        count = self._streak[1] + 1 if self._streak[0] == signature else 1
        self._streak = (signature, count)
        if count >= limit:
            self.stop_reason = (f"stopped after {count} consecutive identical agent errors "
                                f"(--max-consecutive-errors {limit}): {result.error.message[:300]}")
            if self.prefetcher is not None:
                self.prefetcher.stop()

    @pytest.hookimpl(wrapper=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> Any:
        """Before the reporter builds the record (registered after it, so this wrapper is
        outside the reporter's and its first half runs first)."""
        self._finish(session)
        return (yield)

    def _finish(self, session: pytest.Session) -> None:
        if self.prefetcher is not None:
            self.prefetcher.stop()
            if self.prefetcher.instant:
                self.concurrency = 1  # the agent answered instantly: calls ran inline
        self.close_agent()  # the agent host and every process it started: gone before the record
        if self.fhir is not None:  # no call runs any more: nothing is left listening
            self.fhir.stop()
        # read by the controller's reporter (pytest_testnodedown, or this process's own output)
        publish(session.config, concurrency=self.concurrency, stop_reason=self.stop_reason)
