"""tracing.py against a REAL ``langsmith.Client`` talking to a local fake LangSmith API
(a ThreadingHTTPServer on 127.0.0.1 that records every request). Nothing leaves the host."""

from __future__ import annotations

import email.parser
import email.policy
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from urllib3.util.retry import Retry

from pytest_groundeval.tracing import Tracer, case_feedback

TRUTH_MARKER = "TRUTH-MARKER-7f3a"
PROJECT_ID = "11111111-2222-4333-8444-555555555555"
TENANT_ID = "66666666-7777-4888-9999-000000000000"


# ------------------------------------------------------------------ fake LangSmith
class FakeLangSmith:
    """Records requests; answers what langsmith.Client expects (or 500 for everything)."""

    def __init__(self, info: dict | None = None, fail: bool = False) -> None:
        self.info = {} if info is None else info
        self.fail = fail
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                url = urlsplit(self.path)
                with fake.lock:
                    fake.requests.append({
                        "method": self.command, "path": url.path, "query": parse_qs(url.query),
                        "content_type": self.headers.get("Content-Type", ""), "body": body,
                    })
                status, payload = fake.answer(self.command, url.path, parse_qs(url.query), body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def answer(self, method: str, path: str, query: dict, body: bytes) -> tuple[int, Any]:
        if self.fail:
            return 500, {"detail": "internal error"}
        if method == "GET" and path == "/info":
            return 200, self.info
        project = {"id": PROJECT_ID, "tenant_id": TENANT_ID, "name": "groundeval",
                   "reference_dataset_id": None, "start_time": "2026-01-01T00:00:00Z"}
        if method == "GET" and path == "/sessions":
            return 200, []  # not found: the tracer creates it
        if method == "POST" and path == "/sessions":
            return 200, {**project, "name": json.loads(body).get("name")}
        if method == "POST" and path == "/feedback":
            return 200, {}
        return 202, {}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # -- what arrived, decoded --
    def paths(self) -> list[tuple[str, str]]:
        with self.lock:
            return [(r["method"], r["path"]) for r in self.requests]

    def all_bytes(self) -> bytes:
        with self.lock:
            return b"\n".join(r["body"] for r in self.requests)

    def decoded(self) -> tuple[dict[str, dict], list[dict]]:
        """(runs by id: post fields merged with their patches, feedback list), whatever
        endpoint carried them (/runs/multipart, /runs/batch, /runs, /feedback)."""
        runs: dict[str, dict] = {}
        feedback: list[dict] = []

        def add(op: str, run: dict) -> None:
            cur = runs.setdefault(str(run["id"]), {"_ops": []})
            cur["_ops"].append(op)
            for k, v in run.items():
                if v is not None:
                    cur[k] = v

        with self.lock:
            reqs = list(self.requests)
        for r in reqs:
            m, p, body = r["method"], r["path"], r["body"]
            if p == "/runs/multipart":
                parts: dict[str, dict] = {}
                for name, value in _multipart(r["content_type"], body):
                    kind, _, rest = name.partition(".")
                    run_id, _, field = rest.partition(".")
                    if kind == "feedback":
                        feedback.append(value)
                    elif kind in ("post", "patch"):
                        d = parts.setdefault(f"{kind}.{run_id}", {"id": run_id})
                        if field:
                            d[field] = value
                        else:
                            d.update(value)
                for key, run in parts.items():
                    add(key.split(".")[0], run)
            elif p == "/runs/batch":
                data = json.loads(body)
                for op in ("post", "patch"):
                    for run in data.get(op) or []:
                        add(op, run)
            elif p == "/runs" and m == "POST":
                add("post", json.loads(body))
            elif p.startswith("/runs/") and m == "PATCH":
                add("patch", {"id": p.rsplit("/", 1)[1], **json.loads(body)})
            elif p == "/feedback" and m == "POST":
                feedback.append(json.loads(body))
        return runs, feedback


def _multipart(content_type: str, body: bytes) -> list[tuple[str, Any]]:
    msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + body
    )
    out = []
    for part in msg.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        try:
            value = json.loads(payload)
        except ValueError:
            value = payload
        out.append((name, value))
    return out


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No ambient LangSmith/LangChain settings (endpoints, replicas, sampling) leak in."""
    import os

    for name in list(os.environ):
        if name.startswith(("LANGSMITH_", "LANGCHAIN_")) or name == "GROUNDEVAL_TRACE_TRUTH":
            monkeypatch.delenv(name)


@pytest.fixture
def servers():
    made: list[FakeLangSmith] = []

    def make(**kw: Any) -> FakeLangSmith:
        made.append(FakeLangSmith(**kw))
        return made[-1]

    yield make
    for s in made:
        s.close()


def _tracer(server: FakeLangSmith, **env: str) -> Tracer:
    environ = {"LANGSMITH_API_KEY": "lsv2-dummy", "LANGSMITH_ENDPOINT": server.url, **env}
    tracer = Tracer.from_env(environ, retry_config=Retry(total=0, raise_on_status=False), timeout_ms=2000)
    assert tracer is not None and tracer.client is not None, tracer and tracer.errors
    tracer.flush_timeout = 3.0
    return tracer


def _close(tracer: Tracer) -> None:
    """Stop the client's background threads, so none outlives the test (bounded)."""
    try:
        tracer.client.close(timeout=0)
    except Exception:
        pass
    deadline = time.monotonic() + 2.0
    for t in threading.enumerate():
        if "tracing_control_thread_func" in t.name and t is not threading.current_thread():
            t.join(timeout=max(0.0, deadline - time.monotonic()))


# ------------------------------------------------------------------ a small session
RUN_META = {"run_id": "20260101T000000Z-abc123", "agent": "baseline", "model": None,
            "options": {"extraction": {}}, "started_at": "2026-01-01T00:00:00.000Z"}

EXTRACTION_PASSED = {
    "case_id": "pat-ok", "task": "extraction", "outcome": "passed", "content_hash": "sha256:aaa",
    "ground_truth": [{"code": "1", "name": TRUTH_MARKER}], "predicted": [{"code": "1", "name": "x"}],
    "raw_output": '{"active_medications": []}', "error": None, "duration_s": 0.1,
    "usage": {"input_tokens": 10, "output_tokens": 5},
    "score": {"passed": True, "reason": "exact match", "details": {}, "dimensions": {},
              "metrics": {"tp": 1, "fp": 0, "fn": 0, "precision": 1.0, "recall": 1.0, "f1": 1.0,
                          "exact_match": 1.0, "name_accuracy": 0.5}},
}
CODING_REASON = "rxnorm 197361 != expected 313782"
WRITE_FAILED = {
    "case_id": "acetaminophen-prn", "task": "write", "outcome": "failed", "content_hash": "sha256:bbb",
    "ground_truth": {"expected": {"rxnorm_code": TRUTH_MARKER}}, "predicted": {"resourceType": "MedicationStatement"},
    "raw_output": "{...}", "error": None, "duration_s": 0.2, "usage": None,
    "transcript": [{"tool": "search_rxnorm", "args": {"q": "acetaminophen"}, "result": "313782"}], "steps": 1,
    "score": {
        "passed": False, "reason": f"coding: {CODING_REASON}", "details": {},
        "metrics": {"schema": 1.0, "coding": 0.0, "constraints": 1.0, "safety": 1.0, "pass": 0.0},
        "dimensions": {
            "schema": {"passed": True, "reason": "ok", "checks": []},
            "coding": {"passed": False, "reason": CODING_REASON, "checks": []},
            "constraints": {"passed": True, "reason": "ok", "checks": []},
            "safety": {"passed": True, "reason": "ok", "checks": []},
        },
    },
}
ERRORED = {
    "case_id": "pat-boom", "task": "extraction", "outcome": "error", "content_hash": "sha256:ccc",
    "ground_truth": [{"code": "2", "name": TRUTH_MARKER}], "predicted": None, "raw_output": None,
    "error": {"kind": "agent", "message": "agent 'baseline' raised TimeoutError: boom"}, "duration_s": 0.05,
    "usage": None, "score": None,
}
ERRORED_TEXT = "agent: agent 'baseline' raised TimeoutError: boom"
COUNTS = {"extraction": ("tp", "fp", "fn"), "write": ()}
RECORD = {
    "run_id": RUN_META["run_id"], "finished_at": "2026-01-01T00:00:05.000Z", "git_sha": None,
    "summary": {"extraction": {"n_cases": 2, "n_errors": 1, "micro_f1": 0.5, "micro_f1_ci95": [0.0, 1.0]},
                "write": {"n_cases": 1, "pass": 0.0, "coding": 0.0}},
    "gate": {"passed": False, "thresholds": [{"metric": "extraction.f1", "key": "micro_f1", "threshold": 0.9,
                                              "value": 0.5, "passed": False}]},
    "cases": [EXTRACTION_PASSED, WRITE_FAILED, ERRORED],
}


def _run_session(tracer: Tracer) -> float:
    t0 = time.monotonic()
    tracer.start(RUN_META)
    tracer.start(RUN_META)  # idempotent: the plugin may call it before each case
    for entry in (EXTRACTION_PASSED, WRITE_FAILED, ERRORED):
        tracer.log_case(entry, COUNTS[entry["task"]])
    tracer.finish(RECORD)
    return time.monotonic() - t0


# ------------------------------------------------------------------ tests
def test_from_env_needs_the_key(servers) -> None:
    assert Tracer.from_env({}) is None
    assert Tracer.from_env({"LANGSMITH_API_KEY": "  ", "LANGSMITH_ENDPOINT": "http://127.0.0.1:9"}) is None
    server = servers()
    tracer = _tracer(server)
    try:
        assert tracer.project == "groundeval" and not tracer.send_truth and tracer.errors == []
        assert tracer.client.api_url == server.url
    finally:
        _close(tracer)
    tracer = _tracer(server, LANGSMITH_PROJECT="my-evals", GROUNDEVAL_TRACE_TRUTH="1")
    try:
        assert tracer.project == "my-evals" and tracer.send_truth
    finally:
        _close(tracer)


def test_from_env_never_raises_for_a_bad_config() -> None:
    tracer = Tracer.from_env({"LANGSMITH_API_KEY": "k", "LANGSMITH_ENDPOINT": "http://127.0.0.1:9"},
                             no_such_client_option=1)
    assert tracer is not None and tracer.client is None and not tracer.enabled
    assert "could not create the LangSmith client" in tracer.errors[0]
    _run_session(tracer)  # a disabled tracer is a no-op
    assert tracer.warning_line() and "unaffected" in tracer.warning_line()


@pytest.mark.parametrize("info", [
    pytest.param({"version": "0.10.40", "batch_ingest_config": {
        "use_multipart_endpoint": True, "size_limit": 100, "size_limit_bytes": None,
        "scale_up_nthreads_limit": 16, "scale_up_qsize_trigger": 1000, "scale_down_nempty_trigger": 4,
    }}, id="multipart"),  # feedback rides /runs/multipart
    pytest.param({}, id="old-server"),  # no version: feedback goes by POST /feedback
])
def test_session_sends_runs_and_feedback(servers, info) -> None:
    server = servers(info=info)
    tracer = _tracer(server)
    try:
        elapsed = _run_session(tracer)
    finally:
        _close(tracer)
    assert tracer.errors == [], tracer.errors
    assert elapsed < 4
    runs, feedback = server.decoded()
    paths = set(server.paths())
    assert ("POST", "/runs/multipart") in paths
    if info:
        assert ("POST", "/feedback") not in paths
    else:
        assert ("POST", "/feedback") in paths

    by_name = {r.get("name"): r for r in runs.values()}
    parent = by_name["groundeval baseline"]
    assert parent["run_type"] == "chain" and parent["_ops"][0] == "post"  # the client may merge the patch in
    assert parent["session_name"] == "groundeval"
    assert parent["inputs"]["run_id"] == RUN_META["run_id"]
    assert parent["outputs"]["summary"] == RECORD["summary"] and parent["outputs"]["gate"] == RECORD["gate"]
    assert parent["outputs"]["outcomes"] == {"passed": 1, "failed": 1, "error": 1}
    assert parent.get("end_time")
    children = {n: r for n, r in by_name.items() if n != "groundeval baseline"}
    assert set(children) == {"extraction:pat-ok", "write:acetaminophen-prn", "extraction:pat-boom"}
    for child in children.values():
        assert child["parent_run_id"] == parent["id"] == child["trace_id"]
        assert child["dotted_order"].startswith(parent["dotted_order"] + ".")
        assert child.get("end_time")
    ok, write, boom = (children[n] for n in ("extraction:pat-ok", "write:acetaminophen-prn", "extraction:pat-boom"))
    assert ok["inputs"] == {"case_id": "pat-ok", "task": "extraction", "content_hash": "sha256:aaa"}
    assert ok["outputs"]["outcome"] == "passed" and ok["outputs"]["predicted"] == EXTRACTION_PASSED["predicted"]
    assert ok["extra"]["metadata"]["usage"] == {"input_tokens": 10, "output_tokens": 5}
    assert ok["extra"]["metadata"]["duration_s"] == 0.1
    assert write["outputs"]["transcript"] == WRITE_FAILED["transcript"]
    assert boom["error"] == ERRORED_TEXT and boom["outputs"]["outcome"] == "error"

    got = {(str(f["run_id"]), f["key"]): f for f in feedback}

    def keys(run: dict) -> set[str]:
        return {k for (rid, k) in got if rid == str(run["id"])}

    assert keys(ok) == {"precision", "recall", "f1", "exact_match", "name_accuracy", "pass"}
    assert got[(ok["id"], "name_accuracy")]["score"] == 0.5
    assert keys(write) == {"schema", "coding", "constraints", "safety", "pass"}
    assert got[(write["id"], "coding")]["score"] == 0
    assert got[(write["id"], "coding")]["comment"] == CODING_REASON
    assert got[(write["id"], "schema")]["score"] == 1
    assert got[(write["id"], "pass")]["score"] == 0
    assert keys(boom) == {"error"}
    assert got[(boom["id"], "error")]["score"] == 0 and got[(boom["id"], "error")]["comment"] == ERRORED_TEXT
    assert keys(parent) == {"extraction.micro_f1", "write.pass", "write.coding", "gate"}
    assert got[(parent["id"], "gate")]["score"] == 0
    assert all(str(f.get("session_id")) == PROJECT_ID for f in feedback)
    assert all(str(f.get("trace_id")) == parent["id"] for f in feedback)
    # ground truth stays local by default
    assert TRUTH_MARKER.encode() not in server.all_bytes()
    assert all("reference" not in r.get("outputs", {}) for r in children.values())
    assert tracer.n_runs == 4 and tracer.n_feedback == len(feedback) == 6 + 5 + 1 + 4


def test_truth_is_sent_only_when_asked(servers) -> None:
    server = servers(info={"version": "0.10.40"})
    tracer = _tracer(server, GROUNDEVAL_TRACE_TRUTH="1")
    try:
        _run_session(tracer)
    finally:
        _close(tracer)
    assert tracer.errors == []
    runs, _ = server.decoded()
    by_name = {r.get("name"): r for r in runs.values()}
    assert by_name["extraction:pat-ok"]["outputs"]["reference"] == EXTRACTION_PASSED["ground_truth"]
    assert "reference" not in by_name["groundeval baseline"].get("outputs", {})


def test_a_failing_server_never_fails_the_eval(servers) -> None:
    server = servers(fail=True)
    tracer = _tracer(server)
    try:
        elapsed = _run_session(tracer)  # must not raise
    finally:
        _close(tracer)
    assert elapsed < 4.5
    assert tracer.errors and tracer.n_errors >= len(tracer.errors)
    assert tracer.gave_up and tracer.n_errors >= tracer.max_errors  # it stopped trying
    assert any("resolve project" in e for e in tracer.errors)
    line = tracer.warning_line()
    assert line and line.startswith("groundeval: LangSmith tracing had") and "\n" not in line
    assert server.paths()  # it did try, and only this server


def test_an_unreachable_server_is_bounded() -> None:
    import socket

    with socket.socket() as s:  # a port with nothing listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tracer = Tracer.from_env({"LANGSMITH_API_KEY": "k", "LANGSMITH_ENDPOINT": f"http://127.0.0.1:{port}"},
                             retry_config=Retry(total=0, raise_on_status=False), timeout_ms=1000)
    tracer.flush_timeout = 2.0
    try:
        t0 = time.monotonic()
        _run_session(tracer)
        assert time.monotonic() - t0 < 4.5
    finally:
        _close(tracer)
    assert tracer.gave_up and tracer.n_feedback == 0  # gave up at the first connection error
    assert "resolve project: LangSmithConnectionError" in tracer.errors[0]


def test_case_feedback_rules() -> None:
    assert case_feedback({"outcome": "skipped", "score": None}) == []
    parse_failure = {"outcome": "failed", "error": None, "score": {
        "passed": False, "reason": "parse error: no JSON", "metrics": {"f1": 0.0, "fn": 1}, "dimensions": {}}}
    assert case_feedback(parse_failure, ("fn",)) == [("f1", 0.0, None), ("pass", 0.0, "parse error: no JSON")]
    assert case_feedback({"outcome": "error", "error": {"kind": "timeout", "message": "x"}}) == [
        ("error", 0.0, "timeout: x")]
    keys = [k for k, _, _ in case_feedback(EXTRACTION_PASSED, COUNTS["extraction"])]
    assert "tp" not in keys and "f1" in keys and keys[-1] == "pass"
    # counts are the task's to declare: without them they are numbers like any other
    assert "tp" in [k for k, _, _ in case_feedback(EXTRACTION_PASSED)]


def test_plugin_streams_a_pytest_session_to_langsmith(servers, pytester, monkeypatch) -> None:
    """Through pytest itself: with LANGSMITH_API_KEY set, the session's cases reach the endpoint,
    and the local record is written all the same."""
    import shutil

    from conftest import EVAL_FILE, SMALL_SET, SYNTHEA

    server = servers(info={"version": "0.10.0"})
    monkeypatch.setenv("LANGSMITH_API_KEY", "lsv2-dummy")
    monkeypatch.setenv("LANGSMITH_ENDPOINT", server.url)
    pytester.makepyfile(test_evals=EVAL_FILE)
    data = pytester.mkdir("data")
    for stem in SMALL_SET:
        shutil.copy(SYNTHEA / f"{stem}.json", data / f"{stem}.json")
    result = pytester.runpytest("--data-dir", "data", "--run-record", "record.json", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=len(SMALL_SET))
    assert (pytester.path / "record.json").exists()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        bodies = b"".join(r["body"] for r in server.requests)
        if all(stem.encode() in bodies for stem in SMALL_SET):
            break
        time.sleep(0.05)
    bodies = b"".join(r["body"] for r in server.requests)
    for stem in SMALL_SET:
        assert f"extraction:{stem}".encode() in bodies
    assert b"groundeval baseline" in bodies
