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
import shutil
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
    node = shutil.which("node")
    if node is None:
        return "Node is not installed"
    try:
        major = int(subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip().lstrip("v")
                    .split(".")[0])
    except (ValueError, OSError):
        return "node --version is unreadable"
    return None if major >= 20 else f"Node {major} < 20"


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
    assert s["n_cases"] == s["n_passed"] == 50 and s["pass"] == 1.0
    assert (s["persisted_n"], s["abstained_n"]) == (24, 26)
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


@pytest.mark.parametrize(("agent", "select", "fails"), WRONG, ids=[w[0] for w in WRONG])
def test_each_wrong_agent_fails_its_dimension(tmp_path, agent, select, fails):
    (tmp_path / "wrong_orders_agents.py").write_text(WRONG_AGENTS)
    rec = _run(tmp_path, "--agent", f"wrong_orders_agents:{agent}", "-k", select)
    assert rec["cases"], rec["_stdout"][-2000:]
    for case in rec["cases"]:
        assert case["outcome"] == "failed", (case["case_id"], case.get("error"))
        failed = {k for k, v in case["score"]["dimensions"].items() if not v["passed"]}
        assert fails <= failed, (case["case_id"], case["score"]["reason"])
