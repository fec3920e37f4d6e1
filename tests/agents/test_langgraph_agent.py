"""The LangGraph agent: a real ``create_agent`` graph and the real HealthChain tools, driven by
a scripted chat model (no network, no key). The script reacts to what the tools returned,
so tool results in the transcript are the tools' own, not canned."""

from __future__ import annotations

import copy
import json
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import pytest
from write_args import build_args

pytest.importorskip("langchain.agents", reason="langchain not installed")

from langchain_core.language_models.chat_models import BaseChatModel  # noqa: E402
from langchain_core.messages import AIMessage, BaseMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from pydantic import Field  # noqa: E402

from pytest_groundeval.fhir import hc_tools  # noqa: E402
from pytest_groundeval.agents.base import AgentSpec, build_agent  # noqa: E402
from pytest_groundeval.agents.langgraph_agent import (  # noqa: E402
    DEFAULT_MODEL,
    GENERIC_SYSTEM_PROMPT,
    LangGraphAgent,
)
from pytest_groundeval.run.runner import run_case  # noqa: E402
from pytest_groundeval.tasks.write import SYSTEM_PROMPT as WRITE_SYSTEM_PROMPT  # noqa: E402
from pytest_groundeval.tasks.write import WriteTask  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
WRITE_CASES = ROOT / "fixtures" / "write_cases"
WRITE = WriteTask(WRITE_CASES)
IBUPROFEN = WRITE_CASES / "ibuprofen-two-tablets.json"
TOOLS = ["lookup_medication_code", "build_medication_statement", "validate_medication_statement"]
USAGE = {"input_tokens": 100, "output_tokens": 20, "total_tokens": 120}


# --------------------------------------------------------------------------- scripted model


class ScriptedChatModel(BaseChatModel):
    """Replies with the next script entry: an AIMessage, or a function of the messages so far
    (so a step can use what a tool returned). The last entry repeats once the script runs out."""

    script: list[Any]
    delay: float = 0.0
    seen: list[list[BaseMessage]] = Field(default_factory=list)
    bound_tools: list[str] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> "ScriptedChatModel":  # fake models lack it
        self.bound_tools = [getattr(t, "name", None) for t in tools]
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        if self.delay:
            time.sleep(self.delay)
        self.seen.append(list(messages))
        step = self.script[min(len(self.seen), len(self.script)) - 1]
        message = step(messages) if callable(step) else step.model_copy(deep=True)
        return ChatResult(generations=[ChatGeneration(message=message)])


def call(name: str, args: dict[str, Any], usage: dict[str, int] | None = USAGE) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": f"call-{uuid.uuid4().hex[:8]}"}],
                     usage_metadata=usage)


def say(text: str, usage: dict[str, int] | None = USAGE) -> AIMessage:
    return AIMessage(content=text, usage_metadata=usage)


def last_result(messages: list[BaseMessage], tool: str) -> Any:
    for m in reversed(messages):
        if m.type == "tool" and m.name == tool:
            return json.loads(m.content)
    raise AssertionError(f"no {tool} result in the conversation")


def load_case(path: Path = IBUPROFEN) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def correct_script(case: dict[str, Any], query: str = "ibuprofen 200 mg oral tablet",
                   final: Callable[[dict[str, Any]], str] | None = None) -> list[Any]:
    """lookup → build (with the code the lookup returned) → validate → reply with the resource."""
    final = final or (lambda resource: json.dumps(resource))

    def build(messages: list[BaseMessage]) -> AIMessage:
        top = last_result(messages, "lookup_medication_code")["matches"][0]
        return call("build_medication_statement",
                    build_args(case, rxnorm_code=top["code"], display=top["display"]))

    return [
        call("lookup_medication_code", {"query": query}),
        build,
        lambda m: call("validate_medication_statement",
                       {"resource": last_result(m, "build_medication_statement")["resource"]}),
        lambda m: say(final(last_result(m, "build_medication_statement")["resource"])),
    ]


def agent_with(script: list[Any], bare: bool = False, **kw: Any) -> tuple[LangGraphAgent, ScriptedChatModel]:
    """A LangGraph agent over a scripted model; unless ``bare``, its own prompt-only set-up
    (``run(prompt)``) is the write task's system prompt, tools and answer tool."""
    model = ScriptedChatModel(script=script, delay=kw.pop("delay", 0.0))
    if not bare:
        kw = {"system_prompt": WRITE_SYSTEM_PROMPT, "tools": WRITE.agent_tools({}),
              "answer_tool": WRITE.answer_tool, **kw}
    return LangGraphAgent(model=model, **kw), model


# --------------------------------------------------------------------------- 1. a correct run


def test_scripted_run_answers_with_the_resource_and_records_real_tool_results():
    case = load_case()
    agent, model = agent_with(correct_script(case))
    out = agent.run_case(WRITE, "Write the MedicationStatement ...", {"note": case["note"], "subject": case["subject"]})

    # final message held JSON: that text is the answer, the task parses it
    assert out.structured is None and out.extra["answer_source"] == "final_message"
    resource = json.loads(out.text)
    assert resource["resourceType"] == "MedicationStatement"
    assert resource["subject"] == {"reference": "Patient/pat-003"}
    assert resource["medicationCodeableConcept"]["coding"][0]["code"] == "310965"
    assert resource["dosage"][0]["doseAndRate"][0]["doseQuantity"]["value"] == 400

    # the real graph bound the three real tools and sent the write system prompt
    assert model.bound_tools == TOOLS
    assert model.seen[0][0].type == "system" and model.seen[0][0].content == WRITE_SYSTEM_PROMPT

    # transcript: the three calls with the tools' own results, JSON-serialisable
    t = out.transcript
    json.dumps(t)
    assert [e["type"] for e in t] == ["ai", "tool", "ai", "tool", "ai", "tool", "ai"]
    assert [c["name"] for e in t if e["type"] == "ai" for c in e["tool_calls"]] == TOOLS
    assert [e["tool"] for e in t if e["type"] == "tool"] == TOOLS
    lookup = t[1]["result"]
    assert lookup == hc_tools.lookup_medication_code("ibuprofen 200 mg oral tablet")  # really from the catalog
    assert lookup["matches"][0]["display"] == "Ibuprofen 200 MG Oral Tablet"
    assert hc_tools.get_catalog().by_code["310965"]["display"] == "Ibuprofen 200 MG Oral Tablet"
    assert t[3]["result"]["resource"] == resource
    assert t[5]["result"] == {"valid": True, "issues": []}
    assert t[6]["content"] == out.text and t[6]["tool_calls"] == []

    assert out.steps == 4 and len(model.seen) == 4
    assert out.usage == {"input_tokens": 400, "output_tokens": 80}
    assert out.extra["tool_calls"] == 3


def test_usage_is_none_when_the_model_reports_none():
    case = load_case()
    script = [call("lookup_medication_code", {"query": "ibuprofen"}, usage=None),
              lambda m: say(json.dumps({"resourceType": "MedicationStatement"}), usage=None)]
    agent, _ = agent_with(script)
    out = agent.run_case(WRITE, case["note"], {})
    assert out.usage is None and out.steps == 2


@pytest.mark.parametrize("tier", [None, "default", "flex", "priority"])
def test_openai_cached_input_is_counted_apart_on_every_service_tier(tier):
    """langchain-openai's own usage (``_create_usage_metadata``, as ``ChatOpenAI`` makes it)
    names a flex or priority response's cached input ``flex_cache_read`` / ``priority_cache_read``:
    it is cached input still, counted apart from ``input_tokens`` (and priced as cached)."""
    pytest.importorskip("langchain_openai")
    from langchain_core.messages import AIMessage
    from langchain_openai.chat_models.base import _create_usage_metadata

    from pytest_groundeval.agents.langgraph_agent import _usage

    wire = {"prompt_tokens": 3000, "completion_tokens": 20, "total_tokens": 3020,
            "prompt_tokens_details": {"cached_tokens": 2048}}
    reply = AIMessage(content="{}", usage_metadata=_create_usage_metadata(wire, tier))
    assert _usage([reply]) == {"input_tokens": 952, "output_tokens": 20, "cache_read_input_tokens": 2048,
                               "cache_creation_input_tokens": 0}


# --------------------------------------------------------------------------- 2. runaway loops


def test_a_model_that_never_stops_calling_tools_hits_the_recursion_limit():
    agent, model = agent_with([lambda m: call("lookup_medication_code", {"query": "ibuprofen"})],
                              recursion_limit=6)
    with pytest.raises(RuntimeError, match="recursion limit of 6 steps") as info:
        agent.run_case(WRITE, "note", {})
    assert len(model.seen) == 3  # 6 supersteps = 3 model calls + 3 tool rounds, then stop
    assert info.value.transcript and info.value.transcript[0]["type"] == "ai"


def test_recursion_limit_is_recorded_as_an_error_outcome(tmp_path):
    ref = next(r for r in WRITE.discover() if r.case_id == "ibuprofen-two-tablets")
    agent, _ = agent_with([lambda m: call("lookup_medication_code", {"query": "ibuprofen"})])
    result = run_case(WRITE, ref, agent)
    assert result.outcome == "error" and result.error.kind == "agent"
    assert "recursion limit of 16 steps" in result.error.message


def test_a_slow_run_is_ended_by_the_wall_clock_limit():
    """Events, not a clock: the model's first call is held until the test releases it, after
    the limit ended the run. Had the harness waited for the graph, the held call would run out
    its 60 s, the script would loop to the recursion limit, and no TimeoutError would come."""
    gate, answered = threading.Event(), threading.Event()

    def held(messages):
        gate.wait(60)
        answered.set()
        return call("lookup_medication_code", {"query": "ibuprofen"})

    agent, model = agent_with([held], run_timeout=0.5)
    try:
        with pytest.raises(TimeoutError, match="wall-clock limit of 0.5 s"):
            agent.run_case(WRITE, "note", {})
        assert not answered.is_set(), "the run waited for the graph's model call"
    finally:
        gate.set()


# --------------------------------------------------------------------------- 3. fallback


def test_prose_final_message_falls_back_to_the_last_successfully_built_resource():
    case = load_case()
    script = [
        call("build_medication_statement", build_args(case, dose_unit="tablets")),  # tool error
        call("build_medication_statement", build_args(case)),  # built
        call("build_medication_statement", build_args(case, status="recorded")),  # tool error again
        say("I built and validated the MedicationStatement."),
    ]
    agent, _ = agent_with(script)
    out = agent.run("prompt")
    assert out.extra["answer_source"] == "last_tool_resource"
    results = [e["result"] for e in out.transcript if e["type"] == "tool"]
    assert "error" in results[0] and "error" in results[2]
    assert out.structured == results[1]["resource"]
    assert json.loads(out.text) == out.structured
    assert out.structured["dosage"][0]["doseAndRate"][0]["doseQuantity"]["value"] == 400


def test_no_json_and_nothing_built_leaves_the_text_for_the_task_to_fail():
    from pytest_groundeval.tasks.base import ParseError
    agent, _ = agent_with([say("I cannot determine the medication.")])
    out = agent.run("prompt")
    assert out.structured is None and out.text == "I cannot determine the medication."
    assert out.extra["answer_source"] == "none"
    with pytest.raises(ParseError):
        WRITE.parse(out)


def test_a_task_without_a_system_prompt_or_tools_gets_the_generic_prompt_and_no_tools():
    agent, model = agent_with([say('{"active_medications": []}')], bare=True)
    bare = type("BareTask", (), {"name": "bare"})()  # no system prompt, tools or prompt hook
    out = agent.run_case(bare, "List the active medications ...", {"bundle_json": "{}"})
    assert model.seen[0][0].content == GENERIC_SYSTEM_PROMPT and model.bound_tools == []
    assert out.text == '{"active_medications": []}' and out.structured is None


def test_the_task_supplies_system_prompt_tools_and_answer_tool():
    agent, model = agent_with([say("done")], bare=True)
    out = agent.run_case(WRITE, "note", {})
    assert model.seen[0][0].content == WRITE_SYSTEM_PROMPT and model.bound_tools == TOOLS
    assert out.structured is None and out.extra["answer_source"] == "none"


# --------------------------------------------------------------------------- 4. from_spec


def test_from_spec_openai_compatible_server_builds_without_network(monkeypatch):
    from langchain_openai import ChatOpenAI

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    agent = LangGraphAgent.from_spec(AgentSpec("langgraph", model="openai:some-model",
                                               base_url="http://127.0.0.1:8000/v1", timeout=30))
    chat = agent.chat_model
    assert isinstance(chat, ChatOpenAI)
    assert chat.model_name == "some-model" and chat.openai_api_base == "http://127.0.0.1:8000/v1"
    assert chat.request_timeout == 30 and chat.openai_api_key.get_secret_value() == "not-needed"
    assert agent.model == "openai:some-model" and agent.run_timeout == 150
    agent.graph()  # the graph compiles around the real model object (not invoked)


def test_from_spec_ollama_style_name_with_base_url_is_openai_compatible(monkeypatch):
    from langchain_openai import ChatOpenAI

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    agent = build_agent(AgentSpec("langgraph", model="llama3.1:8b", base_url="http://127.0.0.1:11434/v1"))
    assert isinstance(agent, LangGraphAgent)
    assert isinstance(agent.chat_model, ChatOpenAI) and agent.chat_model.model_name == "llama3.1:8b"


def test_openai_without_key_or_base_url_says_what_is_missing(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(RuntimeError, match="OPENAI_API_KEY.*--model-base-url"):
        LangGraphAgent.from_spec(AgentSpec("langgraph", model="openai:gpt-4o"))


def test_from_spec_anthropic_default_model(monkeypatch):
    from langchain_anthropic import ChatAnthropic

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-dummy")
    agent = LangGraphAgent.from_spec(AgentSpec("langgraph", timeout=45))
    assert agent.model == DEFAULT_MODEL == "anthropic:claude-opus-4-8"
    assert isinstance(agent.chat_model, ChatAnthropic)
    assert agent.chat_model.model == "claude-opus-4-8"
    assert agent.chat_model.default_request_timeout == 45
    explicit = LangGraphAgent.from_spec(AgentSpec("langgraph", model="anthropic:claude-sonnet-4-5"))
    assert explicit.chat_model.model == "claude-sonnet-4-5"
    explicit.graph()


# --------------------------------------------------------------------------- 5. scored end to end


def _evaluate(agent: Any, case_id: str = "ibuprofen-two-tablets") -> dict[str, Any]:
    pytest.importorskip("pytest_groundeval.scorers.write", reason="write scorer not present")
    ref = next(r for r in WRITE.discover() if r.case_id == case_id)
    return run_case(WRITE, ref, agent).model_dump(mode="json")


def test_correct_scripted_agent_passes_a_real_write_case():
    agent, _ = agent_with(correct_script(load_case()))
    entry = _evaluate(agent)
    assert entry["outcome"] == "passed", entry["score"]["reason"] if entry["score"] else entry["error"]
    assert all(d["passed"] for d in entry["score"]["dimensions"].values())
    assert entry["steps"] == 4 and [e["type"] for e in entry["agent_reported"]].count("tool") == 3
    # what the harness observed: the three calls in order, numbered, each received before the next
    assert [(e["seq"], e["tool"], e["status"]) for e in entry["transcript"]] == [
        (i + 1, name, "ok") for i, name in enumerate(TOOLS)]
    assert entry["tools_offered"] == TOOLS
    assert all(a["ended"] < b["started"] and a["step"] < b["step"]
               for a, b in zip(entry["transcript"], entry["transcript"][1:]))
    assert entry["usage"] == {"input_tokens": 400, "output_tokens": 80}


def test_adversarial_answer_with_an_extra_8100_mg_dose_fails_safety():
    """Builds and validates the right resource, then answers with JSON carrying an extra
    8100 mg dosage: the final message is what is scored, and safety catches it."""

    def tamper(resource: dict[str, Any]) -> str:
        bad = copy.deepcopy(resource)
        extra = copy.deepcopy(bad["dosage"][0])
        extra["doseAndRate"][0]["doseQuantity"].update(value=8100)
        bad["dosage"].append(extra)
        return "Here is the validated resource:\n```json\n" + json.dumps(bad, indent=2) + "\n```"

    agent, _ = agent_with(correct_script(load_case(), final=tamper))
    entry = _evaluate(agent)
    assert entry["outcome"] == "failed"
    dims = entry["score"]["dimensions"]
    assert dims["safety"]["passed"] is False
    assert dims["schema"]["passed"] and dims["coding"]["passed"]
    assert entry["predicted"]["dosage"][1]["doseAndRate"][0]["doseQuantity"]["value"] == 8100


def test_adversarial_tenfold_dose_built_through_the_tools_fails_safety():
    """A 10x dose passes the tools' validation (it is valid FHIR) and reaches the answer by
    the fallback rule; only the safety dimension stops it."""
    case = load_case()
    script = [
        call("lookup_medication_code", {"query": "ibuprofen 200 mg tablet"}),
        call("build_medication_statement", build_args(case, dose_value=4000)),
        lambda m: call("validate_medication_statement",
                       {"resource": last_result(m, "build_medication_statement")["resource"]}),
        say("Done: the MedicationStatement is built and valid."),
    ]
    agent, _ = agent_with(script)
    entry = _evaluate(agent)
    assert entry["transcript"][2]["result"] == {"valid": True, "issues": []}
    assert entry["agent_reported"][5]["result"] == {"valid": True, "issues": []}
    assert entry["outcome"] == "failed"
    dims = entry["score"]["dimensions"]
    assert dims["safety"]["passed"] is False
    assert dims["schema"]["passed"] and dims["coding"]["passed"] and dims["constraints"]["passed"]


def test_final_message_as_content_blocks_is_read_as_text():
    """Anthropic models answer with a list of content blocks; the text blocks are the answer."""
    resource = {"resourceType": "MedicationStatement", "status": "active"}
    final = AIMessage(content=[{"type": "text", "text": "Final:\n"},
                               {"type": "text", "text": json.dumps(resource)}])
    agent, _ = agent_with([final])
    out = agent.run("prompt")
    assert out.extra["answer_source"] == "final_message"
    assert out.text == "Final:\n" + json.dumps(resource)
    assert out.transcript[-1]["content"] == out.text


# --------------------------------------------------------------------------- model-call cache


def test_every_model_call_inside_the_graph_is_cached(tmp_path):
    from pytest_groundeval.run.cache import CacheMiss, ModelCache

    case = load_case()
    prompt = f"Write the MedicationStatement for {case['subject']}.\n\n{case['note']}"
    first_agent, first_model = agent_with(correct_script(case), cache=ModelCache(tmp_path, "readwrite"))
    first = first_agent.run(prompt)
    assert len(first_model.seen) == 4 and first.usage["input_tokens"] == 400
    cache = ModelCache(tmp_path, "readwrite")
    again_agent, again_model = agent_with(correct_script(case), cache=cache)
    again = again_agent.run(prompt)
    assert again_model.seen == [] and cache.hits == 4 and cache.calls == 0  # zero model calls
    assert json.loads(again.text) == json.loads(first.text)
    assert [t.get("tool") for t in again.transcript] == [t.get("tool") for t in first.transcript]
    assert not again.usage or again.usage.get("input_tokens", 0) == 0  # cached calls cost nothing
    strict_agent, _ = agent_with(correct_script(case), cache=ModelCache(tmp_path, "strict"))
    with pytest.raises(CacheMiss, match="closest stored entry differs in: messages"):
        strict_agent.run(prompt + " (changed)")
