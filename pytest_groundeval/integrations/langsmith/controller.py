"""LangSmith's controller half: where the record is made (the only process, or the
pytest-xdist controller).

It names the session's experiments (the run id, the prefix, the metadata) and hands them to
every xdist worker (``pytest_configure_node``); at the session's end, once the record is
built (``Reporter.finish``), it takes what every process's worker half did (this process's
own, and each worker's typed ``WorkerOutput.langsmith``), sends each experiment's
summary feedback and metadata, and gives the record its ``langsmith`` part; the terminal
gets the experiments' URLs and one warning line for every process's errors.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import pytest

from pytest_groundeval.integrations.langsmith.common import (
    MAX_KEPT_ERRORS, WORKER_KEY, Experiment, Session, _jsonable, _now, _scrub, dataset_tags, git_metadata,
    summary_feedback, suite_versions)
from pytest_groundeval.pytest.workeroutput import LangSmithOutput


class LangSmithController(Session):
    """The session's end, in LangSmith. Never raises out of a hook or a method."""

    def __init__(self, *, local: Any = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.local = local  # this process's worker half (langsmith/worker.py), when items may run here
        self.experiments: dict[str, Experiment] = {}  # by task, every process's
        self.counts: dict[str, int] = {"experiment_feedback": 0}  # every process's, with the workers' counts
        self.record: Any = None  # the LangSmithRecord given to the run record

    def _ensure_client(self) -> Any:
        """In the process that ran the items: its worker half's client (one client per process)."""
        if self.local is not None:
            self.client = self.local._ensure_client()
            return self.client
        return super()._ensure_client()

    def _take(self, out: LangSmithOutput) -> None:
        with self._lock:
            for exp in out.experiments:
                self.experiments.setdefault(exp.task, exp)
            for message in out.errors:
                if len(self.errors) < MAX_KEPT_ERRORS:
                    self.errors.append(message)
            self.n_errors += out.n_errors
            self.gave_up = self.gave_up or out.gave_up
            for k, v in out.counts.items():
                self.counts[k] = self.counts.get(k, 0) + v

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[WORKER_KEY] = {"run_id": self.run_id, "prefix": self.prefix, "metadata": self.metadata}

    def finish(self, outcome: Mapping[str, Any], workers: Iterable[LangSmithOutput] = (),
               cases: Iterable[Any] = ()) -> Any:
        """Before the record is built (it is built once, with what this returns): what every
        process did (this process's own worker half, drained now, and the xdist workers'
        outputs), the experiments' summary feedback and metadata (bounded) from the run's
        ``outcome`` (its summary, gate, agent, model, finished_at and completeness, as the
        record will hold them), each suite's dataset version tagged (git commit and branch, the
        suite version of its ``cases``), and what the record says of LangSmith (None when
        nothing ran)."""
        from pytest_groundeval.model import LangSmithRecord

        try:
            if self.local is not None:
                self.local.drain()
                self._take(self.local.output())
            for out in workers:
                self._take(out)
            experiments = sorted(self.experiments.values(), key=lambda e: e.task)
            if experiments and not self.gave_up and self._ensure_client() is not None:
                data = _jsonable(outcome)
                self._jobs_thread().submit(self._finish_experiments, experiments, data, suite_versions(cases))
                self._wait("experiment feedback")
            if not experiments and not self.n_errors:
                return None
            self.record = LangSmithRecord(
                experiments=experiments,
                errors=self.n_errors, warning=self.warning_line())
        except Exception as exc:  # noqa: BLE001 - the record is written all the same
            self._error("finish", exc)
            return None
        return self.record

    def _finish_experiments(self, experiments: list[Experiment], record: dict, suites: dict[str, str]) -> None:
        completeness = record.get("completeness") or {}
        gate = record.get("gate")
        for exp in experiments:
            for key, score, comment in summary_feedback(record, exp.task):
                self.client.create_feedback(None, key, score=score, comment=_scrub(comment),
                                            project_id=exp.experiment_id, stop_after_attempt=1)
                self.counts["experiment_feedback"] += 1
            version = self._tag_dataset_version(exp, suites.get(exp.task))
            metadata = {**self.metadata, "answered_by": record.get("agent"), "answered_model": record.get("model"),
                        "finished_at": record.get("finished_at"), "n_cases": completeness.get("recorded"),
                        "cut_short": completeness.get("cut_short"),
                        "gate_passed": gate.get("passed") if isinstance(gate, Mapping) else None,
                        # as evaluate() ends an experiment: the dataset version it ran on, its splits
                        # (groundeval's examples are all in LangSmith's default split, "base")
                        "dataset_version": version.isoformat() if version is not None else None,
                        "dataset_splits": ["base"], "suite_version": suites.get(exp.task)}
            self.client.update_project(exp.experiment_id, metadata=_scrub(metadata), end_time=_now())

    def _tag_dataset_version(self, exp: Experiment, suite_version: str | None) -> Any:
        """The suite's dataset version now (every process's examples are in it), tagged as the
        langsmith pytest plugin tags it (``git:commit:<sha>``, ``git:branch:<name>``) and with
        ``suite:<version>``; a tag already on another version moves to this one. Its ``as_of``,
        or None when LangSmith could not say (counted, the experiment still ends)."""
        try:
            as_of = self.client.read_dataset_version(dataset_id=exp.dataset_id, as_of=_now()).as_of
        except Exception as exc:  # noqa: BLE001 - counted; the metadata and end time still go
            self._error(f"dataset version of {exp.dataset}", exc)
            return None
        for tag in dataset_tags(self.metadata.get("git") or git_metadata(None), suite_version):
            try:
                self.client.update_dataset_tag(dataset_id=exp.dataset_id, as_of=as_of, tag=tag)
                self.counts["dataset_tags"] = self.counts.get("dataset_tags", 0) + 1
            except Exception as exc:  # noqa: BLE001
                self._error(f"dataset tag {tag!r} of {exp.dataset}", exc)
        return as_of

    @pytest.hookimpl(trylast=True)  # the URLs come after the groundeval summary
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        tr = terminalreporter
        for exp in (self.record.experiments if self.record is not None else []):
            tr.write_line(f"LangSmith experiment {exp.experiment!r} on {exp.dataset}: {exp.url or exp.experiment_id}")
        line = self.warning_line()
        if line:
            tr.write_line(line, yellow=True)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.local is not None:
            self.client = None  # the worker half's: closed by it
        self.close()
