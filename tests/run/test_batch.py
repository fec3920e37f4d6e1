"""``--batch`` (issue 31 item 3): ``--agent=claude``'s cases as one Anthropic Message Batch,
through the real ``anthropic`` SDK against a loopback Messages API on 127.0.0.1 that
implements the batch endpoints (create, retrieve, JSONL results) and bills the requests
(``tests/anthropic_loopback.py``). One batch holds every case; each result is scored; its cost
is half the list price; an errored or expired request is an error of its kind; a session
killed after submitting resumes the same batch (no second batch); --max-cost admits requests
at the batch price; tool-using agents and -n are refused. ``--agent=chat`` on an OpenAI model
goes through OpenAI's Batch API (``tests/openai_loopback.py``: file upload, batch create and
retrieve, output and error files), with the same --max-cost and resume guarantees."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from anthropic_loopback import AnthropicLoopback, _Handler
from conftest import ROOT

pytest.importorskip("anthropic")

from pytest_groundeval.run.usage import cost_usd  # noqa: E402
from pytest_groundeval.store.journal import journal_batches  # noqa: E402
from pytest_groundeval.store.record import validate_record  # noqa: E402

PATIENTS = ("Adalberto_Hartmann_44ec4447-9e2c-4eb9-bd4f-0bdb416b806e",
            "Chiquita638_Vandervort697_269c9001-961e-5c04-c250-442ec7c276c5")
MODEL = "claude-sonnet-4-6"


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    data = pytester.mkdir("synthea")
    for stem in PATIENTS:
        shutil.copy(ROOT / "fixtures" / "synthea" / f"{stem}.json", data / f"{stem}.json")
    return pytester


def _args(p: pytest.Pytester, *extra: str) -> list[str]:
    return [str(ROOT / "evals"), "-m", "extraction", "--data-dir", "synthea", "--agent=claude", "--model", MODEL,
            "--repeat", "2", "--batch", "--batch-poll", "0.05", "--run-record", "record.json",
            "-p", "no:cacheprovider", "-p", "no:randomly", "--rootdir", str(p.path), *extra]


def _env(monkeypatch: pytest.MonkeyPatch, api: AnthropicLoopback) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", api.url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")


def _record(p: pytest.Pytester) -> dict[str, Any]:
    rec = json.loads((p.path / "record.json").read_text())
    assert validate_record(rec) == []
    return rec


def _paths(api: AnthropicLoopback) -> list[str]:
    return [path for path, _ in api.requests]


def test_every_case_goes_in_one_batch_and_costs_half(project, monkeypatch):
    with AnthropicLoopback() as api:
        _env(monkeypatch, api)
        result = project.runpytest_subprocess(*_args(project))
        result.assert_outcomes(passed=4)
    assert api.batch_creations == 1 and "/v1/messages" not in _paths(api)  # no direct call
    (body,) = [b for path, b in api.requests if path == "/v1/messages/batches"]
    assert len(body["requests"]) == 4 and len({r["custom_id"] for r in body["requests"]}) == 4  # 2 cases x 2 repeats
    assert all(r["params"]["model"] == MODEL for r in body["requests"])
    result.stdout.fnmatch_lines(["*groundeval: batch msgbatch_* submitted: 4 requests*",
                                 "*groundeval: batch msgbatch_* ended: 0 processing, 4 succeeded*"])
    rec = _record(project)
    assert rec["options"]["batch"] is True
    for c in rec["cases"]:
        assert c["outcome"] == "passed" and c["usage"]["batch_calls"] == 1
        direct = cost_usd(MODEL, {k: v for k, v in c["usage"].items() if k != "batch_calls"})
        assert c["cost_usd"] == pytest.approx(direct / 2) and c["cost_usd"] > 0
    assert not (project.path / "record.jsonl").exists()  # a complete record replaced its journal


BUNDLES = [(ROOT / "fixtures" / "synthea" / f"{stem}.json").read_text() for stem in PATIENTS]


def _patient(params: dict[str, Any]) -> int:
    """Which patient's bundle the request carries."""
    text = "".join(b["text"] for b in params["messages"][0]["content"])
    return next(i for i, bundle in enumerate(BUNDLES) if bundle in text)


def test_an_errored_request_is_an_agent_error_and_an_expired_one_a_timeout(project, monkeypatch):
    with AnthropicLoopback(outcome=lambda cid, params: ("errored", "expired")[_patient(params)]) as api:
        _env(monkeypatch, api)
        project.runpytest_subprocess(*_args(project, "--agent-retries", "0")).assert_outcomes(errors=4)
    rec = _record(project)
    kinds = {(c["case_id"], c["repeat"]): c["error"]["kind"] for c in rec["cases"]}
    assert kinds == {(PATIENTS[0], 1): "agent", (PATIENTS[0], 2): "agent",
                     (PATIENTS[1], 1): "timeout", (PATIENTS[1], 2): "timeout"}
    errored = next(c for c in rec["cases"] if c["error"]["kind"] == "agent")
    assert "errored: invalid_request_error: max_tokens: too large" in errored["error"]["message"]
    assert all(c["cost_usd"] in (None, 0) for c in rec["cases"])
    assert api.batch_creations == 1


def _watch_polls(monkeypatch: pytest.MonkeyPatch, handler: Any, marker: str) -> threading.Event:
    """Set once a loopback's batch is retrieved (a GET whose path holds ``marker``)."""
    polled = threading.Event()
    handle = handler.do_GET

    def watch(self: Any) -> None:
        handle(self)
        if marker in self.path:
            polled.set()  # the journal has the batch id: it is written before the first poll

    monkeypatch.setattr(handler, "do_GET", watch)
    return polled


def _kill_once_polled(p: pytest.Pytester, argv: list[str], polled: threading.Event) -> None:
    """A session in a process of its own, killed (SIGKILL, no clean-up) once its batch is polled."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-m", "pytest", *argv], cwd=p.path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        assert polled.wait(120), "the batch was never polled"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_a_session_killed_after_submitting_resumes_the_same_batch(project, monkeypatch):
    polled = _watch_polls(monkeypatch, _Handler, "/v1/messages/batches/")
    with AnthropicLoopback(hold=True) as api:
        _env(monkeypatch, api)
        _kill_once_polled(project, _args(project), polled)
        assert api.batch_creations == 1 and not (project.path / "record.json").exists()
        (line,) = journal_batches(project.path / "record.jsonl")  # what a killed session leaves
        (body,) = [b for path, b in api.requests if path == "/v1/messages/batches"]
        assert sorted(line["custom_ids"]) == sorted(r["custom_id"] for r in body["requests"])
        api.release.set()  # the batch ends (the API kept processing while nobody watched)
        result = project.runpytest_subprocess(*_args(project, "--resume", "record.jsonl", "--run-record",
                                                     "resumed.json"))
        result.assert_outcomes(passed=4)
    assert api.batch_creations == 1 and "/v1/messages" not in _paths(api)  # nothing paid twice
    rec = json.loads((project.path / "resumed.json").read_text())
    assert validate_record(rec) == [] and rec["options"]["resumed_from"] and len(rec["cases"]) == 4
    assert all(c["outcome"] == "passed" and c["usage"]["batch_calls"] == 1 for c in rec["cases"])
    assert journal_batches(project.path / "record.jsonl")[0]["id"] == line["id"]


def _room_for_two(bodies: list[dict[str, Any]], input_rate: float, output_rate: float) -> float:
    """A --max-cost with room for the two cheapest requests at the batch price but not at the
    list price. Each request's list price is estimated here by hand as ``batching.estimate``
    documents it (its body's characters / 4 at the input rate, its ``max_tokens`` at the
    output rate, USD per million tokens), not by calling it: a reservation at the list price
    must fail the test."""
    listed = sorted((len(json.dumps(b)) / 4 * input_rate + b.get("max_tokens", 0) * output_rate) / 1e6
                    for b in bodies)
    batch = [c / 2 for c in listed]
    cap = batch[0] + batch[1] + 0.5 * batch[2]  # one more request at the list price would not fit
    assert listed[0] + listed[1] > cap and batch[0] > 0
    return cap


def test_max_cost_admits_requests_at_the_batch_price_and_the_rest_are_budget_not_run(project, monkeypatch):
    """The cases --max-cost leaves out of the batch are recorded as any case it keeps from
    running: error kind ``budget``, not run (a pytest skip), no call and no attempt, and the
    terminal's "not run: 2 budget"."""
    with AnthropicLoopback() as api:
        _env(monkeypatch, api)
        probe = project.runpytest_subprocess(*_args(project))
        probe.assert_outcomes(passed=4)
        (body,) = [b for path, b in api.requests if path == "/v1/messages/batches"]
        cap = _room_for_two([r["params"] for r in body["requests"]], 3.0, 15.0)  # claude-sonnet-4-6's list price
        result = project.runpytest_subprocess(*_args(project, "--max-cost", f"{cap:.8f}"))
    second = [b for path, b in api.requests if path == "/v1/messages/batches"][1]
    assert len(second["requests"]) == 2 and "/v1/messages" not in _paths(api)  # nothing called directly
    rec = _record(project)
    refused = [c for c in rec["cases"] if c["outcome"] == "error"]
    assert len(refused) == 2 and all("--max-cost" in c["error"]["message"] for c in refused)
    assert all(c["error"]["kind"] == "budget" and c["error"]["not_run"] for c in refused), refused
    assert all(c["attempts"] == 0 and c["agent"] is None for c in refused)  # its agent was never asked
    assert sum(c["outcome"] == "passed" for c in rec["cases"]) == 2, result.stdout.str()[-2000:]
    assert rec["budget"]["stopped"] and rec["budget"]["cases_not_run"] == 2
    result.assert_outcomes(passed=2, skipped=2)  # a case not run is pytest's skip
    result.stdout.fnmatch_lines(["*extraction: 4 cases, 2 passed, 0 failed, 0 errors, 2 not run*",
                                 "*not run: 2 budget"])


@pytest.mark.parametrize("args, says", [
    (("--agent=langgraph", "--model", "anthropic:claude-sonnet-4-6"), "--agent=claude (Message Batches) or --agent=chat on an OpenAI model"),
    (("--agent=claude", "-n", "2"), "drop -n"),
])
def test_batch_refuses_tool_using_agents_and_xdist(project, monkeypatch, args, says):
    pytest.importorskip("xdist")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    argv = [a for a in _args(project) if a not in ("--agent=claude",)]
    result = project.runpytest_subprocess(*argv, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--batch*{says}*"])


# ------------------------------------------------------------------ --agent=chat on OpenAI's Batch API
def _openai_args(p: pytest.Pytester, api: Any, *extra: str, model: str = "openai:gpt-test") -> list[str]:
    argv = [a for a in _args(p) if a not in ("--agent=claude", MODEL, "--model")]
    return [*argv, "--agent=chat", "--model", model, "--model-base-url", api.url, *extra]


def test_chat_on_an_openai_model_goes_through_the_batch_api(project, monkeypatch):
    pytest.importorskip("langchain_openai")
    from openai_loopback import OpenAILoopback

    def outcome(cid: str, body: dict[str, Any]) -> str:
        text = body["messages"][-1]["content"]
        return "succeeded" if BUNDLES[0] in text else "expired"

    with OpenAILoopback(outcome=outcome) as api:
        result = project.runpytest_subprocess(*_openai_args(project, api, "--agent-retries", "0"))
        result.assert_outcomes(passed=2, errors=2)
    assert api.batch_creations == 1 and "/v1/chat/completions" not in api.requests  # no direct call
    assert api.requests.count("/v1/files") == 1
    result.stdout.fnmatch_lines(["*groundeval: batch batch_* submitted: 4 requests*",
                                 "*groundeval: batch batch_* completed: 2 of 4 completed, 2 failed*"])
    rec = _record(project)
    kinds = {(c["case_id"], c["repeat"]): (c["outcome"], (c["error"] or {}).get("kind")) for c in rec["cases"]}
    assert kinds == {(PATIENTS[0], 1): ("passed", None), (PATIENTS[0], 2): ("passed", None),
                     (PATIENTS[1], 1): ("error", "timeout"), (PATIENTS[1], 2): ("error", "timeout")}
    passed = next(c for c in rec["cases"] if c["outcome"] == "passed")
    assert passed["usage"]["batch_calls"] == 1
    assert passed["usage"]["input_tokens"] + passed["usage"].get("cache_read_input_tokens", 0) > 1000


def test_a_session_killed_after_submitting_an_openai_batch_resumes_the_same_batch(project, monkeypatch):
    pytest.importorskip("langchain_openai")
    import openai_loopback
    from openai_loopback import OpenAILoopback

    polled = _watch_polls(monkeypatch, openai_loopback._Handler, "/v1/batches/")
    with OpenAILoopback(hold=True) as api:
        _kill_once_polled(project, _openai_args(project, api), polled)
        assert api.batch_creations == 1 and not (project.path / "record.json").exists()
        (line,) = journal_batches(project.path / "record.jsonl")  # what a killed session leaves
        (upload,) = api.uploads
        assert line["provider"] == "openai" and sorted(line["custom_ids"]) == sorted(r["custom_id"] for r in upload)
        api.release.set()  # the batch completes (the API kept processing while nobody watched)
        result = project.runpytest_subprocess(*_openai_args(project, api, "--resume", "record.jsonl",
                                                            "--run-record", "resumed.json"))
        result.assert_outcomes(passed=4)
    # nothing paid twice: no second upload, no second batch, no direct call
    assert api.batch_creations == 1 and api.requests.count("/v1/files") == 1 and len(api.uploads) == 1
    assert "/v1/chat/completions" not in api.requests
    rec = json.loads((project.path / "resumed.json").read_text())
    assert validate_record(rec) == [] and rec["options"]["resumed_from"] and len(rec["cases"]) == 4
    assert all(c["outcome"] == "passed" and c["usage"]["batch_calls"] == 1 for c in rec["cases"])
    assert journal_batches(project.path / "record.jsonl")[0]["id"] == line["id"]


OPENAI_MODEL = "openai:gpt-4.1-mini"  # priced: $0.40 in, $1.60 out per million tokens (prices.json, openai)


def test_max_cost_on_an_openai_batch_admits_requests_at_the_batch_price_and_the_rest_are_budget_not_run(
        project, monkeypatch):
    """As on Anthropic's batches: the requests uploaded are those that fit --max-cost at half
    the list price; the cases left out are budget, not run (a pytest skip), no call, no attempt."""
    pytest.importorskip("langchain_openai")
    from openai_loopback import OpenAILoopback

    with OpenAILoopback() as api:
        probe = project.runpytest_subprocess(*_openai_args(project, api, model=OPENAI_MODEL))
        probe.assert_outcomes(passed=4)
        (everything,) = api.uploads
        cap = _room_for_two([line["body"] for line in everything], 0.40, 1.60)
        result = project.runpytest_subprocess(*_openai_args(project, api, "--max-cost", f"{cap:.8f}",
                                                            model=OPENAI_MODEL))
    assert api.batch_creations == 2 and len(api.uploads) == 2
    admitted = api.uploads[1]
    assert len(admitted) == 2 and all(line["url"] == "/v1/chat/completions" for line in admitted)
    assert "/v1/chat/completions" not in api.requests  # nothing called directly
    rec = _record(project)
    refused = [c for c in rec["cases"] if c["outcome"] == "error"]
    assert len(refused) == 2 and all("--max-cost" in c["error"]["message"] for c in refused)
    assert all(c["error"]["kind"] == "budget" and c["error"]["not_run"] for c in refused), refused
    assert all(c["attempts"] == 0 and c["agent"] is None for c in refused)  # its agent was never asked
    passed = [c for c in rec["cases"] if c["outcome"] == "passed"]
    assert len(passed) == 2, result.stdout.str()[-2000:]
    for c in passed:  # billed at half the list price (the probe's prompts are in the loopback's cache)
        u = c["usage"]
        assert u["batch_calls"] == 1 and u["cache_read_input_tokens"] > 0 and c["cost_usd"] == pytest.approx(
            (u["input_tokens"] * 0.40 + u["cache_read_input_tokens"] * 0.10 + u["output_tokens"] * 1.60) / 2 / 1e6)
    assert rec["budget"]["stopped"] and rec["budget"]["cases_not_run"] == 2
    assert rec["budget"]["spent_usd"] == pytest.approx(sum(c["cost_usd"] for c in passed), abs=1e-6)
    assert rec["usage"]["prices_source"] == "https://developers.openai.com/api/docs/pricing"  # whose prices
    result.assert_outcomes(passed=2, skipped=2)  # a case not run is pytest's skip
    result.stdout.fnmatch_lines(["*groundeval: batch batch_* submitted: 2 requests*",
                                 "*extraction: 4 cases, 2 passed, 0 failed, 0 errors, 2 not run*",
                                 "*not run: 2 budget"])


def test_an_openai_batch_results_cached_input_is_billed_at_the_cached_input_price(project, monkeypatch):
    """OpenAI reports a result's cached input in ``usage.prompt_tokens_details.cached_tokens``
    (part of its ``prompt_tokens``): the record counts it apart, as ``cache_read_input_tokens``,
    and bills it at the cached-input rate, at half, like a direct call's. Each case is asked
    twice (``--repeat 2``): the loopback reads the second request of a prompt from its cache."""
    pytest.importorskip("langchain_openai")
    from openai_loopback import OpenAILoopback, prompt_text

    with OpenAILoopback() as api:
        project.runpytest_subprocess(*_openai_args(project, api, model=OPENAI_MODEL)).assert_outcomes(passed=4)
    (lines,) = api.uploads
    rec = _record(project)
    total = 0.0
    for i, patient in enumerate(PATIENTS):
        (prompt,) = {prompt_text(line["body"]) for line in lines if BUNDLES[i] in prompt_text(line["body"])}
        tokens = -(-len(prompt) // 4)  # the loopback's count: one token per 4 characters, rounded up
        cached = tokens // 128 * 128  # all of it again, in OpenAI's 128-token steps
        assert cached >= 1024  # long enough to cache
        cases = [c for c in rec["cases"] if c["case_id"] == patient]
        got = sorted((c["usage"]["input_tokens"], c["usage"].get("cache_read_input_tokens", 0)) for c in cases)
        assert got == sorted([(tokens, 0), (tokens - cached, cached)])  # the first asked, then the repeat
        for c in cases:
            u = c["usage"]
            assert u["batch_calls"] == u["model_calls"] == 1 and not u.get("cache_creation_input_tokens")
            # gpt-4.1-mini: $0.40 input, $0.10 cached input, $1.60 output per million tokens; batch: half
            by_hand = (u["input_tokens"] * 0.40 + u.get("cache_read_input_tokens", 0) * 0.10
                       + u["output_tokens"] * 1.60) / 1e6 / 2
            assert c["cost_usd"] == pytest.approx(by_hand, abs=1e-9)
            total += by_hand
    assert rec["usage"]["cost_usd"] == pytest.approx(total, abs=1e-6)
