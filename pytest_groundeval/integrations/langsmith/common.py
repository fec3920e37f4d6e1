"""LangSmith, the way LangSmith users expect it, when ``LANGSMITH_API_KEY`` is set: what both
halves share (``worker.py`` where items run, ``controller.py`` where the record is made).

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
  dataset, made and ended as the SDK's ``evaluate(..., num_repetitions=N)`` does: ``num_examples``
  and ``num_repetitions`` (``--repeat N``) on it, and in its metadata ``num_repetitions``, the
  SDK's ``git`` block (commit, branch, dirty), ``dataset_version`` and ``dataset_splits``, besides
  git sha, record path, run id, agent and model. At the end the dataset version is tagged as the
  langsmith pytest plugin tags it (``git:commit:<sha>``, ``git:branch:<name>``) and with the
  suite version (``suite:<12 hex>`` of the session's cases and their content). The controller
  (``controller.py``) names it and hands the run id to every pytest-xdist worker
  (``pytest_configure_node``):
  all workers post to the one experiment (the first creates it, the others find it). A
  LangSmith experiment has one dataset, so a session over several suites has one
  experiment per suite, all named after the same run id.
* **each case a root run** ``<task>:<case id>`` with ``reference_example_id``. The agent
  is called inside LangSmith's tracing context (the worker half's ``case_trace(case).attempt()``, handed
  to ``runner.py`` by the evaluator and entered around each attempt, on whatever thread runs it), so LangChain / LangGraph
  callbacks and ``wrap_anthropic`` (the claude agent) nest their runs under the case. A
  case that made no call here (``--rescore``, ``--resume``) gets its root run from the
  stored output, its transcript as child runs.
* **feedback** per case: each numeric metric (not the task's raw counts), each pass/fail
  dimension (its reason as comment), and ``pass``; per experiment, the suite's summary figures
  whose declared kind is not ``count`` and the gate as experiment-level feedback
  (``project_id``, as the SDK's summary evaluators).
* the experiments' URLs in the terminal summary and in the record (``RunRecord.langsmith``).

LangSmith never fails, slows or stalls a case. Nothing is imported or contacted until eval
items are selected; with the key unset nothing is registered and the runner's
trace is its no-op. Requests run off the
case path: one background thread for the session's own calls (dataset, experiment,
examples, ends of root runs, feedback) and the client's batch uploader for runs. A suite's
runs are held in memory until its dataset and experiment exist (so the experiment is made
with its dataset, not by its first run), then released in order. Failures are counted,
never raised; after a connection error or ``max_errors`` failures a process stops trying,
and the controller prints one warning line for every process (the workers' errors reach it
in the one typed ``WorkerOutput``, ``pytest/workeroutput.py``). Everything sent goes through
``redact.py`` (runs: every field; examples, feedback, metadata: before they are built).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import orjson

from pytest_groundeval.model import LangSmithExperiment
from pytest_groundeval.store.redact import redact_json, redact_text

DATASET_PREFIX = "groundeval/"
# example ids are uuid5(EXAMPLE_NAMESPACE, "<task>\n<content hash>"): the same case content, the same example
EXAMPLE_NAMESPACE = uuid.UUID("8c2f4d1e-6b3a-5e7f-9a0c-1d2e3f4a5b6c")
WORKER_KEY = "groundeval_langsmith"  # in workerinput (controller -> worker); back through WorkerOutput.langsmith
MAX_KEPT_ERRORS = 20
FLUSH_TIMEOUT = 30.0  # seconds the session's end waits for LangSmith at most (once it has given up: 1)

Experiment = LangSmithExperiment  # one suite's experiment, as the record and the WorkerOutput carry it


def api_key(environ: Mapping[str, str]) -> str | None:
    """The key LangSmith is used with in this session, or None: unset, or set for something
    else with LangSmith's own switch off (``LANGSMITH_TRACING=false``)."""
    key = (environ.get("LANGSMITH_API_KEY") or "").strip()
    if not key:
        return None
    if (environ.get("LANGSMITH_TRACING") or "").strip().lower() in ("false", "0", "no", "off"):
        return None
    return key


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
    for item in _jury_items(score):  # a judged item's feedback says what each judge said, and why
        key = f"item_{item.get('id')}"
        if key in found:
            found[key] = (found[key][0], jury_comment(item))
    return [(key, value, comment) for key, (value, comment) in found.items()]


def _jury_items(score: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    jury = score.get("jury")
    items = jury.get("items") if isinstance(jury, Mapping) else None
    return [i for i in items or [] if isinstance(i, Mapping)]


def jury_comment(item: Mapping[str, Any]) -> str:
    """One judged item as a feedback comment: the majority (or why unscored), then each judge's
    verdict and rationale (or why it gave none)."""
    head = f"majority: {item.get('verdict')}" if item.get("verdict") else f"unscored: {item.get('unscored')}"
    lines = [f"{item.get('question')} ({head})"]
    for call in item.get("calls") or []:
        if isinstance(call, Mapping):
            said = call.get("verdict") or f"no verdict ({call.get('error')})"
            lines.append(f"- {call.get('judge')}: {said}" + (f": {call['rationale']}" if call.get("rationale") else ""))
    return "\n".join(lines)


def jury_calls(entry: Mapping[str, Any]) -> list[tuple[Mapping[str, Any], Mapping[str, Any]]]:
    """Every judge call of a case's jury, as (item, call), in the record's order: what the
    LangSmith worker posts as the case's evaluator runs."""
    score = entry.get("score")
    if not isinstance(score, Mapping):
        return []
    return [(item, call) for item in _jury_items(score) for call in item.get("calls") or []
            if isinstance(call, Mapping)]


def summary_feedback(record: Mapping[str, Any], task: str) -> list[tuple[str, float, str | None]]:
    """Experiment-level feedback for one suite: each figure its summary declares a score (the
    record's ``summary.<task>.specs``: every kind but ``count``, so no raw tp/fp/fn sums, no
    ``repeats``; nor the ``n_`` outcome counts, an applicable metric's ``<name>_n`` or a
    confidence interval), in declaration order, and the gate."""
    out: list[tuple[str, float, str | None]] = []
    summary = (record.get("summary") or {}).get(task) or {}
    for name, spec in (summary.get("specs") or {}).items():
        if not isinstance(spec, Mapping) or spec.get("kind") == "count":
            continue
        number = _number(summary.get(name))
        if number is not None:
            out.append((name, number, None))
    gate = record.get("gate")
    if isinstance(gate, Mapping):
        missed = [c.get("metric") for c in gate.get("thresholds", []) if not c.get("passed")]
        out.append(("gate", 1.0 if gate.get("passed") else 0.0,
                    f"missed: {', '.join(map(str, missed))}" if missed else "all thresholds met"))
    return out


# ------------------------------------------------------------------ git, suite version
def git_metadata(git: Any) -> dict[str, Any]:
    """The experiment's ``git`` block as the SDK's ``evaluate()`` sends it (its
    ``get_git_info`` keys ``commit``, ``branch``, ``dirty``) from the record's
    :class:`~pytest_groundeval.model.GitInfo` (None outside a work tree: all three None)."""
    return {"commit": getattr(git, "commit", None), "branch": getattr(git, "branch", None),
            "dirty": getattr(git, "dirty", None)}


def suite_versions(cases: Iterable[Any]) -> dict[str, str]:
    """Per task, the version of the suite the session ran: ``<12 hex>`` of the sha256 over its
    cases' ``case id`` and content hash (each once, sorted; repeats count once). Another case,
    or one whose files changed, is another version; the same cases, the same version."""
    import hashlib

    by_task: dict[str, set[str]] = {}
    for c in cases:
        task, case_id, content_hash = (getattr(c, k, None) if not isinstance(c, Mapping) else c.get(k)
                                       for k in ("task", "case_id", "content_hash"))
        if task and case_id and content_hash:
            by_task.setdefault(task, set()).add(f"{len(case_id)}:{case_id}\n{content_hash}")
    return {task: hashlib.sha256("\n".join(sorted(lines)).encode()).hexdigest()[:12]
            for task, lines in sorted(by_task.items())}


def dataset_tags(git: Mapping[str, Any], suite_version: str | None) -> list[str]:
    """The tags the suite's dataset version gets: the langsmith pytest plugin's
    ``git:commit:<sha>`` and ``git:branch:<branch>`` (each when known), and
    ``suite:<version>`` (:func:`suite_versions`)."""
    tags = [f"git:{k}:{git[k]}" for k in ("commit", "branch") if git.get(k)]
    return tags + ([f"suite:{suite_version}"] if suite_version else [])



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
    the first few, in ``Session.client_log``."""

    def __init__(self, owner: "Session") -> None:
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



# ------------------------------------------------------------------ what both halves are
class Session:
    """One process's half of a groundeval session's LangSmith side: the client (made on
    first need), the session's own calls on one background thread, and the errors, counted,
    never raised (after a connection error or ``max_errors`` failures it gives up)."""

    def __init__(self, *, api_key: str, endpoint: str | None, run_id: str, prefix: str, metadata: dict[str, Any],
                 client_kwargs: Mapping[str, Any] | None = None, max_errors: int = 5,
                 flush_timeout: float = FLUSH_TIMEOUT) -> None:
        self.api_key = api_key
        self.endpoint = endpoint
        self.run_id = run_id
        self.prefix = prefix
        self.metadata = metadata
        self.client_kwargs = dict(client_kwargs or {})
        self.max_errors = max_errors
        self.flush_timeout = flush_timeout
        self.client: Any = None
        self.errors: list[str] = []  # the first MAX_KEPT_ERRORS messages
        self.n_errors = 0
        self.gave_up = False
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

    def _give_up(self) -> None:
        with self._lock:
            if self.gave_up:
                return
            self.gave_up = True
        self._gave_up()

    def _gave_up(self) -> None:
        """What else stops when this process gives up (the worker half closes its gates)."""

    def _background_error(self, exc: Exception) -> None:
        self._error("background upload", exc)

    def warning_line(self) -> str | None:
        """One line for the terminal when something went wrong (any process), else None."""
        if not self.n_errors:
            return None
        stopped = " (gave up)" if self.gave_up else ""
        return (f"groundeval: LangSmith had {self.n_errors} error(s){stopped}; the eval and its local record are "
                f"unaffected. First: {self.errors[0] if self.errors else '?'}")

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

    def close(self) -> None:
        """At unconfigure: the client's log filters off, the client closed (not waited for)."""
        for logger, flt in self._filters:
            logger.removeFilter(flt)
        self._filters = []
        if self.client is not None:
            try:
                self.client.close(timeout=0)  # what the bounded flush left is not waited for
            except Exception:  # noqa: BLE001
                pass
