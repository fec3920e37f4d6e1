"""``--agent langgraph-mcp`` (issue 19 item 3): the real LangGraph graph over a scripted model,
its tools loaded from the case's real MCP stdio server by langchain-mcp-adapters; the harness
records every call where it runs, and that log is the case's transcript."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import REFS, ROOT, SYNTHEA

pytest.importorskip("langchain_mcp_adapters")

from test_extraction_tools import openai_server  # noqa: E402,F401  (the scripted OpenAI-compatible server)
from test_langgraph_agent import TOOLS, WRITE, ScriptedChatModel, correct_script, load_case  # noqa: E402

from pytest_groundeval.agents.base import AgentSpec, build_agent  # noqa: E402
from pytest_groundeval.agents.langgraph_mcp import LangGraphMCPAgent  # noqa: E402
from pytest_groundeval.run.runner import run_case  # noqa: E402
from pytest_groundeval.store.record import validate_record  # noqa: E402


def test_the_registry_builds_it_and_it_is_live():
    spec = AgentSpec("langgraph-mcp", model="openai:x", base_url="http://127.0.0.1:9/v1")
    assert spec.check() is None and spec.is_live and spec.required_key is None
    agent = build_agent(spec)
    assert isinstance(agent, LangGraphMCPAgent) and agent.name == "langgraph-mcp"


def test_a_scripted_write_run_over_mcp_is_observed_by_the_harness_and_grounded():
    model = ScriptedChatModel(script=correct_script(load_case()))
    agent = LangGraphMCPAgent(model=model)
    ref = next(r for r in WRITE.discover() if r.case_id == "ibuprofen-two-tablets")
    entry = run_case(WRITE, ref, agent, require_grounded=True).model_dump(mode="json")
    assert entry["outcome"] == "passed", entry["score"]["reason"] if entry["score"] else entry["error"]
    assert model.bound_tools == TOOLS  # the graph bound the server's tools, in the task's order
    assert entry["tools_offered"] == TOOLS
    assert [(e["seq"], e["tool"], e["status"]) for e in entry["transcript"]] == [
        (i + 1, name, "ok") for i, name in enumerate(TOOLS)]
    assert all(e["step"] is None for e in entry["transcript"])  # MCP carries no LangGraph step: the clock orders
    assert all(a["ended"] < b["started"] for a, b in zip(entry["transcript"], entry["transcript"][1:]))
    assert entry["score"]["metrics"]["grounded"] == 1.0
    assert [e["type"] for e in entry["agent_reported"]].count("tool") == 3  # its own account, kept apart


def test_pytest_evals_with_agent_langgraph_mcp_against_an_openai_compatible_server(pytester, openai_server,
                                                                                   monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    data = pytester.mkdir("data")
    for stem in (REFS, "Devin_Bailey_17dc1d1b-060d-4069-b7f9-640463bf12a7"):
        shutil.copy(SYNTHEA / f"{stem}.json", data / f"{stem}.json")
    url = f"http://127.0.0.1:{openai_server.server_address[1]}/v1"
    result = pytester.runpytest_subprocess(
        str(ROOT / "evals"), "-m", "extraction", "--data-dir", str(data), "--agent=langgraph-mcp",
        "--model", "openai:scripted", "--model-base-url", url, "--require-grounded",
        "--run-record", str(pytester.path / "record.json"), "-p", "no:cacheprovider", "-p", "no:randomly",
        "--rootdir", str(pytester.path))
    result.assert_outcomes(passed=2)
    rec = json.loads((pytester.path / "record.json").read_text())
    assert validate_record(rec) == []
    assert rec["agent"] == "langgraph-mcp"
    for c in rec["cases"]:
        assert c["outcome"] == "passed" and c["steps"] == 2 and c["usage"]["input_tokens"] > 0
        assert [t["tool"] for t in c["transcript"]] == ["list_medication_requests"]
        assert c["tools_offered"] == ["list_medication_requests", "read_resource"]
        assert c["score"]["metrics"]["grounded"] == 1.0
    tools = openai_server.requests[0]["tools"]
    assert {t["function"]["name"] for t in tools} == {"list_medication_requests", "read_resource"}
