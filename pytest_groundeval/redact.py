"""One redaction step for everything that leaves a case: record, journal, terminal, LangSmith.

Replaced by ``[redacted]``: the values of the environment's key variables (``*_API_KEY``,
``*_TOKEN``, ``*_SECRET``, ``LANGSMITH_*KEY``; values of 8 characters or more), and
credentials inside URLs (``https://user:password@host`` → ``https://[redacted]@host``).
An agent that echoes its key into an answer or an exception cannot leak it through the run.
"""

from __future__ import annotations

import os
import re
from typing import Any, Mapping

import orjson

MARK = "[redacted]"
SECRET_NAME = re.compile(r"(?:_API_KEY|_TOKEN|_SECRET|^LANGSMITH_\w*KEY)$")
URL_CREDENTIALS = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s:@\"']+:[^/\s@\"']+@")


_session: tuple[list[str], list[bytes]] | None = None  # this session's secrets (configure())


def configure(environ: Mapping[str, str] = os.environ) -> None:
    """Read the secrets once for the session (pytest_configure), not once per case."""
    global _session
    values = secret_values(environ)
    _session = (values, [orjson.dumps(v)[1:-1] for v in values])


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    if environ is None:
        if _session is not None:
            return _session[0]
        environ = os.environ
    values = {v for k, v in environ.items() if SECRET_NAME.search(k) and len(v.strip()) >= 8}
    return sorted(values, key=len, reverse=True)  # longest first: a key inside another is still found


def redact_text(text: str, environ: Mapping[str, str] | None = None) -> str:
    for value in secret_values(environ):
        text = text.replace(value, MARK)
    return URL_CREDENTIALS.sub(lambda m: m.group(1) + MARK + "@", text)


def redact_json(blob: bytes, environ: Mapping[str, str] | None = None) -> bytes:
    """Redact serialised JSON (key values are plain ASCII, so they appear verbatim in it)."""
    if environ is None and _session is not None:
        encoded_values = _session[1]
    else:
        encoded_values = [orjson.dumps(v)[1:-1] for v in secret_values(environ)]
    for encoded in encoded_values:
        if encoded in blob:
            blob = blob.replace(encoded, MARK.encode())
    if b"://" in blob:
        blob = URL_CREDENTIALS.sub(lambda m: m.group(1) + MARK + "@", blob.decode("utf-8")).encode("utf-8")
    return blob


def redact_obj(value: Any, environ: Mapping[str, str] | None = None) -> Any:
    blob = orjson.dumps(value, default=str)
    red = redact_json(blob, environ)
    return value if red == blob else orjson.loads(red)
