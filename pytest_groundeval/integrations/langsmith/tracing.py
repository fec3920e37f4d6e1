"""LangSmith, the way LangSmith users expect it, when ``LANGSMITH_API_KEY`` is set.

Every run writes its local JSON record (``record.py``). With ``LANGSMITH_API_KEY`` set
(``LANGSMITH_ENDPOINT`` for another deployment) the session also goes to LangSmith through
the real ``langsmith`` client:

* **a dataset per suite**, ``groundeval/<task>`` (read, else created). Its **examples** are
  the cases that ran: inputs ``{"prompt": ...}`` (what every agent is given), reference
  outputs the case's truth (a dict as it is, anything else as ``{"truth": ...}``), metadata
  its case id, content hash and file. An example's id is ``uuid5`` of the task and the
  case's content hash, so a re-run upserts (creates the missing, updates what differs),
  never duplicates.
* **an experiment per suite and session**: a project named ``<agent> <task> <run id>``
  (``LANGSMITH_EXPERIMENT`` replaces ``<agent>``) whose ``reference_dataset_id`` is the
  dataset; git sha, record path, run id, agent and model are its metadata. The controller
  names it and hands the run id to every pytest-xdist worker (``pytest_configure_node``):
  all workers post to the one experiment (the first creates it, the others find it). A
  LangSmith experiment has one dataset, so a session over several suites has one
  experiment per suite, all named after the same run id.
* **each case a root run** ``<task>:<case id>`` with ``reference_example_id``. The agent
  is called inside LangSmith's tracing context (``case_trace(case).attempt()``, entered by
  ``runner.py`` around each attempt, on whatever thread runs it), so LangChain / LangGraph
  callbacks and ``wrap_anthropic`` (the claude agent) nest their runs under the case. A
  case that made no call here (``--rescore``, ``--resume``) gets its root run from the
  stored output, its transcript as child runs.
* **feedback** per case: each numeric metric (not the task's raw counts), each pass/fail
  dimension (its reason as comment), and ``pass``; per experiment, the suite's summary and
  the gate as experiment-level feedback (``project_id``, as the SDK's summary evaluators).
* the experiments' URLs in the terminal summary and in the record (``RunRecord.langsmith``).

LangSmith never fails, slows or stalls a case. Nothing is imported or contacted until eval
items are selected; with the key unset :func:`case_trace` is a no-op. Requests run off the
case path: one background thread for the session's own calls (dataset, experiment,
examples, ends of root runs, feedback) and the client's batch uploader for runs. A suite's
runs are held in memory until its dataset and experiment exist (so the experiment is made
with its dataset, not by its first run), then released in order. Failures are counted,
never raised; after a connection error or ``max_errors`` failures a process stops trying,
and the controller prints one warning line for every process. Everything sent goes through
``redact.py`` (runs: every field; examples, feedback, metadata: before they are built).
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import orjson

from pytest_groundeval.store.redact import redact_json, redact_text

DATASET_PREFIX = "groundeval/"
# example ids are uuid5(EXAMPLE_NAMESPACE, "<task>\n<content hash>"): the same case content, the same example
EXAMPLE_NAMESPACE = uuid.UUID("8c2f4d1e-6b3a-5e7f-9a0c-1d2e3f4a5b6c")
WORKER_KEY = "groundeval_langsmith"  # in workerinput (controller -> worker) and workeroutput (back)
REPORT_ATTR = "groundeval"  # the TestReport attribute carrying a case result (reporter.REPORT_ATTR)
MAX_KEPT_ERRORS = 20
FLUSH_TIMEOUT = 30.0  # seconds the session's end waits for LangSmith at most (once it has given up: 1)
LIST_CHUNK = 100  # example ids per GET /examples
MAX_HELD = 10_000  # run operations a gate holds at most (as the client's own queue); beyond: dropped
BATCH = 100  # results sent together (one example upsert per suite and batch) ...
LINGER = 0.5  # ... gathered for at most this many seconds (off the case path; not at the end)

_ACTIVE: list["LangSmith"] = []  # this process's session (a stack: pytester nests sessions)


# ------------------------------------------------------------------ the runner's hook
class _NoTrace:
    """No LangSmith: nothing to enter, nothing imported."""

    __slots__ = ()

    def attempt(self) -> contextlib.nullcontext:
        return _NULL


_NULL = contextlib.nullcontext()
NO_TRACE = _NoTrace()


def case_trace(case: Any) -> Any:
    """The case's LangSmith root run, opened as its call starts: enter ``.attempt()`` around
    each agent attempt (on the thread running it) to nest the agent's own runs under it.
    Without LangSmith a shared no-op."""
    if not _ACTIVE:
        return NO_TRACE
    return _ACTIVE[-1].case_trace(case)


def active() -> bool:
    """Is LangSmith on in this process (e.g. to wrap an SDK client for tracing)?"""
    return bool(_ACTIVE) and _ACTIVE[-1].enabled


def example_id(task: str, content_hash: str) -> uuid.UUID:
    return uuid.uuid5(EXAMPLE_NAMESPACE, f"{task}\n{content_hash}")


def experiment_name(prefix: str, task: str, run_id: str) -> str:
    return f"{prefix} {task} {run_id}"


def _run_name(task: str, case_id: str, repeat: Any = None) -> str:
    """A case's root run: ``<task>:<case id>`` (``[rK]`` for repeat K of ``--repeat``)."""
    return f"{task}:{case_id}" if repeat is None else f"{task}:{case_id}[r{repeat}]"


# ------------------------------------------------------------------ small helpers
def _now() -> datetime:
    return datetime.now(timezone.utc)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300]}" if text else type(exc).__name__


def _unreachable(exc: BaseException) -> bool:
    """LangSmith cannot be reached at all (DNS, refused, connect timeout)."""
    return any(type(e).__name__ == "LangSmithConnectionError" for e in (exc, exc.__cause__))


def _error_text(entry: Mapping[str, Any]) -> str:
    error = entry.get("error")
    if isinstance(error, Mapping):
        return f"{error.get('kind')}: {error.get('message')}"
    return str(error or "error")


def _jsonable(value: Any) -> Any:
    return orjson.loads(orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS))


def _scrub(value: Any) -> Any:
    """``value`` with every secret replaced (``redact.py``), its types kept; objects that are
    not JSON become their redacted text only when that text holds a secret."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {(_scrub(k) if isinstance(k, str) else k): _scrub(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_scrub(v) for v in value) if isinstance(value, list) else tuple(_scrub(v) for v in value)
    if value is None or isinstance(value, (bool, int, float, datetime, uuid.UUID)):
        return value
    text = str(value)
    red = redact_text(text)
    return red if red != text else value


def _redacted(kwargs: dict[str, Any]) -> dict[str, Any]:
    """A run operation's fields, redacted (checked once as JSON; scrubbed only when needed)."""
    try:
        blob = orjson.dumps(kwargs, default=str, option=orjson.OPT_NON_STR_KEYS)
    except Exception:  # noqa: BLE001 - cannot tell: scrub everything
        return _scrub(kwargs)
    return kwargs if redact_json(blob) == blob else _scrub(kwargs)


def _relative(path: Any, root: Path) -> str:
    p = Path(path)
    try:
        return str(p.resolve().relative_to(root.resolve()))
    except (ValueError, OSError):
        return str(p)


# ------------------------------------------------------------------ feedback
def case_feedback(entry: Mapping[str, Any], counts: Iterable[str] = ()) -> list[tuple[str, float, str | None]]:
    """The feedback (key, score, comment) on one case's root run, from its result (as JSON).
    Task-agnostic: numeric metrics (not the task's raw ``counts``), pass/fail dimensions with
    their reasons, and ``pass`` (0 with the error for an errored case; none when skipped)."""
    outcome = entry.get("outcome")
    if outcome == "error":
        return [("pass", 0.0, _error_text(entry))]
    score = entry.get("score")
    if outcome == "skipped" or not isinstance(score, Mapping):
        return []
    counts = frozenset(counts)
    dims = score.get("dimensions") or {}
    found: dict[str, tuple[float, str | None]] = {}
    for name, value in (score.get("metrics") or {}).items():
        number = _number(value)
        if number is None or name in counts:
            continue
        dim = dims.get(name)
        found[name] = (number, dim.get("reason") if isinstance(dim, Mapping) else None)
    for name, dim in dims.items():
        if isinstance(dim, Mapping):
            found[name] = (1.0 if dim.get("passed") else 0.0, dim.get("reason"))
    found["pass"] = (1.0 if score.get("passed") else 0.0, score.get("reason") or None)
    return [(key, value, comment) for key, (value, comment) in found.items()]


def summary_feedback(record: Mapping[str, Any], task: str) -> list[tuple[str, float, str | None]]:
    """Experiment-level feedback for one suite: its summary's numbers (not the ``n_`` counts,
    not confidence intervals) and the gate."""
    out: list[tuple[str, float, str | None]] = []
    for key, value in ((record.get("summary") or {}).get(task) or {}).items():
        number = _number(value)
        if number is not None and not key.startswith("n_"):
            out.append((key, number, None))
    gate = record.get("gate")
    if isinstance(gate, Mapping):
        missed = [c.get("metric") for c in gate.get("thresholds", []) if not c.get("passed")]
        out.append(("gate", 1.0 if gate.get("passed") else 0.0,
                    f"missed: {', '.join(map(str, missed))}" if missed else "all thresholds met"))
    return out


# ------------------------------------------------------------------ pieces
@dataclass
class Experiment:
    task: str
    dataset: str
    dataset_id: str
    experiment: str
    experiment_id: str
    url: str | None


class _Gate:
    """The client a suite's runs are posted through (the root run's, so every nested run's
    too): every field redacted; held until the suite's dataset and experiment exist, then
    passed on in order; dropped once they cannot be had or LangSmith was given up."""

    def __init__(self, owner: "LangSmith", client: Any) -> None:
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

    def __init__(self, owner: "LangSmith", gate: _Gate, case: Any, experiment: str) -> None:
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


class _Jobs:
    """One daemon thread running the session's own LangSmith calls, in order."""

    def __init__(self, on_error: Callable[[str, BaseException], None]) -> None:
        self._queue: "queue.SimpleQueue[tuple[Callable[..., Any], tuple]]" = queue.SimpleQueue()
        self._pending = 0
        self._done = threading.Condition()
        self._on_error = on_error
        threading.Thread(target=self._loop, daemon=True, name="groundeval-langsmith").start()

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        with self._done:
            self._pending += 1
        self._queue.put((fn, args))

    def _loop(self) -> None:
        while True:
            fn, args = self._queue.get()
            try:
                fn(*args)
            except BaseException as exc:  # noqa: BLE001 - counted, never raised
                self._on_error(getattr(fn, "__name__", "job").strip("_").replace("_", " "), exc)
            finally:
                with self._done:
                    self._pending -= 1
                    self._done.notify_all()

    def drain(self, timeout: float) -> bool:
        """Wait until every job ran (True), or ``timeout`` seconds passed (False)."""
        deadline = time.monotonic() + timeout
        with self._done:
            while self._pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._done.wait(left)
        return True


class _Quiet(logging.Filter):
    """The client's own warnings while the session runs (one per failed batch, per failed
    info call, ...) are not lines of their own: its failures reach the session as exceptions
    (``tracing_error_callback``, the calls' own), counted into its one warning line. Kept,
    the first few, in ``LangSmith.client_log``."""

    def __init__(self, owner: "LangSmith") -> None:
        super().__init__()
        self.owner = owner

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        if len(self.owner.client_log) < MAX_KEPT_ERRORS:
            try:
                self.owner.client_log.append(record.getMessage().strip()[:300])
            except Exception:  # noqa: BLE001
                pass
        return False


# ------------------------------------------------------------------ the session
class LangSmith:
    """One process's LangSmith side of a groundeval session (a pytest plugin object).

    Where items run (the only process, or each xdist worker): the suites' datasets and
    experiments, the cases' examples, root runs and feedback. In the controller: the run id
    for the workers, the experiment-level feedback and metadata at the end, the URLs in the
    record and the terminal, one warning line. Never raises out of a hook or a method."""

    def __init__(self, *, api_key: str, endpoint: str | None, run_id: str, prefix: str, metadata: dict[str, Any],
                 evaluator: Any = None, client_kwargs: Mapping[str, Any] | None = None, max_errors: int = 5,
                 flush_timeout: float = FLUSH_TIMEOUT) -> None:
        self.api_key = api_key
        self.endpoint = endpoint
        self.run_id = run_id
        self.prefix = prefix
        self.metadata = metadata
        self.evaluator = evaluator
        self.client_kwargs = dict(client_kwargs or {})
        self.max_errors = max_errors
        self.flush_timeout = flush_timeout
        self.client: Any = None
        self.errors: list[str] = []  # the first MAX_KEPT_ERRORS messages
        self.n_errors = 0
        self.gave_up = False
        self.experiments: dict[str, Experiment] = {}  # by task: this process's, then the workers'
        self.record: Any = None  # the LangSmithRecord given to the run record
        self.counts = {"examples_created": 0, "examples_updated": 0, "root_runs": 0, "feedback": 0,
                       "experiment_feedback": 0}
        self.controller = False  # set when a reporter (this process records) is found
        self.closing = False
        self._drained = False
        self._gates: dict[str, _Gate] = {}
        self._live: dict[tuple[str, str, Any], _CaseTrace] = {}  # by (task, case id, repeat)
        self._pending: list[tuple[dict, _CaseTrace | None]] = []
        self._flush_scheduled = False
        self._synced: set[str] = set()  # example ids upserted in this session
        self._refs: dict[str, dict[str, Any]] = {}
        self._jobs: _Jobs | None = None
        self._filters: list[tuple[logging.Logger, _Quiet]] = []
        self.client_log: list[str] = []  # the client's own warnings, silenced while the session runs
        self._lock = threading.RLock()

    # ------------------------------------------------------------- state
    @property
    def enabled(self) -> bool:
        return not self.gave_up

    def _count(self, message: str) -> None:
        with self._lock:
            self.n_errors += 1
            if len(self.errors) < MAX_KEPT_ERRORS:
                self.errors.append(message)
            enough = self.n_errors >= self.max_errors
        if enough:
            self._give_up()

    def _error(self, what: str, exc: BaseException) -> None:
        self._count(f"{what}: {_describe(exc)}")
        if _unreachable(exc):  # no point in more tries (and their timeouts)
            self._give_up()

    def _background_error(self, exc: Exception) -> None:
        self._error("background upload", exc)

    def _give_up(self) -> None:
        with self._lock:
            if self.gave_up:
                return
            self.gave_up = True
            gates = list(self._gates.values())
        for gate in gates:  # outside the lock: a gate may be sending (and erring) meanwhile
            gate.close()

    def warning_line(self) -> str | None:
        """One line for the terminal when something went wrong (any process), else None."""
        if not self.n_errors:
            return None
        stopped = " (gave up)" if self.gave_up else ""
        return (f"groundeval: LangSmith had {self.n_errors} error(s){stopped}; the eval and its local record are "
                f"unaffected. First: {self.errors[0] if self.errors else '?'}")

    # ------------------------------------------------------------- construction
    @classmethod
    def register(cls, config: Any, settings: Any, evaluator: Any, environ: Mapping[str, str] = os.environ) -> "LangSmith | None":
        """The session's LangSmith plugin when ``LANGSMITH_API_KEY`` is set (registered, and
        handed to the reporter in the controller), else None: nothing imported."""
        api_key = (environ.get("LANGSMITH_API_KEY") or "").strip()
        if not api_key:
            return None
        if (environ.get("LANGSMITH_TRACING") or "").strip().lower() in ("false", "0", "no", "off"):
            return None  # the key is set for something else: LangSmith's own switch turns this off
        _mark_hooks()
        reporter = config.pluginmanager.get_plugin("groundeval-reporter")
        given = (getattr(config, "workerinput", None) or {}).get(WORKER_KEY)
        if isinstance(given, Mapping):
            run_id, prefix, metadata = str(given["run_id"]), str(given["prefix"]), dict(given["metadata"])
        else:
            from pytest_groundeval.store.record import git_sha

            run_id = reporter.run_id if reporter is not None else \
                "xdist-" + (environ.get("PYTEST_XDIST_TESTRUNUID") or uuid.uuid4().hex)[:12]
            prefix = (environ.get("LANGSMITH_EXPERIMENT") or "").strip() or settings.agent.name
            metadata = {"groundeval_run_id": run_id, "agent": settings.agent.name, "model": settings.agent.model,
                        "mode": settings.mode, "stored_run": settings.stored_spec, "git_sha": git_sha(settings.rootdir),
                        "record_path": _relative(reporter.path, settings.rootdir) if reporter is not None else None}
        plugin = cls(api_key=api_key, endpoint=(environ.get("LANGSMITH_ENDPOINT") or "").strip() or None,
                     run_id=run_id, prefix=prefix, metadata=_scrub(metadata), evaluator=evaluator)
        if reporter is not None:
            plugin.controller = True
            reporter.tracer = plugin
        config.pluginmanager.register(plugin, "groundeval-langsmith")
        _ACTIVE.append(plugin)
        return plugin

    def _ensure_client(self) -> Any:
        """The client, made on first need (with its background uploader); None when it cannot be."""
        with self._lock:
            if self.client is not None or self.gave_up:
                return self.client
            try:
                import langsmith
                from urllib3.util.retry import Retry

                kwargs: dict[str, Any] = {
                    "api_key": self.api_key,
                    "tracing_error_callback": self._background_error,
                    # short: a slow LangSmith delays only the session's end, and that by a bound
                    "timeout_ms": (3_000, 20_000),
                    # a dead endpoint is not retried; 429 / 5xx twice, without honouring long Retry-After
                    "retry_config": Retry(total=2, connect=0, read=0, status=2, backoff_factor=0.3,
                                          status_forcelist=(429, 500, 502, 503, 504), allowed_methods=None,
                                          raise_on_status=False, respect_retry_after_header=False),
                }
                if self.endpoint:
                    kwargs["api_url"] = self.endpoint
                kwargs.update(self.client_kwargs)
                self._quiet_client_logs()
                self.client = langsmith.Client(**kwargs)
            except Exception as exc:  # noqa: BLE001
                self._error("could not create the LangSmith client", exc)
                self._give_up()
            return self.client

    def _quiet_client_logs(self) -> None:
        import langsmith.client  # noqa: F401 - its loggers exist once imported
        import langsmith.run_helpers  # noqa: F401

        for name, logger in list(logging.root.manager.loggerDict.items()):
            if (name == "langsmith" or name.startswith("langsmith.")) and isinstance(logger, logging.Logger):
                flt = _Quiet(self)
                logger.addFilter(flt)
                self._filters.append((logger, flt))

    def _jobs_thread(self) -> _Jobs:
        with self._lock:
            if self._jobs is None:
                self._jobs = _Jobs(self._error)
            return self._jobs

    # ------------------------------------------------------------- setup (where items run)
    def pytest_collection_finish(self, session: Any) -> None:
        if session.config.option.collectonly or self.gave_up:
            return
        from pytest_groundeval.pytest.evaluator import case_ref

        tasks = sorted({ref.task for ref in map(case_ref, session.items) if ref is not None})
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
            project = client.create_project(exp_name, reference_dataset_id=dataset.id, metadata=self.metadata,
                                            description=f"groundeval run {self.run_id} of {name}")
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

    def pytest_runtest_logreport(self, report: Any) -> None:
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
        self.counts["root_runs"] += 1
        from pytest_groundeval.model import per_case_counts  # the count specs the record declares

        counts = per_case_counts(getattr((getattr(self.evaluator, "tasks", None) or {}).get(task), "specs", ()))
        for key, score, comment in case_feedback(data, counts):
            self.client.create_feedback(root.id, key, score=score, comment=_scrub(comment), trace_id=root.id,
                                        session_id=exp.experiment_id, start_time=root.start_time,
                                        stop_after_attempt=1)
            self.counts["feedback"] += 1

    # ------------------------------------------------------------- the end
    def _drain(self) -> None:
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

    def _wait(self, what: str) -> None:
        timeout = self.flush_timeout if self.enabled else 1.0
        started = time.monotonic()
        if self._jobs is not None and not self._jobs.drain(timeout):
            self._count(f"{what}: LangSmith did not take them within {timeout:g} s (the rest is dropped)")
        client = self.client
        if client is None:
            return
        left = max(0.0, timeout - (time.monotonic() - started)) if self.enabled else 0.5
        try:
            client.flush(timeout=left)  # never an unbounded flush: a dead endpoint would hang the run
        except Exception as exc:  # noqa: BLE001
            self._error("flush", exc)
        q = getattr(client, "tracing_queue", None)
        if q is not None and getattr(q, "unfinished_tasks", 0) and self.enabled:
            self._count(f"flush: {q.unfinished_tasks} upload(s) still pending after {timeout:g} s")

    def pytest_sessionfinish(self, session: Any) -> None:
        """Where items ran; before xdist sends the worker's output to the controller."""
        self._drain()
        out = getattr(session.config, "workeroutput", None)
        if out is not None:
            out[WORKER_KEY] = {"experiments": [asdict(e) for e in self.experiments.values()],
                               "n_errors": self.n_errors, "errors": self.errors[:MAX_KEPT_ERRORS],
                               "gave_up": self.gave_up, "counts": dict(self.counts)}

    # ------------------------------------------------------------- the controller
    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[WORKER_KEY] = {"run_id": self.run_id, "prefix": self.prefix, "metadata": self.metadata}

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        out = (getattr(node, "workeroutput", None) or {}).get(WORKER_KEY)
        if not isinstance(out, Mapping):
            return
        with self._lock:
            for exp in out.get("experiments") or []:
                self.experiments.setdefault(exp["task"], Experiment(**exp))
            for message in out.get("errors") or []:
                if len(self.errors) < MAX_KEPT_ERRORS:
                    self.errors.append(message)
            self.n_errors += int(out.get("n_errors") or 0)
            self.gave_up = self.gave_up or bool(out.get("gave_up"))
            for k, v in (out.get("counts") or {}).items():
                self.counts[k] = self.counts.get(k, 0) + int(v)

    def finish(self, outcome: Mapping[str, Any], path: Any = None) -> Any:
        """The controller, before the record is built: the experiments' summary feedback and
        metadata (bounded) from the run's ``outcome`` (its summary, gate, agent, model,
        finished_at and completeness, as the record will hold them), and what the record says
        of LangSmith (None when nothing ran)."""
        from pytest_groundeval.model import LangSmithExperiment, LangSmithRecord

        try:
            self._drain()
            experiments = sorted(self.experiments.values(), key=lambda e: e.task)
            if experiments and not self.gave_up and self._ensure_client() is not None:
                data = _jsonable(outcome)
                self._jobs_thread().submit(self._finish_experiments, experiments, data)
                self._wait("experiment feedback")
            if not experiments and not self.n_errors:
                return None
            self.record = LangSmithRecord(
                experiments=[LangSmithExperiment(**asdict(e)) for e in experiments],
                errors=self.n_errors, warning=self.warning_line())
        except Exception as exc:  # noqa: BLE001 - the record is written all the same
            self._error("finish", exc)
            return None
        return self.record

    def _finish_experiments(self, experiments: list[Experiment], record: dict) -> None:
        completeness = record.get("completeness") or {}
        gate = record.get("gate")
        for exp in experiments:
            for key, score, comment in summary_feedback(record, exp.task):
                self.client.create_feedback(None, key, score=score, comment=_scrub(comment),
                                            project_id=exp.experiment_id, stop_after_attempt=1)
                self.counts["experiment_feedback"] += 1
            metadata = {**self.metadata, "answered_by": record.get("agent"), "answered_model": record.get("model"),
                        "finished_at": record.get("finished_at"), "n_cases": completeness.get("recorded"),
                        "cut_short": completeness.get("cut_short"),
                        "gate_passed": gate.get("passed") if isinstance(gate, Mapping) else None}
            self.client.update_project(exp.experiment_id, metadata=_scrub(metadata), end_time=_now())

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.controller:
            return
        tr = terminalreporter
        for exp in (self.record.experiments if self.record is not None else []):
            tr.write_line(f"LangSmith experiment {exp.experiment!r} on {exp.dataset}: {exp.url or exp.experiment_id}")
        line = self.warning_line()
        if line:
            tr.write_line(line, yellow=True)

    def pytest_unconfigure(self, config: Any) -> None:
        if self in _ACTIVE:
            _ACTIVE.remove(self)
        for logger, flt in self._filters:
            logger.removeFilter(flt)
        self._filters = []
        if self.client is not None:
            try:
                self.client.close(timeout=0)  # what the bounded flush left is not waited for
            except Exception:  # noqa: BLE001
                pass


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


_HOOKS_MARKED = False


def _mark_hooks() -> None:
    """pytest's hook options on :class:`LangSmith`'s methods, set when pytest runs (this
    module itself does not import pytest): the xdist hooks are optional (xdist may be absent),
    the URLs come after the groundeval summary."""
    global _HOOKS_MARKED
    if _HOOKS_MARKED:
        return
    import pytest

    pytest.hookimpl(optionalhook=True)(LangSmith.pytest_configure_node)
    pytest.hookimpl(optionalhook=True)(LangSmith.pytest_testnodedown)
    pytest.hookimpl(trylast=True)(LangSmith.pytest_terminal_summary)
    _HOOKS_MARKED = True
