"""The ``chat`` and ``langgraph`` agents against a loopback server that behaves as
llama-cpp-python's did on the first real-model run (``tests/llama_server.py``): the cap on
generated tokens, the partial record of a timed-out or failed attempt, tool_choice, the
refused null content, and server errors as one line, grouped (issue 31 item 1)."""

from __future__ import annotations

import json
import shutil
import threading
from typing import Any

import pytest
from conftest import ROOT, SYNTHEA
from llama_server import N_CTX, LlamaCppServer, say, server_error, tool_call, validation_error

pytest.importorskip("langgraph")
pytest.importorskip("langchain_openai")

from pytest_groundeval.agents.langgraph_agent import ChatAgent, LangGraphAgent  # noqa: E402
from pytest_groundeval.agents.spec import DEFAULT_MAX_TOKENS  # noqa: E402
from pytest_groundeval.run.calls import CallPolicy  # noqa: E402
from pytest_groundeval.run.errortext import signature  # noqa: E402
from pytest_groundeval.run.runner import run_case  # noqa: E402
from pytest_groundeval.store.record import validate_record  # noqa: E402
from pytest_groundeval.tasks.extraction import ExtractionTask  # noqa: E402

TASK = ExtractionTask(SYNTHEA)
REFS = TASK.discover()


@pytest.fixture(autouse=True)
def _no_key(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


def _answer(listed: dict[str, Any]) -> str:
    codes = [{"code": c["code"], "display": c["display"]} for c in listed["medication_requests"]]
    return "Here are the active medications:\n```json\n" + json.dumps({"active_medications": codes}) + "\n```"


def reader(req: dict[str, Any], tools: Any) -> dict[str, Any]:
    """A model that reads the record with its tools when it sees them (lists the active
    MedicationRequests, then answers with their codes), and says it cannot see it otherwise."""
    results = [m for m in req["messages"] if m["role"] == "tool"]
    if not tools:
        return say("I cannot see the patient's record.")
    if not results:
        return tool_call("list_medication_requests", {"status": "active"})
    return say(_answer(json.loads(results[-1]["content"])))


def _agent(server: LlamaCppServer, kind: type = LangGraphAgent, **kw: Any) -> Any:
    return kind(model="openai:smollm2", base_url=server.url, timeout=30, **kw)


# --------------------------------------------------------------------------- max_tokens


def test_a_looping_model_stops_at_the_default_cap_and_the_case_says_so():
    with LlamaCppServer("loop") as server:
        result = run_case(TASK, REFS[0], _agent(server, ChatAgent), policy=CallPolicy(timeout=30, max_attempts=1))
    (req,) = server.requests
    assert req["max_tokens"] == DEFAULT_MAX_TOKENS  # the name llama-cpp-python reads (not only max_completion_tokens)
    assert result.usage.output_tokens == DEFAULT_MAX_TOKENS < N_CTX  # it stopped at the cap, not the context's end
    assert result.outcome == "failed"  # its answer is scored as what it is: no answer object
    assert any("stopped at the max_tokens cap (4096" in w for w in result.warnings), result.warnings


def test_a_tool_call_cut_at_the_cap_is_said_though_the_server_reports_a_tool_call():
    """llama-cpp-python reports a tool call cut at the cap with ``finish_reason: "tool_calls"``
    (the first real-model run's write, labs, orders and reconciliation cases): the call used the
    whole cap, so the case says it may be cut, as for ``finish_reason: "length"``."""
    with LlamaCppServer("loop-tool-call") as server:
        result = run_case(TASK, REFS[0], _agent(server, max_tokens=128, recursion_limit=4),
                          policy=CallPolicy(timeout=30, max_attempts=1))
    assert {r["max_tokens"] for r in server.requests} == {128} and len(server.requests) >= 1
    assert any(w.startswith(f"{len(server.requests)} of {len(server.requests)} model call(s) stopped at the "
                            "max_tokens cap (128") for w in result.warnings), result.warnings


def test_a_model_that_answers_within_the_cap_passes_without_a_warning():
    with LlamaCppServer(reader) as server:
        result = run_case(TASK, REFS[0], _agent(server, max_tokens=512), policy=CallPolicy(timeout=30, max_attempts=1))
    assert result.outcome == "passed", result.reason
    assert {r["max_tokens"] for r in server.requests} == {512} and not result.warnings


def test_openai_itself_is_sent_the_cap_under_its_own_name_only():
    """No --model-base-url (OpenAI's API): max_completion_tokens alone, as LangChain sends it."""
    from pytest_groundeval.agents.openai_wire import WireTransport, sdk_httpx

    httpx = sdk_httpx()

    seen: list[dict[str, Any]] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.read()))
        return httpx.Response(500, json={"error": {"message": "stop here"}})

    wire = WireTransport(local=False, inner=httpx.MockTransport(record), http=httpx)
    body = {"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 64}
    httpx.Client(transport=wire).post("https://api.openai.invalid/v1/chat/completions", json=body)
    assert seen == [body]


# --------------------------------------------------------------------------- a failed attempt keeps its record


def _two_calls_then(end: Any) -> Any:
    def model(req: dict[str, Any], tools: Any) -> Any:
        done = sum(1 for m in req["messages"] if m["role"] == "tool")
        if done == 0:
            return tool_call("list_medication_requests", {"status": "active"})
        if done == 1:
            return tool_call("list_medication_requests", {"status": "stopped"})
        return end
    return model


@pytest.mark.parametrize("thread", ["main", "worker"])
@pytest.mark.parametrize("end", ["hang", "http-400"])
def test_a_timed_out_or_failed_attempt_keeps_its_transcript_steps_and_usage(end, thread):
    """After two tool rounds the third model call hangs (the harness's timeout) or is refused
    (a permanent error): the case keeps the harness's log of the two tool calls, the agent's
    account of its two model turns and what the two answered requests used. On the main thread
    the timeout interrupts the agent (SIGALRM); on a worker thread the harness stops waiting."""
    last = None if end == "hang" else (400, {"error": {"message": "bad request", "type": "invalid_request_error"}})
    box: dict[str, Any] = {}
    with LlamaCppServer(_two_calls_then(last)) as server:
        def work() -> None:
            box["result"] = run_case(TASK, REFS[0], _agent(server), policy=CallPolicy(timeout=8, max_attempts=1))
        if thread == "main":
            work()
        else:
            worker = threading.Thread(target=work)
            worker.start()
            worker.join(60)
    result = box["result"]
    assert result.outcome == "error" and result.error.kind == ("timeout" if end == "hang" else "agent")
    assert [c.tool for c in result.transcript] == ["list_medication_requests"] * 2
    assert [c.args for c in result.transcript] == [{"status": "active"}, {"status": "stopped"}]
    assert result.steps == 2
    assert [s.type for s in result.agent_reported] == ["ai", "tool", "ai", "tool"]
    assert result.usage.output_tokens == 40 and result.usage.input_tokens > 0  # two answered requests


def test_the_case_deadline_keeps_what_the_attempt_carried():
    """The harness's own word for an attempt's end (the case's deadline would pass before a
    retry) still carries the partial transcript and usage the agent's exception had."""
    from pytest_groundeval.run.calls import AgentCallError, TransientAgentError, call_with_policy

    def attempt() -> Any:
        exc = TransientAgentError("overloaded", retry_after=500)
        exc.transcript, exc.usage = [{"type": "ai", "content": "", "tool_calls": []}], {"input_tokens": 7}
        raise exc

    with pytest.raises(AgentCallError) as caught:
        call_with_policy(attempt, CallPolicy(timeout=None, max_attempts=3, case_deadline=100, max_retry_after=1000))
    assert "would pass before retry 2" in str(caught.value)
    assert caught.value.last.transcript and caught.value.last.usage == {"input_tokens": 7}


def test_an_answered_case_keeps_its_transcript_as_before():
    with LlamaCppServer(reader) as server:
        result = run_case(TASK, REFS[0], _agent(server), policy=CallPolicy(timeout=30, max_attempts=1))
    assert result.outcome == "passed" and [c.tool for c in result.transcript] == ["list_medication_requests"]
    assert result.steps == 2


# --------------------------------------------------------------------------- tool_choice


def test_tools_reach_the_model_through_tool_choice_auto():
    with LlamaCppServer(reader) as server:
        result = run_case(TASK, REFS[0], _agent(server), policy=CallPolicy(timeout=30, max_attempts=1))
    assert result.outcome == "passed", result.reason
    assert all(r["tool_choice"] == "auto" for r in server.requests if r.get("tools"))


def test_without_tool_choice_the_server_hides_the_tools():
    """tool_choice left out (--model-tool-choice omit): llama-cpp-python leaves the tools out of
    the prompt, the model reads nothing and the case fails: what the default avoids."""
    with LlamaCppServer(reader) as server:
        result = run_case(TASK, REFS[0], _agent(server, tool_choice=None), policy=CallPolicy(timeout=30, max_attempts=1))
    assert result.outcome == "failed" and result.transcript == []
    assert all("tool_choice" not in r for r in server.requests)


def test_a_request_without_tools_names_no_tool_choice():
    with LlamaCppServer(lambda req, tools: say('{"active_medications": []}')) as server:
        run_case(TASK, REFS[0], _agent(server, ChatAgent), policy=CallPolicy(timeout=30, max_attempts=1))
    assert server.requests and all("tool_choice" not in r and "tools" not in r for r in server.requests)


# --------------------------------------------------------------------------- empty assistant content


def test_a_server_that_refuses_null_content_is_sent_empty_content_from_then_on():
    """The first tool round of the first case is refused once (HTTP 500, as llama-cpp-python
    does), sent again with ``""``, and every later request of the session is sent so."""
    with LlamaCppServer(reader) as server:
        agent = _agent(server)
        results = [run_case(TASK, ref, agent, policy=CallPolicy(timeout=30, max_attempts=1)) for ref in REFS[:2]]
    assert [r.outcome for r in results] == ["passed", "passed"], [r.reason for r in results]
    assert server.refused == 1  # detected once, remembered for the session
    turns = [m for r in server.requests for m in r["messages"] if m["role"] == "assistant"]
    assert turns and {m["content"] for m in turns[1:]} == {""}


def test_a_server_that_takes_null_content_is_sent_null():
    """Not a blanket change: a server that accepts ``null`` (OpenAI's API) gets it as LangChain writes it."""
    with LlamaCppServer(reader, refuses_null=False) as server:
        result = run_case(TASK, REFS[0], _agent(server), policy=CallPolicy(timeout=30, max_attempts=1))
    assert result.outcome == "passed"
    turns = [m for r in server.requests for m in r["messages"] if m["role"] == "assistant"]
    assert turns and all(m["content"] is None for m in turns)


# --------------------------------------------------------------------------- server errors, in a session


def _crash_body(req: dict[str, Any], tools: Any) -> Any:
    """The server fails every request with the body llama-cpp-python sent for a refused turn:
    FastAPI's ten-line validation error, quoting a tool call id that differs per request and a
    frame of the server's own code."""
    return server_error(validation_error({"messages": [*req["messages"], tool_call("list_medication_requests", {})]}))


def test_a_session_against_a_failing_server_reads_its_errors_in_one_line_grouped(pytester):
    """--agent=chat with --model-max-tokens 64 (recorded) against a server that fails each request
    with a multi-line body naming the request's call id: each case's error is one line with the
    body's message, the cases group as one error, the 'at' is never the server's file quoted in
    the body, and two such errors in a row are identical for --max-consecutive-errors."""
    data = pytester.mkdir("data")
    for path in sorted(SYNTHEA.glob("*.json"))[:3]:
        shutil.copy(path, data / path.name)
    with LlamaCppServer(_crash_body) as server:
        result = pytester.runpytest_subprocess(
            str(ROOT / "evals"), "-m", "extraction", "--data-dir", str(data), "--agent=chat",
            "--model", "openai:smollm2", "--model-base-url", server.url, "--model-max-tokens", "64",
            "--agent-retries", "0", "--max-consecutive-errors", "2", "--concurrency", "1",
            "--run-record", str(pytester.path / "record.json"), "-p", "no:cacheprovider", "-p", "no:randomly",
            "--rootdir", str(pytester.path))
    out = result.stdout.str()
    rec = json.loads((pytester.path / "record.json").read_text())
    assert validate_record(rec) == []
    assert rec["options"]["max_tokens"] == 64 and {r["max_tokens"] for r in server.requests} == {64}
    called = [c for c in rec["cases"] if not c["error"]["not_run"]]
    assert len(called) == 2  # the third was not run: two identical errors in a row, though their ids differ
    messages = [c["error"]["message"] for c in called]
    assert all("\n" not in m and "HTTP 500: 7 validation errors: {'type': 'literal_error'" in m for m in messages)
    assert signature(messages[0]) == signature(messages[1])
    grouped = [line for line in out.splitlines() if line.startswith("ERROR 2 extraction cases:")]
    assert grouped, out[-3000:]
    at = grouped[0][grouped[0].rindex(" (at "):]  # the line's last "(at FILE:LINE in FUNC)", before the ids
    assert "site-packages/langchain_openai" in at and "llama_cpp" not in at, grouped[0]  # not the body's frame


def test_errors_that_differ_only_by_ids_and_numbers_are_one_line_others_are_not():
    from test_terminal_summary import record

    from pytest_groundeval.model import CaseResult
    from pytest_groundeval.reporting.terminal import failure_lines

    def failed(i: int, message: str) -> CaseResult:
        return CaseResult(case_id=f"e{i}", task="write", outcome="error", error={"kind": "agent", "message": message})

    same = [failed(i, f"HTTP 500: tool call call_{uuid} has no arguments (request req_{n})")
            for i, (uuid, n) in enumerate([("a1b2c3", 17), ("9f8e7d", 4018), ("77aa01", 5)])]
    other = failed(9, "HTTP 500: tool call call_c0ffee has no name (request req_3)")
    lines = failure_lines(record([*same, other]))
    assert lines[0].startswith("ERROR 3 write cases: HTTP 500: tool call call_a1b2c3 has no arguments"), lines
    # the other message is its own group: one case, listed by pytest's short summary, not here
    from pytest_groundeval.reporting.terminal import failure_groups

    groups = failure_groups(record([*same, other]))
    assert [(word, len(cases)) for word, _, _, cases in groups] == [("error", 3), ("error", 1)], groups
    assert groups[1][2] == "HTTP 500: tool call call_c0ffee has no name (request req_3)"
    assert len(lines) == 1, lines


def test_model_max_tokens_is_refused_for_an_agent_that_would_ignore_it(pytester):
    result = pytester.runpytest_subprocess(str(ROOT / "evals"), "-m", "extraction", "--agent=baseline",
                                           "--model-max-tokens", "64", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--model-max-tokens is for --agent=claude, langgraph, chat, langgraph-mcp*"])


def test_the_options_reach_the_agent():
    """--model-max-tokens and --model-tool-choice as the agents take them (AgentSpec)."""
    from pytest_groundeval.agents.spec import AgentSpec

    assert AgentSpec("langgraph").model_settings() == {"max_tokens": DEFAULT_MAX_TOKENS, "tool_choice": "auto"}
    assert AgentSpec("chat", max_tokens=512, tool_choice="omit").model_settings() == {"max_tokens": 512,
                                                                                       "tool_choice": None}
    assert AgentSpec("claude").effective_max_tokens == DEFAULT_MAX_TOKENS
    assert AgentSpec("baseline").effective_max_tokens is None
    assert "would ignore it" in AgentSpec("baseline", max_tokens=64).check()


def test_the_preflight_takes_a_busy_server_for_a_server():
    """A CPU server still generating for a request the harness gave up on takes the connection
    and answers nothing for minutes (the smoke run's langgraph session was refused as 'nothing
    answers there'); a port nobody listens on is still refused."""
    import socket

    from pytest_groundeval.pytest.evaluator import probe_url

    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(8)  # takes connections (the kernel's backlog), never answers
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
    try:
        assert probe_url(f"http://127.0.0.1:{busy.getsockname()[1]}/v1", timeout=0.5) is None
        assert "ConnectionRefusedError" in probe_url(f"http://127.0.0.1:{closed.getsockname()[1]}/v1", timeout=0.5)
    finally:
        busy.close()
        closed.close()
