"""The harness owns retries and time (issue 16 item 4): the built-in agents' SDK clients
retry nothing themselves (``max_retries=0``) and get the attempt's timeout, so a scripted
slow server on 127.0.0.1 receives exactly the requests of the harness's attempts and none
after the harness gave up; what the requests that answered reported is counted, also for
the attempts that timed out.

Each server is slow for one patient (its requests hang until the test ends) and answers the
others at once. The sessions run serially, so the slow case's requests must all arrive
before the next case's first request: a request the SDK retried behind the harness's back
(the issue: 5 timed-out attempts, 13 requests, 8 after the harness gave up) arrives later,
or makes more requests than attempts. The counts are read once the session has ended."""

from __future__ import annotations

import json
import shutil
import threading
import uuid
from http.server import ThreadingHTTPServer
from typing import Any

import pytest
from json_http import JSONHandler
from conftest import ROOT, SYNTHEA

pytest.importorskip("langgraph")
pytest.importorskip("langchain")

from pytest_groundeval.store.record import validate_record  # noqa: E402

STEMS = sorted(p.stem for p in SYNTHEA.glob("*.json"))[:3]  # the middle one is the slow patient
RETRIES = 2  # three attempts
PROMPT_TOKENS = 1234  # what the server reports for each request it answers


def _patient_id(stem: str) -> str:
    bundle = json.loads((SYNTHEA / f"{stem}.json").read_text())
    return next(e["resource"]["id"] for e in bundle["entry"] if e["resource"]["resourceType"] == "Patient")


PATIENTS = [_patient_id(stem) for stem in STEMS]
SLOW = PATIENTS[1]
ANSWER = json.dumps({"active_medications": []})


class _Scripted(JSONHandler):
    protocol_version = "HTTP/1.1"


    def do_GET(self) -> None:  # noqa: N802 - the preflight probe of --model-base-url
        self._send({"object": "list", "data": [{"id": "scripted", "object": "model"}]})

    def do_POST(self) -> None:  # noqa: N802
        raw = self.rfile.read(int(self.headers["Content-Length"]))
        req = json.loads(raw)
        patient = next(i for i, p in enumerate(PATIENTS) if p in raw.decode())
        slow = patient == 1
        server = self.server
        reply = self.reply(req, slow)  # None: hang
        with server.lock:  # type: ignore[attr-defined]
            server.log.append({"patient": patient, "slow": slow,  # type: ignore[attr-defined]
                               "answered": reply is not None})
        if reply is None:
            server.release.wait(120)  # type: ignore[attr-defined]  # until the test ends
            self.close_connection = True
            return
        self._send(reply)

    def reply(self, req: dict[str, Any], slow: bool) -> dict[str, Any] | None:
        raise NotImplementedError


class _OpenAI(_Scripted):
    """/v1/chat/completions. The slow patient: the first request (no tool result yet) is
    answered at once with a tool call, the next one hangs; so every attempt pays for one
    answered request before it times out."""

    def reply(self, req: dict[str, Any], slow: bool) -> dict[str, Any] | None:
        usage = {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": 20, "total_tokens": PROMPT_TOKENS + 20}
        if slow and any(m["role"] == "tool" for m in req["messages"]):
            return None
        if slow:
            message = {"role": "assistant", "content": None, "tool_calls": [{
                "id": "call_" + uuid.uuid4().hex[:8], "type": "function",
                "function": {"name": "list_medication_requests", "arguments": json.dumps({"status": "active"})}}]}
        else:
            message = {"role": "assistant", "content": ANSWER}
        return {"id": "chatcmpl-" + uuid.uuid4().hex[:8], "object": "chat.completion", "created": 0,
                "model": "scripted", "usage": usage,
                "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if slow else "stop"}]}


class _Anthropic(_Scripted):
    """/v1/messages: the slow patient's requests hang; the others get the answer."""

    def reply(self, req: dict[str, Any], slow: bool) -> dict[str, Any] | None:
        if slow:
            return None
        return {"id": "msg_" + uuid.uuid4().hex[:8], "type": "message", "role": "assistant",
                "model": req["model"], "content": [{"type": "text", "text": ANSWER}],
                "stop_reason": "end_turn", "stop_sequence": None,
                "usage": {"input_tokens": PROMPT_TOKENS, "output_tokens": 20}}


def _serve(handler: type) -> Any:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.log, server.lock, server.release = [], threading.Lock(), threading.Event()  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def servers():
    made: list[Any] = []

    def make(handler: type) -> Any:
        made.append(_serve(handler))
        return made[-1]

    yield make
    for server in made:
        server.release.set()
        server.shutdown()
        server.server_close()


def _session(pytester: pytest.Pytester, *args: str) -> dict[str, Any]:
    data = pytester.mkdir("data")
    for stem in STEMS:
        shutil.copy(SYNTHEA / f"{stem}.json", data / f"{stem}.json")
    result = pytester.runpytest_subprocess(
        str(ROOT / "evals"), "-m", "extraction", "--data-dir", str(data), *args,
        "--agent-timeout", "2", "--agent-retries", str(RETRIES), "--agent-retry-delay", "0",
        "--run-record", str(pytester.path / "record.json"), "-p", "no:cacheprovider", "-p", "no:randomly",
        "--rootdir", str(pytester.path))
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()[-3000:]
    rec = json.loads((pytester.path / "record.json").read_text())
    assert validate_record(rec) == []
    return rec


def _slow_case(rec: dict[str, Any]) -> dict[str, Any]:
    (case,) = [c for c in rec["cases"] if c["case_id"] == STEMS[1]]
    assert case["outcome"] == "error" and case["error"]["kind"] == "timeout"
    assert case["attempts"] == RETRIES + 1
    return case


def _none_after_the_give_up(log: list[dict[str, Any]], concurrency: str) -> None:
    """Serial: the first case (which also pays the cold start) answers, then the slow one
    times out, then the harness moves on to the third; no request for the slow case may
    arrive once the third case's have begun."""
    slow = [i for i, r in enumerate(log) if r["slow"]]
    later = [i for i, r in enumerate(log) if r["patient"] == 2]
    assert later, "the third case made no request"
    if concurrency == "1":
        assert max(slow) < min(later), "a request for the slow case arrived after the harness gave up on it"


@pytest.mark.parametrize("concurrency", ["1", "4"])
def test_langgraph_over_openai_sends_one_request_per_model_call_of_each_attempt(pytester, servers, monkeypatch,
                                                                                concurrency):
    pytest.importorskip("langchain_openai")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server = servers(_OpenAI)
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    rec = _session(pytester, "--agent=langgraph", "--model", "openai:scripted", "--model-base-url", url,
                   "--concurrency", concurrency)
    case = _slow_case(rec)
    log = list(server.log)  # the session has ended: nothing more will arrive
    slow = [r for r in log if r["slow"]]
    # each attempt: one answered request (the tool call), one that hung until the harness gave up
    assert len(slow) == 2 * (RETRIES + 1)
    assert sum(r["answered"] for r in slow) == RETRIES + 1
    _none_after_the_give_up(log, concurrency)
    # what the answered requests of the timed-out attempts reported is counted, every one
    assert case["usage"]["input_tokens"] == PROMPT_TOKENS * (RETRIES + 1)
    assert case["usage"]["output_tokens"] == 20 * (RETRIES + 1)


@pytest.mark.parametrize("agent", ["claude", "langgraph"])
def test_anthropic_clients_send_one_request_per_attempt(pytester, servers, monkeypatch, agent):
    pytest.importorskip("anthropic")
    if agent == "langgraph":
        pytest.importorskip("langchain_anthropic")
    server = servers(_Anthropic)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-not-a-key")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.delenv("ANTHROPIC_API_URL", raising=False)
    model = "claude-sonnet-4-5" if agent == "claude" else "anthropic:claude-sonnet-4-5"
    rec = _session(pytester, f"--agent={agent}", "--model", model, "--concurrency", "1")
    log = list(server.log)
    case = _slow_case(rec)
    slow = [r for r in log if r["slow"]]
    assert len(slow) == RETRIES + 1 and not any(r["answered"] for r in slow)
    _none_after_the_give_up(log, "1")
    assert case["usage"] is None and case["cost_usd"] is None  # the server reported nothing for it
    (fast,) = [c for c in rec["cases"] if c["case_id"] == STEMS[2]]
    assert fast["usage"]["input_tokens"] == PROMPT_TOKENS and fast["cost_usd"] is not None
    assert rec["usage"]["cases_unreported"] == 1  # the timed-out case: cost unknown, not $0


def test_built_in_agents_build_their_clients_without_sdk_retries(monkeypatch):
    """What the servers above observe, at the source: the chat models and the Anthropic client
    are made with max_retries=0 and the attempt's timeout."""
    pytest.importorskip("langchain_openai")
    pytest.importorskip("langchain_anthropic")
    from pytest_groundeval.agents.base import AgentSpec, build_agent

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-not-a-key")
    for spec in (AgentSpec(name="langgraph", model="openai:scripted", base_url="http://127.0.0.1:9/v1", timeout=7),
                 AgentSpec(name="chat", model="openai:scripted", base_url="http://127.0.0.1:9/v1", timeout=7),
                 AgentSpec(name="langgraph", model="anthropic:claude-sonnet-4-5", timeout=7)):
        chat = build_agent(spec).chat_model
        assert chat.max_retries == 0, spec
        assert (getattr(chat, "request_timeout", None) or getattr(chat, "default_request_timeout", None)) == 7
    claude = build_agent(AgentSpec(name="claude", model="claude-sonnet-4-5", timeout=7)).client
    assert claude.max_retries == 0 and claude.timeout == 7


def test_the_usage_a_failed_request_reports_is_counted():
    """An API error whose body carries usage (OpenAI or Anthropic names) is charged to the case."""
    import httpx
    import openai

    from pytest_groundeval.run.runner import _failed_usage

    request = httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
    exc = openai.InternalServerError("boom", response=httpx.Response(500, request=request),
                                     body={"error": "overloaded", "usage": {"prompt_tokens": 50, "completion_tokens": 3}})
    exc.usage = {"input_tokens": 1000, "output_tokens": 10}  # the requests of the attempt that answered
    assert _failed_usage(exc) == {"input_tokens": 1050, "output_tokens": 13}
    bad = openai.InternalServerError("boom", response=httpx.Response(500, request=request),
                                     body={"usage": {"input_tokens": -5, "output_tokens": 1}})
    assert _failed_usage(bad) is None  # not token counts: not counted
    assert _failed_usage(RuntimeError("no body")) is None
