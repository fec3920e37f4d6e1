"""LangSmith when configured; nothing otherwise.

Every run writes its local JSON record (``record.py``). With ``LANGSMITH_API_KEY`` set,
the run also goes to LangSmith through the real ``langsmith.Client``:

* one parent run (``chain``, ``groundeval <agent>``) per groundeval session;
* one child run per case (``<task>:<case_id>``), sent as the case finishes;
* feedback per case: the scorer's numeric metrics, one feedback per pass/fail dimension
  (its reason as the comment), ``pass``; an errored case gets ``error`` = 0;
* at the end, the summary and gate as the parent's outputs, the summary rates and the
  gate as feedback on the parent, then a bounded flush.

Runs carry ``trace_id`` and ``dotted_order``, so the client queues them and a background
thread uploads them in batches (``/runs/multipart``): the eval never waits on LangSmith
while cases run. Feedback rides the same queue when the server supports it, and falls
back to ``POST /feedback`` otherwise.

Tracing can never fail or change the eval: every call is guarded, failures (ours and the
client's background ones) are collected in ``Tracer.errors``, and after ``max_errors``
failed calls (or at once when LangSmith cannot be reached) the tracer stops trying; the
plugin prints ``Tracer.warning_line()``. Ground truth stays in the local record unless
``GROUNDEVAL_TRACE_TRUTH=1``. Only the pytest controller process should own a Tracer.
"""

from __future__ import annotations

import os
import threading
import uuid
import warnings
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Mapping

DEFAULT_PROJECT = "groundeval"
TRUTH_ENV = "GROUNDEVAL_TRACE_TRUTH"
MAX_KEPT_ERRORS = 50


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _parse_time(text: Any) -> datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)


def _dotted(start: datetime, run_id: uuid.UUID) -> str:
    return start.strftime("%Y%m%dT%H%M%S%fZ") + str(run_id)


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


def case_feedback(entry: Mapping[str, Any], counts: Iterable[str] = ()) -> list[tuple[str, float, str | None]]:
    """The feedback (key, score, comment) for one case result (as JSON). Task-agnostic:
    numeric metrics (not the task's raw ``counts``), pass/fail dimensions with their
    reasons, and ``pass``."""
    outcome = entry.get("outcome")
    if outcome == "error":
        return [("error", 0.0, _error_text(entry))]
    if outcome == "skipped":
        return []
    score = entry.get("score")
    if not isinstance(score, Mapping):
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


def summary_feedback(record: Mapping[str, Any]) -> list[tuple[str, float, str | None]]:
    """Feedback on the parent run: each task's summary rates (``task.metric``) and the gate."""
    out: list[tuple[str, float, str | None]] = []
    for task, values in (record.get("summary") or {}).items():
        for key, value in (values or {}).items():
            number = _number(value)
            if number is not None and not key.startswith("n_"):
                out.append((f"{task}.{key}", number, None))
    gate = record.get("gate")
    if isinstance(gate, Mapping):
        missed = [c.get("metric") for c in gate.get("thresholds", []) if not c.get("passed")]
        out.append(("gate", 1.0 if gate.get("passed") else 0.0,
                    f"missed: {', '.join(map(str, missed))}" if missed else "all thresholds met"))
    return out


class Tracer:
    """Sends one groundeval session to LangSmith. Never raises out of its methods."""

    def __init__(
        self,
        client: Any,
        project: str,
        *,
        send_truth: bool = False,
        max_errors: int = 5,
        flush_timeout: float = 30.0,
    ) -> None:
        self.client = client
        self.project = project
        self.send_truth = send_truth
        self.errors: list[str] = []  # the first MAX_KEPT_ERRORS messages
        self.n_errors = 0  # all failures, ours and the client's background uploads
        self.max_errors = max_errors  # after this many, stop trying
        self.gave_up = False
        self.flush_timeout = flush_timeout
        self.started = False  # start() was called (it runs once)
        self.n_runs = 0
        self.n_feedback = 0
        self.parent_id: uuid.UUID | None = None
        self.session_id: Any = None
        self._parent_start: datetime | None = None
        self._parent_dotted: str | None = None
        self._lock = threading.Lock()
        if client is not None and getattr(client, "_tracing_error_callback", 0) is None:
            # a client built elsewhere: still hear about its background upload failures
            try:
                client._tracing_error_callback = self._background_error
            except Exception:  # pragma: no cover - a client that refuses the attribute
                pass

    # ------------------------------------------------------------- construction
    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ, **client_kwargs: Any) -> "Tracer | None":
        """A Tracer when ``LANGSMITH_API_KEY`` is set, else None. Honors ``LANGSMITH_ENDPOINT``,
        ``LANGSMITH_PROJECT`` (default ``groundeval``) and ``GROUNDEVAL_TRACE_TRUTH``.
        Never raises: a client that cannot be built gives a disabled Tracer whose
        ``errors`` say why. ``client_kwargs`` go to ``langsmith.Client`` (e.g. retry_config)."""
        api_key = (environ.get("LANGSMITH_API_KEY") or "").strip()
        if not api_key:
            return None
        project = (environ.get("LANGSMITH_PROJECT") or "").strip() or DEFAULT_PROJECT
        tracer = cls(None, project, send_truth=_truthy(environ.get(TRUTH_ENV)))
        try:
            import langsmith

            kwargs: dict[str, Any] = {"api_key": api_key, "tracing_error_callback": tracer._background_error}
            endpoint = (environ.get("LANGSMITH_ENDPOINT") or "").strip()
            if endpoint:
                kwargs["api_url"] = endpoint
            kwargs.update(client_kwargs)
            tracer.client = langsmith.Client(**kwargs)
        except Exception as exc:
            tracer._error("could not create the LangSmith client", exc)
        return tracer

    # ------------------------------------------------------------- state
    @property
    def enabled(self) -> bool:
        return self.client is not None and not self.gave_up

    def _error(self, what: str, exc: BaseException) -> None:
        with self._lock:
            self.n_errors += 1
            # unreachable: no point in more tries (and in their retry sleeps)
            if self.n_errors >= self.max_errors or _unreachable(exc):
                self.gave_up = True
            if len(self.errors) < MAX_KEPT_ERRORS:
                self.errors.append(f"{what}: {_describe(exc)}")

    def _background_error(self, exc: Exception) -> None:
        self._error("background upload", exc)

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> bool:
        """Call the client; True when it did not raise (queued or sent)."""
        if not self.enabled:
            return False
        try:
            with warnings.catch_warnings():
                # e.g. LangSmithWarning about feedback without session_id: not the user's concern
                warnings.simplefilter("ignore")
                fn(*args, **kwargs)
        except Exception as exc:
            self._error(what, exc)
            return False
        return True

    def warning_line(self) -> str | None:
        """One line for the terminal when something went wrong, else None."""
        if not self.errors:
            return None
        stopped = " (gave up)" if self.gave_up and self.client is not None else ""
        return (f"groundeval: LangSmith tracing had {self.n_errors} error(s){stopped}; the eval and its "
                f"local record are unaffected. First: {self.errors[0]}")

    # ------------------------------------------------------------- the session
    def start(self, run_meta: dict) -> None:
        """Open the parent run of this groundeval session (once; later calls do nothing)."""
        if self.started or not self.enabled:
            return
        self.started = True
        try:
            self._start(run_meta)
        except Exception as exc:
            self._error("start", exc)

    def _start(self, run_meta: dict) -> None:
        self.session_id = self._project_id()
        start = _parse_time(run_meta.get("started_at")) or _now()
        self.parent_id = uuid.uuid4()
        self._parent_start = start
        self._parent_dotted = _dotted(start, self.parent_id)
        agent = run_meta.get("agent") or "agent"
        meta = {
            "groundeval_run_id": run_meta.get("run_id"),
            "agent": agent,
            "model": run_meta.get("model"),
            "options": run_meta.get("options"),
            "started_at": run_meta.get("started_at"),
        }
        if self._call(
            "create parent run",
            self.client.create_run,
            name=f"groundeval {agent}",
            inputs={"run_id": run_meta.get("run_id"), "agent": agent, "model": run_meta.get("model"),
                    "options": run_meta.get("options")},
            run_type="chain",
            project_name=self.project,
            id=self.parent_id,
            trace_id=self.parent_id,
            dotted_order=self._parent_dotted,
            start_time=start,
            extra={"metadata": meta},
            tags=["groundeval", str(agent)],
        ):
            self.n_runs += 1

    def _project_id(self) -> Any:
        """The project's id (feedback wants it as session_id), created if missing; None
        when it cannot be had (feedback then goes without it)."""
        from langsmith.utils import LangSmithConflictError, LangSmithNotFoundError

        def read() -> Any:
            return self.client.read_project(project_name=self.project).id

        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    return read()
                except LangSmithNotFoundError:
                    pass
                try:
                    return self.client.create_project(self.project).id
                except LangSmithConflictError:  # created meanwhile by someone else
                    return read()
        except Exception as exc:
            self._error("resolve project", exc)
            return None

    def log_case(self, entry: dict, counts: Iterable[str] = ()) -> None:
        """One child run for a finished case, then its feedback (``counts``: the task's
        per-case metrics that are raw counts, not scores)."""
        if not self.enabled or self.parent_id is None:
            return
        try:
            self._log_case(entry, counts)
        except Exception as exc:
            self._error(f"log case {entry.get('task')}:{entry.get('case_id')}", exc)

    def _log_case(self, entry: dict, counts: Iterable[str] = ()) -> None:
        run_id = uuid.uuid4()
        end = _now()
        duration = _number(entry.get("duration_s")) or 0.0
        start = max(end.timestamp() - duration, self._parent_start.timestamp())  # type: ignore[union-attr]
        start_dt = datetime.fromtimestamp(start, timezone.utc)
        task, case_id = entry.get("task"), entry.get("case_id")
        outputs: dict[str, Any] = {
            "raw_output": entry.get("raw_output"),
            "predicted": entry.get("predicted"),
            "outcome": entry.get("outcome"),
            "error": entry.get("error"),
        }
        if entry.get("transcript") is not None:
            outputs["transcript"] = entry["transcript"]
        if self.send_truth and entry.get("ground_truth") is not None:
            outputs["reference"] = entry["ground_truth"]
        metadata = {"usage": entry.get("usage"), "duration_s": entry.get("duration_s")}
        for key in ("cost_usd", "steps", "attempts"):
            if entry.get(key) is not None:
                metadata[key] = entry[key]
        if isinstance(entry.get("error"), Mapping):
            metadata["error_kind"] = entry["error"].get("kind")
        kwargs: dict[str, Any] = {}
        if entry.get("outcome") == "error":
            kwargs["error"] = _error_text(entry)
        if self._call(
            f"create run {task}:{case_id}",
            self.client.create_run,
            name=f"{task}:{case_id}",
            inputs={"case_id": case_id, "task": task, "content_hash": entry.get("content_hash")},
            run_type="chain",
            project_name=self.project,
            id=run_id,
            trace_id=self.parent_id,
            parent_run_id=self.parent_id,
            dotted_order=f"{self._parent_dotted}.{_dotted(start_dt, run_id)}",
            start_time=start_dt,
            end_time=end,
            outputs=outputs,
            extra={"metadata": metadata},
            tags=[str(task), str(entry.get("outcome"))],
            **kwargs,
        ):
            self.n_runs += 1
        for key, score, comment in case_feedback(entry, counts):
            self._feedback(run_id, key, score, comment)

    def _feedback(self, run_id: uuid.UUID, key: str, score: float, comment: str | None) -> None:
        kwargs: dict[str, Any] = {}
        if self.session_id is not None:
            kwargs["session_id"] = self.session_id
        if self._call(
            f"feedback {key}",
            self.client.create_feedback,
            run_id,
            key,
            score=score,
            comment=comment,
            trace_id=self.parent_id,
            stop_after_attempt=1,  # the client's default retries sleep for seconds
            **kwargs,
        ):
            self.n_feedback += 1

    def finish(self, record: dict) -> None:
        """The summary and gate on the parent run, end it, then flush (bounded)."""
        if self.client is None:
            return
        try:
            if self.enabled and self.parent_id is not None:
                self._finish(record)
        except Exception as exc:
            self._error("finish", exc)
        self._flush()

    def _finish(self, record: dict) -> None:
        outcomes: dict[str, int] = {}
        for case in record.get("cases") or []:
            outcomes[case.get("outcome")] = outcomes.get(case.get("outcome"), 0) + 1
        self._call(
            "end parent run",
            self.client.update_run,
            self.parent_id,
            end_time=max(_now(), self._parent_start),  # type: ignore[type-var]
            outputs={
                "summary": record.get("summary"),
                "gate": record.get("gate"),
                "outcomes": outcomes,
                "n_cases": sum(outcomes.values()),
                "finished_at": record.get("finished_at"),
                "git_sha": record.get("git_sha"),
            },
            trace_id=self.parent_id,
            dotted_order=self._parent_dotted,
            session_name=self.project,
        )
        for key, score, comment in summary_feedback(record):
            self._feedback(self.parent_id, key, score, comment)  # type: ignore[arg-type]

    def _flush(self) -> None:
        flush = getattr(self.client, "flush", None)
        if not callable(flush):
            return
        # once the tracer has given up, what is left will not get through: do not wait long
        timeout = self.flush_timeout if self.enabled else min(self.flush_timeout, 2.0)
        try:
            flush(timeout=timeout)  # never an unbounded flush(): a dead endpoint would hang the run
        except Exception as exc:
            self._error("flush", exc)
        queue = getattr(self.client, "tracing_queue", None)
        left = getattr(queue, "unfinished_tasks", 0) if queue is not None else 0
        if left:
            self._error("flush", TimeoutError(f"{left} upload(s) still pending after {timeout:g}s"))
