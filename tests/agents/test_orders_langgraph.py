"""The LangGraph agent on orders cases: a real ``create_agent`` graph driven by a scripted chat
model, given the task's system prompt and FHIR tools (here the in-process stand-in's, as
LangChain tools, offline; ``tests/tasks/test_orders_suite.py`` runs the same agent through the
real server and the harness), scored from the server's activity. The script reads what the tools returned, so the writes carry the ids and
values the server gave it."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("langchain.agents", reason="langchain not installed")

from langchain_core.tools import StructuredTool  # noqa: E402
from orders_fake_fhir import BASE, FakeFhir  # noqa: E402
from test_langgraph_agent import ScriptedChatModel, call, say  # noqa: E402

from pytest_groundeval.agents.langgraph_agent import LangGraphAgent  # noqa: E402
from pytest_groundeval.fhir.codes import LOINC  # noqa: E402
from pytest_groundeval.tasks.orders import OrdersTask  # noqa: E402
from pytest_groundeval.tasks.resources import data_path  # noqa: E402

TASK = OrdersTask(data_path("orders"))
REFS = {r.case_id: r for r in TASK.discover()}


def _tools(fake: FakeFhir) -> list[Any]:
    return [StructuredTool.from_function(f, name=f.__name__, description=f.__name__) for f in fake.tools()]


def _result(messages, tool: str) -> Any:
    for m in reversed(messages):
        if m.type == "tool" and m.name == tool:
            return json.loads(m.content) if isinstance(m.content, str) else m.content
    raise AssertionError(f"no {tool} result")


def _run(case_id: str, script: list[Any], monkeypatch) -> tuple[Any, FakeFhir, ScriptedChatModel]:
    """What the harness's server hook does around the call, with the stand-in for the server:
    the base URL into the inputs and prompt, the agent's call, the activity onto the case."""
    case = TASK.load(REFS[case_id])
    fake = FakeFhir(case.inputs["bundle"])
    monkeypatch.setattr(OrdersTask, "agent_tools", lambda self, inputs: _tools(fake))
    model = ScriptedChatModel(script=script)
    case.inputs["fhir_base_url"] = BASE
    out = LangGraphAgent(model=model).run_case(TASK, case.prompt.replace("{fhir_base_url}", BASE), case.inputs)
    case.inputs["fhir_activity"] = fake.activity()
    score = TASK.score(TASK.parse(out), case)
    return (out, score), fake, model


def test_a_scripted_langgraph_agent_orders_once_and_passes(monkeypatch):
    cid = "hba1c-due-lapsed-Danae_Kshlerin_87a339d0"
    truth = TASK.load(REFS[cid]).truth
    patient = truth["patient"]
    script = [
        call("fhir_search", {"resource_type": "Observation", "params": {"patient": patient,
                                                                      "code": f"{LOINC}|4548-4"}}),
        call("fhir_search", {"resource_type": "ServiceRequest", "params": {"patient": patient}}),
        lambda m: call("fhir_create", {"resource": {
            "resourceType": "ServiceRequest", "status": "active", "intent": "order",
            "code": {"coding": [{"system": LOINC, "code": "4548-4"}]}, "subject": {"reference": patient},
            "authoredOn": truth["today"]}}),
        lambda m: say(f"Ordered an HbA1c: ServiceRequest/{_result(m, 'fhir_create')['id']}."),
    ]
    (out, score), fake, model = _run(cid, script, monkeypatch)
    assert score.passed, score.reason
    assert "fhir_create" in model.bound_tools
    assert model.seen[0][0].content == OrdersTask.agent_system_prompt  # the task's system prompt
    assert BASE in model.seen[0][1].content and patient in model.seen[0][1].content
    assert [(x.method, x.status) for x in fake.log] == [("GET", 200), ("GET", 200), ("POST", 201)]
    assert TASK.parse(out) == "Ordered an HbA1c: ServiceRequest/new-1."


def test_a_scripted_agent_that_orders_twice_fails_no_collateral(monkeypatch):
    cid = "hba1c-due-lapsed-Danae_Kshlerin_87a339d0"
    truth = TASK.load(REFS[cid]).truth
    order = {"resourceType": "ServiceRequest", "status": "active", "intent": "order",
             "code": {"coding": [{"system": LOINC, "code": "4548-4"}]}, "subject": {"reference": truth["patient"]},
             "authoredOn": truth["today"]}
    script = [call("fhir_create", {"resource": order}), call("fhir_create", {"resource": order}), say("Done.")]
    (out, score), fake, _ = _run(cid, script, monkeypatch)
    assert {k for k, d in score.dimensions.items() if not d.passed} == {"no_collateral"}
