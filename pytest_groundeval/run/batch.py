"""``--batch``: a session's single-call cases sent as one Anthropic Message Batch (half price,
results within 24 hours).

When the items are collected, every case the session will call is loaded and its Messages
request (the one the ``claude`` agent would send) submitted at once in one batch
(``client.messages.batches.create``); its id and the requests' ``custom_id`` go to the run's
journal before anything else. A poller retrieves the batch every ``poll_s`` seconds and
reports its counts (the progress line); once it has ended, its results (JSONL) are read and
each case's call, waiting on its ``custom_id``, gets its own: the item scores it as usual. A
result the batch reports ``errored`` is an agent error with the batch's message, ``expired``
a timeout (the batch's 24 hours ran out), ``canceled`` an agent error. A session that is
killed leaves the batch id in its journal: ``--resume`` attaches to that batch again (no
new batch, nothing paid twice) and submits only requests it does not hold.

A request's ``custom_id`` is a digest of its body and its repeat, so the same case's request
in a resumed session finds its result. Batch results are billed at half the list prices:
their usage carries ``batch_calls`` and :func:`usage.cost_usd` halves their cost.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from typing import Any, Callable, Iterable

from pytest_groundeval.run.calls import CallTimeout, PermanentAgentError, attempt_deadline, current_repeat

BATCH_DISCOUNT = 0.5  # Message Batches: 50% of the list prices (cache reads and writes included)
POLL_S = 30.0


def custom_id(request: dict[str, Any], repeat: int | None = None) -> str:
    """A request's id in a batch (``^[a-zA-Z0-9_-]{1,64}$``): its body and repeat."""
    blob = json.dumps(request, sort_keys=True, separators=(",", ":")) + f"\0{repeat}"
    return "r" + hashlib.sha256(blob.encode("utf-8")).hexdigest()[:40]


class BatchResultError(PermanentAgentError):
    """The batch reported this request ``errored`` or ``canceled``."""


class Batches:
    """The session's batches on one provider: what was submitted, the poller, each request's
    result. Subclasses create a batch, read its status and its results."""

    provider = ""

    def __init__(self, client: Any, *, poll_s: float = POLL_S, progress: Callable[[str], None] = lambda line: None,
                 journal: Callable[[dict[str, Any]], None] = lambda info: None) -> None:
        self.client = client
        self.poll_s = poll_s
        self.progress = progress
        self.journal = journal
        self.created = 0  # batches this session created (a resume attaches to its journal's)
        self._owner: dict[str, str] = {}  # custom_id -> batch id
        self._open: list[str] = []
        self._results: dict[str, tuple[str, Any]] = {}  # custom_id -> (result type, payload)
        self._failed: str | None = None  # why the poller stopped (every waiting call fails with it)
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the provider's side --
    def _create(self, todo: dict[str, dict[str, Any]]) -> str:
        raise NotImplementedError

    def _status(self, batch_id: str) -> tuple[bool, str]:
        """(has it ended, its progress in words)."""
        raise NotImplementedError

    def _read(self, batch_id: str) -> Iterable[tuple[str, str, Any]]:
        """Its results: ``(custom_id, succeeded|errored|expired|canceled, the answer or why)``."""
        raise NotImplementedError

    # -- submitting --
    def attach(self, batch_id: str, ids: list[str]) -> None:
        """A batch an earlier session submitted (its journal's line): its results serve these ids."""
        for cid in ids:
            self._owner.setdefault(cid, batch_id)
        self._open.append(batch_id)
        self.journal({"provider": self.provider, "id": batch_id, "custom_ids": ids, "resumed": True})

    def submit(self, requests: dict[str, dict[str, Any]]) -> str | None:
        """One batch of the requests no batch holds yet (``{custom_id: body}``); its id."""
        todo = {cid: params for cid, params in requests.items() if cid not in self._owner}
        if not todo:
            return None
        batch_id = self._create(todo)
        self.created += 1
        for cid in todo:
            self._owner[cid] = batch_id
        self._open.append(batch_id)
        self.journal({"provider": self.provider, "id": batch_id, "custom_ids": list(todo)})
        self.progress(f"groundeval: batch {batch_id} submitted: {len(todo)} requests")
        return batch_id

    def holds(self, cid: str) -> bool:
        return cid in self._owner

    def start(self) -> None:
        if self._thread is None and self._open:
            _import_httpx()
            self._thread = threading.Thread(target=self._poll, daemon=True, name="groundeval-batch")
            self._thread.start()

    def close(self) -> None:
        self._stop.set()

    # -- polling --
    def _poll(self) -> None:
        try:
            while self._open and not self._stop.is_set():
                for batch_id in list(self._open):
                    self._check(batch_id)
                if self._open:
                    self._stop.wait(self.poll_s)
        except Exception as e:  # noqa: BLE001 - the waiting calls fail with it, as values
            with self._cond:
                self._failed = f"polling the batch failed: {type(e).__name__}: {e}"
                self._cond.notify_all()

    def _check(self, batch_id: str) -> None:
        ended, words = self._status(batch_id)
        self.progress(f"groundeval: batch {batch_id} {words}")
        if not ended:
            return
        for cid, kind, payload in self._read(batch_id):
            with self._cond:
                self._results[cid] = (kind, payload)
                self._cond.notify_all()
        with self._cond:
            self._open.remove(batch_id)
            for cid, owner in self._owner.items():  # a request the results left out: say so
                if owner == batch_id and cid not in self._results:
                    self._results[cid] = ("missing", None)
            self._cond.notify_all()

    # -- one call --
    def result(self, cid: str, deadline: float | None = None) -> Any:
        """The answer to request ``cid`` once its batch has ended; its error otherwise."""
        if cid not in self._owner:
            raise PermanentAgentError("no batch of this session holds this request (it is not the one submitted "
                                      "for this case when the items were collected)")
        self.start()
        with self._cond:
            while cid not in self._results and self._failed is None:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise CallTimeout(f"the batch {self._owner[cid]} had not ended by the case's deadline")
                self._cond.wait(left if left is not None else 5.0)
            if cid not in self._results:
                raise PermanentAgentError(str(self._failed))
            kind, payload = self._results[cid]
        return _answer_of(kind, payload, self._owner[cid])


def _import_httpx() -> None:
    """Finish importing ``httpx`` in the calling thread before the poll thread starts.

    openai's ``_httpx2`` reads ``sys.modules["httpx"]`` without the import lock: while another
    thread is importing httpx (anthropic and langsmith import it lazily), the poll thread would
    meet a partially initialised module (FRICTION P)."""
    try:
        import httpx  # noqa: F401
    except ImportError:  # not installed: openai has nothing to look up
        pass


class MessageBatches(Batches):
    """Anthropic's Message Batches: ``client.messages.batches`` create, retrieve, results."""

    provider = "anthropic"

    def _create(self, todo: dict[str, dict[str, Any]]) -> str:
        return self.client.messages.batches.create(
            requests=[{"custom_id": cid, "params": params} for cid, params in todo.items()]).id

    def _status(self, batch_id: str) -> tuple[bool, str]:
        batch = self.client.messages.batches.retrieve(batch_id)
        c = batch.request_counts
        return batch.processing_status == "ended", (
            f"{batch.processing_status}: {c.processing} processing, {c.succeeded} succeeded, {c.errored} errored, "
            f"{c.expired} expired, {c.canceled} canceled")

    def _read(self, batch_id: str) -> Iterable[tuple[str, str, Any]]:
        for line in self.client.messages.batches.results(batch_id):
            result = line.result
            if result.type == "succeeded":
                yield line.custom_id, "succeeded", result.message
            elif result.type == "errored":
                error = getattr(getattr(result, "error", None), "error", None)
                yield line.custom_id, "errored", f"{getattr(error, 'type', 'error')}: {getattr(error, 'message', '')}"
            else:
                yield line.custom_id, result.type, None


class OpenAIBatches(Batches):
    """OpenAI's Batch API: the requests uploaded as a JSONL file (``purpose="batch"``), a
    batch on ``/v1/chat/completions``, its output and error files read when it is over."""

    provider = "openai"
    OVER = ("completed", "failed", "expired", "cancelled")

    def _create(self, todo: dict[str, dict[str, Any]]) -> str:
        lines = "".join(json.dumps({"custom_id": cid, "method": "POST", "url": "/v1/chat/completions",
                                    "body": body}) + "\n" for cid, body in todo.items())
        upload = self.client.files.create(file=("groundeval-batch.jsonl", lines.encode("utf-8")), purpose="batch")
        return self.client.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions",
                                          completion_window="24h").id

    def _status(self, batch_id: str) -> tuple[bool, str]:
        batch = self.client.batches.retrieve(batch_id)
        c = batch.request_counts
        counts = f": {c.completed} of {c.total} completed, {c.failed} failed" if c is not None else ""
        return batch.status in self.OVER, f"{batch.status}{counts}"

    def _read(self, batch_id: str) -> Iterable[tuple[str, str, Any]]:
        batch = self.client.batches.retrieve(batch_id)
        for file_id in (batch.output_file_id, batch.error_file_id):
            if not file_id:
                continue
            for raw in self.client.files.content(file_id).text.splitlines():
                if raw.strip():
                    yield _openai_line(json.loads(raw))


def _openai_line(line: dict[str, Any]) -> tuple[str, str, Any]:
    cid, response, error = line.get("custom_id"), line.get("response") or {}, line.get("error") or {}
    if response.get("status_code") == 200:
        return cid, "succeeded", response.get("body")
    code = error.get("code") or ""
    if code == "batch_expired":
        return cid, "expired", None
    if code == "batch_cancelled":
        return cid, "canceled", None
    body_error = (response.get("body") or {}).get("error") or {}
    what = body_error.get("message") or error.get("message") or f"HTTP {response.get('status_code')}"
    return cid, "errored", f"{body_error.get('type') or code or 'error'}: {what}"


def _answer_of(kind: str, payload: Any, batch_id: str) -> Any:
    if kind == "succeeded":
        return payload
    if kind == "expired":
        raise CallTimeout(f"the batch {batch_id} expired before this request was processed (24 hours)")
    if kind == "errored":
        raise BatchResultError(f"the batch {batch_id} reports this request errored: {payload}")
    if kind == "canceled":
        raise BatchResultError(f"the batch {batch_id} was canceled before this request was processed")
    raise BatchResultError(f"the batch {batch_id} ended without a result for this request")


def batch_call(batches: Batches, request: dict[str, Any]) -> Any:
    """The agent's side: the result of ``request`` (this repeat's) from the session's batch."""
    return batches.result(custom_id(request, current_repeat()), attempt_deadline())
