"""LangSmith the way LangSmith users expect it (integrations/langsmith/), end to end: pytest sessions in
fresh interpreters with ``LANGSMITH_API_KEY`` set and the REAL ``langsmith`` client talking to
a fake LangSmith API on 127.0.0.1 (a threaded HTTP server that keeps datasets, examples and
projects, and records every request). Nothing leaves the host.

Checked: one dataset per suite whose examples are the cases (ids the uuid5 of the content
hash, outputs the truth), upserted by a re-run; one experiment per session with its
reference dataset, the same for both xdist workers; each case a root run with its
reference example, the LangGraph agent's runs nested under it; feedback per metric,
dimension and ``pass``; experiment-level summary feedback; git sha and record path as
metadata; the URL in the terminal and the record; ``--rescore`` as a new experiment from the
stored outputs; a slow LangSmith holds the runs, not the cases; a dead one costs one warning
line and no time; a key the agent echoes reaches no request body."""

from __future__ import annotations

import email.parser
import email.policy
import gzip
import json
import os
import shutil
import socket
import threading
import time
import uuid
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from conftest import EVAL_FILE, SMALL_SET, SYNTHEA

from pytest_groundeval.store.record import validate_record
from pytest_groundeval.integrations.langsmith.common import example_id

TENANT_ID = "66666666-7777-4888-9999-000000000000"
INFO = {
    "version": "0.10.40",
    "instance_flags": {},
    "batch_ingest_config": {"use_multipart_endpoint": True, "size_limit": 100, "size_limit_bytes": None,
                            "scale_up_nthreads_limit": 16, "scale_up_qsize_trigger": 1000,
                            "scale_down_nempty_trigger": 4},
}


def _stamp() -> str:
    return datetime.now(timezone.utc).isoformat()


# ------------------------------------------------------------------ fake LangSmith
class FakeLangSmith:
    """A LangSmith API that keeps what the client creates (datasets, examples, projects),
    answers with what the client parses, refuses duplicates as LangSmith does (409), and
    records every request: method, path, query, headers, body (chunked and gzip undone)."""

    def __init__(self, info: dict | None = None, delays: dict[tuple[str, str], float] | None = None,
                 gates: dict[tuple[str, str], threading.Event] | None = None) -> None:
        self.info = INFO if info is None else info
        self.delays = delays or {}  # (method, path) -> seconds before answering
        self.gates = gates or {}  # (method, path) -> an event the answer waits for
        self.requests: list[dict[str, Any]] = []
        self.datasets: dict[str, dict] = {}
        self.examples: dict[str, dict] = {}
        self.projects: dict[str, dict] = {}
        self.versions: dict[str, list[str]] = {}  # dataset id -> its versions' timestamps (each change one)
        self.tags: dict[str, dict[str, str]] = {}  # dataset id -> tag -> the version it is on
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    out = b""
                    while True:
                        size = int(self.rfile.readline().strip().split(b";")[0], 16)
                        if not size:
                            self.rfile.readline()
                            return out
                        out += self.rfile.read(size)
                        self.rfile.readline()
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else b""

            def _handle(self) -> None:
                body = self._body()
                if self.headers.get("Content-Encoding", "").lower() == "gzip":
                    body = gzip.decompress(body)
                assert self.headers.get("Content-Encoding", "").lower() in ("", "gzip"), "zstd: not expected"
                url = urlsplit(self.path)
                query = parse_qs(url.query)
                started = time.monotonic()
                delay = fake.delays.get((self.command, url.path), 0.0)
                if delay:
                    time.sleep(delay)
                gate = fake.gates.get((self.command, url.path))
                if gate is not None:
                    gate.wait(GATE_LIMIT)
                status, payload = fake.answer(self.command, url.path, query, body)
                with fake.lock:
                    fake.requests.append({"method": self.command, "path": url.path, "query": query,
                                          "content_type": self.headers.get("Content-Type", ""), "body": body,
                                          "status": status, "t0": started, "t1": time.monotonic()})
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

    # -- the API --
    def answer(self, method: str, path: str, query: dict, body: bytes) -> tuple[int, Any]:
        with self.lock:
            return self._answer(method, path, query, body)

    def _answer(self, method: str, path: str, query: dict, body: bytes) -> tuple[int, Any]:
        one = {k: v[0] for k, v in query.items()}
        if method == "GET" and path == "/info":
            return 200, self.info
        if path == "/datasets":
            if method == "GET":
                found = [d for d in self.datasets.values() if "name" not in one or d["name"] == one["name"]]
                return 200, found[: int(one.get("limit", 100))]
            data = json.loads(body)
            if any(d["name"] == data["name"] for d in self.datasets.values()):
                return 409, {"detail": "Dataset with this name already exists."}
            ds = {"id": str(uuid.uuid4()), "name": data["name"], "description": data.get("description"),
                  "data_type": data.get("data_type", "kv"), "created_at": _stamp(), "modified_at": _stamp(),
                  "example_count": 0, "metadata": (data.get("extra") or {}).get("metadata")}
            self.datasets[ds["id"]] = ds
            self.versions[ds["id"]] = [ds["created_at"]]
            return 200, ds
        if path.startswith("/datasets/") and path.endswith("/version") and method == "GET":
            ds_id = path.split("/")[2]
            as_of = datetime.fromisoformat(one["as_of"])
            before = [v for v in self.versions.get(ds_id, []) if datetime.fromisoformat(v) <= as_of]
            if not before:
                return 404, {"detail": "no version at that time"}
            latest = max(before, key=datetime.fromisoformat)
            return 200, {"as_of": latest, "tags": sorted(t for t, v in self.tags.get(ds_id, {}).items() if v == latest)}
        if path.startswith("/datasets/") and path.endswith("/tags") and method == "PUT":
            ds_id, data = path.split("/")[2], json.loads(body)
            exact = [v for v in self.versions.get(ds_id, [])
                     if datetime.fromisoformat(v) == datetime.fromisoformat(data["as_of"])]
            if not exact:  # as LangSmith: a tag goes on an exact version
                return 404, {"detail": "no version of this dataset at that time"}
            self.tags.setdefault(ds_id, {})[data["tag"]] = exact[0]  # a tag on another version moves
            return 200, {}
        if path.startswith("/datasets/") and method == "GET":
            ds = self.datasets.get(path.rsplit("/", 1)[1])
            return (200, ds) if ds else (404, {"detail": "not found"})
        if path == "/examples" and method == "GET":
            ids = set(query.get("id", []))
            found = [e for e in self.examples.values()
                     if (not ids or e["id"] in ids) and ("dataset" not in one or e["dataset_id"] == one["dataset"])]
            offset, limit = int(one.get("offset", 0)), int(one.get("limit", 100))
            return 200, found[offset:offset + limit]
        if path == "/examples/bulk" and method == "POST":
            items = json.loads(body)
            if any(e["id"] in self.examples for e in items):
                return 409, {"detail": "example already exists"}
            stamp = _stamp()  # one request, one new version of the dataset
            for e in items:
                self.examples[e["id"]] = {"id": e["id"], "dataset_id": e["dataset_id"], "inputs": e.get("inputs"),
                                          "outputs": e.get("outputs"), "metadata": e.get("metadata"),
                                          "created_at": stamp, "modified_at": stamp}
                self.versions.setdefault(e["dataset_id"], []).append(stamp)
            return 200, [self.examples[e["id"]] for e in items]
        if path == "/examples/bulk" and method == "PATCH":
            items = json.loads(body)
            for e in items:
                cur = self.examples.get(e["id"])
                if cur is None:
                    return 404, {"detail": "no such example"}
                cur.update({k: e[k] for k in ("inputs", "outputs", "metadata") if k in e}, modified_at=_stamp())
                self.versions.setdefault(cur["dataset_id"], []).append(cur["modified_at"])
            return 200, {"message": f"{len(items)} examples updated", "count": len(items)}
        if path == "/sessions":
            if method == "GET":
                found = [p for p in self.projects.values() if "name" not in one or p["name"] == one["name"]]
                return 200, found[: int(one.get("limit", 100))]
            data = json.loads(body)
            if any(p["name"] == data["name"] for p in self.projects.values()):
                return 409, {"detail": "Session with this name already exists."}
            project = {"id": data.get("id") or str(uuid.uuid4()), "name": data["name"], "tenant_id": TENANT_ID,
                       "start_time": _stamp(), "extra": data.get("extra"), "description": data.get("description"),
                       "reference_dataset_id": data.get("reference_dataset_id"), "end_time": None,
                       "num_examples": data.get("num_examples"), "num_repetitions": data.get("num_repetitions")}
            self.projects[project["id"]] = project
            return 200, project
        if path.startswith("/sessions/"):
            project = self.projects.get(path.rsplit("/", 1)[1])
            if project is None:
                return 404, {"detail": "not found"}
            if method == "PATCH":
                data = json.loads(body)
                for key in ("name", "description", "extra", "end_time"):
                    if data.get(key) is not None:
                        project[key] = data[key]
            return 200, project
        if path == "/feedback" and method == "POST":
            return 200, json.loads(body)
        if path == "/v1/messages" and method == "POST":  # an Anthropic Messages API too, for --agent=claude
            return 200, {"id": "msg_" + uuid.uuid4().hex[:8], "type": "message", "role": "assistant",
                         "model": json.loads(body)["model"], "stop_reason": "end_turn", "stop_sequence": None,
                         "content": [{"type": "text", "text": '{"active_medications": []}'}],
                         "usage": {"input_tokens": 11, "output_tokens": 7}}
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
        """(runs by id: posts merged with their patches, feedback), whichever endpoint carried
        them (/runs/multipart, /runs/batch, /runs, /feedback)."""
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

    def wait_for(self, predicate: Any, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not predicate():
            time.sleep(0.05)


GATE_LIMIT = 300.0  # a held answer is released by an event; this only ends a hung test


def release_when_journaled(journal: Path, cases: int, gate: threading.Event) -> dict[str, bool]:
    """Set ``gate`` once ``journal`` holds ``cases`` finished cases (its header line, then a
    line per case). Returns a dict whose ``"journaled"`` is True if that is what released it
    (False: the limit ran out first, i.e. the cases were waiting on what the gate holds)."""
    state = {"journaled": False}

    def watch() -> None:
        deadline = time.monotonic() + GATE_LIMIT
        while time.monotonic() < deadline and not gate.is_set():
            try:
                lines = [ln for ln in journal.read_bytes().splitlines() if ln.strip()]
            except FileNotFoundError:
                lines = []
            if len(lines) - 1 >= cases:
                state["journaled"] = True
                break
            time.sleep(0.02)
        gate.set()

    threading.Thread(target=watch, daemon=True).start()
    return state


class BlackHole:
    """A port that accepts connections and answers nothing until ``gate`` is set, then drops
    every connection: a LangSmith that hangs."""

    def __init__(self, gate: threading.Event) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.accepted = 0
        self.gate = gate
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        self.sock.settimeout(0.05)
        while not self.gate.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            self.held.append(conn)
        self.close()

    def close(self) -> None:
        for conn in self.held:
            conn.close()
        self.held.clear()
        self.sock.close()


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


# ------------------------------------------------------------------ helpers
@pytest.fixture
def fake():
    made: list[FakeLangSmith] = []

    def make(**kw: Any) -> FakeLangSmith:
        made.append(FakeLangSmith(**kw))
        return made[-1]

    yield make
    for s in made:
        s.close()


def _env(monkeypatch: pytest.MonkeyPatch, endpoint: str) -> None:
    """LangSmith on, at ``endpoint``; nothing ambient (endpoints, projects, tracing) leaks in."""
    for name in list(os.environ):
        if name.startswith(("LANGSMITH_", "LANGCHAIN_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("LANGSMITH_API_KEY", "test")
    monkeypatch.setenv("LANGSMITH_ENDPOINT", endpoint)
    # langsmith's and anyio's own pytest plugins are not what is tested: left out (faster start)
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p no:pytest-retry -p no:langsmith_plugin -p no:anyio")


@pytest.fixture
def extraction(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_evals=EVAL_FILE)
    data = pytester.mkdir("data")
    for stem in SMALL_SET:
        shutil.copy(SYNTHEA / f"{stem}.json", data / f"{stem}.json")
    return pytester


def _run(p: pytest.Pytester, *args: str, record: str = "record.json") -> tuple[Any, dict, float]:
    t0 = time.monotonic()
    result = p.runpytest_subprocess("--data-dir", "data", "--run-record", record, "-p", "no:cacheprovider", *args)
    elapsed = time.monotonic() - t0
    rec = json.loads((p.path / record).read_text())
    assert validate_record(rec) == []
    return result, rec, elapsed


def _roots(runs: dict[str, dict]) -> dict[str, dict]:
    return {r["name"]: r for r in runs.values() if not r.get("parent_run_id")}


def _children(runs: dict[str, dict], root: dict) -> list[dict]:
    return [r for r in runs.values() if r.get("parent_run_id") and str(r.get("trace_id")) == root["id"]]


def _feedback_by_run(feedback: list[dict]) -> dict[str, dict[str, dict]]:
    out: dict[str, dict[str, dict]] = {}
    for f in feedback:
        if f.get("run_id"):
            out.setdefault(str(f["run_id"]), {})[f["key"]] = f
    return out


def _experiment_feedback(feedback: list[dict], project_id: str) -> dict[str, dict]:
    return {f["key"]: f for f in feedback if not f.get("run_id") and str(f.get("session_id")) == project_id}


COUNTS = {"tp", "fp", "fn"}  # the extraction scorer's raw counts: per-case metrics, not feedback


# ------------------------------------------------------------------ tests
def test_a_session_is_a_dataset_examples_an_experiment_root_runs_and_feedback(extraction, fake, monkeypatch):
    server = fake()
    _env(monkeypatch, server.url)
    result, rec, _ = _run(extraction)
    result.assert_outcomes(passed=len(SMALL_SET))
    out = result.stdout.str()

    # one dataset per suite; its examples are the cases: uuid5 of the content hash, the truth
    assert [d["name"] for d in server.datasets.values()] == ["groundeval/extraction"]
    dataset = next(iter(server.datasets.values()))
    cases = {c["case_id"]: c for c in rec["cases"]}
    expected_ids = {str(example_id("extraction", c["content_hash"])): c for c in cases.values()}
    assert set(server.examples) == set(expected_ids)
    for ex_id, ex in server.examples.items():
        case = expected_ids[ex_id]
        assert ex["dataset_id"] == dataset["id"]
        assert ex["outputs"] == {"truth": case["ground_truth"]}
        assert ex["metadata"]["case_id"] == case["case_id"] and ex["metadata"]["content_hash"] == case["content_hash"]
        assert "Bundle:" in ex["inputs"]["prompt"]

    # one experiment: its reference dataset, the git sha and the record path as metadata
    assert len(server.projects) == 1
    project = next(iter(server.projects.values()))
    assert project["reference_dataset_id"] == dataset["id"]
    assert project["name"] == f"baseline extraction {rec['run_id']}"
    meta = project["extra"]["metadata"]
    assert meta["record_path"] == "record.json" and meta["groundeval_run_id"] == rec["run_id"]
    assert "git_sha" in meta and meta["git_sha"] == rec["git_sha"]
    assert meta["gate_passed"] is None and meta["n_cases"] == len(SMALL_SET)  # updated at the end
    assert project["end_time"]
    # no --repeat: one run per example, as evaluate() says it; no git work tree: a block of nulls
    assert project["num_repetitions"] == 1 == meta["num_repetitions"] and project["num_examples"] == len(SMALL_SET)
    assert rec["git"] is None and meta["git"] == {"commit": None, "branch": None, "dirty": None}
    assert server.tags[dataset["id"]] == {f"suite:{meta['suite_version']}": meta["dataset_version"]}  # no git tags

    # each case a root run in the experiment, referencing its example
    runs, feedback = server.decoded()
    roots = _roots(runs)
    assert set(roots) == {f"extraction:{c}" for c in cases}
    for name, root in roots.items():
        case = cases[name.split(":", 1)[1]]
        assert root["session_name"] == project["name"] and root["trace_id"] == root["id"]
        assert root["reference_example_id"] == str(example_id("extraction", case["content_hash"]))
        assert root["outputs"]["output"] == case["raw_output"] and root["outputs"]["predicted"] == case["predicted"]
        assert root.get("end_time") and root["inputs"] == server.examples[root["reference_example_id"]]["inputs"]

    # feedback per metric (not raw counts) and dimension, plus pass; session_id the experiment
    by_run = _feedback_by_run(feedback)
    for name, root in roots.items():
        case = cases[name.split(":", 1)[1]]
        got = by_run[root["id"]]
        assert set(got) == (set(case["score"]["metrics"]) - COUNTS) | set(case["score"]["dimensions"]) | {"pass"}
        assert got["pass"]["score"] == 1
        for key, value in case["score"]["metrics"].items():
            if key not in COUNTS:
                assert got[key]["score"] == pytest.approx(value, abs=1e-4)
        assert all(str(f["session_id"]) == project["id"] and str(f["trace_id"]) == root["id"] for f in got.values())

    # the summary as experiment-level feedback
    summary = _experiment_feedback(feedback, project["id"])
    specs = rec["summary"]["extraction"]["specs"]
    scores = {n for n, spec in specs.items() if spec["kind"] != "count"}  # kinds as the record declares them
    assert set(summary) == scores and scores and not set(summary) & COUNTS
    assert summary["micro_f1"]["score"] == pytest.approx(rec["summary"]["extraction"]["micro_f1"], abs=1e-4)

    # the URL in the record and in the terminal; no warning
    ls = rec["langsmith"]
    assert ls["errors"] == 0 and ls["warning"] is None
    [exp] = ls["experiments"]
    assert exp["experiment_id"] == project["id"] and exp["dataset_id"] == dataset["id"]
    assert exp["url"] == f"http://localhost/o/{TENANT_ID}/datasets/{dataset['id']}/compare?selectedSessions={project['id']}"
    assert exp["url"] in out
    assert "LangSmith had" not in out

    # a re-run upserts: the same example ids, nothing created twice (the server would refuse)
    creates = server.paths().count(("POST", "/examples/bulk"))
    result2, rec2, _ = _run(extraction, record="record2.json")
    result2.assert_outcomes(passed=len(SMALL_SET))
    assert len(server.datasets) == 1 and set(server.examples) == set(expected_ids)
    assert server.paths().count(("POST", "/examples/bulk")) == creates  # nothing new to create
    assert ("PATCH", "/examples/bulk") not in server.paths()  # nothing changed
    assert len(server.projects) == 2  # a new experiment on the same dataset
    second = next(p for p in server.projects.values() if p["id"] != project["id"])
    assert second["reference_dataset_id"] == dataset["id"] and rec2["run_id"] in second["name"]
    assert "ERROR" not in result2.stdout.str() and "LangSmith had" not in result2.stdout.str()


def test_a_changed_example_is_updated_not_duplicated(extraction, fake, monkeypatch):
    server = fake()
    _env(monkeypatch, server.url)
    _, rec, _ = _run(extraction)
    some = next(iter(server.examples.values()))
    some["outputs"] = {"truth": "edited in the LangSmith app"}  # drifted from the case
    result, _, _ = _run(extraction, record="record2.json")
    result.assert_outcomes(passed=len(SMALL_SET))
    assert len(server.examples) == len(SMALL_SET)
    assert server.paths().count(("PATCH", "/examples/bulk")) == 1
    case = next(c for c in rec["cases"] if str(example_id("extraction", c["content_hash"])) == some["id"])
    assert some["outputs"] == {"truth": case["ground_truth"]}


def test_xdist_workers_share_one_experiment(extraction, fake, monkeypatch):
    server = fake()
    _env(monkeypatch, server.url)
    result, rec, _ = _run(extraction, "-n", "2")
    result.assert_outcomes(passed=len(SMALL_SET))
    assert len(server.datasets) == 1 and len(server.examples) == len(SMALL_SET)
    [project] = server.projects.values()  # two workers, one experiment (the second found the first's)
    assert project["reference_dataset_id"] == next(iter(server.datasets))
    assert server.paths().count(("POST", "/sessions")) >= 2  # each worker tried; one was refused (409)
    runs, feedback = server.decoded()
    roots = _roots(runs)
    assert len(roots) == len(SMALL_SET)
    assert {r["session_name"] for r in roots.values()} == {project["name"]}
    workers = {r["extra"]["metadata"].get("xdist_worker") for r in roots.values()}
    assert workers == {"gw0", "gw1"}, workers  # both posted, to the same experiment
    assert all(r.get("reference_example_id") in server.examples for r in roots.values())
    by_run = _feedback_by_run(feedback)
    assert all("pass" in by_run[r["id"]] for r in roots.values())
    assert _experiment_feedback(feedback, project["id"])  # sent once, by the controller
    [exp] = rec["langsmith"]["experiments"]
    assert exp["experiment_id"] == project["id"] and exp["url"] in result.stdout.str()
    assert project["extra"]["metadata"]["record_path"] == "record.json"


def test_the_claude_agents_calls_nest_under_each_case(extraction, fake, monkeypatch):
    """--agent=claude with LangSmith on: its SDK client is wrap_anthropic's, so each Messages
    call is an llm run under its case (the Messages API here is the fake's too)."""
    server = fake()
    _env(monkeypatch, server.url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-not-a-real-key")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    result, rec, _ = _run(extraction, "--agent=claude", "--model", "claude-test-model", "--no-preflight")  # (a made-up id)
    assert len(rec["cases"]) == len(SMALL_SET) and all(c["model"] == "claude-test-model" for c in rec["cases"])
    assert server.paths().count(("POST", "/v1/messages")) == len(SMALL_SET)
    runs, _ = server.decoded()
    roots = _roots(runs)
    assert len(roots) == len(SMALL_SET)
    for root in roots.values():
        [call] = _children(runs, root)
        assert call["run_type"] == "llm" and call["name"] == "ChatAnthropic"
        assert call["parent_run_id"] == root["id"] and call["dotted_order"].startswith(root["dotted_order"] + ".")
        assert call["extra"]["metadata"]["ls_model_name"] == "claude-test-model"
    assert b"sk-ant-test-not-a-real-key" not in server.all_bytes()


# the write suite, through the real LangGraph agent driven by a scripted model
WRITE_SELECTION = ("-k", "acetaminophen or lisinopril or metformin")


@pytest.fixture
def writeproject(pytester, monkeypatch):
    from test_write_suite import AGENT_MODULE, EVAL_FILE as WRITE_EVAL, WRITE_CASES

    pytester.makepyfile(test_write_evals=WRITE_EVAL, scripted_langgraph=AGENT_MODULE)
    monkeypatch.setenv("CASES_DIR", str(WRITE_CASES))
    pytester.mkdir("data")
    return pytester, WRITE_CASES


def test_langgraph_runs_nest_under_each_case_and_rescore_is_a_new_experiment(writeproject, fake, monkeypatch):
    p, cases_dir = writeproject
    server = fake()
    _env(monkeypatch, server.url)
    # (--agent-in-process: the graph's own runs nest under its case only in pytest's process)
    result, rec, _ = _run(p, "--write-cases", str(cases_dir), "--agent=scripted_langgraph:ScriptedLangGraph",
                          "--agent-in-process", *WRITE_SELECTION)
    n = len(rec["cases"])
    assert n >= 2 and all(c["outcome"] == "passed" for c in rec["cases"]), result.stdout.str()[-3000:]
    runs, feedback = server.decoded()
    roots = _roots(runs)
    assert len(roots) == n
    [project] = server.projects.values()
    for root in roots.values():
        assert root["session_name"] == project["name"]
        kids = _children(runs, root)
        for kid in kids:  # nested: same trace, dotted order under the root's, same experiment
            assert kid["dotted_order"].startswith(root["dotted_order"] + ".")
            assert kid["session_name"] == project["name"]
        names = {k["name"] for k in kids}
        types = {k["run_type"] for k in kids}
        assert {"lookup_medication_code", "build_medication_statement", "validate_medication_statement"} <= names
        assert {"llm", "tool", "chain"} <= types, types
        assert any(k["parent_run_id"] == root["id"] for k in kids)  # the graph itself, directly under the case
        got = _feedback_by_run(feedback)[root["id"]]
        assert {"schema", "coding", "constraints", "safety", "pass"} <= set(got)

    # --rescore: a new experiment from the stored outputs; no agent call, the transcript as children
    before = set(runs)
    result2, rec2, _ = _run(p, "--write-cases", str(cases_dir), "--rescore", "record.json", *WRITE_SELECTION,
                            record="rescored.json")
    assert all(c["rescored_from"] == rec["run_id"] for c in rec2["cases"]) and len(rec2["cases"]) == n
    assert len(server.projects) == 2 and len(server.examples) == n  # the same examples
    runs2, feedback2 = server.decoded()
    new_roots = {k: r for k, r in _roots(runs2).items() if r["id"] not in before}
    assert len(new_roots) == n
    second = next(p_ for p_ in server.projects.values() if p_["id"] != project["id"])
    by_run = _feedback_by_run(feedback2)
    for name, root in new_roots.items():
        case = next(c for c in rec2["cases"] if f"write:{c['case_id']}" == name)
        assert root["session_name"] == second["name"]
        assert root["reference_example_id"] == str(example_id("write", case["content_hash"]))
        assert root["outputs"]["output"] == case["raw_output"]
        assert root["extra"]["metadata"]["rescored_from"] == rec["run_id"]
        kids = _children(runs2, root)
        assert [k["name"] for k in sorted(kids, key=lambda k: k["dotted_order"]) if k["run_type"] == "tool"] == [
            "lookup_medication_code", "build_medication_statement", "validate_medication_statement"]
        assert all(k["parent_run_id"] == root["id"] for k in kids)
        assert by_run[root["id"]]["pass"]["score"] == 1
    assert rec2["langsmith"]["experiments"][0]["experiment_id"] == second["id"]


def test_a_slow_langsmith_holds_the_runs_not_the_cases(extraction, fake, monkeypatch):
    """Creating the experiment is held until every case is in the journal: the cases run
    meanwhile, their runs wait in memory and go after it (the experiment is made with its
    dataset, not by a run). An event, not a clock: had a case waited for LangSmith, the
    journal would never fill and only the test's limit would release the experiment."""
    gate = threading.Event()
    server = fake(gates={("POST", "/sessions"): gate})
    _env(monkeypatch, server.url)
    released = release_when_journaled(extraction.path / "record.jsonl", len(SMALL_SET), gate)
    result, rec, _ = _run(extraction)
    result.assert_outcomes(passed=len(SMALL_SET))
    assert released["journaled"]  # every case finished while the experiment was still being made
    created = next(r for r in server.requests if (r["method"], r["path"]) == ("POST", "/sessions"))
    first_run = min(r["t0"] for r in server.requests if r["path"] == "/runs/multipart")
    assert first_run >= created["t1"] - 0.01  # the held runs went after the experiment existed
    runs, _ = server.decoded()
    assert len(_roots(runs)) == len(SMALL_SET)
    [project] = server.projects.values()
    assert {r["session_name"] for r in _roots(runs).values()} == {project["name"]}
    assert project["reference_dataset_id"] == next(iter(server.datasets))
    assert rec["langsmith"]["errors"] == 0


def _dead_port() -> int:
    with socket.socket() as s:  # a port with nothing listening
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_dead_langsmith_costs_one_warning_line_and_no_time(extraction, monkeypatch):
    _env(monkeypatch, f"http://127.0.0.1:{_dead_port()}")
    # live logging on: the client's own warnings (failed info call, failed batches) would show here
    result, rec, t_dead = _run(extraction, "-o", "log_cli=true", "-o", "log_cli_level=WARNING")
    result.assert_outcomes(passed=len(SMALL_SET))
    lines = [line for line in (result.stdout.str() + result.stderr.str()).splitlines()
             if ("langsmith" in line.lower() or "Failed to" in line) and "pytest-of-" not in line]  # not tmp paths
    assert len(lines) == 1, lines
    assert lines[0].startswith("groundeval: LangSmith had") and "(gave up)" in lines[0]
    assert "unaffected" in lines[0] and "Connection" in lines[0]
    assert rec["langsmith"]["experiments"] == [] and rec["langsmith"]["errors"] >= 1
    assert rec["langsmith"]["warning"] == lines[0]


def test_a_hanging_langsmith_holds_no_case(extraction, monkeypatch):
    """"No time", without a clock: LangSmith accepts connections and answers nothing until
    every case is in the journal. Had any case waited on it, the journal would not fill and
    only the test's limit would let the run go on."""
    gate = threading.Event()
    hole = BlackHole(gate)
    _env(monkeypatch, hole.url)
    released = release_when_journaled(extraction.path / "record.jsonl", len(SMALL_SET), gate)
    try:
        result, rec, _ = _run(extraction)
    finally:
        gate.set()
    result.assert_outcomes(passed=len(SMALL_SET))
    assert hole.accepted >= 1  # the client did try, and was held
    assert released["journaled"]  # every case finished while LangSmith hung
    assert rec["langsmith"]["experiments"] == [] and rec["langsmith"]["errors"] >= 1


LEAKY = '''
import json, os
from langsmith import traceable
from pytest_groundeval.tasks.extraction import active_medications

@traceable(run_type="tool", name="lookup")
def lookup(query, key):
    return {"answer": "ok", "echo": key, "query": query}

class Leaky:
    """Echoes its key into its answers, a nested traced call's inputs and outputs, and an
    exception (with a credentialed URL) on the zero-medication patient."""
    name = "leaky"
    def run(self, prompt):
        key = os.environ["MY_SERVICE_API_KEY"]
        lookup(f"token={key}", key)
        bundle = json.JSONDecoder().raw_decode(prompt.split("Bundle:\\n", 1)[1])[0]
        truth = active_medications(bundle, "prompt")
        if not truth:
            raise RuntimeError(f"auth failed for key {key} at https://bob:hunter2@example.test/v1")
        return f"my key is {key}\\n" + json.dumps({"active_medications": truth})
'''


@pytest.mark.parametrize("extra", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_a_canary_key_reaches_no_langsmith_request(extraction, fake, monkeypatch, extra):
    from test_redaction import CANARY

    server = fake()
    _env(monkeypatch, server.url)
    monkeypatch.setenv("MY_SERVICE_API_KEY", CANARY)
    extraction.makepyfile(leaky=LEAKY)
    # (--agent-in-process: an agent's own traced runs nest under its case only in pytest's process;
    # in its agent host they are not traced at all)
    result, rec, _ = _run(extraction, "--agent=leaky:Leaky", "--agent-in-process", *extra)
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # the zero-medication case errors
    runs, feedback = server.decoded()
    roots = _roots(runs)
    assert len(roots) == len(SMALL_SET)
    lookups = [r for r in runs.values() if r.get("name") == "lookup"]
    assert len(lookups) == len(SMALL_SET) and all(r.get("parent_run_id") for r in lookups)  # nested, so sent
    assert any("[redacted]" in json.dumps(r.get("inputs")) for r in lookups)
    body = server.all_bytes()
    assert CANARY.encode() not in body and b"hunter2" not in body
    assert b"auth failed for key [redacted]" in body  # the errored case's root run error / pass comment
    errored = [r for r in roots.values() if r.get("error")]
    assert len(errored) == 1 and "[redacted]" in errored[0]["error"]


def test_langsmith_tracing_false_keeps_the_run_local_with_the_key_set(extraction, fake, monkeypatch):
    """A shell holding LANGSMITH_API_KEY for something else: LangSmith's own switch,
    LANGSMITH_TRACING=false, sends nothing."""
    server = fake()
    _env(monkeypatch, server.url)
    monkeypatch.setenv("LANGSMITH_TRACING", "false")
    result, rec, _ = _run(extraction)
    result.assert_outcomes(passed=len(SMALL_SET))
    assert server.paths() == [] and rec.get("langsmith") is None


# ------------------------------------------------------------------ like the SDK's evaluate()
SDK_EVALUATE = '''
import json, sys
from langsmith import Client
from langsmith.evaluation import evaluate

client = Client(api_url=sys.argv[1], api_key="test")
evaluate(lambda inputs: {"echo": inputs["prompt"][:10]}, data=sys.argv[2], num_repetitions=int(sys.argv[3]),
         client=client, experiment_prefix="sdk-evaluate")
client.flush()
'''


def _git(path: Any, *args: str) -> str:
    import subprocess

    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.test", *args], cwd=path,
                          check=True, capture_output=True, text=True).stdout.strip()


def _session_bodies(server: FakeLangSmith, project_id: str) -> tuple[dict, list[dict]]:
    """The POST /sessions body that made ``project_id`` and the PATCH bodies that changed it."""
    with server.lock:
        reqs = list(server.requests)
    made = [json.loads(r["body"]) for r in reqs if (r["method"], r["path"]) == ("POST", "/sessions")
            and r["status"] == 200 and json.loads(r["body"])["id"] == project_id]
    patches = [json.loads(r["body"]) for r in reqs if (r["method"], r["path"]) == ("PATCH", f"/sessions/{project_id}")]
    return made[0], patches


def test_under_repeat_the_experiment_is_made_and_ended_as_the_sdks_evaluate_makes_and_ends_it(
        extraction, fake, monkeypatch):
    """``--repeat 2`` in a git work tree: the experiment's ``num_repetitions`` (the create body
    and the metadata), its ``git`` block, ``dataset_version`` and ``dataset_splits`` are what
    the SDK's own ``evaluate(..., num_repetitions=2)`` sends for the same dataset from the same
    tree (run here against the same endpoint); the dataset version carries the pytest plugin's
    ``git:commit:`` / ``git:branch:`` tags and the suite version; the experiment-level feedback
    is the declared non-count figures (no tp/fp/fn sums, no ``repeats``)."""
    import subprocess
    import sys

    server = fake()
    _env(monkeypatch, server.url)
    # what the run and pytester write beside the project: ignored, so the tree is clean
    (extraction.path / ".gitignore").write_text("record*\n__pycache__/\n.groundeval/\nrunpytest-current\nstdout\nstderr\n")
    _git(extraction.path, "init", "-q", "-b", "feature/ls-repeat")
    _git(extraction.path, "add", "-A")
    _git(extraction.path, "commit", "-q", "-m", "the eval project")
    sha = _git(extraction.path, "rev-parse", "HEAD")
    result, rec, _ = _run(extraction, "--repeat", "2")
    result.assert_outcomes(passed=2 * len(SMALL_SET))
    assert rec["git"] == {"commit": sha, "branch": "feature/ls-repeat", "dirty": False}, _git(extraction.path, "status", "--porcelain")
    assert rec["git_sha"] == sha

    [project] = server.projects.values()
    made, patches = _session_bodies(server, project["id"])
    assert made["num_repetitions"] == 2 and made["num_examples"] == len(SMALL_SET)
    meta = project["extra"]["metadata"]
    assert meta["num_repetitions"] == 2
    assert meta["git"] == rec["git"] and meta["git_sha"] == sha
    assert meta["dataset_splits"] == ["base"]
    [dataset] = server.datasets.values()
    version = meta["dataset_version"]
    assert version is not None and version == max(server.versions[dataset["id"]], key=datetime.fromisoformat)
    assert meta["suite_version"] and len(meta["suite_version"]) == 12
    assert server.tags[dataset["id"]] == {f"git:commit:{sha}": version, "git:branch:feature/ls-repeat": version,
                                          f"suite:{meta['suite_version']}": version}

    # each repeat its own root run on the one example (LangSmith's repetitions of an example)
    runs, feedback = server.decoded()
    roots = _roots(runs)
    assert set(roots) == {f"extraction:{c}[r{k}]" for c in SMALL_SET for k in (1, 2)}
    for c in SMALL_SET:
        assert roots[f"extraction:{c}[r1]"]["reference_example_id"] == roots[f"extraction:{c}[r2]"]["reference_example_id"]

    # experiment-level feedback: the declared figures that are scores (kinds from the record's specs)
    summary = rec["summary"]["extraction"]
    counts = {n for n, s in summary["specs"].items() if s["kind"] == "count"}
    assert {"tp", "fp", "fn", "repeats"} <= counts
    got = _experiment_feedback(feedback, project["id"])
    assert rec["gate"] is None  # no thresholds: no gate feedback either
    assert set(got) == {n for n in summary["specs"] if n not in counts and isinstance(summary[n], (int, float))}
    assert not set(got) & (counts | {"n_cases", "n_passed"})
    assert {"micro_f1", "pass_rate", "pass_hat_k", "pass_hat_1", "pass_hat_2"} <= set(got)
    assert got["pass_hat_2"]["score"] == pytest.approx(summary["pass_hat_2"], abs=1e-6)

    # the SDK's own evaluate(), num_repetitions=2, on the same dataset from the same work tree
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LANGSMITH_", "LANGCHAIN_"))}
    proc = subprocess.run([sys.executable, "-c", SDK_EVALUATE, server.url, dataset["name"], "2"],  # no file in the tree
                          cwd=extraction.path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    [sdk] = [p for p in server.projects.values() if p["name"].startswith("sdk-evaluate")]
    sdk_made, _ = _session_bodies(server, sdk["id"])
    sdk_meta = sdk["extra"]["metadata"]
    assert sdk_meta["__ls_runner"] == "py_sdk_evaluate"  # it is the SDK's, ended as the SDK ends it
    assert made["num_repetitions"] == sdk_made["num_repetitions"] == 2
    assert meta["num_repetitions"] == sdk_meta["num_repetitions"]
    assert meta["git"] == {k: sdk_meta["git"][k] for k in ("commit", "branch", "dirty")}
    assert meta["dataset_splits"] == sdk_meta["dataset_splits"]
    assert datetime.fromisoformat(meta["dataset_version"]) == datetime.fromisoformat(sdk_meta["dataset_version"])


def test_the_experiments_git_block_is_the_records_even_when_the_run_dirties_the_tree(extraction, fake, monkeypatch):
    """The record and its journal land in the work tree (not ignored here; the run's lock file
    is): read at the end, the tree would be dirty while the experiment, made at the start, said
    clean. The block is read once (as the SDK reads its own once) and both carry it."""
    server = fake()
    _env(monkeypatch, server.url)
    (extraction.path / ".gitignore").write_text("*.lock\n__pycache__/\n.groundeval/\nrunpytest-current\nstdout\n"
                                                "stderr\n")
    _git(extraction.path, "init", "-q", "-b", "main")
    _git(extraction.path, "add", "-A")
    _git(extraction.path, "commit", "-q", "-m", "the eval project")
    result, rec, _ = _run(extraction)
    result.assert_outcomes(passed=len(SMALL_SET))
    assert "record.json" in _git(extraction.path, "status", "--porcelain")  # the run left the tree dirty
    [project] = server.projects.values()
    assert project["extra"]["metadata"]["git"] == rec["git"] == {
        "commit": _git(extraction.path, "rev-parse", "HEAD"), "branch": "main", "dirty": False}  # as it started
