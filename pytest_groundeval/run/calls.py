"""One agent call under a policy: a per-call timeout, and retries with exponential backoff
and jitter on transient failures (rate limits, overload, network), honouring ``retry-after``.
Permanent failures (bad request, auth, a bug in the agent) are not retried.

The outcome keeps every attempt, so the record can tell "the model failed" (a scored
``failed``) from "the API failed" (``error``, with the final error class and the attempts).
"""

from __future__ import annotations

import contextvars
import email.utils
import queue
import random
import signal
import threading
import time
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any, Callable

from pytest_groundeval.run.errortext import error_line, message_of
from pytest_groundeval.run.errortext import status_of as _status

TRANSIENT_STATUS = {408, 409, 425, 429, 500, 502, 503, 504, 529}


class TransientAgentError(Exception):
    """Raise from your agent for a failure worth retrying; set ``retry_after`` (seconds) if known."""

    def __init__(self, message: str = "", retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class PermanentAgentError(Exception):
    """Raise from your agent for a failure that retrying cannot fix."""


class AgentCrash(Exception):
    """The agent's process died while it answered (``os._exit``, a signal, out of memory):
    the case's ``crash`` error, not retried (``agents/host.py``)."""


class CallTimeout(TimeoutError):
    """The call took longer than ``--agent-timeout``."""


# The monotonic time by which the running attempt must be over (its timeout, or the case's
# deadline if sooner), set around each attempt in the thread that runs it. An agent that
# makes several model calls per attempt reads it with :func:`attempt_deadline` so that no
# call starts once the harness has given up on the attempt (the LangGraph agent does).
_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("groundeval_deadline", default=None)


# With --repeat N: which repeat of its case the running call answers (None without --repeat).
# The model-call cache makes it part of the key, so one repeat is never served another's answer.
_REPEAT: contextvars.ContextVar[int | None] = contextvars.ContextVar("groundeval_repeat", default=None)


class repeat_of:
    """``with repeat_of(k):`` the calls made inside answer repeat ``k`` (a no-op for None)."""

    def __init__(self, repeat: int | None) -> None:
        self.repeat = repeat
        self._token: Any = None

    def __enter__(self) -> None:
        if self.repeat is not None:
            self._token = _REPEAT.set(self.repeat)

    def __exit__(self, *exc: Any) -> None:
        if self._token is not None:
            _REPEAT.reset(self._token)


def current_repeat() -> int | None:
    return _REPEAT.get()


# The running attempt's tally of what it has spent so far (``{"usage": {...}}``), set around
# each attempt by the runner. An agent that makes several model calls per attempt keeps it
# current with :func:`report_spent`, so what the attempt spent is known even when the harness
# stops waiting for it (a timeout off the main thread), not only from its exception.
_TALLY: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("groundeval_tally", default=None)


class spending_into:
    """``with spending_into(tally):`` the calls made inside report what they spent to ``tally``."""

    def __init__(self, tally: dict[str, Any]) -> None:
        self.tally = tally
        self._token: Any = None

    def __enter__(self) -> None:
        self._token = _TALLY.set(self.tally)

    def __exit__(self, *exc: Any) -> None:
        _TALLY.reset(self._token)


def attempt_tally() -> dict[str, Any] | None:
    """The running attempt's tally (None outside the harness): hand it to :func:`report_spent`
    from any thread the attempt uses."""
    return _TALLY.get()


def report_agent_time(tally: dict[str, Any] | None, seconds: Any) -> None:
    """How long the attempt's agent itself ran, measured where it ran (its agent host: the call
    alone, without the round trip or the wait behind the host's other calls). The prefetcher
    reads it to tell an instant agent (``run/concurrency.py``); nothing is scored on it."""
    if tally is not None and isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and seconds >= 0:
        tally["agent_seconds"] = float(seconds)


def report_spent(tally: dict[str, Any] | None, usage: dict[str, Any] | None,
                 transcript: list[dict[str, Any]] | None = None) -> None:
    """The attempt has spent ``usage`` so far (its whole usage, not an increment); and, when
    given, its ``transcript`` so far (the agent's own account: kept on the case if the harness
    stops waiting for the attempt, which then raises nothing the agent could attach it to)."""
    if tally is not None and usage:
        tally["usage"] = dict(usage)
        note = tally.get("on_spent")  # the runner's: written beside the journal (store/spent.py)
        if callable(note):
            note(dict(usage))
    if tally is not None and transcript is not None:
        tally["transcript"] = list(transcript)


def attempt_deadline() -> float | None:
    """``time.monotonic()`` value at which the current attempt ends (None: unbounded)."""
    return _DEADLINE.get()


def _bounded(fn: Callable[[], Any], timeout: float | None) -> Callable[[], Any]:
    """``fn`` run with :func:`attempt_deadline` set to now + ``timeout`` where it runs."""
    if not timeout:
        return fn

    def run() -> Any:
        token = _DEADLINE.set(time.monotonic() + timeout)
        try:
            return fn()
        finally:
            _DEADLINE.reset(token)

    return run


def _retry_after(exc: BaseException) -> float | None:
    value = getattr(exc, "retry_after", None)
    if isinstance(value, (int, float)):
        return float(value)
    headers = getattr(getattr(exc, "response", None), "headers", None)
    if not headers:
        return None
    try:
        if headers.get("retry-after-ms"):
            return float(headers["retry-after-ms"]) / 1000
        raw = headers.get("retry-after")
    except Exception:
        return None
    if not raw:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(raw) if raw else None
        return max(0.0, parsed.timestamp() - time.time()) if parsed else None


def is_timeout(exc: BaseException) -> bool:
    """The attempt ran out of time: the harness's timeout (:class:`CallTimeout`), or the SDK
    client's own request timeout, which the built-in agents set to the same attempt timeout
    (whichever of the two clocks fires first, it is a timeout, not an agent error)."""
    if isinstance(exc, TimeoutError):  # CallTimeout, the LangGraph agent's wall-clock limit
        return True
    names = {cls.__name__ for cls in type(exc).__mro__}
    return bool(names & {"APITimeoutError", "TimeoutException"})  # anthropic / openai, httpx


def dns_failure(exc: BaseException) -> bool:
    """The host's name could not be resolved (``socket.gaierror`` anywhere in the exception's
    chain, under the SDK's connection error): a wrong URL or no network, which retrying does not
    fix; a permanent error, so a run fails fast instead of retrying every case."""
    import socket

    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, socket.gaierror):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return False


def is_transient(exc: BaseException) -> bool:
    if isinstance(exc, (PermanentAgentError, AgentCrash)) or dns_failure(exc):
        return False
    if isinstance(exc, (TransientAgentError, CallTimeout, ConnectionError, TimeoutError)):
        return True
    status = _status(exc)
    if status is not None:
        return status in TRANSIENT_STATUS or status >= 500
    # SDK network errors (anthropic/openai/httpx) without a status: APIConnectionError,
    # APITimeoutError, ConnectError, ReadTimeout ...
    names = {cls.__name__ for cls in type(exc).__mro__}
    return any(n.endswith(("ConnectionError", "TimeoutError", "ConnectError", "ReadTimeout",
                           "RemoteProtocolError", "OverloadedError", "RateLimitError"))
               for n in names)


@dataclass
class CallPolicy:
    timeout: float | None = 120.0
    max_attempts: int = 5
    base_delay: float = 1.0
    max_delay: float = 60.0
    max_retry_after: float = 60.0  # a server asking for longer is not obeyed (capped)
    case_deadline: float | None = None  # seconds for all attempts of one case together
    sleep: Callable[[float], None] = time.sleep
    rng: random.Random = field(default_factory=random.Random)

    def delay(self, attempt: int, retry_after: float | None) -> float:
        """Full-jitter exponential backoff; never shorter than the server's retry-after, which
        is capped at ``max_retry_after`` (``retry-after: 3600`` must not stall a run)."""
        backoff = self.rng.uniform(0, min(self.max_delay, self.base_delay * 2 ** (attempt - 1)))
        return max(backoff, min(retry_after or 0.0, self.max_retry_after))


class AgentCallError(Exception):
    """The call failed for good (permanent error, or transient errors until attempts ran out)."""

    def __init__(self, last: BaseException, attempts: list[dict[str, Any]]) -> None:
        super().__init__(error_line(last))
        self.last = last
        self.attempts = attempts

    @property
    def error_class(self) -> str:
        return type(self.last).__name__


class _Caller:
    """A daemon thread that runs one call at a time and returns to the idle list when done
    (also after the caller stopped waiting for it): threads are reused, not made per call."""

    _idle: "list[_Caller]" = []
    _lock = threading.Lock()

    def __init__(self) -> None:
        self._jobs: "queue.SimpleQueue[tuple[Future, Callable[[], Any]]]" = queue.SimpleQueue()
        threading.Thread(target=self._loop, daemon=True, name="groundeval-call").start()

    @classmethod
    def get(cls) -> "_Caller":
        with cls._lock:
            return cls._idle.pop() if cls._idle else cls()

    def submit(self, fn: Callable[[], Any]) -> Future:
        future: Future = Future()
        self._jobs.put((future, fn))
        return future

    def _loop(self) -> None:
        while True:
            future, fn = self._jobs.get()
            try:
                future.set_result(fn())
            except BaseException as exc:  # noqa: BLE001 - handed back to the caller
                future.set_exception(exc)
            with self._lock:
                self._idle.append(self)


def _alarm_is_free() -> bool:
    """SIGALRM can bound a call on this thread: POSIX, the main thread, and nobody else
    (e.g. pytest-timeout's signal method) holds the signal or the real-time timer."""
    return (hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None)
            and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0))


def _with_alarm(fn: Callable[[], Any], timeout: float) -> Any:
    """Run ``fn`` here, interrupted by SIGALRM after ``timeout`` seconds (a blocking socket
    read is interrupted too). An agent that swallows the interruption and answers anyway is
    still a timeout."""
    fired = False

    def on_alarm(signum: int, frame: Any) -> None:
        nonlocal fired
        fired = True
        raise CallTimeout(f"no answer within {timeout:g} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    try:
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            value = fn()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    finally:
        signal.signal(signal.SIGALRM, previous)
    if fired:
        raise CallTimeout(f"no answer within {timeout:g} s")
    return value


def _with_timeout(fn: Callable[[], Any], timeout: float | None) -> Any:
    """Run ``fn`` and stop waiting after ``timeout`` seconds. On the main thread (serial runs)
    the call runs in place under SIGALRM, as pytest-timeout's signal method does: no thread
    hand-off per call. Elsewhere (prefetch threads), or when SIGALRM is taken, it runs on a
    reused daemon thread the caller stops waiting for; that thread cannot be killed, and SDK
    agents get the same timeout so their sockets give up too."""
    if not timeout:
        return fn()
    fn = _bounded(fn, timeout)
    if _alarm_is_free():
        return _with_alarm(fn, timeout)
    future = _Caller.get().submit(fn)
    try:
        return future.result(timeout)
    except FutureTimeout:
        if future.done():  # the agent itself raised a TimeoutError (same class since 3.11)
            raise
        raise CallTimeout(f"no answer within {timeout:g} s") from None


PARTIAL = ("transcript", "usage", "steps")  # what an agent's exception carries of its attempt


def carrying(new: BaseException, old: BaseException) -> BaseException:
    """``new`` (the harness's word for how ``old`` ended) with what ``old`` carried of the
    attempt: its partial transcript, usage and steps (the LangGraph agent sets them)."""
    for name in PARTIAL:
        if getattr(old, name, None) is not None:
            setattr(new, name, getattr(old, name))
    return new


def call_with_policy(fn: Callable[[], Any], policy: CallPolicy) -> tuple[Any, list[dict[str, Any]]]:
    """``fn()`` under the policy. Returns (value, attempts); raises :class:`AgentCallError`."""
    attempts: list[dict[str, Any]] = []
    deadline = time.monotonic() + policy.case_deadline if policy.case_deadline else None
    for n in range(1, max(1, policy.max_attempts) + 1):
        started = time.monotonic()
        timeout = policy.timeout
        if deadline is not None:  # no attempt may run past the case's deadline
            timeout = min(timeout or deadline - started, deadline - started)
        try:
            value = _with_timeout(fn, timeout)
        except Exception as exc:
            if deadline is not None and isinstance(exc, CallTimeout) and time.monotonic() >= deadline - 1e-3:
                exc = carrying(CallTimeout(f"case deadline of {policy.case_deadline:g} s reached (attempt {n})"), exc)
            transient = is_transient(exc)
            attempt = {"attempt": n, "error_class": type(exc).__name__, "error": message_of(exc),
                       "transient": transient, "status": _status(exc),
                       "duration_s": round(time.monotonic() - started, 6)}
            attempts.append(attempt)
            if not transient or n >= policy.max_attempts:
                raise AgentCallError(exc, attempts) from exc
            wait = policy.delay(n, _retry_after(exc))
            if deadline is not None and time.monotonic() + wait >= deadline:
                # the retry could not start before the case's deadline: give up now
                raise AgentCallError(carrying(CallTimeout(
                    f"case deadline of {policy.case_deadline:g} s would pass before retry {n + 1} "
                    f"(in {wait:.3g} s) after {error_line(exc)}"), exc), attempts) from exc
            attempt["retry_in_s"] = round(wait, 3)
            policy.sleep(wait)
            continue
        attempts.append({"attempt": n, "error_class": None, "duration_s": round(time.monotonic() - started, 6)})
        return value, attempts
    raise AssertionError("unreachable")
