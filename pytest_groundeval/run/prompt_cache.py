"""Anthropic prompt caching: the layout of a prompt that carries a patient's record, the
``cache_control`` breakpoints of a Messages request, and one writer per cached prefix.

A prompt that carries the patient's record starts with it (:func:`record_first`): the
record, then the task's instructions and the case's question. The same patient's record is
then the same leading text in every task that pastes it (extraction, reconciliation) and in
every repeat, so the Messages API's prompt cache can serve it: a prefix up to a
``cache_control`` breakpoint that was seen within its TTL (5 minutes, refreshed by each read)
is read at a tenth of the input price; the first request writes it at 1.25x. A breakpoint
whose prefix is shorter than the model's minimum cacheable length is neither written nor read
(billed as plain input), so marking a short prompt costs nothing.

Two breakpoints at most (the API allows four): the end of the record (shared by every case
of that patient) and the end of the user message (shared by a case's repeats).

A cache entry exists only once the request that writes it has been answered: requests for
the same prefix that start together all pay the write. :class:`PrefixGate` lets the first
request of a prefix go and holds the others of this process until it is answered (or failed).
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from typing import Any, Callable

RECORD_HEADER = "The patient's FHIR R4 Bundle (JSON) comes first; the task follows it.\n\nBundle:\n"
RECORD_END = "\n(End of the bundle.)\n\n"
EPHEMERAL = {"type": "ephemeral"}


def record_first(record: str, rest: str) -> str:
    """A prompt that carries ``record`` (a patient's bundle, as its file's text) before
    ``rest`` (the task's instructions and the case's question)."""
    return f"{RECORD_HEADER}{record}{RECORD_END}{rest}"


def split_record(prompt: str) -> tuple[str, str] | None:
    """``(record part, the rest)`` of a :func:`record_first` prompt (their concatenation is
    ``prompt``), else None. A record that itself holds the end line splits early: the text
    sent is the same, only less of it is cached."""
    if not prompt.startswith(RECORD_HEADER):
        return None
    at = prompt.find(RECORD_END, len(RECORD_HEADER))
    if at < 0:
        return None
    cut = at + len(RECORD_END)
    return prompt[:cut], prompt[cut:]


def user_content(prompt: str, cached: bool) -> str | list[dict[str, Any]]:
    """The user message's content: the prompt as it is (``cached`` off), or its text blocks
    with a breakpoint after the record (if it has one) and one at its end."""
    if not cached:
        return prompt
    parts = split_record(prompt)
    texts = [t for t in (parts or (prompt,)) if t]
    return [{"type": "text", "text": t, "cache_control": dict(EPHEMERAL)} for t in texts]


def prefix_key(model: str, prompt: str) -> str:
    """What a request's first cached prefix is (the record, else the whole prompt), for
    :class:`PrefixGate`."""
    parts = split_record(prompt)
    head = parts[0] if parts else prompt
    return hashlib.sha256(f"{model}\0{head}".encode("utf-8")).hexdigest()


class PrefixGate:
    """One request per prefix at a time until the first is answered: the first caller of a
    key goes at once; a caller of a key in flight waits for it (at most ``wait_s`` or until
    ``deadline``, a ``time.monotonic()`` value) and then goes, reading what it wrote. Keys
    answered stay open (a later request reads the cache, or rewrites it after its TTL)."""

    def __init__(self, wait_s: float = 600.0) -> None:
        self.wait_s = wait_s
        self._lock = threading.Lock()
        self._flight: dict[str, threading.Event] = {}
        self._done: set[str] = set()

    def run(self, key: str, fn: Callable[[], Any], deadline: float | None = None) -> Any:
        with self._lock:
            first = key not in self._done and key not in self._flight
            event = self._flight.setdefault(key, threading.Event()) if first else self._flight.get(key)
        if not first:
            if event is not None:
                limit = self.wait_s if deadline is None else max(0.0, min(self.wait_s, deadline - time.monotonic()))
                event.wait(limit)
            return fn()
        try:
            value = fn()
            with self._lock:
                self._done.add(key)
            return value
        finally:
            with self._lock:
                self._flight.pop(key, None)
            event.set()  # type: ignore[union-attr]


# a patient's key in case ids: the name parts up to the first 8-hex-digit id (Synthea's file
# names: "Given_Family_<uuid>"; the suites' other cases: "Given_Family_<uuid[:8]>_<what>")
_PATIENT = re.compile(r"^(.*?(?:^|_)[0-9a-f]{8})(?:[-_]|$)")


def patient_key(case_id: str) -> str:
    """The patient a case id names (the leading ``name_<8 hex digits>`` of the bundled
    suites' ids), else the case id itself. Only the order of items depends on it."""
    found = _PATIENT.match(case_id)
    return found.group(1) if found else case_id
