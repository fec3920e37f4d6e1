"""What ``--agent`` / ``--model`` ask for is checked at start, and said as what it is (issue 30
item 5): a misspelt agent gets "did you mean"; a Claude model id groundeval does not know is a
usage error naming the close ones, before (not as) a missing key; an OpenAI-compatible
server's model ids are its own and pass; a DNS failure is not retried."""

from __future__ import annotations

import socket

import pytest

from pytest_groundeval.agents.spec import AgentSpec, known_claude_models
from pytest_groundeval.run.calls import is_transient


@pytest.fixture(autouse=True)
def _no_key(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)


def test_a_misspelt_agent_gets_did_you_mean():
    assert "unknown agent (did you mean claude?)" in AgentSpec("cluade").check()
    assert "did you mean langgraph or langgraph-mcp?" in AgentSpec("langrgaph").check()
    assert "did you mean" not in AgentSpec("zzz").check()  # nothing close: no guess
    assert AgentSpec("baseline").check() is None


@pytest.mark.parametrize("agent, model, close", [
    ("claude", "claude-sonet-4-5", "claude-sonnet-4-5"),
    ("claude-agent", "claude-opus-4-8-latest", "claude-opus-4-8"),
    ("langgraph", "anthropic:claude-hiaku-4-5", "claude-haiku-4-5"),
    ("chat", "claude-opus-48", "claude-opus-4-8"),
])
def test_an_unknown_claude_id_is_a_usage_error_with_the_close_ones_not_a_missing_key(agent, model, close):
    problem = AgentSpec(agent, model=model).check()
    assert problem.startswith(f"--model {model}: not a Claude model id groundeval knows (did you mean {close}"), problem
    assert "ANTHROPIC_API_KEY" not in problem


def test_a_non_claude_id_for_the_anthropic_route_says_how_to_reach_a_local_server():
    problem = AgentSpec("chat", model="gpt-4o").check()
    assert "not a Claude model id" in problem and "--model openai:NAME with --model-base-url URL" in problem


@pytest.mark.parametrize("spec", [
    AgentSpec("claude", model="claude-opus-4-8"),  # known ids, as a user writes them
    AgentSpec("claude", model="claude-sonnet-4-5-20250929"),  # a dated snapshot (an alias)
    AgentSpec("langgraph", model="anthropic:claude-haiku-4-5"),
    AgentSpec("claude", model="claude-haiku-5-5"),  # known, unpriced on purpose
])
def test_a_known_claude_id_passes_to_the_key_check(spec):
    assert "ANTHROPIC_API_KEY" in spec.check()
    assert spec.check(needs_key=False) is None  # (a rescore: no call, no key, no model check)


@pytest.mark.parametrize("spec", [
    AgentSpec("langgraph", model="openai:qwen2.5-7b-instruct", base_url="http://127.0.0.1:8000/v1"),
    AgentSpec("chat", model="openai:my-finetune"),  # an OpenAI-compatible server: its ids are its own
    AgentSpec("chat", model="llama-3.1-8b", base_url="http://127.0.0.1:8000/v1"),
    AgentSpec("claude-agent", model="whatever-the-proxy-serves", base_url="http://127.0.0.1:9/"),
])
def test_an_open_weight_server_s_ids_are_not_checked(spec):
    assert spec.check() is None


def test_the_model_check_can_be_skipped_for_a_model_newer_than_the_table():
    spec = AgentSpec("claude", model="claude-opus-9")
    assert "--no-preflight skips this check" in spec.check()
    assert "ANTHROPIC_API_KEY" in spec.check(check_model=False)
    assert "claude-opus-4-8" in known_claude_models()


def _connect_error(cause: BaseException) -> Exception:
    class APIConnectionError(Exception):  # as the SDKs name it (anthropic, openai)
        pass

    try:
        try:
            raise cause
        except BaseException as inner:
            raise APIConnectionError("Connection error.") from inner
    except APIConnectionError as outer:
        return outer


def test_a_dns_failure_is_not_retried_a_refused_connection_is():
    assert not is_transient(_connect_error(socket.gaierror(socket.EAI_NONAME, "Name or service not known")))
    assert is_transient(_connect_error(ConnectionRefusedError(111, "Connection refused")))
    assert is_transient(_connect_error(TimeoutError()))
