"""The controller's reporter, modelled on pytest's junitxml ``LogXML``: a plugin object
registered only in the controller process, fed by ``pytest_runtest_logreport`` (its own
reports, or those xdist workers send), that keeps the journal, builds the record, decides
the gate and writes the terminal summary. Workers never see it; what they say of their
session comes back in one typed ``WorkerOutput`` each (``workeroutput.py``). Of the process
it runs in it needs only what :class:`Local` says (the plugin hands it the evaluator); the
controller's other parts it finds under their stash keys (``keys.py``).
"""

from __future__ import annotations

import functools
import gc
from pathlib import Path
from typing import Any, Mapping, Protocol

import orjson
import pytest
from pydantic import ValidationError

from pytest_groundeval.reporting.gate import run_gate
from pytest_groundeval.reporting.terminal import plural
from pytest_groundeval.store import write
from pytest_groundeval.store.files import Layout, StoredRun, read_written
from pytest_groundeval.store.journal import JournalWriter, JournalWriteError
from pytest_groundeval.model import CaseRef, CaseResult, Completeness, ErrorInfo, RunRecord, ShardRecord
from pytest_groundeval.pytest.items import REPORT_ATTR
from pytest_groundeval.pytest.keys import CRASHES, LANGSMITH_CONTROLLER, listing_only
from pytest_groundeval.pytest.settings import Settings
from pytest_groundeval.pytest.workeroutput import WorkerOutput, WorkerOutputError, parse
from pytest_groundeval.store.record import (build_record, case_json, git_info, new_run_id, now_iso, sort_cases, summarize,
                                            user_subset)
from pytest_groundeval.store.redact import redact_obj
from pytest_groundeval.run.runner import not_run
from pytest_groundeval.pytest.signals import terminated
from pytest_groundeval.tasks.base import Task
from pytest_groundeval.run.usage import budget_record, total_usage, with_unfinished
from pytest_groundeval.store import spent as spentlog

FREEZE_EVERY = 256  # results kept between two gc.freeze() calls

__all__ = ["REPORT_ATTR", "Local", "Reporter"]


def _shown(path: Path) -> str:
    """A path as the terminal shows it: relative to the current folder when under it."""
    try:
        return str(path.absolute().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _plain(value: Any) -> Any:
    """Typed parts of the record as the JSON it will hold."""
    return orjson.loads(orjson.dumps(value, default=lambda v: v.model_dump(mode="json")))


class Local(Protocol):
    """What the reporter asks of the process it runs in (the evaluator)."""

    def find_case(self, item_id: str) -> list[CaseRef]:
        """The eval items with this id (a case id, ``[rK]`` for a repeat), in any task."""
        ...

    def output(self) -> WorkerOutput:
        """This process's own session output: what an xdist worker would send (its selection,
        concurrency, stop, shard), for the session whose items ran here."""
        ...


STOPPED = ("crash", "interrupted", "timeout")  # kinds of a case stopped from outside its agent call


def stopped_tool_users(cases: list[CaseResult]) -> list[CaseResult]:
    """A ``module:Class`` agent's kind says nothing of tools: a case of it stopped from outside
    (its worker crashed, pytest-timeout killed it) before the harness gave it tools has no
    ``offered`` line to go by. When the same agent took the harness's tools on another case of
    that task in this run, it is a tool-using agent there: the stopped case counts 0 in
    ``grounded`` too (else crashing before taking the tools would leave the rate)."""
    from pytest_groundeval.scorers.grounding import NAME as GROUNDED

    tool_tasks = {c.task for c in cases if c.tools_offered}
    out = []
    for c in cases:
        if c.outcome == "error" and c.task in tool_tasks and c.error is not None and c.error.kind in STOPPED \
                and GROUNDED not in (c.applicable or []):
            c = c.model_copy(update={"applicable": [*(c.applicable or []), GROUNDED]})
        out.append(c)
    return out


IGNORED = ".groundeval"  # under the rootdir: run records, journals, HTML reports, the model-call cache, verdicts
GITIGNORE = ("# groundeval's run records, journals, HTML reports and caches: they hold case data (prompts, answers,\n"
             "# ground truth); not for version control. Written by the first run; delete this file to commit them.\n*\n")


def ignore_runs(rootdir: Path, record: Path) -> None:
    """The first run to write under ``<rootdir>/.groundeval`` writes its ``.gitignore`` (``*``):
    what lands there holds case data. A record written elsewhere (``--run-record``,
    ``--groundeval-runs-dir``) is the user's choice: nothing is written beside it."""
    folder = rootdir / IGNORED
    if folder not in record.absolute().parents:
        return
    folder.mkdir(parents=True, exist_ok=True)
    ignore = folder / ".gitignore"
    if not ignore.exists():
        ignore.write_text(GITIGNORE, encoding="utf-8")


class Reporter:
    def __init__(self, config: pytest.Config, settings: Settings, tasks: Mapping[str, Task],
                 stored: StoredRun | None, local: Local) -> None:
        self.config = config
        self.local = local
        self.settings = settings
        self.tasks = tasks
        self.stored = stored
        self.run_id = new_run_id()
        self.started_at = now_iso()
        self.results: dict[tuple[str, str], CaseResult] = {}
        # the results this process's redaction step made (case_json at makereport), by id, the
        # objects held: the record writes them without redacting them again (store.files)
        self.redacted: dict[int, CaseResult] = {}
        self._local: dict[int, tuple[CaseResult, bytes]] = {}
        self.reruns: list[CaseResult] = []  # executions of a case after its first (reruns.py)
        self.journal: JournalWriter | None = None
        self._journal_specs: set[str] = set()  # the tasks whose specs the journal holds
        self.record: RunRecord | None = None
        self.layout = Layout()  # where the written record's cases lie in its file (the page reads them one by one)
        self.record_path: Path | None = None
        self.problems: list[str] = []
        self.write_error: str | None = None
        self.html_error: str | None = None  # --groundeval-html: why the page could not be written
        self.html_path: Path | None = None  # --groundeval-html: the page written
        self.journal_failed = False
        self.workers: list[WorkerOutput] = []  # each xdist worker's, as it went down
        self.unresolved_crashes: list[str] = []
        self.collected: list[str] = []  # the node ids xdist's workers collected
        self.froze = False  # gc.freeze() was called (undone at unconfigure)
        self.other_failures = 0  # failed reports that are not eval cases (plain tests, teardowns)
        # --resume: what the killed session's unfinished cases paid (store/spent.py), read before any call;
        # this session's attempts write beside its own journal
        self.unfinished = spentlog.unfinished(stored.path.with_suffix(".jsonl"), set(stored.cases)) \
            if stored is not None and settings.mode == "resume" else ([], 0, set())
        spentlog.open_sink(self.path.with_suffix(".jsonl"))
        self.failure_lines: list[str] = []  # the lines above pytest's short summary (_one_line_failures)
        self._failed_reports: dict[tuple, pytest.TestReport] = {}  # each failed eval case's report, by result key

    @property
    def path(self) -> Path:
        return self.settings.run_record or self.settings.runs_dir / f"{self.run_id}.json"

    def requested(self) -> dict[str, str | None]:
        return {"agent": self.settings.agent.name, "model": self.settings.agent.model}

    def header(self) -> dict[str, Any]:
        return redact_obj({"run_id": self.run_id, "started_at": self.started_at, "agent": self.settings.agent.name,
                           "model": self.settings.agent.model, "requested": self.requested(),
                           "options": self.options()})

    def attribution(self, cases: list[CaseResult]) -> tuple[str, str | None]:
        """The agent as it names itself and the model it reports, from the cases it answered;
        a rescore keeps the stored run's (it makes no call)."""
        if self.settings.mode == "rescore" and self.stored is not None:
            return self.stored.answered_by or self.settings.agent.name, self.stored.answered_model
        agents = sorted({c.agent for c in cases if c.agent})
        models = sorted({c.model for c in cases if c.model})
        return (", ".join(agents) or self.settings.agent.name,
                ", ".join(models) or self.settings.agent.model)

    # -- what the processes that ran the items said of their session (workeroutput.py) --
    def outputs(self) -> list[WorkerOutput]:
        """The xdist workers' outputs, else this process's own (it ran the items)."""
        return self.workers or [self.local.output()]

    def selection(self) -> tuple[int | None, int]:
        """(selected, deselected) eval items: every worker collects every item, so any one
        that collected says it; with none (all died), what the crash ledgers counted."""
        said = [(o.selected, o.deselected) for o in self.workers if o.selected is not None]
        if said:
            return said[-1]
        crashes = self.config.stash.get(CRASHES, None)
        if crashes is not None and crashes.selected is not None:  # every worker died
            return crashes.selected, 0
        local = self.local.output()
        return local.selected, local.deselected

    def shard(self) -> tuple[ShardRecord | None, int]:
        """--groundeval-shard: the whole selection's note and this shard's eval items."""
        said = [(o.shard, o.shard_kept) for o in self.outputs() if o.shard is not None]
        return said[-1] if said else (None, 0)

    def options(self) -> dict[str, Any]:
        concurrency = max(o.concurrency for o in self.outputs())
        return self.settings.record_options(self.tasks, concurrency, self.stored.run_id if self.stored else None)

    def hand_over(self, report: pytest.TestReport, result: CaseResult, blob: bytes) -> None:
        """In-process reports bring their typed result and its JSON along (no re-validation)."""
        self._local[id(report)] = (result, blob)

    # -- hooks --
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self._slim_previous()
        data = getattr(report, REPORT_ATTR, None)
        if data is None:
            if report.failed:
                self.other_failures += 1
            return
        local = self._local.pop(id(report), None)
        if local is not None:
            result, blob = local
        else:  # from an xdist worker: plain data, checked here
            try:
                result = CaseResult.model_validate(data)
            except ValidationError as e:  # a groundeval bug: say so, keep the rest of the run
                self.problems.append(f"{report.nodeid}: {e.errors()[0]['loc']}: {e.errors()[0]['msg']}")
                return
            blob = orjson.dumps(data, default=str)
        self._previous = report
        if report.failed and result.result_key not in self.results:
            self._failed_reports[result.result_key] = report  # its line in pytest's short summary (below)
        if result.result_key in self.results:
            self._again(result, blob)
            return
        self._keep(result)
        if local is not None:
            self.redacted[id(result)] = result
        self._journal(blob, task=result.task)

    def _slim_previous(self) -> None:
        """The case's data off the previous report (every hook has read it by now): the
        terminal reporter keeps each report to the end of the session, and the case is kept
        once, as its typed result in ``self.results``, not also as a dict on its report."""
        previous, self._previous = getattr(self, "_previous", None), None
        if previous is not None:
            previous.__dict__.pop(REPORT_ATTR, None)

    def _again(self, result: CaseResult, blob: bytes) -> None:
        """A case reported again (a plugin re-ran its item): the first result stands
        (reruns.py made the report agree with it). The same result again (re-reported, the
        agent not called) is nothing new; another execution is kept apart with its usage
        (the record's ``reruns``, the journal's ``rerun`` lines), never as the case's result."""
        if orjson.loads(blob) == self.results[result.result_key].model_dump(mode="json"):
            return
        self.reruns.append(result)
        self._journal(blob, kind="rerun", task=result.task)

    def _keep(self, result: CaseResult) -> None:
        self.results[result.result_key] = result  # (its JSON went to the journal; the record dumps it again)
        if len(self.results) % FREEZE_EVERY == 0:
            # the results are kept to the end: after a young collection (which frees this
            # stretch's cyclic garbage) move them out of the collector's way, so a long run's
            # full collections do not traverse every earlier result again and again
            gc.collect(0)
            gc.freeze()
            self.froze = True

    def _open_journal(self) -> None:
        if self.journal is None and not self.journal_failed:
            try:
                ignore_runs(self.settings.rootdir, self.path)
                self.journal = JournalWriter(self.path.with_suffix(".jsonl"), self.header())
            except OSError as e:
                self.journal_failed = True
                self.problems.append(f"could not open the journal {self.path.with_suffix('.jsonl')}: "
                                     f"{e.strerror or e} (the cases are kept for the record)")

    def journal_batch(self, info: dict[str, Any]) -> None:
        """A batch line (``run/batch.py``), at once: a session killed after submitting resumes it."""
        self._open_journal()
        if self.journal is not None:
            self.journal.append_batch(info)

    def _journal(self, blob: bytes, kind: str = "case", task: str | None = None) -> None:
        self._open_journal()
        if self.journal is not None:
            try:
                if task is not None and task not in self._journal_specs and task in self.tasks:
                    # what each figure of the task is, before its first case (a journal is
                    # compared without its task installed)
                    self.journal.append_specs(task, [spec.model_dump(mode="json") for spec in
                                                     type(self.tasks[task]).all_specs(self.settings.repeat)])
                    self._journal_specs.add(task)
                self.journal.append_json(blob, kind)
            except JournalWriteError as e:  # disk full mid-run: stop cleanly, the record keeps what finished
                self.problems.append(f"{e}; the run was stopped (the cases that finished are kept for the record)")
                # as an interrupt (pytest prints no terminal summary for INTERNAL_ERROR); the
                # problem makes the exit status 3 once the record is written
                pytest.exit(f"groundeval: {e}", returncode=pytest.ExitCode.INTERRUPTED)

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[spentlog.WORKERINPUT] = str(self.path.with_suffix(".jsonl"))  # store/spent.py

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self.collected = ids  # every worker collects the same (a crashed item's suite: items.crashed_refs)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """A worker finished (or died: then it sent nothing): its output, typed; a malformed
        one is a problem of the run (exit status 3, said in the terminal), not dropped."""
        try:
            out = parse(node)
        except WorkerOutputError as e:
            self.problems.append(str(e))
            return
        if out is not None:
            self.workers.append(out)

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched: Any) -> None:
        """An xdist worker died running ``crashitem``: its case gets an error of kind ``crash``
        on the crash report (the report xdist logs next), so it is in the record once."""
        from pytest_groundeval.pytest.items import crashed_refs

        refs = crashed_refs(self.config.rootpath, crashitem, self.local.find_case, self.collected,
                            lambda task: {r.item_id for r in self.local.refs(task)})  # namespaced as its worker did
        if len(refs) != 1:
            if refs or crashitem.endswith("]"):
                self.unresolved_crashes.append(crashitem)
            return  # not an eval item (or an id several tasks share): pytest reports it as always
        crashes = self.config.stash.get(CRASHES, None)
        tools = None
        if crashes is not None:  # which call crashed it, from the worker's ledger (crashes.py)
            error = crashes.diagnose(getattr(report, "node", None), refs[0], crashitem)
            tools = crashes.tools_offered(getattr(report, "node", None), refs[0])  # given before it died
        else:
            error = ErrorInfo(kind="crash", message=(
                f"the pytest-xdist worker running it crashed: {report.longreprtext.strip()[:500]}"))
        # grounded: the run's agent kind takes the harness's tools, or the ledger saw them given
        result, data, blob = case_json(not_run(refs[0], error=error, task=self.tasks.get(refs[0].task),
                                               tool_using=self.settings.agent.tool_using, tools_offered=tools))
        setattr(report, REPORT_ATTR, data)
        from pytest_groundeval.pytest.outcomes import apply

        path, lineno = report.location[0], report.location[1]
        apply(report, result, lambda: (str(self.config.rootpath / path), (lineno if lineno is not None else -1) + 1))
        self.hand_over(report, result, blob)

    @pytest.hookimpl(wrapper=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> Any:
        self._slim_previous()
        try:
            self.finish(session, exitstatus)
            self._one_line_failures(session.config)
        finally:
            if self.journal is not None:
                self.journal.close()
        result = yield  # junitxml writes its file here
        from pytest_groundeval.pytest.junit import rewrite_for

        rewrite_for(session.config, self.record, self.record_path)  # errored cases as <error>, suite properties
        return result

    def completeness(self, session: pytest.Session, exitstatus: int, cases: list[CaseResult],
                     budget: Any) -> Completeness:
        """Selected vs recorded, the user's selection, and whether (and why) the run stopped
        before every selected case had a result."""
        selected, deselected = self.selection()
        sel = {k: v for k, v in self.settings.selection.items()}
        sel["last_failed"] = bool(session.config.getoption("lf", False))
        subset = user_subset(sel, deselected)  # a shard is a subset too: the other shards' cases are deselected
        reasons = []
        if terminated(session.config):  # SIGTERM (signals.py)
            reasons.append(terminated(session.config))
        elif self.journal is not None and self.journal.error is not None:  # disk full: the run was stopped
            reasons.append(f"stopped: {self.journal.error}")
        elif (exitstatus == pytest.ExitCode.INTERRUPTED or session.shouldstop) and not session.shouldfail:
            # (xdist stops its workers at -x / --maxfail with an interrupt: that is said below)
            reasons.append(f"interrupted ({session.shouldstop or 'KeyboardInterrupt'})")
        if session.shouldfail:
            reasons.append(f"-x / --maxfail: {session.shouldfail}")
        if budget is not None and budget.stopped:
            reasons.append(f"--max-cost reached ({plural(budget.cases_not_run, 'case')} not run)")
        stops = [o.stop_reason for o in self.outputs()]
        reasons += sorted({r.split(":", 1)[0] for r in stops if r})
        crashed = sum(c.error_kind == "crash" for c in cases) + len(self.unresolved_crashes)
        if crashed:
            reasons.append(f"a worker crashed ({plural(crashed, 'case')})")
        interrupted = sum(c.error_kind == "interrupted" for c in cases)
        if interrupted:
            reasons.append(f"{plural(interrupted, 'case')} interrupted by another case's crash")
        missing = (selected - len(cases)) if selected is not None else 0
        if missing > 0:
            reasons.append(f"{missing} selected {'case has' if missing == 1 else 'cases have'} no result")
        return Completeness(selected=selected, deselected=deselected, recorded=len(cases), subset=subset,
                            selection=sel, cut_short=bool(reasons), reason="; ".join(reasons) or None,
                            shard=self.shard()[0])

    def _one_line_failures(self, config: pytest.Config) -> None:
        """Each failing case is said once. An eval failure is one line with no traceback: when
        every failure of the session is an eval case and ``--tb`` was left at its default,
        pytest's FAILURES / ERRORS sections are switched off (``--tb=no``; they cost O(failures x
        items) at the end of a run and would say each case again), and pytest's short test
        summary (``-rfE``) is the list: one line per failed or errored case, its reason as the
        message. What that list cannot say once is said above it (``failure_lines``): the cases
        that errored the very same way (one line, each case's own line points at it) and the
        cases not run (pytest's skips, not listed by default)."""
        from pytest_groundeval.reporting.terminal import failure_lines

        failing = any(r.outcome in ("failed", "error") for r in self.results.values())
        if failing and self.other_failures == 0 and config.option.tbstyle == "auto":
            config.option.tbstyle = "no"
        if self.record is not None and failing:
            self.failure_lines = failure_lines(self.record)
            self._point_to_the_grouped_line()

    def _point_to_the_grouped_line(self) -> None:
        """A case of a group that errored the same way says, in pytest's short summary, where
        the group's one line is instead of repeating the error (an agent bug over 45 cases is
        one line of it, not 46). Its message only: the test stays an error, and junitxml wrote
        its element when the report came in (pytest/junit.py rewrites it from the record)."""
        assert self.record is not None
        from pytest_groundeval.reporting.terminal import failure_groups, pointer

        for word, task, _reason, cases in failure_groups(self.record):
            if word != "error" or len(cases) < 2:
                continue
            for c in cases:
                report = self._failed_reports.get(c.result_key)
                if report is not None:
                    report.longrepr = pointer(task, c.case_id, len(cases))

    @functools.cached_property
    def git(self) -> Any:
        """The record's git block, read once: when LangSmith names its experiments (at start, as
        the SDK reads its own once) or else when the record is built; the same for both."""
        return git_info(self.settings.rootdir)

    def selected_any(self) -> bool:
        """Did this session select any eval item (here, or on any xdist worker)?"""
        return any(o.selected for o in self.outputs())

    def finish(self, session: pytest.Session, exitstatus: int) -> None:
        """Summary → gate → record (written atomically) → exit status. With thresholds set,
        the gate decides the exit status."""
        if listing_only(session.config):
            return  # --collect-only: nothing ran, nothing to record
        if not self.results and not self.selected_any() \
                and not any(t.origin == "option" for t in self.settings.thresholds):
            return  # no eval item collected (e.g. the project's own tests): inert, no record
        self.record = self._build(session, exitstatus)
        if not self._write(session):
            return
        gate = self.record.gate
        if self.problems:
            session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
        elif gate is not None and exitstatus in (
            pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.NO_TESTS_COLLECTED
        ):
            session.exitstatus = pytest.ExitCode.OK if gate.passed else pytest.ExitCode.TESTS_FAILED
        elif gate is None and exitstatus == pytest.ExitCode.OK and any(c.outcome == "error" for c in self.record.cases):
            # a case not run is a pytest skip (outcomes.py), still an error of the run: not an OK
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        self._write_html(session)

    def _build(self, session: pytest.Session, exitstatus: int) -> RunRecord:
        # in case-id order: aggregates (bootstrap resamples, float sums) must not depend on
        # the order results arrived in (xdist workers finish in any order)
        cases = sort_cases(self.results.values())
        if self.settings.agent.tool_using is None:  # a module:Class: its other cases say whether it takes tools
            cases = stopped_tool_users(cases)
        summary = summarize(self.tasks, cases)
        usage = total_usage(cases + self.reruns)  # every execution's usage, the first results' figures
        spent, cut, unfinished = self.unfinished
        model = (self.stored.answered_model or self.stored.model) if self.stored is not None else None
        usage = with_unfinished(usage, model, spent, cut, len(unfinished))
        budget = budget_record(self.settings.max_cost, cases, usage)
        completeness = self.completeness(session, exitstatus, cases, budget)
        gate = run_gate(self.settings.thresholds, summary, completeness)
        agent, model = self.attribution(cases)
        finished_at = now_iso()
        langsmith = self.config.stash.get(LANGSMITH_CONTROLLER, None)
        if langsmith is not None:  # the experiments' summary feedback; their URLs go in the record
            langsmith = langsmith.finish(_plain({"summary": summary, "gate": gate, "agent": agent, "model": model,
                                                 "finished_at": finished_at, "completeness": completeness}),
                                         [o.langsmith for o in self.workers if o.langsmith], cases)
        return build_record(
            run_id=self.run_id, started_at=self.started_at, agent=agent, model=model,
            requested=self.requested(), options=self.options(), cases=cases, summary=summary,
            completeness=completeness, usage=usage, budget=budget, gate=gate, rootdir=self.settings.rootdir,
            reruns=self.reruns, langsmith=langsmith, finished_at=finished_at, git=self.git,
        )

    def _write(self, session: pytest.Session) -> bool:
        """Write the record (store.write: redacted, atomic; a complete record folds the
        journal, closed first); False when it could not be written."""
        assert self.record is not None
        if self.journal is not None:
            self.journal.close()  # every case is in it; a complete record replaces it
        try:
            self.layout = Layout()
            write(self.record, self.path, journal=self.journal.path if self.journal is not None else None,
                  redacted=self.redacted, layout=self.layout)
        except OSError as e:  # disk full, no permission, a file where a folder should be
            self.write_error = f"could not write the run record {self.path}: {e.strerror or e}"
            if self.journal is not None and self.journal.error is not None:
                kept = (f"; the journal {self.journal.path} holds only the cases before that failed "
                        f"({self.journal.error.strerror}): re-run, or --resume {self.journal.path}")
            else:
                kept = f"; its cases are in the journal {self.journal.path}" if self.journal is not None else ""
            self.problems.append(self.write_error + kept)
            session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
            return False
        self.record_path = self.path
        self._fold_resumed()
        return True

    def _fold_resumed(self) -> None:
        """``--resume`` of a journal, finished into a complete record: the journal says so (a
        ``folded`` line), so it is not resumed, and paid for, again."""
        stored = self.stored
        if (self.settings.mode != "resume" or stored is None or self.record is None
                or self.record.completeness.cut_short or stored.path.suffix != ".jsonl"
                or not stored.path.exists()):
            return
        from pytest_groundeval.store.files import mark_folded

        mark_folded(stored.path, self.path, self.record.run_id)
        spentlog.remove(stored.path)  # its unfinished cases' spend is in this record

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> None:
        """Before the first case (and so the first paid call): the record's folder and the
        journal are made and its header written; a folder that cannot be written is a usage
        error, with nothing run. Serially, when the session selected an eval case; under xdist
        (the controller does not collect), when an agent or a record path was asked for."""
        if listing_only(session.config):
            return
        if session.items:
            from pytest_groundeval.pytest.items import case_ref

            wanted = any(case_ref(item) is not None for item in session.items)
        else:
            wanted = bool(getattr(session.config, "workerinput", None) is None and self._xdist(session.config)
                          and (self.settings.agent.name or self.settings.run_record is not None))
        if not wanted or self.journal is not None:
            return
        self._open_journal()
        if self.journal is None:
            why = self.problems.pop().replace(" (the cases are kept for the record)", "")
            raise pytest.UsageError(f"groundeval: {why}; nothing was run (no agent call): make the "
                                    "folder writable, or give the record another place with --run-record PATH")

    @staticmethod
    def _xdist(config: pytest.Config) -> bool:
        return bool(getattr(config.option, "numprocesses", None)) or bool(getattr(config.option, "dist", "no") != "no")

    def _write_html(self, session: pytest.Session) -> None:
        """The HTML report of the record just written (read back as JSON, its cases one at a
        time as the page goes through them: the page shows exactly the file; it was validated
        as it was built, so it is not validated again),
        beside it or at ``--groundeval-html``; none under ``--no-groundeval-html``. A failure
        is one terminal line; the page asked for (``--groundeval-html``) makes it
        INTERNAL_ERROR, the default one leaves the exit status to the run (the record stands)."""
        if not self.settings.html:
            return  # --no-groundeval-html
        target = self.settings.html_report or self.path.with_suffix(".html")
        from pytest_groundeval.reporting.html import write as write_html

        try:
            self.html_path = write_html(read_written(self.path, self.layout), target)
        except Exception as e:  # noqa: BLE001 - disk, permissions, or a bug of the page: said, not raised
            why = e.strerror if isinstance(e, OSError) and e.strerror else f"{type(e).__name__}: {e}"
            self.html_error = f"could not write the HTML report {target}: {why}"
            if self.settings.html_report is not None:
                session.exitstatus = pytest.ExitCode.INTERNAL_ERROR

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        if self.write_error is not None:
            for problem in self.problems:
                terminalreporter.write_line(f"groundeval: {problem}", red=True)
            return
        if self.record is None:
            return
        from pytest_groundeval.reporting.terminal import SECTION, subset_line, terminal_lines

        tr = terminalreporter
        if self.failure_lines:
            tr.write_sep("=", SECTION)
            for line in self.failure_lines:
                tr.write_line(line, red=True)
        tr.write_sep("=", "groundeval summary")
        for line in terminal_lines(self.record, quiet=config.get_verbosity() < 0):
            tr.write_line(line)
        if self.problems:
            tr.write_line("groundeval: some case results could not be recorded (a groundeval bug):", red=True)
            for p in self.problems[:20]:
                tr.write_line(f"  {p}", red=True)
        comp = self.record.completeness
        subset = subset_line(self.record)
        if subset is not None:
            tr.write_line(subset, yellow=True)
        if comp.cut_short:
            tr.write_line(f"groundeval: the run was cut short: {comp.reason}", red=True)

    def path_lines(self, terminalreporter: Any) -> None:
        """The last of groundeval's lines (``plugin.py`` calls it after every other summary): the
        record, the HTML report, and the history of the records' folder."""
        if self.record is None or self.record_path is None:
            return
        tr = terminalreporter
        tr.write_line(f"run record: {_shown(self.record_path)}")
        if self.html_error is not None:
            tr.write_line(f"groundeval: {self.html_error}", red=True)
        elif self.html_path is not None:
            tr.write_line(f"HTML report: {_shown(self.html_path)}")
        folder = self.record_path.parent
        tr.write_line(f"history: groundeval report {_shown(folder)} (every run in that folder, one page)")
