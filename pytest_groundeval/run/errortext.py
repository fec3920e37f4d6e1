"""How an agent's error reads in the record and the summary.

* :func:`error_line`: an exception in one line; an API error (an SDK's ``APIStatusError``: a
  ``status_code`` and a parsed ``body``) as its HTTP status and the message of its body (OpenAI's
  ``{"error": {"message": ...}}``, Anthropic's, FastAPI's ``detail``), not the whole body; a
  multi-line message on one line.
* :func:`signature`: the form errors are grouped by (the summary's failure lines, the
  consecutive-error stop): a message with its ids and numbers (a call id, a request id, a
  count, a port) replaced, so bodies that differ only by them are one error.
"""

from __future__ import annotations

import re
from typing import Any

MAX_LINE = 600  # characters of an error's message kept per attempt (the case's message: runner.MAX_MESSAGE)


def body_message(body: Any, depth: int = 0) -> str | None:
    """The message an API error's body carries, or None when it names none."""
    if depth > 3:
        return None
    if isinstance(body, str):
        return body or None
    if isinstance(body, dict):
        for key in ("error", "message", "detail", "msg"):
            found = body_message(body.get(key), depth + 1) if key in body else None
            if found:
                return found
    if isinstance(body, list) and body:  # FastAPI's validation "detail": a list of problems
        parts = [body_message(item, depth + 1) for item in body[:3]]
        return "; ".join(p for p in parts if p) or None
    return None


def one_line(text: str, limit: int = MAX_LINE) -> str:
    """``text`` with its whitespace runs (newlines included) as one space, cut at ``limit``."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit] + f" ... [{len(flat) - limit} more characters]"


def status_of(exc: BaseException) -> int | None:
    """The HTTP status of an API error (its own, or its response's), else None."""
    for obj in (exc, getattr(exc, "response", None)):
        code = getattr(obj, "status_code", None)
        if isinstance(code, int):
            return code
    return None


def message_of(exc: BaseException) -> str:
    """An exception's message in one line; an API error's: ``HTTP <status>: <its body's message>``."""
    status = status_of(exc)
    message = body_message(getattr(exc, "body", None)) if status is not None else None
    return one_line(str(exc) if message is None else f"HTTP {status}: {message}")


def error_line(exc: BaseException) -> str:
    """``Class: message`` in one line (:func:`message_of`)."""
    return f"{type(exc).__name__}: {message_of(exc)}"


_IDS = re.compile(
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"  # a UUID
    r"|\b[A-Za-z_-]*\d[\w-]*"  # a word with a digit in it: a number, call_ab12, chatcmpl-9x, req_01
    r"|\b[0-9a-f]{8,}\b", re.IGNORECASE)  # a hex id


def signature(message: str | None) -> str:
    """``message`` with ids and numbers as ``#``: errors that differ only by them group together."""
    return _IDS.sub("#", " ".join((message or "").split()))


__all__ = ["body_message", "error_line", "message_of", "one_line", "signature", "status_of"]
