"""Secrets never leave a case: a canary key the agent echoes into its answer, an exception,
its printed and logged output, and what a server echoes back (an HTTP Basic header: the
base64 of ``user:password``) is absent from every sink: the record, the journal, the
terminal (captured output with ``--tb=short``, usage errors, the preflight), junitxml,
pytest's cache and the HTML report; so are URL credentials, and the base64 form of each.
(The model-call cache: tests/pytest/test_bad_inputs_corpus.py, through the same redaction step.)"""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import ZERO

from pytest_groundeval.store.redact import MARK, redact_json, redact_text, secret_values
from pytest_groundeval.pytest.evaluator import probe_url

CANARY = "sk-canary-0123456789abcdef"
OTHER_SECRETS = {"AWS_SECRET_ACCESS_KEY": "aws-canary-wJalrXUtnFEMI-K7MDENG", "MY_DB_PASSWORD": "db-canary-pw-4567",
                 "X_SECRET_VALUE": "xsv-canary-89abcd"}
URL_PASSWORD = "hunter2-canary"
HALLUCINATED = "Clarissa466_Feeney44_38f65650-9735-8541-322d-387417329eb2"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


# ---------------------------------------------------------------- the redaction step
def test_the_redaction_step():
    env = {"MY_SERVICE_API_KEY": CANARY, "GITHUB_TOKEN": "ghp_abcdefgh1234", "SHORT_API_KEY": "abc",
           "LANGSMITH_API_KEY": "lsv2_pt_zzzzzzzzzzzz", "HOME": "/root"}
    assert {CANARY, "ghp_abcdefgh1234", "lsv2_pt_zzzzzzzzzzzz"} <= set(secret_values(env))
    assert "abc" not in secret_values(env) and "/root" not in secret_values(env)
    assert redact_text(f"x {CANARY} y", env) == f"x {MARK} y"
    assert redact_text("see https://bob:hunter2@example.test/v1 now", env) == f"see https://{MARK}@example.test/v1 now"
    assert redact_text("https://example.test/v1 and /root", env) == "https://example.test/v1 and /root"
    assert redact_json(f'{{"a": "{CANARY}", "u": "http://u:p@h"}}'.encode(), env) == (
        f'{{"a": "{MARK}", "u": "http://{MARK}@h"}}'.encode())


@pytest.mark.parametrize("name", ["AWS_SECRET_ACCESS_KEY", "MY_DB_PASSWORD", "X_SECRET_VALUE", "GITHUB_TOKEN",
                                  "STRIPE_KEY", "aws_session_token", "AWS_ANYTHING", "DB_PASSWD", "PASSWORD",
                                  "SECRET_SAUCE"])
def test_each_secret_name_pattern_is_redacted(name):
    env = {name: "s3cr3t-value-0042", "HOME": "/root"}
    assert redact_text("x s3cr3t-value-0042 y", env) == f"x {MARK} y"


@pytest.mark.parametrize("name", ["KEYBOARD", "TOKENIZER_PATH", "PASSWORD_HINT_URL", "MY_KEYS", "PATH",
                                  "MONKEY", "NOSECRETS"])
def test_other_names_are_not_secrets(name):
    env = {name: "s3cr3t-value-0042"}
    assert redact_text("x s3cr3t-value-0042 y", env) == "x s3cr3t-value-0042 y"


def test_base64_forms_of_secrets_and_url_credentials_are_redacted_at_any_alignment():
    env = {"MY_SERVICE_API_KEY": CANARY, "SERVICE_URL": f"http://bob:{URL_PASSWORD}@127.0.0.1:9/echo"}
    # the Basic header a client sends for that URL, and the canary base64'd alone or inside more text
    for leaked in (b64(f"bob:{URL_PASSWORD}"), b64(CANARY), b64("Bearer " + CANARY), b64("x" + CANARY + "yz"),
                   b64("ab" + CANARY), base64.urlsafe_b64encode(("?" + CANARY).encode()).decode(),
                   b64(f"bob:{URL_PASSWORD}").rstrip("=")):
        red = redact_text(f"Authorization: Basic {leaked}", env)
        assert MARK in red and leaked not in red, leaked
    # the URL's password alone (8 characters or more), and the URL form
    assert redact_text(f"password {URL_PASSWORD}", env) == f"password {MARK}"
    assert redact_text(f"http://bob:{URL_PASSWORD}@h/x", env) == f"http://{MARK}@h/x"
    # a short password is redacted only in its URL and its base64 pair ("pw" stays in "passed")
    short = {"SERVICE_URL": "http://bob:pw@h/"}
    assert redact_text("a pw in passed text", short) == "a pw in passed text"
    assert redact_text(b64("bob:pw") + " and http://bob:pw@h/", short) == f"{MARK} and http://{MARK}@h/"
    # credentials from the command line (--model-base-url) count as the environment's do
    assert URL_PASSWORD in secret_values({}, [f"http://bob:{URL_PASSWORD}@127.0.0.1:1/v1"])
    # nothing else is touched
    other = "plain text, base64 " + b64("nothing secret here")
    assert redact_text(other, env) == other


class _Echo(BaseHTTPRequestHandler):
    """Echoes the Authorization header it got (as a careless server's error page would)."""

    def log_message(self, *args):
        pass

    def do_GET(self):  # noqa: N802
        body = f"forbidden; you sent Authorization: {self.headers.get('Authorization')}".encode()
        self.send_response(401 if self.path.endswith("/models") else 200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def echo_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_a_credentialed_base_url_passes_the_preflight_probe_when_a_server_answers(echo_server):
    # was: gaierror, urllib read "bob:hunter2-canary@127.0.0.1" as the host name
    assert probe_url(f"http://bob:{URL_PASSWORD}@127.0.0.1:{echo_server}/v1") is None
    assert probe_url(f"http://127.0.0.1:{echo_server}/v1") is None


# ---------------------------------------------------------------- every sink
LEAKY = '''
import base64, json, logging, os, sys, urllib.parse, urllib.request
from pytest_groundeval.tasks.extraction import active_medications

OTHERS = ("AWS_SECRET_ACCESS_KEY", "MY_DB_PASSWORD", "X_SECRET_VALUE")


def ask_the_service():
    """An HTTP Basic call to SERVICE_URL (user:password in the URL); the server echoes the header."""
    url = urllib.parse.urlsplit(os.environ["SERVICE_URL"])
    request = urllib.request.Request(urllib.parse.urlunsplit(url._replace(netloc=f"{url.hostname}:{url.port}")))
    request.add_header("Authorization", "Basic " + base64.b64encode(f"{url.username}:{url.password}".encode()).decode())
    return urllib.request.urlopen(request, timeout=30).read().decode()


class Leaky:
    """Prints, logs and answers every secret it has (and its key's base64) with what the
    service echoed; raises with them (and the credentialed URL) on the zero-medication
    patient; answers its key as a code on the patient HALLUCINATE_ON."""
    name = "leaky"
    def run(self, prompt):
        key = os.environ["MY_SERVICE_API_KEY"]
        others = " ".join(os.environ[n] for n in OTHERS)
        encoded = base64.b64encode(key.encode()).decode()
        print(f"calling the service with key {key} ({encoded}) and {others}")
        print(f"stderr says {key}", file=sys.stderr)
        logging.getLogger("leaky").warning("key %s, encoded %s, others %s", key, encoded, others)
        echoed = ask_the_service()
        bundle = json.JSONDecoder().raw_decode(prompt.split("Bundle:\\n", 1)[1])[0]
        truth = active_medications(bundle, "prompt")
        if not truth:
            raise RuntimeError(f"auth failed for key {key} at {os.environ['SERVICE_URL']}: {echoed} {others} {encoded}")
        patient = next(e["resource"]["id"] for e in bundle["entry"] if e["resource"]["resourceType"] == "Patient")
        if patient == os.environ["HALLUCINATE_ON"]:
            truth = truth + [{"code": key, "display": "leaked " + others}]
        return f"my key is {key} ({encoded}), the service said {echoed}, and {others}\\n" + json.dumps(
            {"active_medications": truth})
'''


def _leaks() -> dict[str, str]:
    """Each secret, and the base64 forms a sink could hold."""
    plain = {"canary": CANARY, **OTHER_SECRETS, "url password": URL_PASSWORD}
    found = dict(plain)
    found.update({f"base64 of {k}": b64(v) for k, v in plain.items()})
    found["base64 of user:password"] = b64(f"bob:{URL_PASSWORD}")
    return found


def _sinks(project: Path, result: pytest.RunResult) -> dict[str, str]:
    sinks = {"record": (project / "record.json").read_text(), "terminal": result.stdout.str() + result.stderr.str(),
             "junitxml": (project / "junit.xml").read_text(), "HTML report": (project / "report.html").read_text()}
    journal = project / "record.jsonl"
    if journal.exists():
        sinks["journal"] = journal.read_text()
    cache = [p for p in (project / ".pytest_cache").rglob("*") if p.is_file()]
    assert cache, "pytest's cache was not written"
    sinks["cache"] = "\n".join(p.read_text(errors="replace") for p in cache)
    return sinks


@pytest.mark.parametrize("extra", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_a_canary_key_reaches_no_sink(evalproject, monkeypatch, echo_server, extra):
    monkeypatch.setenv("MY_SERVICE_API_KEY", CANARY)
    for name, value in OTHER_SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("SERVICE_URL", f"http://bob:{URL_PASSWORD}@127.0.0.1:{echo_server}/echo")
    bundle = json.loads((evalproject.path / "data" / f"{HALLUCINATED}.json").read_text())
    monkeypatch.setenv("HALLUCINATE_ON", next(e["resource"]["id"] for e in bundle["entry"]
                                              if e["resource"]["resourceType"] == "Patient"))
    evalproject.makepyfile(leaky=LEAKY)
    result = evalproject.runpytest_subprocess(
        "--data-dir", "data", "--run-record", "record.json", "--agent=leaky:Leaky", "--maxfail", "2",
        "--tb=short", "-rA", "--junitxml", "junit.xml", "-o", "junit_logging=all", "--groundeval-html", "report.html",
        *extra, timeout=300)
    # ZERO raises, the hallucinated case fails: --maxfail 2 stops there (serial), so the journal is kept too
    assert result.ret in (pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.INTERRUPTED), result.stdout.str()[-3000:]
    sinks = _sinks(evalproject.path, result)
    if not extra:
        assert "journal" in sinks
    for sink, text in sinks.items():
        for what, leak in _leaks().items():
            assert leak not in text, f"{what} in the {sink}"
    record = sinks["record"]
    assert "auth failed for key [redacted]" in record and f"http://{MARK}@127.0.0.1" in record
    assert "you sent Authorization: Basic [redacted]" in record  # the server's echo of the Basic header
    # the captured output pytest shows (--tb=short, -rA) is there, redacted: stdout, stderr, log
    terminal = sinks["terminal"]
    assert "Captured stdout call" in terminal and f"calling the service with key {MARK} ({MARK}) and" in terminal
    assert f"stderr says {MARK}" in terminal and f"key {MARK}, encoded {MARK}" in terminal
    assert "auth failed for key [redacted]" in terminal
    assert f"calling the service with key {MARK}" in sinks["junitxml"]  # junit_logging=all: system-out
    cases = {c["case_id"]: c for c in json.loads(record)["cases"]}
    assert cases[ZERO]["error"]["kind"] == "agent"
    if not extra:  # the answer path too: the echoed header and every secret stored as the mark
        raw = cases[HALLUCINATED]["raw_output"]
        assert raw.startswith(f"my key is {MARK} ({MARK}), the service said ") and "Basic [redacted]" in raw
        assert f"and {MARK} {MARK} {MARK}\n" in raw
        assert f"'{MARK}'" in cases[HALLUCINATED]["score"]["reason"]


def test_the_preflight_error_shows_no_password(evalproject, monkeypatch):
    """--model-base-url with credentials where nothing answers: one usage error, the URL's
    credentials redacted (they were printed whole)."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with ThreadingHTTPServer(("127.0.0.1", 0), _Echo) as closed:
        port = closed.server_address[1]  # bound and closed again: nothing listens there
    url = f"http://bob:{URL_PASSWORD}@127.0.0.1:{port}/v1"
    result = evalproject.runpytest_subprocess("--data-dir", "data", "-p", "no:cacheprovider", "--agent=chat",
                                              "--model", "openai:scripted", "--model-base-url", url, "--tb=short")
    text = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"--model-base-url http://{MARK}@127.0.0.1:{port}/v1: nothing answers there" in text
    for what, leak in _leaks().items():
        assert leak not in text, what


# ---------------------------------------------------------------- names and shapes (issue 29)
@pytest.mark.parametrize("name", ["GITHUB_PAT", "MY_SERVICE_PAT", "GOOGLE_APPLICATION_CREDENTIALS", "CREDENTIALS",
                                  "db_credentials"])
def test_pat_and_credentials_names_are_secret(name):
    env = {name: "s3cr3t-value-0042", "PATH": "/usr/bin:/bin", "HOME": "/root"}
    assert redact_text("x s3cr3t-value-0042 y", env) == f"x {MARK} y"
    assert "/usr/bin:/bin" not in secret_values(env)  # PATH is not a PAT


KEY_LIKE = {
    "anthropic": "sk-ant-api03-" + "A1b2C3d4E5f6G7h8I9j0" * 3,
    "openai": "sk-proj-" + "Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2" * 2,
    "openai-old": "sk-" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6",
    "github": "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
    "github-fine": "github_pat_11AAAAAAA0" + "b" * 40,
    "aws": "AKIAIOSFODNN7EXAMPLE",
    "slack": "xoxb-123456789012-abcdefABCDEF",
}


@pytest.mark.parametrize("kind", KEY_LIKE)
def test_a_key_is_redacted_by_its_shape_under_any_name(kind):
    """A key that no variable name marks (read from a file, an unknown variable): redacted by shape."""
    key = KEY_LIKE[kind]
    env = {"HOME": "/root"}
    assert redact_text(f"the key is {key}.", env) == f"the key is {MARK}."
    assert redact_json(json.dumps({"answer": f"use {key}"}).encode(), env) == \
        json.dumps({"answer": f"use {MARK}"}).encode()


@pytest.mark.parametrize("text", ["task-0123456789abcdefghijkl", "sk-short", "risk-adjusted-dose-of-0123456789abc",
                                  "AKIA is not a key", "gho_short", "xoxb-1", "ask-ant-colony-0123456789abcdef0123"])
def test_ordinary_text_is_not_taken_for_a_key(text):
    assert redact_text(text, {"HOME": "/root"}) == text


def test_a_key_passed_to_warnings_warn_is_redacted_in_pytest_s_warnings_summary(tmp_path):
    import os
    import subprocess
    import sys

    secret = "wrn-canary-0123456789"
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_warns.py").write_text(
        "import os, warnings\n\n"
        "def test_warns():\n"
        "    warnings.warn('calling with ' + os.environ['MY_API_KEY'] + ' and ' + os.environ['SHAPE'])\n")
    shape = KEY_LIKE["anthropic"]
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rw", "test_warns.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "MY_API_KEY": secret, "SHAPE": shape})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "warnings summary" in out and "calling with" in out, out
    assert secret not in out and shape not in out and MARK in out


def test_the_prefilter_names_every_key_shape_s_start():
    """The check that skips the key-shape pattern (``redact._may_hold_key``) finds each form's
    literal start: every top-level alternative of the pattern begins with one of KEY_STARTS,
    and each of those is found in text and in bytes (a form it missed would go unredacted)."""
    import re

    from pytest_groundeval.store import redact

    forms = redact.KEY_SHAPES.pattern.split("|\\b")
    starts = [re.sub(r"^\\b|^\(\?:", "", f) for f in forms]
    for start in starts:
        literals = [lit for lit in redact.KEY_STARTS if start.startswith(lit)
                    or start.startswith(lit[:2] + "[")]  # (gh[pousr]_: the literal "gh")
        assert literals or start.startswith(("AKIA|ASIA",)), start
    for literal in redact.KEY_STARTS:
        assert redact._may_hold_key(f"a {literal} b") and redact._may_hold_key(f"a {literal} b".encode())
    assert not redact._may_hold_key("no key here") and not redact._may_hold_key(b"no key here")
