"""Attacks on the orders suite that go through the real FHIR server (helper audit), each scored
by the orders scorer from what the server logged and holds:

* a GraphQL mutation (Medplum's router runs ``POST $graphql`` mutations: a create or delete no
  REST request names, past the write cap and the binding checks) is refused by the server, and
  a GraphQL query still answers;
* a case's FHIR base cannot be computed from the case's public key (its task and case id), so
  an agent cannot reach another case's repository open on the same server (what else such an
  agent may read, /proc and the caches: tests/fhir/test_fhir_case_isolation.py);
* an order whose subject is ``urn:uuid:<patient id>`` is stored as such and a search of the
  patient's orders does not find it (why the scorer fails it);
* a resource changed and changed back within the case shows in the log's stored versions
  (why the scorer fails it) though the state diff is empty."""

from __future__ import annotations

import copy
import hashlib
import json
import urllib.error
import urllib.request

import pytest

from pytest_groundeval.fhir.server.manager import FhirServer, ServerUnavailable, check_node
from pytest_groundeval.fhir.state import diff_states
from pytest_groundeval.model import FhirActivity, FhirExchange
from pytest_groundeval.scorers.orders import score_orders
from pytest_groundeval.tasks.orders import OrdersTask
from pytest_groundeval.tasks.resources import data_path

try:
    check_node()
    NODE = None
except ServerUnavailable as e:
    NODE = e.reason
pytestmark = pytest.mark.skipif(NODE is not None, reason=f"{NODE}")

TASK = OrdersTask(data_path("orders"))
REFS = {r.case_id: r for r in TASK.discover()}
HBA = "hba1c-due-lapsed-Danae_Kshlerin_87a339d0"
HBA_RECENT = "hba1c-recent-Emery_Purdy_efe58fa2"
STOP = "stop-Angelic_Mueller_2ec622d5"


@pytest.fixture(scope="module")
def server():
    s = FhirServer()
    yield s
    s.stop()


def call(base: str, method: str, path: str, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"{base}/{path}", data=data, method=method,
                                 headers={"content-type": "application/fhir+json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def acted(server, case_id: str, act):
    """Open the case as the harness does (its key: task and case id), let ``act(base, case)``
    act on it, and score what the server logged and holds."""
    case = TASK.load(REFS[case_id])
    handle = server.open_case(case.inputs["bundle"], key=f"orders:{case_id}", clock=f"{case.inputs['today']}T00:00:00Z")
    try:
        act(handle.base_url, case)
    finally:
        got = server.activity(handle, close=True)
    activity = FhirActivity(base_url=handle.base_url, requests=[FhirExchange.model_validate(r) for r in got["requests"]],
                            changes=diff_states(handle.before, got["state"]), requests_cut=got["requests_cut"])
    return activity, score_orders(activity, case.truth)


def order(case, **over):
    return {"resourceType": "ServiceRequest", "status": "active", "intent": "order",
            "code": {"coding": [{"system": "http://loinc.org", "code": "4548-4"}]},
            "subject": {"reference": case.truth["patient"]}, "authoredOn": case.truth["today"], **over}


def test_a_graphql_mutation_is_refused_and_a_query_answers(server):
    seen = {}

    def act(base, case):
        call(base, "GET", "ServiceRequest?_count=1")  # the type indexed, as any search of it does
        mutation = ('mutation { ServiceRequestCreate(res: {resourceType: "ServiceRequest", status: "active", '
                    'intent: "order", subject: {reference: "%s"}, code: {coding: [{system: "http://loinc.org", '
                    'code: "4548-4"}]}}) { id } }' % case.truth["patient"])
        seen["mutation"] = call(base, "POST", "$graphql", {"query": mutation})
        seen["query"] = call(base, "POST", "$graphql", {"query": '{ PatientList(_count: 1) { id } }'})

    activity, score = acted(server, HBA_RECENT, act)
    status, body = seen["mutation"]
    assert status >= 400 and "mutation" in json.dumps(body), body
    assert activity.changes == []
    assert seen["query"][0] == 200 and seen["query"][1]["data"]["PatientList"], seen["query"]
    logged = [r for r in activity.requests if r.path == "$graphql"]
    assert logged[0].refused and not logged[1].refused
    # an attempted write where none was due, that wrote nothing
    assert {k for k, d in score.dimensions.items() if not d.passed} == {"abstained"}, score.reason


def test_another_open_case_cannot_be_reached_from_its_public_key(server):
    other = TASK.load(REFS[STOP])
    pid = other.truth["patient"]
    handle = server.open_case(other.inputs["bundle"], key=f"orders:{STOP}")
    try:
        status, _ = call(handle.base_url, "GET", pid)
        assert status == 200  # its own base reaches it
        origin = handle.base_url.split("/case/")[0]
        for guess in (hashlib.sha256(f"orders:{STOP}".encode()).hexdigest()[:n] for n in (24, 64)):
            status, _ = call(f"{origin}/case/{guess}/fhir/R4", "GET", pid)
            assert status == 404, guess
        # the same key opened again is another token: a URL is never a function of the case
        again = server.open_case(other.inputs["bundle"], key=f"orders:{STOP}")
        assert again.base_url != handle.base_url and call(again.base_url, "GET", pid)[0] == 200
        server.close_case(again)
    finally:
        server.close_case(handle)


def test_a_urn_uuid_subject_is_no_order_of_the_patient(server):
    found = {}

    def act(base, case):
        pid = case.truth["patient"].split("/", 1)[1]
        call(base, "POST", "ServiceRequest", order(case, subject={"reference": f"urn:uuid:{pid}"}))
        found["total"] = call(base, "GET", f"ServiceRequest?patient={case.truth['patient']}")[1].get("total")

    _, score = acted(server, HBA, act)
    assert found["total"] == 0  # the patient's orders, as the server answers them: not there
    assert {k for k, d in score.dimensions.items() if not d.passed} == {"correct"}, score.reason
    assert "urn:uuid" in score.dimensions["correct"].reason

    def right(base, case):
        call(base, "POST", "ServiceRequest", order(case))
        found["total"] = call(base, "GET", f"ServiceRequest?patient={case.truth['patient']}")[1].get("total")

    _, score = acted(server, HBA, right)
    assert found["total"] == 1 and score.passed, score.reason


def test_a_resource_changed_and_back_is_seen_in_the_log(server):
    def act(base, case):
        rid = case.truth["expected"]["id"]
        status, mr = call(base, "GET", rid)
        call(base, "PUT", rid, {**mr, "status": "stopped"})
        other = next(e["resource"] for e in call(base, "GET", f"MedicationRequest?patient={case.truth['patient']}"
                                                 "&_count=1000")[1]["entry"]
                     if f"MedicationRequest/{e['resource']['id']}" != rid and e["resource"]["status"] == "active")
        call(base, "PUT", f"MedicationRequest/{other['id']}", {**copy.deepcopy(other), "status": "stopped"})
        call(base, "PUT", f"MedicationRequest/{other['id']}", other)

    activity, score = acted(server, STOP, act)
    assert [c.kind for c in activity.changes] == ["updated"]  # the diff: the stop alone
    assert {k for k, d in score.dimensions.items() if not d.passed} == {"no_collateral"}, score.reason
    assert "changed and back" in score.dimensions["no_collateral"].reason


# ---------------------------------------------------------------- a partial write, then a crash
class _Crashes:
    """Places the right order, then fails (each attempt; ``error`` the exception class)."""

    name = "crashes-after-writing"
    model = None

    def __init__(self, error=RuntimeError):
        self.error = error

    def run_case(self, task, prompt, inputs):
        from pytest_groundeval.fhir.client import FhirClient

        FhirClient(inputs["fhir_base_url"]).create({
            "resourceType": "ServiceRequest", "status": "active", "intent": "order",
            "code": {"coding": [{"system": "http://loinc.org", "code": "4548-4"}]},
            "subject": {"reference": f"Patient/{inputs['patient_id']}"}, "authoredOn": inputs["today"]})
        raise self.error("the agent fell over after its write")


def test_a_crash_after_the_right_write_is_an_error_never_a_pass(server):
    """The write is on the server and in the record, but the case is an error (counted 0 in
    pass), not scored as done."""
    from pytest_groundeval.run.runner import run_case

    result = run_case(TASK, REFS[HBA], _Crashes(), server=server)
    assert result.outcome == "error" and result.error.kind == "agent" and result.score is None
    assert [c.kind for c in result.fhir.changes] == ["created"]


def test_a_retried_attempt_writes_on_the_state_the_first_left(server):
    """Attempts share the case's repository: a transient failure after the write, then the
    same write again, leaves two orders, scored as the duplicate it is."""
    from pytest_groundeval.run.calls import CallPolicy
    from pytest_groundeval.run.runner import run_case

    class Once(_Crashes):
        calls = 0

        def run_case(self, task, prompt, inputs):
            Once.calls += 1
            if Once.calls == 1:
                return super().run_case(task, prompt, inputs)
            from pytest_groundeval.fhir.client import FhirClient

            FhirClient(inputs["fhir_base_url"]).create({
                "resourceType": "ServiceRequest", "status": "active", "intent": "order",
                "code": {"coding": [{"system": "http://loinc.org", "code": "4548-4"}]},
                "subject": {"reference": f"Patient/{inputs['patient_id']}"}, "authoredOn": inputs["today"]})
            return "ordered"

    policy = CallPolicy(timeout=None, max_attempts=2, base_delay=0.0, sleep=lambda s: None)
    result = run_case(TASK, REFS[HBA], Once(ConnectionError), policy=policy, server=server)
    assert result.outcome == "failed", result.error
    assert {k for k, d in result.score.dimensions.items() if not d.passed} == {"no_collateral"}


# ---------------------------------------------------------------- other write routes, same state
def test_a_stop_by_json_patch_or_in_a_batch_passes(server):
    def patch(base, case):
        req = urllib.request.Request(f"{base}/{case.truth['expected']['id']}", method="PATCH",
                                     data=json.dumps([{"op": "replace", "path": "/status", "value": "stopped"}]).encode(),
                                     headers={"content-type": "application/json-patch+json"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            assert resp.status == 200

    def batch(base, case):
        rid = case.truth["expected"]["id"]
        mr = call(base, "GET", rid)[1]
        status, body = call(base, "POST", "", {"resourceType": "Bundle", "type": "batch", "entry": [
            {"resource": {**mr, "status": "stopped"}, "request": {"method": "PUT", "url": rid}}]})
        assert status == 200, body

    for act in (patch, batch):
        _, score = acted(server, STOP, act)
        assert score.passed, (act.__name__, score.reason)


def test_a_conditional_delete_in_a_batch_is_collateral(server):
    def act(base, case):
        call(base, "POST", "ServiceRequest", order(case))
        first = call(base, "GET", f"Condition?patient={case.truth['patient']}&_count=1")[1]["entry"][0]["resource"]
        status, body = call(base, "POST", "", {"resourceType": "Bundle", "type": "batch", "entry": [
            {"request": {"method": "DELETE", "url": f"Condition?_id={first['id']}"}}]})
        assert status == 200 and body["entry"][0]["response"]["status"].startswith("2"), body

    activity, score = acted(server, HBA, act)
    assert any(c.kind == "deleted" and c.resource_type == "Condition" for c in activity.changes)
    assert {k for k, d in score.dimensions.items() if not d.passed} == {"no_collateral"}, score.reason


# ---------------------------------------------------------------- conditional writes at the REST level
def _diabetes(base, case):
    found = call(base, "GET", f"Condition?patient={case.truth['patient']}")[1]
    return next(e["resource"] for e in found["entry"]
                if any(c.get("code") == "44054006" for c in e["resource"]["code"]["coding"]))


def _resolved(cond):
    return {**cond, "clinicalStatus": {"coding": [{
        "system": "http://terminology.hl7.org/CodeSystem/condition-clinical", "code": "resolved"}]}}


def _cond_update_and_back(base, cond):
    q = f"Condition?_id={cond['id']}"
    assert call(base, "PUT", q, _resolved(cond))[0] == 200 and call(base, "PUT", q, cond)[0] == 200


def _cond_patch_and_back(base, cond):
    q = f"Condition?_id={cond['id']}"
    for code in ("resolved", "active"):
        assert call(base, "PATCH", q, [{"op": "replace", "path": "/clinicalStatus/coding/0/code", "value": code}])[0] == 200


def _cond_delete_and_recreate(base, cond):
    assert call(base, "DELETE", f"Condition?_id={cond['id']}")[0] == 200
    assert call(base, "PUT", f"Condition/{cond['id']}", cond)[0] == 200


@pytest.mark.parametrize("undo", [_cond_update_and_back, _cond_patch_and_back, _cond_delete_and_recreate],
                         ids=["update", "patch", "delete"])
def test_a_conditional_write_undone_is_collateral(server, undo):
    """A conditional update, patch or delete (``PUT|PATCH|DELETE Type?search``) names no id in
    its path: the patient's diabetes changed (or deleted) and put back that way passed, the
    state diff empty. The target is read from the stored answer (update, patch); a conditional
    delete's is not in the log, so an accepted one is collateral."""
    def act(base, case):
        undo(base, _diabetes(base, case))
        assert call(base, "POST", "ServiceRequest", order(case))[0] == 201

    activity, score = acted(server, HBA, act)
    assert [c.kind for c in activity.changes] == ["created"]
    assert {k for k, d in score.dimensions.items() if not d.passed} == {"no_collateral"}, score.reason
    assert "Condition" in score.dimensions["no_collateral"].reason


def test_a_stop_by_conditional_update_passes(server):
    """The right stop, written as a conditional update of the MedicationRequest: one write."""
    def act(base, case):
        rid = case.truth["expected"]["id"]
        mr = call(base, "GET", rid)[1]
        status, body = call(base, "PUT", f"MedicationRequest?_id={rid.split('/')[1]}", {**mr, "status": "stopped"})
        assert status == 200 and body["status"] == "stopped", body

    activity, score = acted(server, STOP, act)
    assert score.passed, score.reason
