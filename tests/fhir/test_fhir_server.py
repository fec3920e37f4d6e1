"""groundeval's FHIR server (``fhir/server``) as a real process on 127.0.0.1: per-case
repositories (isolation), the request log, the state dump, the write cap, the required-binding
status checks on write, Medplum's search quirks the wrapper covers, restart after a kill, and
nothing left listening (after ``stop``, and after the harness process itself is killed)."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from pytest_groundeval.fhir.client import FhirClient
from pytest_groundeval.fhir.server.manager import FhirServer, ServerDied, ServerUnavailable, check_node

ROOT = Path(__file__).resolve().parents[2]
SYNTHEA = ROOT / "fixtures" / "synthea"
A = "Alena861_Alina705_Bayer639_a41e603d-0d7c-c89f-3be7-74117adc6390"
B = "Devin_Bailey_17dc1d1b-060d-4069-b7f9-640463bf12a7"

try:
    check_node()
    NODE = None
except ServerUnavailable as e:  # the suites' cases are not run then; these tests say why they skip
    NODE = e.reason
needs_node = pytest.mark.skipif(NODE is not None, reason=f"{NODE}")


def bundle(stem: str) -> dict:
    return json.loads((SYNTHEA / f"{stem}.json").read_text())


def patient_id(stem: str) -> str:
    return bundle(stem)["entry"][0]["resource"]["id"]


def listening(port: int) -> bool:
    """Is anything listening on 127.0.0.1:port (read from /proc/net/tcp, no connection made)?"""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                return True
    return False


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def order(pid: str, **over) -> dict:
    return {"resourceType": "ServiceRequest", "status": "active", "intent": "order",
            "code": {"coding": [{"system": "http://loinc.org", "code": "4548-4"}]},
            "subject": {"reference": f"Patient/{pid}"}, **over}


@pytest.fixture(scope="module")
def server():
    s = FhirServer(write_cap=5)
    yield s
    s.stop()


@needs_node
def test_each_case_sees_only_its_own_repository(server):
    a = server.open_case(bundle(A), key="iso:a")
    b = server.open_case(bundle(B), key="iso:b")
    assert a.base_url != b.base_url
    ca, cb = FhirClient(a.base_url), FhirClient(b.base_url)
    assert ca.read("Patient", patient_id(A))["id"] == patient_id(A)
    other = ca.read("Patient", patient_id(B))
    assert other["status"] == 404 and "error" in other  # B's patient is not in A's repository
    assert ca.search("Patient", {})["total"] == 1
    made = ca.create(order(patient_id(B)))  # a write through A's URL lands in A only
    assert made["id"]
    assert cb.search("ServiceRequest", {})["total"] == 0
    assert [r["method"] for r in server.activity(b)["requests"]] == ["GET"]  # its own search only
    assert len(server.activity(a)["requests"]) == 4
    server.close_case(a)
    gone = ca.search("Patient", {})
    assert gone["status"] == 404 and "no such case" in gone["error"]
    assert cb.read("Patient", patient_id(B))["id"] == patient_id(B)
    server.close_case(b)


@needs_node
def test_control_calls_need_the_harness_token(server):
    server.ensure()
    req = urllib.request.Request(f"http://127.0.0.1:{server.port}/_control/health")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req)
    assert e.value.code == 403
    last = server.refused()[-1]  # logged by the server, for the harness
    assert (last["method"], last["path"], last["status"]) == ("GET", "/_control/health", 403) and last["reason"]


@needs_node
def test_the_state_dump_and_log_are_the_cases(server):
    case = server.open_case(bundle(A), key="state")
    assert set(case.before) == {f"{e['resource']['resourceType']}/{e['resource']['id']}"
                                for e in bundle(A)["entry"]}
    # references to a bundle entry's urn:uuid fullUrl are stored as Type/id
    refs = [(r.get("subject") or r.get("patient"))["reference"] for r in case.before.values()
            if r.get("subject") or r.get("patient")]
    assert refs and all(ref == f"Patient/{patient_id(A)}" for ref in refs)
    client = FhirClient(case.base_url)
    made = client.create(order(patient_id(A)))
    got = server.activity(case)
    assert got["state"][f"ServiceRequest/{made['id']}"]["status"] == "active"
    (req,) = got["requests"]
    assert (req["seq"], req["method"], req["path"], req["status"], req["refused"]) == (1, "POST", "ServiceRequest",
                                                                                      201, None)
    assert req["request"]["resourceType"] == "ServiceRequest" and req["response"]["id"] == made["id"]
    server.close_case(case)


@needs_node
def test_ids_and_timestamps_come_from_the_case_not_the_clock(server):
    made = []
    for _ in range(2):
        case = server.open_case(bundle(A), key="same", clock="2026-01-02T00:00:00Z")
        made.append(FhirClient(case.base_url).create(order(patient_id(A))))
        server.close_case(case)
    assert made[0]["id"] == made[1]["id"] and made[0]["meta"] == made[1]["meta"]
    assert made[0]["meta"]["lastUpdated"].startswith("2026-01-02T")


@needs_node
@pytest.mark.parametrize("resource, element", [
    (order("p", status="taking"), "ServiceRequest.status"),
    (order("p", intent="orden"), "ServiceRequest.intent"),
    ({"resourceType": "ServiceRequest", "intent": "order", "subject": {"reference": "Patient/p"}},
     "ServiceRequest.status"),
    ({"resourceType": "Observation", "status": "done", "code": {"text": "bp"}}, "Observation.status"),
    ({"resourceType": "MedicationRequest", "status": "taking", "intent": "order"}, "MedicationRequest.status"),
    ({"resourceType": "MedicationRequest", "status": "active", "intent": "want"}, "MedicationRequest.intent"),
    ({"resourceType": "MedicationStatement", "status": "recorded"}, "MedicationStatement.status"),
])
def test_a_write_outside_a_required_binding_is_refused_422(server, resource, element):
    case = server.open_case(bundle(A), key=f"binding:{element}")
    client = FhirClient(case.base_url)
    got = client.create(resource)
    assert got["status"] == 422 and got["outcome"]["issue"][0]["expression"] == [element]
    assert got["outcome"]["issue"][0]["code"] == "code-invalid"
    activity = server.activity(case)
    assert activity["state"] == case.before  # nothing stored
    assert activity["requests"][0]["refused"].startswith(f"binding: {element}")
    server.close_case(case)


@needs_node
def test_bindings_hold_for_updates_patches_and_transaction_entries(server):
    case = server.open_case(bundle(A), key="binding:more")
    client = FhirClient(case.base_url)
    made = client.create(order(patient_id(A)))
    assert client.update({**made, "status": "stopped"})["status"] == 422  # not a request-status code
    assert client.update({**made, "status": "revoked"})["status"] == "revoked"
    patch = [{"op": "replace", "path": "/status", "value": "cancelled"}]
    req = urllib.request.Request(f"{case.base_url}/ServiceRequest/{made['id']}", method="PATCH",
                                 data=json.dumps(patch).encode(), headers={"content-type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req)
    assert e.value.code == 422
    tx = {"resourceType": "Bundle", "type": "transaction", "entry": [
        {"resource": order(patient_id(A)), "request": {"method": "POST", "url": "ServiceRequest"}},
        {"resource": order(patient_id(A), status="ordered"), "request": {"method": "POST", "url": "ServiceRequest"}}]}
    assert client.transaction(tx)["status"] == 422  # refused whole: a transaction is all or nothing
    assert client.search("ServiceRequest", {})["total"] == 1
    server.close_case(case)


@needs_node
def test_the_write_cap_counts_every_write_of_the_case(server):
    case = server.open_case(bundle(A), key="cap", write_cap=3)
    client = FhirClient(case.base_url)
    tx = {"resourceType": "Bundle", "type": "transaction", "entry": [
        {"resource": order(patient_id(A)), "request": {"method": "POST", "url": "ServiceRequest"}}] * 2}
    assert client.transaction(tx)["type"] == "transaction-response"
    assert client.create(order(patient_id(A)))["id"]
    refused = client.create(order(patient_id(A)))
    assert refused["status"] == 429
    assert client.search("ServiceRequest", {})["total"] == 3  # reads are never capped
    log = server.activity(case)["requests"]
    assert log[2]["refused"] == "write cap: 3 writes allowed per case, 3 made, this request makes 1"
    server.close_case(case)


@needs_node
def test_a_bare_patient_id_search_finds_the_patients_resources(server):
    """Medplum matches reference searches only on Type/id; the wrapper reads a bare id of the
    patient parameters as Patient/<id>."""
    case = server.open_case(bundle(A), key="bare")
    client = FhirClient(case.base_url)
    conditions = sum(1 for e in bundle(A)["entry"] if e["resource"]["resourceType"] == "Condition")
    assert conditions > 0
    for params in ({"patient": patient_id(A)}, {"subject": patient_id(A)},
                   {"patient": f"Patient/{patient_id(A)}"}, {"subject": f"Patient/{patient_id(A)}"}):
        assert client.search("Condition", params)["total"] == conditions, params
    log = server.activity(case)["requests"]
    assert log[0]["path"] == f"Condition?patient={patient_id(A)}"  # logged as the agent sent it
    server.close_case(case)


@needs_node
def test_conditional_create_makes_nothing_new_when_one_matches(server):
    case = server.open_case(bundle(A), key="conditional")
    client = FhirClient(case.base_url)
    tagged = order(patient_id(A), identifier=[{"system": "urn:x", "value": "1"}])
    first = client.create(tagged, if_none_exist="identifier=urn:x|1")
    second = client.create(tagged, if_none_exist="identifier=urn:x|1")
    assert first["id"] == second["id"]
    assert client.search("ServiceRequest", {})["total"] == 1
    server.close_case(case)


@needs_node
def test_restart_after_a_kill():
    s = FhirServer()
    try:
        case = s.open_case(bundle(A), key="kill")
        pid, port = s.pid, s.port
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(ServerDied, match="killed by signal 9"):
            s.activity(case)
        fresh = s.open_case(bundle(A), key="kill")  # started again
        assert s.pid != pid and s.generation == 2
        assert FhirClient(fresh.base_url).read("Patient", patient_id(A))["id"] == patient_id(A)
        with pytest.raises(ServerDied):  # the old case's repository went with the old process
            s.activity(case)
        del port
    finally:
        s.stop()


@needs_node
def test_nothing_is_left_listening_after_stop():
    s = FhirServer()
    s.ensure()
    pid, port = s.pid, s.port
    assert listening(port) and alive(pid)
    s.stop()
    assert not listening(port) and not alive(pid)


HARNESS = textwrap.dedent("""
    import os, sys
    from pytest_groundeval.fhir.server.manager import FhirServer
    s = FhirServer()
    s.ensure()
    print(s.pid, s.port, flush=True)
    sys.stdin.read()  # until the test kills this process
""")


@needs_node
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
def test_nothing_is_left_listening_after_the_harness_is_killed(how):
    harness = subprocess.Popen([sys.executable, "-c", HARNESS], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               text=True)
    try:
        pid, port = map(int, harness.stdout.readline().split())
        assert listening(port) and alive(pid)
        harness.send_signal(how)
        harness.wait()
        # the server's stdin closes with its parent: it exits by itself (waited for as an event:
        # a pidfd turns readable when the process exits; the limit only stops a broken run)
        fd = os.pidfd_open(pid)
        try:
            ready, _, _ = select.select([fd], [], [], 120)
        finally:
            os.close(fd)
        assert ready, "the FHIR server outlived its harness"
        assert not alive(pid) and not listening(port)
    finally:
        if harness.poll() is None:
            harness.kill()
            harness.wait()


@needs_node
def test_a_paged_search_links_its_next_page(server):
    """Medplum's in-memory search honours _count/_offset but links no next page."""
    case = server.open_case(bundle(A), key="paging")
    client = FhirClient(case.base_url)
    total = client.search("Condition", {})["total"]
    assert total > 2
    seen, params = [], {"_count": 2}
    while True:
        page = client.search("Condition", params)
        seen += [e["resource"]["id"] for e in page.get("entry", [])]
        nxt = [link["url"] for link in page["link"] if link["relation"] == "next"]
        if not nxt:
            break
        params = dict(p.split("=") for p in nxt[0].split("?", 1)[1].split("&"))
    assert len(seen) == len(set(seen)) == total
    server.close_case(case)


def _padded(stem: str, size: int) -> dict:
    """A real bundle with one more resource whose narrative brings it to about ``size`` bytes."""
    b = bundle(stem)
    pad = {"resourceType": "Basic", "id": "pad", "code": {"text": "padding"},
           "text": {"status": "generated", "div": "<div xmlns=\"http://www.w3.org/1999/xhtml\">" + "x" * size + "</div>"}}
    return {**b, "entry": [*b["entry"], {"fullUrl": "urn:uuid:pad", "resource": pad}]}


def test_a_bundle_over_the_body_limit_is_a_case_error_naming_it_before_anything_is_sent():
    """Classified before the server is even started: a ``case`` error (not re-run by
    ``--resume``), never a ``server`` error from a connection the server cut."""
    import dataclasses

    from pytest_groundeval.model import RETRYABLE_KINDS
    from pytest_groundeval.run import fhircase
    from pytest_groundeval.tasks.orders import OrdersTask
    from pytest_groundeval.tasks.resources import data_path

    task = OrdersTask(data_path("orders"))
    case = task.load(task.discover()[0])
    big = dataclasses.replace(case, inputs={**case.inputs, "bundle": _padded(A, 17 << 20)})
    s = FhirServer()
    try:
        got, opened, error = fhircase.open_case(s, task, big)
        assert opened is None and error is not None and error.kind == "case" and error.kind not in RETRYABLE_KINDS
        assert "over the FHIR server's request body limit of 16 MiB (16,777,216 bytes)" in error.message, error.message
        assert error.message.startswith(f"orders:{case.ref.case_id}: ")
        assert not s.running()  # nothing was sent: the server was not even started for it
    finally:
        s.stop()


@needs_node
def test_the_body_limit_is_one_value_the_harness_and_the_server_hold():
    """Under the limit the bundle seeds; over it the harness refuses it, and an agent's request
    over it is answered 413 naming the limit (and logged on its case)."""
    from pytest_groundeval.fhir.server.manager import CaseRefused

    limit = 1 << 20
    s = FhirServer(max_body_bytes=limit)
    try:
        case = s.open_case(_padded(A, limit // 2), key="limit")
        assert "Basic/pad" in case.before
        with pytest.raises(CaseRefused, match=r"over the FHIR server's request body limit of 1 MiB \(1,048,576 bytes\)"):
            s.open_case(_padded(A, limit), key="limit")
        made = FhirClient(case.base_url).create({**order(patient_id(A)), "note": [{"text": "y" * limit}]})
        assert made["status"] == 413 and "over this server's limit of 1048576 bytes" in made["error"], made
        (logged,) = s.activity(case)["requests"]
        assert logged["status"] == 413 and "limit" in logged["refused"]
        assert s.open_case(None, key="after").base_url  # the server goes on
    finally:
        s.stop()
