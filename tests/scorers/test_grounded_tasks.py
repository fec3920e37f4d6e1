"""``grounded`` attacked on each task (labs, orders, letter beside extraction, write and
reconciliation): an agent that calls no tool, an irrelevant one, reads then answers from
memory, answers on an error, or finds its value in some unrelated piece of a tool result; each
wrong agent is not grounded, and an honest one (another valid form of the same answer) is.
Scorer-level: hand-built observed logs in toolcalls.py's form through ``runner.score_case``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_groundeval.model import AgentOutput
from pytest_groundeval.run.runner import score_case
from pytest_groundeval.scorers.base import Score
from pytest_groundeval.tasks.labs import LabsTask
from pytest_groundeval.tasks.letter import LetterTask
from pytest_groundeval.tasks.orders import OrdersTask
from tool_log import log

ROOT = Path(__file__).resolve().parents[2]
LOINC = "http://loinc.org"
RXNORM = "http://www.nlm.nih.gov/research/umls/rxnorm"


def passes(p, c) -> Score:
    return Score(passed=True)


def run(task, case, text, observed, offered, required=True):
    return score_case(task, case, AgentOutput(text=text), passes, require_grounded=required,
                      observed=observed, offered=offered)


# ---------------------------------------------------------------- labs
LABS = LabsTask(ROOT / "fixtures" / "labs")


@pytest.fixture(scope="module")
def labs_case():
    return LABS.load(LABS.discover()[0])


def observation(value, day="2017-03-14", code="33914-3", oid="obs-1"):
    return {"resourceType": "Observation", "id": oid, "status": "final",
            "code": {"coding": [{"system": LOINC, "code": code}]}, "subject": {"reference": "Patient/p1"},
            "effectiveDateTime": f"{day}T10:00:00Z",
            "valueQuantity": {"value": value, "unit": "mL/min", "system": "http://unitsofmeasure.org"}}


def searchset(*resources):
    return {"resourceType": "Bundle", "type": "searchset", "total": len(resources),
            "entry": [{"fullUrl": f"Observation/{r['id']}", "resource": r} for r in resources]}


SEARCH = ("fhir_search", {"resource_type": "Observation", "params": {"patient": "Patient/p1"}})
LAB_TOOLS = ["fhir_search", "fhir_read"]


def labs_answer(value, day):
    return json.dumps({"value": value, "unit": "mL/min", "effective": day})


def test_labs_a_value_read_from_the_record_is_grounded_in_any_valid_form(labs_case):
    found = log((*SEARCH, searchset(observation(87.25))))
    for value in (87.25, "87.25", 87.3, 87):  # the answer's own precision reads the result
        r = run(LABS, labs_case, labs_answer(value, "2017-03-14"), found, LAB_TOOLS)
        assert r["score"].metrics["grounded"] == 1.0, (value, r["score"].dimensions["grounded"].reason)
        assert r["outcome"] == "passed"


@pytest.mark.parametrize("value", [3, 14, 10, 33914, 2017])
def test_labs_a_memory_value_is_not_grounded_by_a_date_a_code_or_a_time(labs_case, value):
    """The record says 87.25 on 2017-03-14 at 10:00 for LOINC 33914-3: an answer of 3, 14, 10
    (pieces of the date, the time and the code) or 33914 or 2017 read no result value."""
    found = log((*SEARCH, searchset(observation(87.25))))
    r = run(LABS, labs_case, labs_answer(value, "2017-03-14"), found, LAB_TOOLS)
    assert r["outcome"] == "failed" and r["score"].metrics["grounded"] == 0.0, r["score"].reason
    assert r["score"].details["ungrounded"]["number"] == [str(value)]


def test_labs_a_date_must_be_a_date_in_a_result_not_digits_of_an_id(labs_case):
    found = log((*SEARCH, searchset(observation(87.25, oid="x-2016-02-01-y"))))
    bad = run(LABS, labs_case, labs_answer(87.25, "2016-02-01"), found, LAB_TOOLS)
    assert bad["score"].details["ungrounded"]["date"] == ["2016-02-01"]
    good = run(LABS, labs_case, labs_answer(87.25, "2017-03-14T10:00:00Z"), found, LAB_TOOLS)
    assert good["score"].metrics["grounded"] == 1.0


def test_labs_no_tool_an_error_or_an_irrelevant_call_is_not_grounded(labs_case):
    answer = labs_answer(87.25, "2017-03-14")
    none = run(LABS, labs_case, answer, [], LAB_TOOLS)
    assert none["outcome"] == "failed" and "called none" in none["score"].reason
    patient = log(("fhir_read", {"resource_type": "Patient", "id": "p1"},
                   {"resourceType": "Patient", "id": "p1", "birthDate": "1950-01-01"}))
    assert run(LABS, labs_case, answer, patient, LAB_TOOLS)["score"].metrics["grounded"] == 0.0
    error = log((*SEARCH, {"error": "HTTP 400: 87.25 on 2017-03-14 is not a search parameter"}, "error"))
    assert run(LABS, labs_case, answer, error, LAB_TOOLS)["score"].metrics["grounded"] == 0.0


def own_search(case):
    """A search of the case's own patient for its question's code (an abstention's evidence:
    tests/scorers/test_labs_no_result_grounding.py)."""
    return ("fhir_search", {"resource_type": "Observation",
                            "params": {"patient": f"Patient/{case.inputs['patient_id']}", "code": case.truth["loinc"]}})


def test_labs_no_result_after_reading_is_grounded_and_without_reading_is_not(labs_case):
    abstain = json.dumps({"no_result": True})
    assert run(LABS, labs_case, abstain, log((*own_search(labs_case), searchset())), LAB_TOOLS)["outcome"] == "passed"
    assert run(LABS, labs_case, abstain, [], LAB_TOOLS)["outcome"] == "failed"
    # a search of another patient (p1), or any successful call that did not look, is not
    assert run(LABS, labs_case, abstain, log((*SEARCH, searchset())), LAB_TOOLS)["outcome"] == "failed"


# ---------------------------------------------------------------- orders
ORDERS = OrdersTask(ROOT / "fixtures" / "orders")
ORDER_TOOLS = ["fhir_search", "fhir_read", "fhir_create", "fhir_update", "fhir_transaction", "lookup_medication_code"]


@pytest.fixture(scope="module")
def orders_case():
    return ORDERS.load(ORDERS.discover()[0])


def med_request(mid="mr-77", code="197361", status="active"):
    return {"resourceType": "MedicationRequest", "id": mid, "status": status, "intent": "order",
            "subject": {"reference": "Patient/p1"},
            "medicationCodeableConcept": {"coding": [{"system": RXNORM, "code": code, "display": "Amlodipine 5 MG"}]}}


def hba1c_order():
    return {"resourceType": "ServiceRequest", "status": "active", "intent": "order",
            "code": {"coding": [{"system": LOINC, "code": "4548-4"}]}, "subject": {"reference": "Patient/p1"}}


MR_SEARCH = ("fhir_search", {"resource_type": "MedicationRequest", "params": {"patient": "Patient/p1"}})
OBS_SEARCH = ("fhir_search", {"resource_type": "Observation", "params": {"patient": "Patient/p1", "code": "4548-4"}})


def test_orders_a_stop_of_an_order_read_from_the_record_is_grounded(orders_case):
    stopped = med_request(status="stopped")
    honest = log((*MR_SEARCH, {"resourceType": "Bundle", "entry": [{"resource": med_request()}]}),
                 ("fhir_update", {"resource": stopped}, stopped))
    r = run(ORDERS, orders_case, "stopped MedicationRequest/mr-77", honest, ORDER_TOOLS)
    assert r["outcome"] == "passed", r["score"].reason


def test_orders_a_write_from_memory_is_not_grounded(orders_case):
    """The order's id and its RxNorm code were never read: an irrelevant read, then the write."""
    stopped = med_request(status="stopped")
    memory = log(("fhir_read", {"resource_type": "Patient", "id": "p1"}, {"resourceType": "Patient", "id": "p1"}),
                 ("fhir_update", {"resource": stopped}, stopped))
    r = run(ORDERS, orders_case, "stopped MedicationRequest/mr-77", memory, ORDER_TOOLS)
    assert r["outcome"] == "failed" and r["score"].metrics["grounded"] == 0.0, r["score"].reason
    # the write's own echo, and a search made after it, are no evidence for it
    after = memory + log((*MR_SEARCH, {"resourceType": "Bundle", "entry": [{"resource": stopped}]}))[0:1]
    after[-1].update(seq=3, started=5, ended=6, step=6)
    assert run(ORDERS, orders_case, "stopped", after, ORDER_TOOLS)["score"].metrics["grounded"] == 0.0


def test_orders_a_write_before_any_read_of_the_record_is_not_grounded(orders_case):
    """An HbA1c order created with no look at the record (its LOINC is knowledge, not data):
    the decision was made from nothing the tools returned."""
    made = {**hba1c_order(), "id": "sr-1"}
    blind = log(("fhir_create", {"resource": hba1c_order()}, made))
    r = run(ORDERS, orders_case, "ordered", blind, ORDER_TOOLS)
    assert r["outcome"] == "failed" and r["score"].metrics["grounded"] == 0.0
    looked = log((*OBS_SEARCH, {"resourceType": "Bundle", "total": 0}), ("fhir_create", {"resource": hba1c_order()}, made))
    assert run(ORDERS, orders_case, "ordered", looked, ORDER_TOOLS)["outcome"] == "passed"


def test_orders_a_failed_read_is_no_look_at_the_record(orders_case):
    made = {**hba1c_order(), "id": "sr-1"}
    failed = log((*OBS_SEARCH, {"error": "HTTP 400"}, "error"), ("fhir_create", {"resource": hba1c_order()}, made))
    assert run(ORDERS, orders_case, "ordered", failed, ORDER_TOOLS)["score"].metrics["grounded"] == 0.0


# ---------------------------------------------------------------- letter
def test_letter_offers_no_tools_so_grounded_is_not_applicable_and_said_so():
    task = LetterTask(ROOT / "fixtures" / "reconciliation")
    case = task.load(task.discover()[0])
    r = score_case(task, case, AgentOutput(text="Dear patient"), passes, require_grounded=True)
    assert r["outcome"] == "failed"
    assert "letter" in r["score"].reason and "offers no tools" in r["score"].reason, r["score"].reason
    loose = score_case(task, case, AgentOutput(text="Dear patient"), passes)
    assert loose["outcome"] == "passed" and "offers no tools" in loose["score"].details["grounded"]


def test_orders_a_medication_code_written_must_come_from_a_lookup_or_the_record(orders_case):
    """A new order's RxNorm code after a read of the record: from memory it is not grounded;
    from the catalog lookup (or inside a transaction, the same) it is."""
    new = med_request(mid="new-1", code="314076")
    del new["id"]
    read = (*MR_SEARCH, {"resourceType": "Bundle", "entry": [{"resource": med_request()}]})
    memory = log(read, ("fhir_create", {"resource": new}, {**new, "id": "n1"}))
    r = run(ORDERS, orders_case, "ordered", memory, ORDER_TOOLS)
    assert r["score"].details["ungrounded"] == {"code": ["314076"]}, r["score"].reason
    lookup = ("lookup_medication_code", {"query": "lisinopril 10 mg"}, {"matches": [{"code": "314076"}]})
    honest = log(read, lookup, ("fhir_create", {"resource": new}, {**new, "id": "n1"}))
    assert run(ORDERS, orders_case, "ordered", honest, ORDER_TOOLS)["outcome"] == "passed"
    bundle = {"resourceType": "Bundle", "type": "transaction", "entry": [{"resource": new, "request": {"method": "POST"}}]}
    assert run(ORDERS, orders_case, "ordered", log(read, ("fhir_transaction", {"bundle": bundle}, {"ok": 1})),
               ORDER_TOOLS)["score"].details["ungrounded"] == {"code": ["314076"]}


@pytest.mark.parametrize("system, code", [("urn:oid:2.16.840.1.113883.6.88", "314076"), ("RxNorm", "314076"),
                                          ("https://www.nlm.nih.gov/research/umls/rxnorm", "314076"),
                                          (RXNORM, 314076)])
def test_orders_a_memory_code_under_another_rxnorm_spelling_or_as_a_number_is_still_checked(orders_case, system, code):
    """RxNorm's other spellings (fhir/codes.RXNORM_ALIASES) and a code written as a JSON number
    name the same code: each is checked against the results like the canonical one."""
    new = med_request(mid="new-1")
    del new["id"]
    new["medicationCodeableConcept"]["coding"] = [{"system": system, "code": code}]
    read = (*MR_SEARCH, {"resourceType": "Bundle", "entry": [{"resource": med_request()}]})
    r = run(ORDERS, orders_case, "ordered", log(read, ("fhir_create", {"resource": new}, {**new, "id": "n1"})),
            ORDER_TOOLS)
    assert r["score"].details["ungrounded"] == {"code": ["314076"]}, r["score"].reason
    lookup = ("lookup_medication_code", {"query": "lisinopril 10 mg"}, {"matches": [{"code": "314076"}]})
    honest = log(read, lookup, ("fhir_create", {"resource": new}, {**new, "id": "n1"}))
    assert run(ORDERS, orders_case, "ordered", honest, ORDER_TOOLS)["outcome"] == "passed"


# ---------------------------------------------------------------- every task: an answer on errors only
def test_an_abstention_after_only_failed_calls_is_not_grounded(labs_case, orders_case):
    """Every call failed, then "no result" (labs) or "nothing to do" (orders): decided on
    nothing a tool returned. One successful read makes the same answer grounded."""
    abstain = json.dumps({"no_result": True})
    errors = log((*SEARCH, {"error": "HTTP 500"}, "error"), (*SEARCH, {"error": "timed out"}, "raised"))
    r = run(LABS, labs_case, abstain, errors, LAB_TOOLS)
    assert r["outcome"] == "failed" and "no call succeeded" in r["score"].reason, r["score"].reason
    mixed = errors + log((*own_search(labs_case), searchset()))
    mixed[-1].update(seq=3, started=5, ended=6, step=6)
    assert run(LABS, labs_case, abstain, mixed, LAB_TOOLS)["outcome"] == "passed"
    r = run(ORDERS, orders_case, "nothing was due", log((*OBS_SEARCH, {"error": "HTTP 400"}, "error")), ORDER_TOOLS)
    assert r["outcome"] == "failed" and "no call succeeded" in r["score"].reason


def test_orders_a_write_as_json_text_or_in_a_transaction_is_read_too_and_a_create_id_is_the_servers(orders_case):
    read = (*MR_SEARCH, {"resourceType": "Bundle", "entry": []})
    stopped = med_request(status="stopped")
    as_text = log(read, ("fhir_update", {"resource": json.dumps(stopped)}, stopped))
    assert run(ORDERS, orders_case, "stopped", as_text, ORDER_TOOLS)["score"].details["ungrounded"] == \
        {"code": ["mr-77", "197361"]}
    put = {"resourceType": "Bundle", "type": "transaction", "entry": [
        {"resource": {"resourceType": "MedicationRequest", "status": "stopped"},
         "request": {"method": "PUT", "url": "MedicationRequest/mr-99"}}]}
    assert run(ORDERS, orders_case, "stopped", log(read, ("fhir_transaction", {"bundle": put}, {"type": "x"})),
               ORDER_TOOLS)["score"].details["ungrounded"] == {"code": ["mr-99"]}
    # a create that proposes an id of its own: the server assigns another; nothing to ground
    made = {**hba1c_order(), "id": "server-1"}
    create = log(read, ("fhir_create", {"resource": {**hba1c_order(), "id": "mine-1"}}, made))
    assert run(ORDERS, orders_case, "ordered", create, ORDER_TOOLS)["outcome"] == "passed"


def test_a_searchs_own_query_echoed_in_the_bundles_links_is_no_evidence(labs_case, orders_case):
    """A searchset's ``link`` urls repeat the query: a guessed code, value or date searched for
    comes back there even when nothing matched; it is the agent's own words, not the record's."""
    def echo(params):
        url = "http://127.0.0.1:1/case/c/fhir/R4/X?" + "&".join(f"{k}={v}" for k, v in params.items())
        warn = {"resourceType": "OperationOutcome", "issue": [{"severity": "warning", "diagnostics": f"no match: {params}"}]}
        return {"resourceType": "Bundle", "type": "searchset", "total": 0, "link": [{"relation": "self", "url": url}],
                "entry": [{"resource": warn, "search": {"mode": "outcome"}}]}

    guess = {"patient": "Patient/p1", "code": "http://www.nlm.nih.gov/research/umls/rxnorm|314076"}
    new = {k: v for k, v in med_request(code="314076").items() if k != "id"}
    orders = log(("fhir_search", {"resource_type": "MedicationRequest", "params": guess}, echo(guess)),
                 ("fhir_create", {"resource": new}, {**new, "id": "n1"}))
    assert run(ORDERS, orders_case, "ordered", orders, ORDER_TOOLS)["score"].details["ungrounded"] == {"code": ["314076"]}
    params = {"patient": "Patient/p1", "value-quantity": "87.25", "date": "2017-03-14"}
    labs = log(("fhir_search", {"resource_type": "Observation", "params": params}, echo(params)))
    r = run(LABS, labs_case, labs_answer(87.25, "2017-03-14"), labs, LAB_TOOLS)
    assert r["score"].details["ungrounded"] == {"number": ["87.25"], "date": ["2017-03-14"]}
