"""One redaction step for everything that leaves a case or the session: record, journal,
terminal (captured output, failure reports, usage errors, the preflight), junitxml, the
model-call cache, the HTML report, LangSmith.

Replaced by ``[redacted]``:

* the values (8 characters or more) of the environment's secret variables: names ending
  ``_KEY``, ``_TOKEN``, ``_PASSWORD`` / ``_PASSWD``, ``_PAT``, ``_CREDENTIALS`` (or just that
  word), holding ``_SECRET`` anywhere (or starting ``SECRET``), or starting ``AWS_``; matched
  without regard to case;
* whatever has the shape of a known key, wherever it comes from (a key in a file the agent
  read, under a variable name no rule knows): Anthropic ``sk-ant-...``, OpenAI ``sk-...``,
  GitHub ``ghp_`` / ``gho_`` / ``ghu_`` / ``ghs_`` / ``ghr_`` and ``github_pat_...``, AWS access
  key ids ``AKIA...`` / ``ASIA...``, Slack ``xoxb-`` / ``xoxp-`` / ``xoxa-`` / ``xoxr-`` /
  ``xoxs-`` tokens (:data:`KEY_SHAPES`);
* credentials inside URLs (``https://user:password@host`` → ``https://[redacted]@host``),
  anywhere in the text; and, for the URLs the session knows (``--model-base-url``, any
  environment value), their password (8 characters or more) on its own;
* the base64 forms of all of these: of each secret value and of each URL's ``user:password``
  (as an HTTP Basic ``Authorization`` header carries it), standard and URL-safe alphabets,
  padded or not, also inside a longer base64 text (each of the three alignments).

An agent (or the server it calls) that echoes a key into an answer, an exception or its
output cannot leak it through the run.
"""

from __future__ import annotations

import base64
import os
import re
from typing import Any, Iterable, Mapping
from urllib.parse import unquote

import orjson

MARK = "[redacted]"
SECRET_NAME = re.compile(r"(?:^|_)(?:KEY|TOKEN|PASSWORD|PASSWD|PAT|CREDENTIALS)$|(?:^|_)SECRET|^AWS_", re.IGNORECASE)
#: keys known by their shape (module docstring); long enough that no word or id matches
KEY_SHAPES = re.compile(
    r"\bsk-ant-[A-Za-z0-9_-]{16,}|\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}"
    r"|\bgh[pousr]_[A-Za-z0-9]{30,}|\bgithub_pat_[A-Za-z0-9_]{22,}"
    r"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b|\bxox[abprs]-[A-Za-z0-9-]{10,}")
KEY_SHAPES_BYTES = re.compile(KEY_SHAPES.pattern.encode())
URL_CREDENTIALS = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s:@\"']+:[^/\s@\"']+@")
URL_USERINFO = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://([^/\s:@\"']+):([^/\s@\"']+)@")
MIN_SECRET = 8  # shorter values would redact ordinary words ("pass" in "passed")
MIN_B64 = 8  # the shortest base64 text redacted (a stable run of characters, alignment removed)


#: the literals :data:`KEY_SHAPES`' forms start with: a text holding none of them holds no key
#: shape, known without running the pattern at every position (every case's record)
KEY_STARTS = ("sk-", "gh", "github_pat_", "AKIA", "ASIA", "xox")  # (gh: ghp_, gho_, ghu_, ghs_, ghr_)
_KEY_STARTS_BYTES = tuple(k.encode() for k in KEY_STARTS)


def _may_hold_key(text: str | bytes) -> bool:
    """Does ``text`` hold one of :data:`KEY_STARTS`? (``map`` over ``__contains__``: no
    generator frame on every record)"""
    return any(map(text.__contains__, _KEY_STARTS_BYTES if isinstance(text, bytes) else KEY_STARTS))


_session: tuple[list[str], list[bytes]] | None = None  # this session's secrets (configure())


def configure(environ: Mapping[str, str] = os.environ, urls: Iterable[str | None] = ()) -> None:
    """Read the secrets once for the session (pytest_configure), not once per case;
    ``urls``: URLs given on the command line (``--model-base-url``) whose credentials count too."""
    global _session
    values = secret_values(environ, urls)
    _session = (values, [orjson.dumps(v)[1:-1] for v in values])


def _b64_forms(raw: bytes) -> set[str]:
    """``raw``'s base64 text as it appears in any base64 text holding it: for each of the
    three alignments (0, 1 or 2 bytes before it), the characters that depend on ``raw``
    alone, in both alphabets. A character covers 6 bits: the first ``ceil(8k/6)`` also hold
    the bytes before, a last partial one the bytes after (or the padding)."""
    whole = base64.b64encode(raw).decode("ascii")  # on its own (an Authorization header): every character
    forms: set[str] = {whole, whole.replace("+", "-").replace("/", "_")} if len(whole) >= MIN_B64 else set()
    for k in range(3):
        enc = base64.b64encode(b"\0" * k + raw).decode("ascii")
        core = enc[-(-8 * k // 6):(8 * (k + len(raw))) // 6]
        if len(core) >= MIN_B64:
            forms.add(core)
            forms.add(core.replace("+", "-").replace("/", "_"))
    return forms


def url_credentials(text: str) -> list[tuple[str, str]]:
    """The ``(user, password)`` pairs of the URLs in ``text`` (percent-decoded)."""
    return [(unquote(m.group(1)), unquote(m.group(2))) for m in URL_USERINFO.finditer(text or "")]


def secret_values(environ: Mapping[str, str] | None = None, urls: Iterable[str | None] = ()) -> list[str]:
    """Every text to redact: the secret variables' values, the URL credentials of the
    environment and of ``urls``, and the base64 forms of both (longest first)."""
    if environ is None:
        if _session is not None:
            return _session[0]
        environ = os.environ
    plain = {v for k, v in environ.items() if SECRET_NAME.search(k) and len(v.strip()) >= MIN_SECRET}
    pairs = [pair for text in [*environ.values(), *(u for u in urls if u)] for pair in url_credentials(text)]
    plain |= {password for _, password in pairs if len(password) >= MIN_SECRET}
    values = set(plain)
    for value in plain:
        values |= _b64_forms(value.encode("utf-8"))
    for user, password in pairs:
        values |= _b64_forms(f"{user}:{password}".encode("utf-8"))
    return sorted(values, key=len, reverse=True)  # longest first: a key inside another is still found


def redact_text(text: str, environ: Mapping[str, str] | None = None) -> str:
    for value in secret_values(environ):
        if value in text:
            text = text.replace(value, MARK)
    if _may_hold_key(text):
        text = KEY_SHAPES.sub(MARK, text)
    return URL_CREDENTIALS.sub(lambda m: m.group(1) + MARK + "@", text) if "://" in text else text


def redact_json(blob: bytes, environ: Mapping[str, str] | None = None) -> bytes:
    """Redact serialised JSON (key values are plain ASCII, so they appear verbatim in it)."""
    if environ is None and _session is not None:
        encoded_values = _session[1]
    else:
        encoded_values = [orjson.dumps(v)[1:-1] for v in secret_values(environ)]
    for encoded in encoded_values:
        if encoded in blob:
            blob = blob.replace(encoded, MARK.encode())
    if _may_hold_key(blob):
        blob = KEY_SHAPES_BYTES.sub(MARK.encode(), blob)
    if b"://" in blob:
        blob = URL_CREDENTIALS.sub(lambda m: m.group(1) + MARK + "@", blob.decode("utf-8")).encode("utf-8")
    return blob


def redact_obj(value: Any, environ: Mapping[str, str] | None = None) -> Any:
    blob = orjson.dumps(value, default=str)
    red = redact_json(blob, environ)
    return value if red == blob else orjson.loads(red)
