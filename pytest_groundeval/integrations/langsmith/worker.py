"""LangSmith's worker half: where items run (the only process, or each pytest-xdist worker).

The suites' datasets and experiments (read, else created: the first process of a session
makes each, the others find it), each case's root run around its agent call (the
evaluator hands :meth:`LangSmithWorker.case_trace` to the runner), the cases' examples,
the ends of their root runs and their per-case feedback. At the session's end it drains
(bounded) and says what it did in this process's typed ``WorkerOutput``
(``pytest/workeroutput.py``: ``langsmith``), which the controller half reads. What is sent
and how it fails: ``common.py``.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Mapping

import pytest

from pytest_groundeval.integrations.langsmith.common import (
    DATASET_PREFIX, MAX_KEPT_ERRORS, Experiment, Session, _error_text, _jsonable, _now, _number, _redacted,
    _relative, _run_name, _scrub, case_feedback, example_id, experiment_name, jury_calls)
from pytest_groundeval.pytest.items import REPORT_ATTR, case_ref
from pytest_groundeval.pytest.keys import listing_only
from pytest_groundeval.pytest.workeroutput import LangSmithOutput, publish
from pytest_groundeval.run.runner import NO_TRACE

LIST_CHUNK = 100  # example ids per GET /examples
MAX_HELD = 10_000  # run operations a gate holds at most (as the client's own queue); beyond: dropped
BATCH = 100  # results sent together (one example upsert per suite and batch) ...
LINGER = 0.5  # ... gathered for at most this many seconds (off the case path; not at the end)


class _Gate:
    """The client a suite's runs are posted through (the root run's, so every nested run's
    too): every field redacted; held until the suite's dataset and experiment exist, then
    passed on in order; dropped once they cannot be had or LangSmith was given up."""

    def __init__(self, owner: "LangSmithWorker", client: Any) -> None:
        self._owner = owner
        self._client = client
        self._held: list[tuple[str, tuple, dict]] | None = []  # None: open
        self._closed = False
        self._lock = threading.RLock()  # re-entered when a failed send closes its own gate

    def __getattr__(self, name: str) -> Any:  # whatever else a run tree or LangChain's tracer asks
        return getattr(self._client, name)

    def create_run(self, **kwargs: Any) -> None:
        self._op("create_run", (), kwargs)

    def update_run(self, run_id: Any, **kwargs: Any) -> None:
        self._op("update_run", (run_id,), kwargs)

    def _op(self, name: str, args: tuple, kwargs: dict[str, Any]) -> None:
        if self._closed or not self._owner.enabled:
            return
        try:
            kwargs = _redacted(kwargs)
        except Exception as exc:  # noqa: BLE001 - unsure it is clean: not sent
            self._owner._error("redact run", exc)
            return
        with self._lock:  # sent under the lock: in order with a release in progress
            if self._closed:
                self._held = None
            elif self._held is not None:
                if len(self._held) < MAX_HELD:
                    self._held.append((name, args, kwargs))
                elif len(self._held) == MAX_HELD:
                    self._held.append(("", (), {}))  # a marker: the drop is counted once
                    self._owner._count(f"runs: more than {MAX_HELD} held while the experiment was made; "
                                       "the rest dropped")
            else:
                self._send(name, args, kwargs)

    def _send(self, name: str, args: tuple, kwargs: dict[str, Any]) -> None:
        try:
            getattr(self._client, name)(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001
            self._owner._error(name.replace("_", " "), exc)

    def open(self) -> None:
        with self._lock:
            held, self._held = self._held or [], None
            for op in held:
                if self._closed:
                    break
                if op[0]:
                    self._send(*op)

    def close(self) -> None:
        """Closed at once (no lock needed: the flag is read before each send); what it holds is
        let go now, or by the thread sending under the lock."""
        self._closed = True
        if self._lock.acquire(blocking=False):
            try:
                self._held = None
            finally:
                self._lock.release()


class _CaseTrace:
    """One case's root run, from the start of its call to its result."""

    def __init__(self, owner: "LangSmithWorker", gate: _Gate, case: Any, experiment: str) -> None:
        from langsmith import run_helpers
        from langsmith.run_trees import RunTree

        self._tracing_context = run_helpers.tracing_context
        self.gate = gate
        self.example = owner.example_for(case)
        ref = case.ref
        self.key = (ref.task, ref.case_id, getattr(ref, "repeat", None))
        self.root = RunTree(
            name=_run_name(*self.key), run_type="chain", inputs=self.example["inputs"],
            project_name=experiment, client=gate, tags=["groundeval", ref.task],
            extra={"metadata": owner.run_metadata(ref.task, ref.case_id, case.content_hash)},
        )
        self.root.post()

    @contextlib.contextmanager
    def attempt(self) -> Any:
        try:
            context = self._tracing_context(parent=self.root, project_name=self.root.session_name,
                                            client=self.gate, enabled=True)
            context.__enter__()
        except Exception:  # noqa: BLE001 - tracing must never fail the call: untraced instead
            yield
            return
        try:
            yield
        except BaseException as exc:
            if not context.__exit__(type(exc), exc, exc.__traceback__):
                raise
        else:
            context.__exit__(None, None, None)



class LangSmithWorker(Session):
    """Where items run: datasets, experiments, examples, root runs and per-case feedback.
    Never raises out of a hook or a method."""

    def __init__(self, *, evaluator: Any = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.evaluator = evaluator
        self.experiments: dict[str, Experiment] = {}  # by task: the suites this process set up
        self.counts = {"examples_created": 0, "examples_updated": 0, "root_runs": 0, "feedback": 0}
        self.closing = False
        self._drained = False
        self._gates: dict[str, _Gate] = {}
        self._live: dict[tuple[str, str, Any], _CaseTrace] = {}  # by (task, case id, repeat)
        self._pending: list[tuple[dict, _CaseTrace | None]] = []
        self._flush_scheduled = False
        self._synced: set[str] = set()  # example ids upserted in this session
        self._refs: dict[str, dict[str, Any]] = {}
        self._case_ids: dict[str, set[str]] = {}  # by task: the selected cases (num_examples)

    def _gave_up(self) -> None:
        with self._lock:
            gates = list(self._gates.values())
        for gate in gates:  # outside the lock: a gate may be sending (and erring) meanwhile
            gate.close()

    def output(self) -> LangSmithOutput:
        """What this process did and what failed, for the controller half."""
        with self._lock:
            return LangSmithOutput(experiments=sorted(self.experiments.values(), key=lambda e: e.task),
                                   n_errors=self.n_errors, errors=self.errors[:MAX_KEPT_ERRORS],
                                   gave_up=self.gave_up, counts=dict(self.counts))

    # ------------------------------------------------------------- setup (where items run)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if listing_only(session.config) or self.gave_up:
            return
        refs = [ref for ref in map(case_ref, session.items) if ref is not None]
        for ref in refs:  # the examples each suite's experiment runs over (a case's repeats: one example)
            self._case_ids.setdefault(ref.task, set()).add(ref.case_id)
        tasks = sorted(self._case_ids)
        if tasks:
            self._setup(tasks)

    def _setup(self, tasks: list[str]) -> None:
        if self._ensure_client() is None:
            return
        with self._lock:
            new = [t for t in tasks if t not in self._gates]
            for task in new:
                self._gates[task] = _Gate(self, self.client)
        if new:
            self._jobs_thread().submit(self._set_up_suites, new)

    def _set_up_suites(self, tasks: list[str]) -> None:
        for task in tasks:
            gate = self._gates[task]
            if not self.enabled:
                gate.close()
                continue
            try:
                self.experiments[task] = self._set_up_suite(task)
            except Exception as exc:  # noqa: BLE001
                self._error(f"dataset and experiment of {DATASET_PREFIX}{task}", exc)
                gate.close()
                continue
            gate.open()

    def _set_up_suite(self, task: str) -> Experiment:
        from langsmith.utils import LangSmithConflictError, LangSmithNotFoundError

        client = self.client
        name = DATASET_PREFIX + task
        try:
            dataset = client.read_dataset(dataset_name=name)
        except LangSmithNotFoundError:
            try:
                dataset = client.create_dataset(name, description=f"groundeval eval cases of the {task!r} suite",
                                                metadata={"source": "groundeval", "task": task})
            except LangSmithConflictError:  # created meanwhile (another worker)
                dataset = client.read_dataset(dataset_name=name)
        exp_name = experiment_name(self.prefix, task, self.run_id)
        try:
            # as evaluate(..., num_repetitions=N) makes it: the examples and the runs per example the
            # experiment expects (LangSmith's progress and its per-example repetitions)
            n_examples = len(self._case_ids.get(task, ())) or None
            project = client.create_project(exp_name, reference_dataset_id=dataset.id, metadata=self.metadata,
                                            description=f"groundeval run {self.run_id} of {name}",
                                            num_examples=n_examples,
                                            num_repetitions=int(self.metadata.get("num_repetitions") or 1))
        except LangSmithConflictError:  # another worker of this session made it
            project = client.read_project(project_name=exp_name)
        host = getattr(client, "_host_url", None) or ""
        tenant = getattr(project, "tenant_id", None)
        url = (f"{host}/o/{tenant}/datasets/{dataset.id}/compare?selectedSessions={project.id}"
               if host and tenant else None)
        return Experiment(task=task, dataset=name, dataset_id=str(dataset.id), experiment=exp_name,
                          experiment_id=str(project.id), url=url)

    # ------------------------------------------------------------- cases
    def example_for(self, case: Any) -> dict[str, Any]:
        """The dataset example of a loaded case (ids, inputs, reference outputs, metadata; redacted)."""
        ref = case.ref
        truth = _jsonable(case.truth)
        outputs = truth if isinstance(truth, dict) else {"truth": truth}
        root = getattr(getattr(self.evaluator, "settings", None), "rootdir", None) or Path.cwd()
        return {"id": str(example_id(ref.task, case.content_hash)), "inputs": _scrub({"prompt": case.prompt}),
                "outputs": _scrub(outputs),
                "metadata": _scrub({"case_id": ref.case_id, "content_hash": case.content_hash,
                                    "source": _relative(ref.path, root),
                                    **({"index": ref.index} if ref.index is not None else {})})}

    def run_metadata(self, task: str, case_id: str, content_hash: str | None) -> dict[str, Any]:
        meta = {"groundeval_run_id": self.run_id, "task": task, "case_id": case_id, "content_hash": content_hash}
        worker = os.environ.get("PYTEST_XDIST_WORKER")
        if worker:
            meta["xdist_worker"] = worker
        return meta

    def case_trace(self, case: Any) -> Any:
        if self.closing or not self.enabled:
            return NO_TRACE
        try:
            task = case.ref.task
            gate = self._gates.get(task)
            if gate is None:  # a suite that was not among the collected items
                self._setup([task])
                gate = self._gates.get(task)
                if gate is None:
                    return NO_TRACE
            trace = _CaseTrace(self, gate, case, experiment_name(self.prefix, task, self.run_id))
        except Exception as exc:  # noqa: BLE001
            self._error(f"trace {getattr(case.ref, 'task', '?')}:{getattr(case.ref, 'case_id', '?')}", exc)
            return NO_TRACE
        with self._lock:
            self._live[trace.key] = trace
        return trace

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        data = getattr(report, REPORT_ATTR, None)
        if data is None or not self._gates or self.closing:
            return
        key = (data.get("task"), data.get("case_id"), data.get("repeat"))
        with self._lock:
            live = self._live.pop(key, None)
            if data.get("outcome") == "skipped" or not self.enabled:
                return
            self._pending.append((data, live))
            if self._flush_scheduled:
                return
            self._flush_scheduled = True
        self._jobs_thread().submit(self._send_cases)

    def _send_cases(self) -> None:
        """The results reported since the last time: their examples (one upsert per suite),
        then the end of each root run and its feedback."""
        deadline = time.monotonic() + LINGER
        while not self.closing and time.monotonic() < deadline and len(self._pending) < BATCH:
            time.sleep(0.02)
        with self._lock:
            batch, self._pending, self._flush_scheduled = self._pending, [], False
        by_task: dict[str, list[tuple[dict, _CaseTrace | None]]] = {}
        for data, live in batch:
            by_task.setdefault(data["task"], []).append((data, live))
        for task, items in by_task.items():
            exp = self.experiments.get(task)
            if exp is None or not self.enabled:
                continue
            examples: dict[str, dict] = {}
            for data, live in items:
                ex = live.example if live is not None else self._stored_example(data)
                if ex is not None and data.get("content_hash") and ex["id"] == str(example_id(task, data["content_hash"])):
                    examples.setdefault(ex["id"], ex)
            try:
                self._upsert_examples(exp, list(examples.values()))
            except Exception as exc:  # noqa: BLE001 - the runs still go, without their examples
                self._error(f"examples of {exp.dataset}", exc)
            for data, live in items:
                if not self.enabled:
                    return
                try:
                    self._end_case(exp, data, live, examples)
                except Exception as exc:  # noqa: BLE001
                    self._error(f"case {task}:{data.get('case_id')}", exc)

    def _stored_example(self, data: dict) -> dict | None:
        """A case that made no call here (rescore, resume, not run): its example, from its file."""
        if self.evaluator is None or not data.get("content_hash"):
            return None
        task = data["task"]
        try:
            if task not in self._refs:
                self._refs[task] = {r.case_id: r for r in self.evaluator.refs(task)}
            ref = self._refs[task].get(data["case_id"])
            if ref is None:
                return None
            case = self.evaluator.tasks[task].load(ref)
        except Exception:  # noqa: BLE001 - an unloadable case has no example (its error says why)
            return None
        if case.content_hash != data["content_hash"]:
            return None
        return self.example_for(case)

    def _upsert_examples(self, exp: Experiment, examples: list[dict]) -> None:
        from langsmith.utils import LangSmithConflictError

        new = [e for e in examples if e["id"] not in self._synced]
        if not new:
            return
        client = self.client

        def existing() -> dict[str, Any]:
            found: dict[str, Any] = {}
            for i in range(0, len(new), LIST_CHUNK):
                ids = [e["id"] for e in new[i:i + LIST_CHUNK]]
                for ex in client.list_examples(dataset_id=exp.dataset_id, example_ids=ids):
                    found[str(ex.id)] = ex
            return found

        def create(have: dict[str, Any]) -> list[dict]:
            missing = [e for e in new if e["id"] not in have]
            if missing:
                client.create_examples(dataset_id=exp.dataset_id, examples=[
                    {"id": e["id"], "inputs": e["inputs"], "reference_outputs": e["outputs"], "metadata": e["metadata"]}
                    for e in missing])
            return missing

        have = existing()
        try:
            created = create(have)
        except LangSmithConflictError:  # another process created some meanwhile: create the rest
            have = existing()
            created = create(have)
        changed = [e for e in new if e["id"] in have and _differs(have[e["id"]], e)]
        if changed:
            client.update_examples(dataset_id=exp.dataset_id, updates=[
                {"id": e["id"], "inputs": e["inputs"], "outputs": e["outputs"], "metadata": e["metadata"]}
                for e in changed])
        self._synced.update(e["id"] for e in new)
        self.counts["examples_created"] += len(created)
        self.counts["examples_updated"] += len(changed)

    def _end_case(self, exp: Experiment, data: dict, live: _CaseTrace | None, examples: dict[str, dict]) -> None:
        from langsmith.run_trees import RunTree

        task, case_id = data["task"], data["case_id"]
        ex_id = str(example_id(task, data["content_hash"])) if data.get("content_hash") else None
        if ex_id is not None and ex_id not in self._synced:
            ex_id = None  # the example could not be upserted: no reference to a missing one
        outcome = data.get("outcome")
        error = _error_text(data) if outcome == "error" else None
        outputs = {"output": data.get("raw_output"), "predicted": data.get("predicted")}
        metadata = {k: data.get(k) for k in ("outcome", "usage", "cost_usd", "duration_s", "attempts", "steps",
                                             "agent", "model", "resumed_from", "rescored_from", "repeat")
                    if data.get(k) is not None}
        end = _now()
        gate = self._gates[task]
        if live is not None:
            root = live.root
            root.reference_example_id = ex_id
            root.tags = sorted(set(root.tags or []) | {str(outcome)})
            root.end(outputs=outputs, error=error, end_time=end, metadata=metadata)
            root.patch()
        else:
            example = examples.get(ex_id or "")
            start = end - timedelta(seconds=_number(data.get("duration_s")) or 0.0)
            root = RunTree(
                name=_run_name(task, case_id, data.get("repeat")), run_type="chain", start_time=start, project_name=exp.experiment,
                inputs=example["inputs"] if example else {"case_id": case_id}, client=gate,
                reference_example_id=ex_id, tags=["groundeval", task, str(outcome)],
                extra={"metadata": {**self.run_metadata(task, case_id, data.get("content_hash")), **metadata}},
            )
            root.end(outputs=outputs, error=error, end_time=end)
            root.post()
            _transcript_runs(root, data.get("transcript") or data.get("agent_reported") or [], start, end)
        _jury_runs(root, data, end)  # judged after the agent's answer: under the case, live or stored
        self.counts["root_runs"] += 1
        from pytest_groundeval.model import per_case_counts  # the count specs the record declares

        counts = per_case_counts(getattr((getattr(self.evaluator, "tasks", None) or {}).get(task), "specs", ()))
        for key, score, comment in case_feedback(data, counts):
            self.client.create_feedback(root.id, key, score=score, comment=_scrub(comment), trace_id=root.id,
                                        session_id=exp.experiment_id, start_time=root.start_time,
                                        stop_after_attempt=1)
            self.counts["feedback"] += 1

    # ------------------------------------------------------------- the end
    def drain(self) -> None:
        """Where items ran: end what is left, wait for the uploads (bounded), once."""
        with self._lock:
            if self._drained:
                return
            self._drained = self.closing = True
            leftover, self._live = list(self._live.values()), {}
        if self._jobs is None:
            return
        if leftover:
            self._jobs.submit(self._end_leftovers, leftover)
        self._wait("uploads")

    def _end_leftovers(self, leftover: list[_CaseTrace]) -> None:
        for trace in leftover:  # called, never reported (the session stopped first)
            trace.root.end(error="not reported: the session stopped before this case finished")
            trace.root.patch()

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Where items ran; before xdist sends the worker's output to the controller."""
        self.drain()
        if self.experiments or self.n_errors:
            publish(session.config, langsmith=self.output())

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.close()


def _differs(existing: Any, example: dict) -> bool:
    """Does the stored example differ from ours (in what we set)?"""
    meta = existing.metadata or {}
    return (_jsonable(existing.inputs or {}) != example["inputs"]
            or _jsonable(existing.outputs or {}) != example["outputs"]
            or any(meta.get(k) != v for k, v in example["metadata"].items()))


def _transcript_runs(root: Any, transcript: list[dict], start: datetime, end: datetime) -> None:
    """A stored transcript as the root run's children (model turns as ``llm`` runs, tool
    results as ``tool`` runs), spread over the case's time in their order: the tool calls the
    harness observed (the record's ``transcript``), else the transcript the agent reported."""
    if not transcript:
        return
    step = (end - start) / len(transcript)
    args: dict[Any, Any] = {}
    for i, entry in enumerate(transcript):
        if not isinstance(entry, Mapping):
            continue
        t0, t1 = start + step * i, start + step * (i + 1)
        if entry.get("type") == "ai":
            for call in entry.get("tool_calls") or []:
                if isinstance(call, Mapping):
                    args[call.get("id")] = call.get("args")
            child = root.create_child("model", "llm", start_time=t0, inputs={},
                                      outputs={"content": entry.get("content"), "tool_calls": entry.get("tool_calls")},
                                      extra={"metadata": {"from_transcript": True, "usage": entry.get("usage")}})
        elif "seq" in entry and entry.get("tool"):  # a call the harness observed (toolcalls.py)
            child = root.create_child(str(entry["tool"]), "tool", start_time=t0, inputs={"args": entry.get("args")},
                                      outputs={"result": entry.get("result")},
                                      extra={"metadata": {"from_transcript": True, "observed": True,
                                                          "seq": entry.get("seq"), "status": entry.get("status")}})
        elif entry.get("type") == "tool":
            child = root.create_child(str(entry.get("tool") or "tool"), "tool", start_time=t0,
                                      inputs={"args": args.get(entry.get("tool_call_id"))},
                                      outputs={"result": entry.get("result")},
                                      extra={"metadata": {"from_transcript": True, "status": entry.get("status")}})
        else:
            continue
        child.end(end_time=t1)
        child.post()




def _jury_runs(root: Any, data: Mapping[str, Any], at: datetime) -> None:
    """A judged case's jury as evaluator runs under its root run: one ``llm`` run per judge
    per item (its verdict and rationale, or why it gave none), as the SDK's ``evaluate()``
    traces its evaluators; the item feedback (``case_feedback``) carries the same words."""
    for item, call in jury_calls(data):
        child = root.create_child(
            f"judge {call.get('judge')}: {item.get('id')}", "llm", start_time=at,
            inputs={"question": _scrub(item.get("question")), "points": item.get("points")},
            outputs={"verdict": call.get("verdict"), "rationale": _scrub(call.get("rationale"))},
            error=_scrub(call.get("error")) if call.get("verdict") is None else None,
            extra={"metadata": {"evaluator": "jury", "judge": call.get("judge"), "item": item.get("id"),
                                "cached": bool(call.get("cached")), "from_record": True}})
        child.end(end_time=at)
        child.post()
