"""integrations/langsmith/ parts: the feedback it derives, example ids, the no-op without LangSmith, the
gate that holds, releases, drops and redacts a suite's runs, and the dataset/experiment set-up
against the REAL ``langsmith.Client`` talking to the fake LangSmith of
``test_langsmith_experiments.py`` (127.0.0.1; nothing leaves the host). The whole plugin
against it: tests/integrations/test_langsmith_experiments.py."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid

import pytest
from test_langsmith_experiments import FakeLangSmith
from urllib3.util.retry import Retry

from pytest_groundeval.store import redact
from pytest_groundeval.integrations.langsmith.common import (
    EXAMPLE_NAMESPACE,
    case_feedback,
    example_id,
    summary_feedback,
)
from pytest_groundeval.integrations.langsmith.worker import LangSmithWorker as LangSmith
from pytest_groundeval.integrations.langsmith.worker import _Gate
from pytest_groundeval.run.runner import NO_TRACE, UNOBSERVED

CANARY = "sk-canary-tracing-0123456789"

EXTRACTION_PASSED = {
    "case_id": "pat-ok", "task": "extraction", "outcome": "passed", "content_hash": "sha256:aaa",
    "score": {"passed": True, "reason": "exact match", "details": {}, "dimensions": {},
              "metrics": {"tp": 1, "fp": 0, "fn": 0, "precision": 1.0, "recall": 1.0, "f1": 1.0,
                          "exact_match": 1.0, "name_accuracy": 0.5}},
}
CODING_REASON = "rxnorm 197361 != expected 313782"
WRITE_FAILED = {
    "case_id": "acetaminophen-prn", "task": "write", "outcome": "failed", "content_hash": "sha256:bbb",
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


def test_case_feedback_rules() -> None:
    assert case_feedback({"outcome": "skipped", "score": None}) == []
    parse_failure = {"outcome": "failed", "error": None, "score": {
        "passed": False, "reason": "parse error: no JSON", "metrics": {"f1": 0.0, "fn": 1}, "dimensions": {}}}
    assert case_feedback(parse_failure, ("fn",)) == [("f1", 0.0, None), ("pass", 0.0, "parse error: no JSON")]
    assert case_feedback({"outcome": "error", "error": {"kind": "timeout", "message": "x"}}) == [
        ("pass", 0.0, "timeout: x")]
    got = {k: (v, c) for k, v, c in case_feedback(EXTRACTION_PASSED, ("tp", "fp", "fn"))}
    assert set(got) == {"precision", "recall", "f1", "exact_match", "name_accuracy", "pass"}
    assert got["name_accuracy"] == (0.5, None) and got["pass"] == (1.0, "exact match")
    # counts are the task's to declare: without them they are numbers like any other
    assert "tp" in [k for k, _, _ in case_feedback(EXTRACTION_PASSED)]
    got = {k: (v, c) for k, v, c in case_feedback(WRITE_FAILED)}
    assert set(got) == {"schema", "coding", "constraints", "safety", "pass"}
    # a dimension that is no metric is feedback all the same: 1 / 0, its reason the comment
    dims_only = {"outcome": "failed", "score": {"passed": False, "reason": "tone: curt", "metrics": {}, "dimensions": {
        "tone": {"passed": False, "reason": "curt", "checks": []}, "facts": {"passed": True, "reason": "ok"}}}}
    assert case_feedback(dims_only) == [("tone", 0.0, "curt"), ("facts", 1.0, "ok"), ("pass", 0.0, "tone: curt")]
    assert got["coding"] == (0.0, CODING_REASON) and got["schema"] == (1.0, "ok")
    assert got["pass"] == (0.0, f"coding: {CODING_REASON}")


def test_summary_feedback_is_the_suites_declared_scores_and_the_gate() -> None:
    """Kinds from the record's specs, not names: a ``count`` (raw tp/fp/fn sums, repeats) is no
    score, whatever it is called; a figure named like a count but declared a rate is one."""
    from pytest_groundeval.model import TaskSummary, metric, prf_specs
    from pytest_groundeval.run.repeats import REPEAT_SPECS

    specs = [*prf_specs("micro", ("tp", "fp", "fn")), metric("macro_f1", "mean"), metric("tp", "count"),
             metric("fp", "count"), metric("fn", "count"), metric("grounded", "rate", among="applicable"),
             metric("n_tp_rate", "rate"), *REPEAT_SPECS]
    figures = {"n_cases": 2, "n_passed": 1, "n_failed": 0, "n_errors": 1, "n_skipped": 0,
               "micro_precision": 0.5, "micro_recall": 1.0, "micro_f1": 0.6667, "macro_f1": 0.5,
               "macro_f1_ci95": [0.0, 1.0], "tp": 3, "fp": 3, "fn": 0, "grounded": 1.0, "grounded_n": 1,
               "grounded_ci95": [0.2, 1.0], "n_tp_rate": 0.25, "n_tp_rate_ci95": [0.0, 0.9], "repeats": 2,
               "pass_rate": 0.75, "pass_rate_ci95": [0.5, 1.0], "pass_hat_k": 0.5, "pass_hat_k_ci95": [0.1, 0.9],
               "pass_at_k": 1.0, "pass_at_k_ci95": [0.3, 1.0], "flaky": 0.5, "flaky_ci95": [0.1, 0.9]}
    summary = TaskSummary.build(figures, specs).model_dump(mode="json")  # as the record carries it
    record = {"summary": {"extraction": summary},
              "gate": {"passed": False, "thresholds": [{"metric": "extraction.f1", "passed": False}]}}
    got = summary_feedback(record, "extraction")
    assert got == [("micro_precision", 0.5, None), ("micro_recall", 1.0, None), ("micro_f1", 0.6667, None),
                   ("macro_f1", 0.5, None), ("grounded", 1.0, None), ("n_tp_rate", 0.25, None),
                   ("pass_rate", 0.75, None), ("pass_hat_k", 0.5, None), ("pass_at_k", 1.0, None),
                   ("flaky", 0.5, None), ("gate", 0.0, "missed: extraction.f1")]
    keys = {k for k, _, _ in got}
    assert not keys & {"tp", "fp", "fn", "repeats", "grounded_n", "n_cases", "n_errors"}
    # without a gate; a summary that declares nothing scores nothing (kinds are never guessed)
    write = TaskSummary.build({"n_cases": 1, "n_passed": 0, "n_failed": 1, "n_errors": 0, "n_skipped": 0,
                               "pass": 0.0, "pass_ci95": None}, [metric("pass", "rate")]).model_dump(mode="json")
    assert summary_feedback({"summary": {"write": write}, "gate": None}, "write") == [("pass", 0.0, None)]
    assert summary_feedback({"summary": {"write": {"n_cases": 1, "pass": 0.0}}}, "write") == []


def test_example_ids_are_uuid5_of_task_and_content_hash() -> None:
    a = example_id("extraction", "sha256:aaa")
    assert a == uuid.uuid5(EXAMPLE_NAMESPACE, "extraction\nsha256:aaa") and a.version == 5
    assert a == example_id("extraction", "sha256:aaa") != example_id("extraction", "sha256:aab")
    assert a != example_id("write", "sha256:aaa")


def test_without_langsmith_the_hook_is_a_no_op_that_imports_nothing() -> None:
    code = ("import sys\n"
            "from pytest_groundeval.run import runner\nfrom pytest_groundeval.pytest import evaluator as worker\n"
            "from pytest_groundeval.integrations.langsmith import common, controller, register, worker\n"
            "assert runner.UNOBSERVED.trace(object()) is runner.NO_TRACE\n"
            "assert common.api_key({}) is None and common.api_key({'LANGSMITH_API_KEY': 'k', 'LANGSMITH_TRACING': 'false'}) is None\n"
            "with runner.NO_TRACE.attempt():\n"
            "    pass\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('langsmith', 'langchain_core')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    assert UNOBSERVED.trace(object()) is NO_TRACE  # in this process too: the runner's default


class _Owner:
    enabled = True

    def __init__(self) -> None:
        self.errors: list[tuple[str, BaseException]] = []

    def _error(self, what: str, exc: BaseException) -> None:
        self.errors.append((what, exc))


class _Client:
    def __init__(self) -> None:
        self.ops: list[tuple] = []

    def create_run(self, **kw):
        self.ops.append(("create", kw))

    def update_run(self, run_id, **kw):
        self.ops.append(("update", run_id, kw))

    api_url = "http://example.test"


def test_the_gate_holds_then_releases_in_order_and_redacts(monkeypatch) -> None:
    monkeypatch.setenv("MY_SERVICE_API_KEY", CANARY)
    redact.configure()
    try:
        owner, client = _Owner(), _Client()
        gate = _Gate(owner, client)
        assert gate.api_url == "http://example.test"  # anything else: the client's
        gate.create_run(name="a", inputs={"prompt": f"key {CANARY}", "n": 1}, start_time=1)
        gate.update_run("a", outputs={"text": ("x", CANARY)}, error=f"boom {CANARY}")
        assert client.ops == []  # held: the suite's experiment does not exist yet
        gate.open()
        gate.create_run(name="b", inputs={"clean": True})
        assert [op[0] for op in client.ops] == ["create", "update", "create"]
        assert client.ops[0][1] == {"name": "a", "inputs": {"prompt": "key [redacted]", "n": 1}, "start_time": 1}
        assert client.ops[1][2] == {"outputs": {"text": ("x", "[redacted]")}, "error": "boom [redacted]"}
        assert CANARY not in repr(client.ops)
    finally:
        monkeypatch.delenv("MY_SERVICE_API_KEY")
        redact.configure()


def test_a_closed_gate_drops_what_it_held_and_what_comes() -> None:
    owner, client = _Owner(), _Client()
    gate = _Gate(owner, client)
    gate.create_run(name="a")
    gate.close()
    gate.open()  # too late: closed stays closed
    gate.create_run(name="b")
    assert client.ops == [] and owner.errors == []


def _session(url: str, run_id: str = "20260101T000000Z-abc123") -> LangSmith:
    return LangSmith(api_key="test", endpoint=url, run_id=run_id, prefix="baseline",
                     metadata={"groundeval_run_id": run_id, "record_path": "runs/x.json"},
                     client_kwargs={"retry_config": Retry(total=0, raise_on_status=False), "timeout_ms": 2000})


def _close(*sessions: LangSmith) -> None:
    for s in sessions:
        if s.client is not None:
            s.client.close(timeout=0)
        for logger, flt in s._filters:
            logger.removeFilter(flt)


@pytest.fixture
def server():
    s = FakeLangSmith()
    yield s
    s.close()


def test_two_processes_of_one_session_find_one_dataset_and_one_experiment(server, monkeypatch) -> None:
    for name in list(os.environ):
        if name.startswith(("LANGSMITH_", "LANGCHAIN_")):
            monkeypatch.delenv(name)
    a, b = _session(server.url), _session(server.url)
    other = _session(server.url, run_id="20260101T000001Z-def456")  # the next session
    try:
        assert all(s._ensure_client() is not None for s in (a, b, other))
        exp_a = a._set_up_suite("extraction")
        exp_b = b._set_up_suite("extraction")  # the dataset exists (read), the experiment too (409, read)
        exp_c = other._set_up_suite("extraction")
    finally:
        _close(a, b, other)
    assert exp_a == exp_b and exp_a.experiment == "baseline extraction 20260101T000000Z-abc123"
    assert len(server.datasets) == 1 and exp_a.dataset == "groundeval/extraction"
    assert len(server.projects) == 2 and exp_c.dataset_id == exp_a.dataset_id != exp_c.experiment_id
    project = server.projects[exp_a.experiment_id]
    assert project["reference_dataset_id"] == exp_a.dataset_id
    assert project["extra"]["metadata"] == {"groundeval_run_id": "20260101T000000Z-abc123",
                                            "record_path": "runs/x.json"}
    assert ("POST", "/sessions") in server.paths() and a.n_errors == b.n_errors == 0
    assert exp_a.url and exp_a.experiment_id in exp_a.url and exp_a.dataset_id in exp_a.url


def test_an_unreachable_langsmith_is_given_up_at_once(monkeypatch) -> None:
    for name in list(os.environ):
        if name.startswith(("LANGSMITH_", "LANGCHAIN_")):
            monkeypatch.delenv(name)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    import urllib3.util.connection

    # "at once" counted, not timed: every connection the client tries to that port, by the
    # client method that asked for it (its info call and the first suite's dataset read). A
    # retry with backoff, or the second suite tried, would ask the same method twice
    tries = []
    real = urllib3.util.connection.create_connection

    def counted(address, *args, **kwargs):
        if address[1] == port:
            frame = sys._getframe()
            while frame is not None and frame.f_code.co_name != "request_with_retries":
                frame = frame.f_back
            tries.append(frame.f_back.f_code.co_name if frame is not None else "?")
        return real(address, *args, **kwargs)

    monkeypatch.setattr(urllib3.util.connection, "create_connection", counted)
    ls = _session(f"http://127.0.0.1:{port}")
    try:
        ls._setup(["extraction", "write"])
        assert ls._jobs is not None and ls._jobs.drain(60)  # a limit, not a margin: drained is the event
    finally:
        _close(ls)
    assert tries and len(tries) == len(set(tries)) and tries.count("read_dataset") == 1, tries
    assert ls.gave_up and ls.n_errors == 1  # the first connection error; the second suite is not tried
    assert "LangSmithConnectionError" in ls.errors[0] and ls.experiments == {}
    assert ls.case_trace(object()) is NO_TRACE
    line = ls.warning_line()
    assert line and line.startswith("groundeval: LangSmith had 1 error(s) (gave up)") and "\n" not in line
