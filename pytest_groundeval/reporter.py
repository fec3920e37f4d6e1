"""The controller's reporter, modelled on pytest's junitxml ``LogXML``: a plugin object
registered only in the controller process, fed by ``pytest_runtest_logreport`` (its own
reports, or those xdist workers send), that keeps the journal, builds the record, decides
the gate and writes the terminal summary. Workers never see it.
"""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any, Mapping

import orjson
import pytest
from pydantic import ValidationError

from .gate import evaluate_gate
from .journal import Journal, StoredRun
from .model import CaseResult, RunRecord
from .options import Settings
from .record import build_record, new_run_id, now_iso, record_bytes, sort_cases, write_json_atomic
from .tasks.base import Task
from .tracing import Tracer
from .usage import budget_record, total_usage

REPORT_ATTR = "groundeval"
FREEZE_EVERY = 256  # the attribute of a TestReport that carries its case result


class Reporter:
    def __init__(self, settings: Settings, tasks: Mapping[str, Task], stored: StoredRun | None) -> None:
        self.settings = settings
        self.tasks = tasks
        self.stored = stored
        self.run_id = new_run_id()
        self.started_at = now_iso()
        self.results: dict[tuple[str, str], CaseResult] = {}
        self._local: dict[int, tuple[CaseResult, bytes]] = {}
        self.data: dict[tuple[str, str], bytes] = {}  # each result as it was reported (JSON)
        self.journal: Journal | None = None
        self.tracer: Tracer | None = Tracer.from_env()
        self.record: RunRecord | None = None
        self.record_path: Path | None = None
        self.problems: list[str] = []
        self.worker_concurrency: list[int] = []
        self.froze = False  # gc.freeze() was called (undone at unconfigure)
        self.other_failures = 0  # failed reports that are not eval cases (plain tests, teardowns)
        self.own_failure_lines = False
        self.local_concurrency: Any = None  # () -> int, the in-process evaluator's, when there is one

    @property
    def path(self) -> Path:
        return self.settings.run_record or self.settings.runs_dir / f"{self.run_id}.json"

    def header(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "started_at": self.started_at, "agent": self.settings.agent.name,
                "model": self.settings.agent.model, "options": self.options()}

    def options(self) -> dict[str, Any]:
        if self.worker_concurrency:
            concurrency = max(self.worker_concurrency)
        else:
            concurrency = self.local_concurrency() if self.local_concurrency else 1
        return self.settings.record_options(self.tasks, concurrency, self.stored.run_id if self.stored else None)

    def hand_over(self, report: pytest.TestReport, result: CaseResult, blob: bytes) -> None:
        """In-process reports bring their typed result and its JSON along (no re-validation)."""
        self._local[id(report)] = (result, blob)

    # -- hooks --
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
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
        self.results[result.key] = result
        if len(self.results) % FREEZE_EVERY == 0:
            # the results are kept to the end: after a young collection (which frees this
            # stretch's cyclic garbage) move them out of the collector's way, so a long run's
            # full collections do not traverse every earlier result again and again
            gc.collect(1)
            gc.freeze()
            self.froze = True
        # kept as bytes until the record is written: no Python objects for the garbage
        # collector to traverse on every collection of a long run
        self.data[result.key] = blob
        if self.journal is None:
            self.journal = Journal(self.path.with_suffix(".jsonl"), self.header())
        self.journal.append_json(blob)
        if self.tracer is not None:
            if not self.tracer.started:  # lazily: sessions without eval cases open no LangSmith run
                self.tracer.start(self.header())
            self.tracer.log_case(data, self.tasks[result.task].count_metrics if result.task in self.tasks else ())

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        out = getattr(node, "workeroutput", None) or {}
        if "groundeval_concurrency" in out:
            self.worker_concurrency.append(int(out["groundeval_concurrency"]))

    @pytest.hookimpl(wrapper=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> Any:
        try:
            self.finish(session, exitstatus)
            self._one_line_failures(session.config)
        finally:
            if self.journal is not None:
                self.journal.close()
        return (yield)

    def _one_line_failures(self, config: pytest.Config) -> None:
        """pytest's FAILURES section looks up teardown sections once per failure by scanning
        every passed report (O(failures x items): 5,000 mostly failing cases cost 9x 1,000).
        An eval failure is one line with no traceback, so when every failure of the session is
        an eval case and ``--tb`` was left at its default, pytest's section is switched off
        (``--tb=no``) and the terminal summary lists each failed case with its whole reason."""
        failing = any(r.outcome in ("failed", "error") for r in self.results.values())
        if failing and self.other_failures == 0 and config.option.tbstyle == "auto":
            config.option.tbstyle = "no"
            self.own_failure_lines = True

    def finish(self, session: pytest.Session, exitstatus: int) -> None:
        """Summary → gate → record (written atomically) → exit status. With thresholds set,
        the gate decides the exit status."""
        if not self.results and not self.settings.thresholds:
            return  # no eval case ran (e.g. the project's own tests): no record
        # in case-id order: aggregates (bootstrap resamples, float sums) must not depend on
        # the order results arrived in (xdist workers finish in any order)
        cases = sort_cases(self.results.values())
        by_task: dict[str, list[CaseResult]] = {}
        for c in cases:
            by_task.setdefault(c.task, []).append(c)
        summary = {name: self.tasks[name].summarize(rs) for name, rs in by_task.items()}
        gate = evaluate_gate(self.settings.thresholds, summary)
        usage = total_usage(cases)
        budget = budget_record(self.settings.max_cost, cases, usage)
        if gate is not None and budget is not None and budget.stopped:
            gate = gate.model_copy(update={"passed": False,
                                           "reason": "--max-cost stopped the run before every case ran"})
        self.record = build_record(
            run_id=self.run_id, started_at=self.started_at, agent=self.settings.agent.name,
            model=self.settings.agent.model, options=self.options(), cases=cases, summary=summary,
            usage=usage, budget=budget, gate=gate, rootdir=self.settings.rootdir,
        )
        # the cases as reported (already JSON), in the record's order: not serialised twice
        head = self.record.model_dump(mode="json", exclude={"cases"})
        payload = {k: ([orjson.loads(self.data[c.key]) for c in self.record.cases] if k == "cases" else head[k])
                   for k in RunRecord.model_fields}
        write_json_atomic(self.path, record_bytes(payload))
        self.record_path = self.path
        if self.tracer is not None and self.tracer.started:
            self.tracer.finish(payload)
        if self.problems:
            session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
        elif gate is not None and exitstatus in (
            pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.NO_TESTS_COLLECTED
        ):
            session.exitstatus = pytest.ExitCode.OK if gate.passed else pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        if self.record is None:
            return
        from .report import terminal_lines

        tr = terminalreporter
        if self.own_failure_lines:
            tr.write_sep("=", "groundeval failures")
            for c in self.record.cases:
                if c.outcome in ("failed", "error"):
                    label = "ERROR" if c.outcome == "error" else "FAILED"
                    tr.write_line(f"{label} {c.task}:{c.case_id}: {c.reason}", red=True)
        tr.write_sep("=", "groundeval summary")
        for line in terminal_lines(self.record, self.tasks):
            tr.write_line(line)
        if self.problems:
            tr.write_line("groundeval: some case results could not be recorded (a groundeval bug):", red=True)
            for p in self.problems[:20]:
                tr.write_line(f"  {p}", red=True)
        tr.write_line(f"run record: {self.record_path}")
        line = self.tracer.warning_line() if self.tracer is not None else None
        if line:
            tr.write_line(line, yellow=True)
