"""An answer that names no value (orders: nothing written; extraction: no medication) gives
``values`` nothing to check: what grounds it is a look at the record. A successful call of some
other tool (the RxNorm catalog, a resource reader pointed elsewhere) is not one. Scorer-level:
hand-built observed logs through ``runner.score_case``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_groundeval.model import AgentOutput
from pytest_groundeval.run.runner import score_case
from pytest_groundeval.scorers.base import Score
from pytest_groundeval.tasks.orders import OrdersTask
from tool_log import log

ROOT = Path(__file__).resolve().parents[2]
ORDERS = OrdersTask(ROOT / "fixtures" / "orders")
ORDER_TOOLS = ["fhir_search", "fhir_read", "fhir_create", "fhir_update", "fhir_transaction", "lookup_medication_code"]


@pytest.fixture(scope="module")
def orders_case():
    return ORDERS.load(ORDERS.discover()[0])


def run(task, case, text, observed, offered):
    return score_case(task, case, AgentOutput(text=text), lambda p, c: Score(passed=True), require_grounded=True,
                      observed=observed, offered=offered)


def test_orders_nothing_written_after_only_a_catalog_lookup_is_not_grounded(orders_case):
    lookup = ("lookup_medication_code", {"query": "metformin"}, {"matches": [{"code": "860975"}]})
    r = run(ORDERS, orders_case, "nothing is due", log(lookup), ORDER_TOOLS)
    assert r["outcome"] == "failed" and r["score"].metrics["grounded"] == 0.0, r["score"].reason
    assert "read" in r["score"].reason
    pid = orders_case.inputs["patient_id"]
    looked = ("fhir_search", {"resource_type": "Observation", "params": {"patient": f"Patient/{pid}"}},
              {"resourceType": "Bundle", "type": "searchset", "total": 0, "entry": []})
    assert run(ORDERS, orders_case, "nothing is due", log(lookup, looked), ORDER_TOOLS)["outcome"] == "passed"
    failed = (*looked[:2], {"error": "HTTP 500"}, "error")
    assert run(ORDERS, orders_case, "nothing is due", log(lookup, failed), ORDER_TOOLS)["outcome"] == "failed"


# ---------------------------------------------------------------- extraction: no medication
def _extraction():
    from pytest_groundeval.tasks.extraction import ExtractionTask

    task = ExtractionTask(ROOT / "fixtures" / "synthea")
    return task, task.load(task.discover()[0])


EXTRACTION_TOOLS = ["list_medication_requests", "read_resource"]
NONE_ACTIVE = {"status": None, "count": 1, "medication_requests": [
    {"code": "314076", "display": "lisinopril 10 MG", "status": "stopped", "requests": 1, "last_authored_on": None}]}


def _listing(status, result):
    return ("list_medication_requests", {} if status is None else {"status": status}, result)


@pytest.mark.parametrize("status", [None, "active", " Active "])
def test_extraction_no_medication_after_listing_all_or_the_active_ones_is_grounded(status):
    task, case = _extraction()
    listed = {**NONE_ACTIVE, "status": status}
    if status is not None:
        listed = {"status": status, "count": 0, "medication_requests": []}
    r = run(task, case, json.dumps({"active_medications": []}), log(_listing(status, listed)), EXTRACTION_TOOLS)
    assert r["score"].metrics["grounded"] == 1.0, r["score"].reason


def test_extraction_no_medication_without_a_look_at_the_active_requests_is_not_grounded():
    task, case = _extraction()
    empty = json.dumps({"active_medications": []})
    attacks = {
        "a resource read": log(("read_resource", {"reference": "Patient/x"}, {"reference": "Patient/x", "resource": {}})),
        "another status": log(_listing("stopped", {"status": "stopped", "count": 0, "medication_requests": []})),
        "active ones listed": log(_listing(None, {"status": None, "count": 1, "medication_requests": [
            {"code": "197361", "status": "active", "requests": 1}]})),
        "an error": log((*_listing(None, {"error": "bundle cannot be read"}), "error")),
    }
    for what, observed in attacks.items():
        r = run(task, case, empty, observed, EXTRACTION_TOOLS)
        assert r["score"].metrics["grounded"] == 0.0 and r["outcome"] == "failed", what
    # a do-not-perform request is not one to take: listing only it grounds "none"
    dnp = log(_listing(None, {"status": None, "count": 1, "medication_requests": [
        {"code": "197361", "status": "active", "requests": 1, "do_not_perform": True}]}))
    assert run(task, case, empty, dnp, EXTRACTION_TOOLS)["score"].metrics["grounded"] == 1.0


# ---------------------------------------------------------------- an answer that cannot be read
def test_an_unparsed_answer_after_a_successful_call_is_not_grounded(orders_case):
    """Garbage after one successful call: nothing of it can be traced to a tool result, so it
    is not grounded (else a TASK.grounded threshold is met by answers no one can read)."""
    from pytest_groundeval.tasks.extraction import ExtractionTask

    task = ExtractionTask(ROOT / "fixtures" / "synthea")
    case = task.load(task.discover()[0])
    listed = log(("list_medication_requests", {}, {"status": None, "count": 0, "medication_requests": []}))
    r = run(task, case, "I could not decide.", listed, ["list_medication_requests", "read_resource"])
    assert r["predicted"] is None and r["score"].metrics["grounded"] == 0.0, r["score"].dimensions
    assert "could not be read" in r["score"].dimensions["grounded"].reason


# ---------------------------------------------------------------- echoes of a call given as text
def test_a_lookup_called_with_a_plain_string_does_not_ground_its_own_echo(orders_case):
    """A tool invoked with its one argument as a plain string (``tool.invoke("zzqx 314076")``:
    LangChain accepts it) echoes it as ``query``: the agent's own words, not the catalog's, as
    with the argument given as ``{"query": ...}``."""
    pid = orders_case.inputs["patient_id"]
    read = ("fhir_search", {"resource_type": "MedicationRequest", "params": {"patient": f"Patient/{pid}"}},
            {"resourceType": "Bundle", "type": "searchset", "total": 0, "entry": []})
    new = {"resourceType": "MedicationRequest", "status": "active", "intent": "order",
           "subject": {"reference": f"Patient/{pid}"},
           "medicationCodeableConcept": {"coding": [{"system": "http://www.nlm.nih.gov/research/umls/rxnorm",
                                                     "code": "314076"}]}}
    for args in ("zzqx 314076", {"query": "zzqx 314076"}):
        echo = ("lookup_medication_code", args, {"query": "zzqx 314076", "matches": []})
        r = run(ORDERS, orders_case, "ordered", log(read, echo, ("fhir_create", {"resource": new}, {**new, "id": "n"})),
                ORDER_TOOLS)
        assert r["score"].details.get("ungrounded") == {"code": ["314076"]}, (args, r["score"].reason)
    found = ("lookup_medication_code", "lisinopril 10 mg", {"query": "lisinopril 10 mg", "matches": [
        {"code": "314076", "display": "lisinopril 10 MG Oral Tablet", "system": "x", "score": 1.0}]})
    r = run(ORDERS, orders_case, "ordered", log(read, found, ("fhir_create", {"resource": new}, {**new, "id": "n"})),
            ORDER_TOOLS)
    assert "ungrounded" not in r["score"].details, r["score"].reason
