"""The orders scorer, table-driven: each row is an agent's behaviour on a committed case's
seeded state (acted out on the in-process FHIR stand-in, or a FhirActivity written by hand),
and the exact set of dimensions it must fail. Every dimension fails on a purpose-built wrong
answer, and equivalent right answers (conditional create vs search-then-create, a
transaction vs a single POST, PUT with a client id, the same instant in another offset) pass."""

from __future__ import annotations

import copy
from typing import Any, Callable

import pytest

from orders_fake_fhir import FakeFhir
from pytest_groundeval.fhir.codes import LOINC, SNOMED, UCUM
from pytest_groundeval.model import FhirActivity, FhirChange, FhirExchange
from pytest_groundeval.scorers.orders import score_orders, summarize
from pytest_groundeval.tasks.orders import OrdersTask
from pytest_groundeval.tasks.resources import data_path

HBA = "hba1c-due-lapsed-Danae_Kshlerin_87a339d0"
HBA_RECENT = "hba1c-recent-Emery_Purdy_efe58fa2"
HBA_REPEAT = "hba1c-repeat-Danae_Kshlerin_87a339d0"
BP = "bp-Asa_Hermiston_c79b748f"
BP_REPEAT = "bp-repeat-Juliette_Padberg_10fe9427"
STOP = "stop-Angelic_Mueller_2ec622d5"
STOP_REPEAT = "stop-repeat-Twanda_Rippin_b85d7e00"

_TASK = OrdersTask(data_path("orders"))
_CASES = {ref.case_id: ref for ref in _TASK.discover()}


def load(case_id: str):
    return _TASK.load(_CASES[case_id])


# ---------------------------------------------------------------- resources an agent writes
def order(truth: dict[str, Any], **over: Any) -> dict[str, Any]:
    r = {"resourceType": "ServiceRequest", "status": "active", "intent": "order",
         "code": {"coding": [{"system": LOINC, "code": "4548-4", "display": "Hemoglobin A1c"}]},
         "subject": {"reference": truth["patient"]}, "authoredOn": truth["today"]}
    r.update(over)
    return {k: v for k, v in r.items() if v is not None}


def reading(truth: dict[str, Any], **over: Any) -> dict[str, Any]:
    e = truth["expected"]

    def comp(code: str, value: Any, unit: str = "mm[Hg]") -> dict[str, Any]:
        return {"code": {"coding": [{"system": LOINC, "code": code}]},
                "valueQuantity": {"value": value, "unit": "mmHg", "system": UCUM, "code": unit}}

    r = {"resourceType": "Observation", "status": "final",
         "category": [{"coding": [{"system": "http://terminology.hl7.org/CodeSystem/observation-category",
                                   "code": "vital-signs"}]}],
         "code": {"coding": [{"system": LOINC, "code": "85354-9"}]}, "subject": {"reference": truth["patient"]},
         "effectiveDateTime": e["effective"],
         "component": [comp("8480-6", e["systolic"]), comp("8462-4", e["diastolic"])]}
    r.update(over)
    return {k: v for k, v in r.items() if v is not None}


def search_first(fake: FakeFhir, truth: dict[str, Any], rtype: str) -> None:
    fake.fhir_search(rtype, {"patient": truth["patient"]})


def target_mr(fake: FakeFhir, truth: dict[str, Any]) -> dict[str, Any]:
    rid = (truth["expected"] or {}).get("id") or truth["existing"][0]
    return copy.deepcopy(fake.state[rid])


# ---------------------------------------------------------------- behaviours
def a_order(fake, t):
    search_first(fake, t, "Observation")
    fake.fhir_create(order(t))


def a_conditional_order(fake, t):
    fake.fhir_create(order(t), if_none_exist=f"patient={t['patient']}&code={LOINC}|4548-4&status=active")


def a_order_in_transaction(fake, t):
    fake.fhir_transaction({"resourceType": "Bundle", "type": "transaction", "entry": [
        {"resource": order(t), "request": {"method": "POST", "url": "ServiceRequest"}}]})


def a_order_put_client_id(fake, t):
    fake.fhir_update({**order(t), "id": "my-a1c-order"})


def a_duplicate_order(fake, t):
    fake.fhir_create(order(t))
    fake.fhir_create(order(t))


def a_wrong_patient(fake, t):
    fake.fhir_create(order(t, subject={"reference": "Patient/someone-else"}))


def a_code_other_system(fake, t):
    fake.fhir_create(order(t, code={"coding": [{"system": SNOMED, "code": "4548-4"}]}))


def a_other_loinc(fake, t):
    fake.fhir_create(order(t, code={"coding": [{"system": LOINC, "code": "17856-6"}]}))


def a_draft(fake, t):
    fake.fhir_create(order(t, status="draft"))


def a_invalid_status(fake, t):
    fake.fhir_create(order(t, status="ordered"))


def a_not_authored_today(fake, t):
    fake.fhir_create(order(t, authoredOn="2020-01-01"))


def a_do_not_perform(fake, t):
    fake.fhir_create(order(t, doNotPerform=True))


def a_unknown_element(fake, t):
    fake.fhir_create(order(t, priorityy="routine"))


def a_collateral_delete(fake, t):
    fake.fhir_create(order(t))
    old = next(k for k in fake.state if k.startswith("Observation/"))
    fake.fhir_delete(*old.split("/"))


def a_collateral_update(fake, t):
    fake.fhir_create(order(t))
    key = next(k for k in fake.state if k.startswith("Condition/"))
    fake.fhir_update({**fake.state[key], "clinicalStatus": {"coding": [{"code": "resolved"}]}})


def a_create_delete_create(fake, t):
    first = fake.fhir_create(order(t))
    fake.fhir_delete("ServiceRequest", first["id"])
    fake.fhir_create(order(t))


def a_refused(fake, t):
    fake.refuse.add("ServiceRequest")
    fake.fhir_create(order(t))


def a_nothing(fake, t):
    fake.fhir_search("Condition", {"patient": t["patient"]})


def a_create_then_delete(fake, t):
    made = fake.fhir_create(order(t))
    fake.fhir_delete("ServiceRequest", made["id"])


def a_refused_attempt(fake, t):
    fake.refuse.add("ServiceRequest")
    fake.fhir_create(order(t))


def a_reading(fake, t):
    search_first(fake, t, "Observation")
    fake.fhir_create(reading(t))


def a_reading_utc(fake, t):
    from datetime import timezone

    from pytest_groundeval.tasks.orders import parse_instant

    utc = parse_instant(t["expected"]["effective"]).astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    fake.fhir_create(reading(t, effectiveDateTime=utc))


def a_reading_date_only(fake, t):
    fake.fhir_create(reading(t, effectiveDateTime=t["today"]))


def a_reading_wrong_unit(fake, t):
    r = reading(t)
    r["component"][0]["valueQuantity"]["code"] = "mmHg"
    fake.fhir_create(r)


def a_reading_swapped(fake, t):
    r = reading(t)
    r["component"][0]["valueQuantity"]["value"], r["component"][1]["valueQuantity"]["value"] = (
        r["component"][1]["valueQuantity"]["value"], r["component"][0]["valueQuantity"]["value"])
    fake.fhir_create(r)


def a_reading_old_panel_code(fake, t):
    fake.fhir_create(reading(t, code={"coding": [{"system": LOINC, "code": "55284-4"}]}))


def a_reading_unit_no_system(fake, t):
    r = reading(t)
    for c in r["component"]:
        c["valueQuantity"].pop("system")
    fake.fhir_create(r)


def a_reading_twice(fake, t):
    fake.fhir_create(reading(t))
    fake.fhir_create(reading(t))


def a_duplicate_of_seeded_reading(fake, t):
    e = next(r for k, r in fake.state.items() if k == t["existing"][0])
    fake.fhir_create({k: v for k, v in e.items() if k not in ("id", "meta")})


def a_stop(fake, t):
    fake.fhir_search("MedicationRequest", {"patient": t["patient"]})
    fake.fhir_update({**target_mr(fake, t), "status": "stopped"})


def a_stop_with_reason_in_transaction(fake, t):
    mr = {**target_mr(fake, t), "status": "stopped", "statusReason": {"text": "side effects"}}
    fake.fhir_transaction({"resourceType": "Bundle", "type": "transaction", "entry": [
        {"resource": mr, "request": {"method": "PUT", "url": f"MedicationRequest/{mr['id']}"}}]})


def a_stop_cancelled(fake, t):
    fake.fhir_update({**target_mr(fake, t), "status": "cancelled"})


def a_stop_dropping_elements(fake, t):
    mr = target_mr(fake, t)
    keep = {k: v for k, v in mr.items() if k not in ("dosageInstruction", "authoredOn")}
    fake.fhir_update({**keep, "status": "stopped"})


def a_stop_by_replacing(fake, t):
    mr = target_mr(fake, t)
    fake.fhir_delete("MedicationRequest", mr["id"])
    fake.fhir_create({**{k: v for k, v in mr.items() if k not in ("id", "meta")}, "status": "stopped"})


def a_stop_the_wrong_one(fake, t):
    other = next(r for k, r in fake.state.items() if k.startswith("MedicationRequest/")
                 and k != t["expected"]["id"] and r.get("status") == "active")
    fake.fhir_update({**other, "status": "stopped"})


def a_stop_and_another(fake, t):
    a_stop(fake, t)
    a_stop_the_wrong_one(fake, t)


def a_restop(fake, t):
    fake.fhir_update({**target_mr(fake, t), "status": "stopped"})


DUE = {"persisted", "valid", "correct"}
ALL_DUE = DUE | {"no_collateral"}

# (case, behaviour, the dimensions that must fail)
TABLE: list[tuple[str, Callable[..., None], set[str]]] = [
    # hba1c, due: right answers
    (HBA, a_order, set()),
    (HBA, a_conditional_order, set()),
    (HBA, a_order_in_transaction, set()),
    (HBA, a_order_put_client_id, set()),
    # hba1c, due: wrong answers
    (HBA, a_nothing, DUE),
    (HBA, a_duplicate_order, {"no_collateral"}),
    (HBA, a_wrong_patient, {"correct"}),
    (HBA, a_code_other_system, {"correct"}),
    (HBA, a_other_loinc, {"correct"}),
    (HBA, a_draft, {"correct"}),
    (HBA, a_invalid_status, {"valid", "correct"}),
    (HBA, a_not_authored_today, {"correct"}),
    (HBA, a_do_not_perform, {"correct"}),
    (HBA, a_unknown_element, {"valid", "correct"}),  # correct: "unverified element: priorityy"
    (HBA, a_collateral_delete, {"no_collateral"}),
    (HBA, a_collateral_update, {"no_collateral"}),
    (HBA, a_create_delete_create, {"no_collateral"}),
    (HBA, a_refused, DUE),
    # hba1c, nothing due (a recent result; the order placed already)
    (HBA_RECENT, a_nothing, set()),
    (HBA_RECENT, a_order, {"abstained", "no_collateral"}),
    (HBA_RECENT, a_create_then_delete, {"abstained", "no_collateral"}),
    (HBA_RECENT, a_refused_attempt, {"abstained"}),
    (HBA_REPEAT, a_nothing, set()),
    (HBA_REPEAT, a_conditional_order, set()),  # the server finds the order: nothing written
    (HBA_REPEAT, a_order, {"abstained", "no_collateral"}),
    # bp
    (BP, a_reading, set()),
    (BP, a_reading_utc, set()),
    (BP, a_nothing, DUE),
    (BP, a_reading_date_only, {"correct"}),
    (BP, a_reading_wrong_unit, {"correct"}),
    (BP, a_reading_swapped, {"correct"}),
    (BP, a_reading_old_panel_code, {"correct"}),
    (BP, a_reading_unit_no_system, {"valid", "correct"}),
    (BP, a_reading_twice, {"no_collateral"}),
    (BP_REPEAT, a_nothing, set()),
    (BP_REPEAT, a_duplicate_of_seeded_reading, {"abstained", "no_collateral"}),
    # stop
    (STOP, a_stop, set()),
    (STOP, a_stop_with_reason_in_transaction, set()),
    (STOP, a_nothing, DUE),
    (STOP, a_stop_cancelled, {"correct"}),
    (STOP, a_stop_dropping_elements, {"correct"}),
    (STOP, a_stop_by_replacing, DUE | {"no_collateral"}),
    (STOP, a_stop_the_wrong_one, DUE | {"no_collateral"}),
    (STOP, a_stop_and_another, {"no_collateral"}),
    (STOP_REPEAT, a_nothing, set()),
    (STOP_REPEAT, a_restop, {"abstained"}),  # an unchanged rewrite: a write where none was due
]


def run(case_id: str, behaviour: Callable[..., None]):
    case = load(case_id)
    fake = FakeFhir(case.inputs["bundle"])
    behaviour(fake, case.truth)
    return score_orders(fake.activity(), case.truth), case


@pytest.mark.parametrize(("case_id", "behaviour", "fails"), TABLE,
                         ids=[f"{c.split('-')[0]}-{b.__name__[2:]}" for c, b, _ in TABLE])
def test_dimensions(case_id, behaviour, fails):
    score, case = run(case_id, behaviour)
    failed = {name for name, d in score.dimensions.items() if not d.passed}
    assert failed == fails, score.reason
    assert score.passed is (not fails)
    due = case.truth["due"]
    expected_dims = (DUE | {"no_collateral"}) if due else {"abstained", "no_collateral"}
    assert set(score.dimensions) == expected_dims
    assert set(score.metrics) == expected_dims | {"pass"}
    for name, d in score.dimensions.items():
        assert d.reason and all(c.reason for c in d.checks)
        assert score.metrics[name] == (1.0 if d.passed else 0.0)


def test_every_dimension_fails_somewhere():
    failing = set().union(*(f for _, _, f in TABLE))
    assert failing == {"persisted", "valid", "correct", "no_collateral", "abstained"}


def test_reasons_name_what_is_wrong():
    score, _ = run(HBA, a_wrong_patient)
    assert "Patient/someone-else" in score.dimensions["correct"].reason
    score, _ = run(HBA, a_duplicate_order)
    assert "created ServiceRequest/new-" in score.dimensions["no_collateral"].reason
    score, _ = run(HBA, a_code_other_system)
    assert "another system" in score.dimensions["correct"].reason
    score, _ = run(STOP, a_stop_dropping_elements)
    assert "authoredOn" in score.dimensions["correct"].reason
    score, _ = run(HBA_RECENT, a_create_then_delete)
    assert "is gone again" in score.dimensions["no_collateral"].reason


def test_no_activity_fails_every_dimension():
    case = load(HBA)
    score = score_orders(None, case.truth)
    assert not score.passed and all(not d.passed for d in score.dimensions.values())
    case = load(HBA_RECENT)
    assert set(score_orders(None, case.truth).dimensions) == {"abstained", "no_collateral"}


def test_a_cut_log_cannot_show_abstention():
    case = load(HBA_RECENT)
    fake = FakeFhir(case.inputs["bundle"])
    a_nothing(fake, case.truth)
    score = score_orders(fake.activity(requests_cut=3), case.truth)
    assert not score.dimensions["abstained"].passed and "3 request(s)" in score.dimensions["abstained"].reason
    assert not score.dimensions["no_collateral"].passed
    case = load(HBA)
    fake = FakeFhir(case.inputs["bundle"])
    a_order(fake, case.truth)
    score = score_orders(fake.activity(requests_cut=1), case.truth)
    assert {k for k, d in score.dimensions.items() if not d.passed} == {"no_collateral"}


# ---------------------------------------------------------------- FhirActivity written by hand
def test_hand_written_transaction_equals_single_post():
    """The record's own shape (as a --rescore reads it back): a transaction whose response
    entries carry only a status and a location counts as the single POST it equals."""
    case = load(HBA)
    made = {**order(case.truth), "id": "abc"}
    change = FhirChange(kind="created", resource_type="ServiceRequest", id="abc", after=made)
    single = FhirActivity(base_url="http://x/fhir/R4", changes=[change], requests=[
        FhirExchange(seq=1, method="POST", path="ServiceRequest", status=201, request=order(case.truth), response=made)])
    tx = FhirActivity(base_url="http://x/fhir/R4", changes=[change], requests=[
        FhirExchange(seq=1, method="POST", path="", status=200,
                     request={"resourceType": "Bundle", "type": "transaction", "entry": [
                         {"resource": order(case.truth), "request": {"method": "POST", "url": "ServiceRequest"}}]},
                     response={"resourceType": "Bundle", "type": "transaction-response", "entry": [
                         {"response": {"status": "201 Created", "location": "ServiceRequest/abc/_history/1"}}]})])
    for activity in (single, tx, single.model_dump(mode="json")):
        score = score_orders(activity, case.truth)
        assert score.passed, score.reason
    # the transaction's create, deleted later by hand: the log shows what the diff does not
    gone = tx.model_copy(update={"changes": []})
    score = score_orders(gone, case.truth)
    assert not score.dimensions["persisted"].passed
    assert "ServiceRequest/abc was created" in score.dimensions["no_collateral"].reason


def test_a_refused_transaction_wrote_nothing():
    case = load(HBA_RECENT)
    activity = FhirActivity(base_url="http://x/fhir/R4", requests=[
        FhirExchange(seq=1, method="POST", path="", status=400, refused="write cap",
                     request={"resourceType": "Bundle", "type": "transaction", "entry": [
                         {"resource": order(case.truth), "request": {"method": "POST", "url": "ServiceRequest"}}]},
                     response={"resourceType": "OperationOutcome"})])
    score = score_orders(activity, case.truth)
    assert score.dimensions["no_collateral"].passed
    assert not score.dimensions["abstained"].passed and "refused" in score.dimensions["abstained"].reason


def test_summary_rates_over_the_applicable_cases():
    from pytest_groundeval.model import CaseResult, ErrorInfo, ScoreRecord

    results = []
    for cid, behaviour in ((HBA, a_order), (HBA, a_draft), (HBA_RECENT, a_nothing), (HBA_RECENT, a_order)):
        score, case = run(cid, behaviour)
        results.append(CaseResult(case_id=cid, task="orders", outcome="passed" if score.passed else "failed",
                                  score=ScoreRecord.model_validate(score), ground_truth=case.truth))
    results.append(CaseResult(case_id="err", task="orders", outcome="error",
                              error=ErrorInfo(kind="agent", message="the agent failed")))
    s = summarize(results)
    assert (s["persisted"], s["persisted_n"]) == (1.0, 2)
    assert (s["correct"], s["correct_n"]) == (0.5, 2)
    assert (s["abstained"], s["abstained_n"]) == (0.5, 2)
    assert s["no_collateral"] == 0.6  # 3 of 5: the error counts 0
    assert s["pass"] == 0.4
    _TASK.summary(results)  # the figures are the declared ones


def test_a_post_search_or_operation_is_no_write():
    case = load(HBA_RECENT)
    activity = FhirActivity(base_url="http://x/fhir/R4", requests=[
        FhirExchange(seq=1, method="POST", path="Observation/_search", status=200, request=None,
                     response={"resourceType": "Bundle", "type": "searchset"}),
        FhirExchange(seq=2, method="POST", path="ServiceRequest/$validate", status=200,
                     request=order(case.truth), response={"resourceType": "OperationOutcome"})])
    assert score_orders(activity, case.truth).passed
    # ... while the same body POSTed to the type is a write where none was due
    activity.requests[1] = activity.requests[1].model_copy(update={"path": "ServiceRequest", "status": 201})
    assert not score_orders(activity, case.truth).dimensions["abstained"].passed
