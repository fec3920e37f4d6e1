"""The orders scorer under attack (helper audit): answers built to pass without being what a
clinician would sign, each on a committed case's seeded state acted out on the in-process FHIR
stand-in (or a request log written by hand), with the dimensions each must fail; and, beside
each, an equivalent right answer in another valid form that must still pass.

Attacks: a subject that does not resolve to the patient on this server (``urn:uuid:``, an
absolute URL of another server, a contained patient); an order that does not act now (a date
in the past or a year ahead, a repeating schedule, several tests, as needed); a blood pressure
reading that is not the note's (a ``<`` comparator, an absent-reason beside the value, about
another focus); a resource changed and changed back within the case (the diff is empty, the
history is not); a GraphQL mutation (a write the REST log does not show as one); a stop that
also relabels or rewrites the MedicationRequest (a security label, the notes it had)."""

from __future__ import annotations

import copy
from datetime import date, timedelta
from typing import Any, Callable

import pytest

from orders_fake_fhir import BASE, FakeFhir
from pytest_groundeval.model import FhirActivity, FhirExchange
from pytest_groundeval.scorers.orders import score_orders, writes
from test_orders_scorer import BP, HBA, HBA_RECENT, STOP, STOP_REPEAT, a_order, load, order, reading, target_mr


def day(t: dict[str, Any], days: int) -> str:
    return (date.fromisoformat(t["today"]) + timedelta(days=days)).isoformat()


def pid(t: dict[str, Any]) -> str:
    return t["patient"].split("/", 1)[1]


# ---------------------------------------------------------------- subject forms
def a_subject_urn_uuid(fake, t):
    fake.fhir_create(order(t, subject={"reference": f"urn:uuid:{pid(t)}"}))


def a_subject_other_server(fake, t):
    fake.fhir_create(order(t, subject={"reference": f"https://elsewhere.example/fhir/Patient/{pid(t)}"}))


def a_subject_contained(fake, t):
    fake.fhir_create(order(t, contained=[{"resourceType": "Patient", "id": "p"}], subject={"reference": "#p"}))


def a_reading_subject_urn(fake, t):
    fake.fhir_create(reading(t, subject={"reference": f"urn:uuid:{pid(t)}"}))


# equivalent right forms: the server's own base, a version-specific reference, a typed one
def a_subject_own_base(fake, t):
    fake.fhir_create(order(t, subject={"reference": f"{BASE}/Patient/{pid(t)}"}))


def a_subject_versioned_typed(fake, t):
    fake.fhir_create(order(t, subject={"reference": f"Patient/{pid(t)}/_history/1", "type": "Patient"}))


# ---------------------------------------------------------------- an order that does not act now
def a_order_in_the_past(fake, t):
    fake.fhir_create(order(t, occurrenceDateTime=day(t, -30)))


def a_order_a_year_ahead(fake, t):
    fake.fhir_create(order(t, occurrenceDateTime=day(t, 360)))


def a_order_period_ahead(fake, t):
    fake.fhir_create(order(t, occurrencePeriod={"start": day(t, 200), "end": day(t, 230)}))


def a_order_repeating(fake, t):
    fake.fhir_create(order(t, occurrenceTiming={"repeat": {"frequency": 1, "period": 1, "periodUnit": "d",
                                                           "boundsDuration": {"value": 1, "unit": "a"}}}))


def a_order_ten_tests(fake, t):
    fake.fhir_create(order(t, quantityQuantity={"value": 10}))


def a_order_as_needed(fake, t):
    fake.fhir_create(order(t, asNeededBoolean=True))


# equivalent right forms: for today, within the coming weeks, one test, not as needed
def a_order_today(fake, t):
    fake.fhir_create(order(t, occurrenceDateTime=f"{t['today']}T09:00:00Z", quantityQuantity={"value": 1},
                           asNeededBoolean=False))


def a_order_within_weeks(fake, t):
    fake.fhir_create(order(t, occurrencePeriod={"start": t["today"], "end": day(t, 14)}, priority="routine"))


def a_order_single_timing_event(fake, t):
    fake.fhir_create(order(t, occurrenceTiming={"event": [day(t, 3)]}))


# ---------------------------------------------------------------- a reading that is not the note's
def a_reading_comparator(fake, t):
    r = reading(t)
    r["component"][0]["valueQuantity"]["comparator"] = "<"
    fake.fhir_create(r)


def a_reading_absent_beside_value(fake, t):
    r = reading(t)
    r["component"][1]["dataAbsentReason"] = {"coding": [{"system": "http://terminology.hl7.org/CodeSystem/"
                                                                   "data-absent-reason", "code": "error"}]}
    fake.fhir_create(r)


def a_reading_other_focus(fake, t):
    fake.fhir_create(reading(t, focus=[{"reference": "Patient/someone-else"}]))


def a_reading_decimal_values(fake, t):  # right: 120.0 is 120
    r = reading(t)
    for c in r["component"]:
        c["valueQuantity"]["value"] = float(c["valueQuantity"]["value"])
    fake.fhir_create(r)


# ---------------------------------------------------------------- changed and changed back
def _first(fake, prefix: str) -> dict[str, Any]:
    return copy.deepcopy(next(r for k, r in sorted(fake.state.items()) if k.startswith(prefix)))


def a_order_and_a_condition_resolved_then_restored(fake, t):
    a_order(fake, t)
    cond = _first(fake, "Condition/")
    fake.fhir_update({**cond, "clinicalStatus": {"coding": [{"code": "resolved"}]}})
    fake.fhir_update(cond)


def a_stop_and_another_stopped_then_restored(fake, t):
    fake.fhir_update({**target_mr(fake, t), "status": "stopped"})
    other = next(copy.deepcopy(r) for k, r in sorted(fake.state.items()) if k.startswith("MedicationRequest/")
                 and k != t["expected"]["id"] and r.get("status") == "active")
    fake.fhir_update({**other, "status": "stopped"})
    fake.fhir_update(other)


def a_order_and_an_unchanged_rewrite(fake, t):  # an unchanged rewrite changes nothing: not collateral
    a_order(fake, t)
    fake.fhir_update(_first(fake, "Condition/"))


def a_order_fixed_in_place(fake, t):  # right: the order it created, corrected by a second PUT
    made = fake.fhir_create(order(t, authoredOn="2001-01-01"))
    fake.fhir_update({**made, "authoredOn": t["today"]})


def a_stop_in_two_steps(fake, t):  # right: stopped, then its reason added
    mr = {**target_mr(fake, t), "status": "stopped"}
    fake.fhir_update(mr)
    fake.fhir_update({**mr, "statusReason": {"text": "the note says it was stopped"}})


# ---------------------------------------------------------------- a stop that rewrites more
def a_stop_with_a_security_label(fake, t):
    mr = target_mr(fake, t)
    meta = {**(mr.get("meta") or {}), "security": [{"system": "http://terminology.hl7.org/CodeSystem/"
                                                               "v3-Confidentiality", "code": "R"}]}
    fake.fhir_update({**mr, "status": "stopped", "meta": meta})


def a_stop_dropping_notes(fake, t):
    mr = target_mr(fake, t)
    fake.state[t["expected"]["id"]] = {**mr, "note": [{"text": "take with food"}]}  # the record had a note
    fake.before[t["expected"]["id"]] = copy.deepcopy(fake.state[t["expected"]["id"]])
    fake.fhir_update({**target_mr(fake, t), "status": "stopped", "note": [{"text": "stopped per note"}]})


def a_stop_without_meta(fake, t):  # right: PUT without the meta it read (the server's tags dropped)
    mr = {k: v for k, v in target_mr(fake, t).items() if k != "meta"}
    fake.fhir_update({**mr, "status": "stopped"})
    fake.state[t["expected"]["id"]].pop("meta", None)


def a_stop_adding_a_note(fake, t):  # right: the old notes kept, one added
    mr = target_mr(fake, t)
    fake.state[t["expected"]["id"]] = {**mr, "note": [{"text": "take with food"}]}
    fake.before[t["expected"]["id"]] = copy.deepcopy(fake.state[t["expected"]["id"]])
    fake.fhir_update({**target_mr(fake, t), "status": "stopped",
                      "note": [{"text": "take with food"}, {"text": "stopped per note"}]})


# ---------------------------------------------------------------- status, intent and code games (pinned)
def _order_with(**over):
    def behaviour(fake, t):
        fake.fhir_create(order(t, **over))
    behaviour.__name__ = "a_" + "_".join(f"{k}_{v if isinstance(v, str) else 'x'}" for k, v in over.items())
    return behaviour


def _stop_as(status):
    def behaviour(fake, t):
        fake.fhir_update({**target_mr(fake, t), "status": status})
    behaviour.__name__ = f"a_stop_as_{status}"
    return behaviour


def a_order_restricted(fake, t):
    fake.fhir_create(order(t, meta={"security": [{"system": "http://terminology.hl7.org/CodeSystem/v3-Confidentiality",
                                                  "code": "R"}]}))


def a_order_tagged(fake, t):  # right: a tag says where it came from, it hides nothing
    fake.fhir_create(order(t, meta={"tag": [{"system": "https://example.org/agent", "code": "protocol"}]}))


def a_code_text_only(fake, t):
    fake.fhir_create(order(t, code={"text": "Hemoglobin A1c"}))


def a_code_with_a_translation(fake, t):  # right: LOINC 4548-4 with a SNOMED translation beside it
    fake.fhir_create(order(t, code={"coding": [{"system": "http://loinc.org", "code": "4548-4"},
                                               {"system": "http://snomed.info/sct", "code": "43396009"}]}))


def a_order_for_a_new_patient(fake, t):
    made = fake.fhir_create({"resourceType": "Patient", "name": [{"family": "Doe"}]})
    fake.fhir_create(order(t, subject={"reference": f"Patient/{made['id']}"}))


def a_order_unless_any_order(fake, t):
    """Orders unless the patient has any ServiceRequest at all (no code, no status read)."""
    fake.fhir_create(order(t), if_none_exist=f"patient={t['patient']}")


def a_order_unless_an_open_hba1c_order(fake, t):  # right: the protocol's own condition
    fake.fhir_create(order(t), if_none_exist=f"patient={t['patient']}&code=http://loinc.org|4548-4&status=active")


def _stop_with(**over):
    def behaviour(fake, t):
        fake.fhir_update({**target_mr(fake, t), "status": "stopped", **over})
    behaviour.__name__ = "a_stop_with_" + "_".join(over)
    return behaviour


def a_order_not_to_do_modifier(fake, t):  # a modifier extension the reader cannot know: an order not to do
    fake.fhir_create(order(t, modifierExtension=[{"url": "https://example.org/not-to-do", "valueBoolean": True}]))


def a_order_subject_a_group(fake, t):
    fake.fhir_create(order(t, subject={"reference": t["patient"], "type": "Group"}))


def a_order_subject_by_identifier(fake, t):
    fake.fhir_create(order(t, subject={"identifier": {"value": pid(t)}}))


def a_order_authored_late_in_another_offset(fake, t):  # right: today where it was written (a UTC tomorrow)
    fake.fhir_create(order(t, authoredOn=f"{t['today']}T23:30:00-10:00"))


def a_order_for_today_in_another_offset(fake, t):  # right
    fake.fhir_create(order(t, occurrenceDateTime=f"{t['today']}T23:30:00-12:00"))


def _subject_with(**extra):
    def behaviour(fake, t):
        fake.fhir_create(order(t, subject={"reference": t["patient"], **extra}))
    behaviour.__name__ = "a_subject_with_" + "_".join(f"{k}_{str(v)[:12]}" for k, v in extra.items())
    return behaviour


def a_subject_named_as_on_the_record(fake, t):  # right: the record's own spelling, digits and all
    fake.fhir_create(order(t, subject={"reference": t["patient"], "display": "Danae554 Kshlerin58"}))


def a_subject_with_the_patient_s_ssn(fake, t):  # right: one of the patient's own identifiers
    ssn = next(i for i in t["patient_identifiers"] if i.count("-") == 2 and len(i) == 11)
    fake.fhir_create(order(t, subject={"reference": t["patient"], "identifier": {"value": ssn}}))


def a_reading_of_someone_else_by_display(fake, t):
    fake.fhir_create(reading(t, subject={"reference": t["patient"], "display": "John Smith"}))


DECOY = "hba1c-due-decoy-Hiedi_Bruen_b361ebbe"
DUE = {"persisted", "valid", "correct"}

# (case, behaviour, the dimensions that must fail)
TABLE: list[tuple[str, Callable[..., None], set[str]]] = [
    *[(HBA, _order_with(status=st), {"correct"}) for st in ("draft", "on-hold", "revoked", "completed",
                                                              "entered-in-error")],
    *[(HBA, _order_with(intent=it), {"correct"}) for it in ("proposal", "plan", "directive", "original-order")],
    *[(STOP, _stop_as(st), {"correct"}) for st in ("on-hold", "cancelled", "completed", "entered-in-error")],
    (DECOY, a_order_unless_any_order, DUE),
    (DECOY, a_order_unless_an_open_hba1c_order, set()),
    (HBA, a_order_unless_any_order, set()),  # no order of any kind in the record: it cannot tell
    (HBA, a_code_text_only, {"correct"}),
    (HBA, a_order_restricted, {"correct"}),
    (HBA, a_order_tagged, set()),
    (HBA, a_code_with_a_translation, set()),
    (HBA, a_order_for_a_new_patient, {"correct", "no_collateral"}),
    (HBA, a_subject_urn_uuid, {"correct"}),
    (HBA, a_subject_other_server, {"correct"}),
    (HBA, a_subject_contained, {"correct"}),
    (BP, a_reading_subject_urn, {"correct"}),
    (HBA, a_subject_own_base, set()),
    (HBA, a_subject_versioned_typed, set()),
    (HBA, a_order_in_the_past, {"correct"}),
    (HBA, a_order_a_year_ahead, {"correct"}),
    (HBA, a_order_period_ahead, {"correct"}),
    (HBA, a_order_repeating, {"correct"}),
    (HBA, a_order_ten_tests, {"correct"}),
    (HBA, a_order_as_needed, {"correct"}),
    (HBA, a_order_today, set()),
    (HBA, a_order_within_weeks, set()),
    (HBA, a_order_single_timing_event, set()),
    (BP, a_reading_comparator, {"correct"}),
    (BP, a_reading_absent_beside_value, {"correct"}),
    (BP, a_reading_other_focus, {"correct"}),
    (BP, a_reading_decimal_values, set()),
    (HBA, a_order_and_a_condition_resolved_then_restored, {"no_collateral"}),
    (STOP, a_stop_and_another_stopped_then_restored, {"no_collateral"}),
    (HBA, a_order_fixed_in_place, set()),
    (HBA, a_order_and_an_unchanged_rewrite, set()),
    (STOP, a_stop_in_two_steps, set()),
    (STOP, a_stop_with_a_security_label, {"correct"}),
    (STOP, a_stop_dropping_notes, {"correct"}),
    (STOP, a_stop_without_meta, set()),
    (STOP, a_stop_adding_a_note, set()),
    # pinned (helper orders2): meaning changed by a modifier, a wrong JSON type, a subject that
    # is no Patient reference, a stop that changes what else the request says; and right forms
    (HBA, a_order_not_to_do_modifier, {"valid", "correct"}),  # correct: an unverified element
    (HBA, _order_with(doNotPerform="true"), {"valid", "correct"}),  # correct: not plainly false
    (HBA, a_order_subject_a_group, {"correct"}),
    (HBA, a_order_subject_by_identifier, {"correct"}),
    (STOP, _stop_with(intent="proposal"), {"correct"}),
    (STOP, _stop_with(doNotPerform=True), {"correct"}),
    (STOP, _stop_with(modifierExtension=[{"url": "https://example.org/resumed", "valueBoolean": True}]),
     {"valid", "correct"}),
    (HBA, _order_with(priority="stat"), set()),
    (HBA, a_order_authored_late_in_another_offset, set()),
    (HBA, a_order_for_today_in_another_offset, set()),
    # a subject whose display or identifier, beside the patient's reference, names someone else
    (HBA, _subject_with(display="Jane Other"), {"correct"}),
    (HBA, _subject_with(display="J\u200bane &amp; Other"), {"correct"}),
    (HBA, _subject_with(identifier={"system": "http://hl7.org/fhir/sid/us-ssn", "value": "999-00-0000"}), {"correct"}),
    (BP, a_reading_of_someone_else_by_display, {"correct"}),
    (HBA, _subject_with(display="Danae Kshlerin"), set()),
    (HBA, _subject_with(display="the patient"), set()),
    (HBA, _subject_with(display="Mrs. Kshlerin"), set()),
    (HBA, a_subject_named_as_on_the_record, set()),
    (HBA, a_subject_with_the_patient_s_ssn, set()),
]


@pytest.mark.parametrize(("case_id", "behaviour", "fails"), TABLE,
                         ids=[f"{c.split('-')[0]}-{b.__name__[2:]}" for c, b, _ in TABLE])
def test_attack(case_id, behaviour, fails):
    case = load(case_id)
    fake = FakeFhir(case.inputs["bundle"])
    behaviour(fake, case.truth)
    score = score_orders(fake.activity(), case.truth)
    failed = {name for name, d in score.dimensions.items() if not d.passed}
    assert failed == fails, score.reason


def test_reasons_name_the_attack():
    def failing(case_id, behaviour, dim):
        case = load(case_id)
        fake = FakeFhir(case.inputs["bundle"])
        behaviour(fake, case.truth)
        return score_orders(fake.activity(), case.truth).dimensions[dim].reason

    assert "urn:uuid" in failing(HBA, a_subject_urn_uuid, "correct")
    assert "elsewhere.example" in failing(HBA, a_subject_other_server, "correct")
    assert "repeat" in failing(HBA, a_order_repeating, "correct")
    assert "comparator" in failing(BP, a_reading_comparator, "correct")
    assert "and back" in failing(HBA, a_order_and_a_condition_resolved_then_restored, "no_collateral")
    assert "meta.security" in failing(STOP, a_stop_with_a_security_label, "correct")


# ---------------------------------------------------------------- GraphQL: a write the REST log does not name
def _graphql(query: str, status: int = 200, refused: str | None = None) -> FhirExchange:
    return FhirExchange(seq=1, method="POST", path="$graphql", status=status, request={"query": query},
                        response={"data": {}}, refused=refused)


CREATE_AND_DELETE = ('mutation { ServiceRequestCreate(res: {resourceType: "ServiceRequest", status: "active"}) '
                     '{ id } }')


def test_a_graphql_mutation_is_a_write():
    """A mutation created and deleted an order (the diff is empty): on a case with nothing due
    that is a write where none was due, and its effects cannot be read from the log."""
    case = load(HBA_RECENT)
    activity = FhirActivity(base_url=BASE, requests=[_graphql(CREATE_AND_DELETE)])
    assert [w.method for w in writes(activity) if w.is_write] == ["POST"]
    score = score_orders(activity, case.truth)
    failed = {k for k, d in score.dimensions.items() if not d.passed}
    assert failed == {"abstained", "no_collateral"}, score.reason
    assert "GraphQL" in score.dimensions["no_collateral"].reason
    # refused by the server (as it refuses every mutation): an attempt, nothing written
    refused = FhirActivity(base_url=BASE, requests=[_graphql(CREATE_AND_DELETE, 405, "graphql mutation")])
    score = score_orders(refused, case.truth)
    assert {k for k, d in score.dimensions.items() if not d.passed} == {"abstained"}


def test_a_graphql_query_reads_only():
    case = load(STOP_REPEAT)
    activity = FhirActivity(base_url=BASE, requests=[
        _graphql('{ MedicationRequestList(subject: "Patient/x") { id status } }')])
    assert not writes(activity)
    assert score_orders(activity, case.truth).passed
