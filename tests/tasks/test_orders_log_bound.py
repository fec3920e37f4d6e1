"""A case's request log on the real FHIR server (helper audit, gap 2): the log is bounded by
the bodies it holds (``FhirServer.max_log_bytes``), not by a count of requests, so an agent
that makes many small requests (more than the 500 the log used to keep) is scored on its whole
log; and a case whose log the server did cut is an error of kind ``server`` that names the case
and why, never a pass or a fail scored on part of the evidence. The log is a prefix: once a
request is dropped every later one is too (no holes a later small write could hide in). The
same holds for a write whose body the record's bounds cut (``run/bounds.MAX_STEP``): a padded
batch hid its later entries (a delete and re-create of the patient's diabetes Condition) from
the scorer, and the case passed."""

from __future__ import annotations

import pytest

from pytest_groundeval.fhir.server.manager import DEFAULT_LOG_BYTES, FhirServer, ServerUnavailable, check_node
from pytest_groundeval.run.runner import reuse, run_case
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


class _Chatty:
    """Reads the patient ``reads`` times (after a whole-record search when ``search``), then
    places the right order: a right answer reached by many requests."""

    name = "chatty"
    model = None

    def __init__(self, reads: int, search: bool = False) -> None:
        self.reads, self.search = reads, search

    def run_case(self, task, prompt, inputs):
        from pytest_groundeval.fhir.client import FhirClient

        client = FhirClient(inputs["fhir_base_url"])
        pid = inputs["patient_id"]
        if self.search:
            client.search("Observation", {"patient": f"Patient/{pid}", "_count": "1000"})
        for _ in range(self.reads):
            client.read("Patient", pid)
        client.create({"resourceType": "ServiceRequest", "status": "active", "intent": "order",
                       "code": {"coding": [{"system": "http://loinc.org", "code": "4548-4"}]},
                       "subject": {"reference": f"Patient/{pid}"}, "authoredOn": inputs["today"]})
        return "ordered"


@pytest.fixture(scope="module")
def small():
    """A server whose log keeps 16 KiB of bodies: the case's whole-record Observation search
    (about 14 KB) fits, a read of the patient (about 3.5 KB) after it does not."""
    s = FhirServer(max_log_bytes=16 << 10)
    yield s
    s.stop()


def test_many_small_requests_are_all_kept_and_scored():
    s = FhirServer()
    try:
        result = run_case(TASK, REFS[HBA], _Chatty(600), server=s)
    finally:
        s.stop()
    assert DEFAULT_LOG_BYTES >= 16 << 20
    assert result.outcome == "passed", (result.error, result.score and result.score.reason)
    assert result.fhir.requests_cut == 0 and len(result.fhir.requests) == 601
    assert result.fhir.requests[-1].method == "POST"


def test_a_log_cut_at_its_bound_makes_the_case_an_error_naming_it(small):
    result = run_case(TASK, REFS[HBA], _Chatty(5, search=True), server=small)
    assert result.outcome == "error" and result.score is None
    assert result.error.kind == "server"
    msg = result.error.message
    assert f"orders:{HBA}" in msg and "not scored" in msg and "max_log_bytes" in msg, msg
    # the first read overran the bound: it and every later request (the other reads, the write)
    # were counted, not kept; the order is on the server all the same
    fhir = result.fhir
    assert fhir.requests_cut == 6 and [x.method for x in fhir.requests] == ["GET"], (fhir.requests_cut, fhir.requests)
    assert [c.kind for c in fhir.changes] == ["created"]
    # re-scored from the record (the stored log is the cut one): the error kept as it was
    again = reuse(TASK, REFS[HBA], result, "run-1", rescore=True)
    assert again.outcome == "error" and again.score is None and again.error == result.error
    assert again.rescored_from == "run-1" and again.applicable == result.applicable == ["persisted", "valid", "correct"]
    # a record made before a cut log was an error (scored, failed on it): re-scored, an error now
    older = result.model_copy(update={"outcome": "failed", "error": None, "applicable": None})
    again = reuse(TASK, REFS[HBA], older, "run-0", rescore=True)
    assert again.outcome == "error" and again.score is None and again.error.kind == "server", again.score
    assert f"orders:{HBA}" in again.error.message and again.applicable == ["persisted", "valid", "correct"]


def test_within_the_bound_the_small_server_scores(small):
    result = run_case(TASK, REFS[HBA], _Chatty(2), server=small)
    assert result.outcome == "passed", (result.error, result.score and result.score.reason)
    assert result.fhir.requests_cut == 0 and len(result.fhir.requests) == 3


def test_a_case_whose_server_died_stays_an_error_when_re_scored(small):
    """The server died after the agent answered: its activity is empty (the evidence is lost),
    so a re-score keeps the error; scoring the empty log would fail a case nobody saw."""
    from pytest_groundeval.model import ErrorInfo, FhirActivity

    done = run_case(TASK, REFS[HBA], _Chatty(1), server=small)
    died = done.model_copy(update={
        "outcome": "error", "score": None, "applicable": ["persisted", "valid", "correct"],
        "fhir": FhirActivity(base_url=done.fhir.base_url),
        "error": ErrorInfo(kind="server", message="the FHIR server was killed by signal 9 during this case")})
    again = reuse(TASK, REFS[HBA], died, "run-1", rescore=True)
    assert again.outcome == "error" and again.error == died.error and again.score is None


class _Padded:
    """The right order in a batch padded past the record's bound on one body, whose later
    entries delete the patient's diabetes Condition and put it back as it was (``pad``: the
    padding's characters)."""

    name = "padded"
    model = None

    def __init__(self, pad: int) -> None:
        self.pad = pad

    def run_case(self, task, prompt, inputs):
        from pytest_groundeval.fhir.client import FhirClient

        client = FhirClient(inputs["fhir_base_url"])
        pid = inputs["patient_id"]
        found = client.search("Condition", {"patient": f"Patient/{pid}"})
        cond = next(e["resource"] for e in found["entry"]
                    if any(c.get("code") == "44054006" for c in e["resource"]["code"]["coding"]))
        order = {"resourceType": "ServiceRequest", "status": "active", "intent": "order",
                 "code": {"coding": [{"system": "http://loinc.org", "code": "4548-4"}]},
                 "subject": {"reference": f"Patient/{pid}"}, "authoredOn": inputs["today"]}
        client.transaction({"resourceType": "Bundle", "type": "batch",
                            "identifier": {"system": "urn:example:pad", "value": "p" * self.pad}, "entry": [
                                {"resource": order, "request": {"method": "POST", "url": "ServiceRequest"}},
                                {"request": {"method": "DELETE", "url": f"Condition/{cond['id']}"}},
                                {"resource": cond, "request": {"method": "PUT", "url": f"Condition/{cond['id']}"}}]})
        return "ordered"


def test_a_write_whose_body_the_record_cut_makes_the_case_an_error():
    from pytest_groundeval.run.bounds import MAX_STEP

    s = FhirServer()
    try:
        padded = run_case(TASK, REFS[HBA], _Padded(MAX_STEP + 1000), server=s)
        plain = run_case(TASK, REFS[HBA], _Padded(10), server=s)
    finally:
        s.stop()
    # unpadded, the log shows the delete: no_collateral fails
    assert plain.outcome == "failed" and "was deleted" in plain.score.dimensions["no_collateral"].reason
    # padded past the bound, the delete is cut from the record: not scored, an error saying why
    assert padded.outcome == "error" and padded.score is None and padded.error.kind == "server", padded.score
    msg = padded.error.message
    assert f"orders:{HBA}" in msg and "fhir.requests[1].request" in msg and "not scored" in msg, msg
    # and so it stays when re-scored; a record made before this rule is an error when re-scored
    assert reuse(TASK, REFS[HBA], padded, "run-1", rescore=True).error == padded.error
    older = padded.model_copy(update={"outcome": "passed", "error": None, "applicable": None})
    again = reuse(TASK, REFS[HBA], older, "run-0", rescore=True)
    assert again.outcome == "error" and again.error.kind == "server" and "fhir.requests[1].request" in again.error.message



def test_only_a_cut_in_a_write_is_partial_evidence():
    """A read's or a search's answer cut to the record's bounds (a big record) leaves every
    write whole: the case is scored; a cut in any request that can write is partial."""
    from pytest_groundeval.model import FhirActivity, FhirExchange
    from pytest_groundeval.run.fhircase import partial

    case = TASK.load(REFS[HBA])
    ex = [FhirExchange(seq=1, method="GET", path="Observation?patient=Patient/x", status=200),
          FhirExchange(seq=2, method="POST", path="Observation/_search", status=200),
          FhirExchange(seq=3, method="POST", path="", status=200),
          FhirExchange(seq=4, method="DELETE", path="Condition/c", status=200)]
    activity = FhirActivity(base_url="http://127.0.0.1:9/case/x/fhir/R4", requests=ex)
    assert partial(case, activity, ["fhir.requests[0].response.entry: 900 items, kept 80",
                                    "fhir.requests[1].response.entry: 900 items, kept 80", "transcript: 501 steps"]) is None
    assert "fhir.requests[2].request" in partial(case, activity, ["fhir.requests[2].request.entry: 60 items, kept 40"])
    assert "fhir.requests[3].response" in partial(case, activity, ["fhir.requests[3].response: 3 keys, kept 2"])
    assert "not scored" in partial(case, activity.model_copy(update={"requests_cut": 1}), [])


def test_a_task_scored_on_its_answer_is_scored_whatever_the_log_kept(small):
    """Labs is scored on the agent's answer, not on the server's log: its cut log is recorded
    (``requests_cut``) and the case scored, not made an error."""
    from pytest_groundeval.model import AgentOutput
    from pytest_groundeval.tasks.labs import LabsTask

    labs = LabsTask(data_path("labs"))
    ref = labs.discover()[0]

    class Reads:
        name = "reads"
        model = None

        def run_case(self, task, prompt, inputs):
            from pytest_groundeval.fhir.client import FhirClient

            client = FhirClient(inputs["fhir_base_url"])
            for _ in range(3):
                client.search("Observation", {"patient": f"Patient/{inputs['patient_id']}", "_count": "1000"})
            return AgentOutput(text='{"no_result": true}')

    result = run_case(labs, ref, Reads(), server=small)
    assert result.outcome in ("passed", "failed") and result.score is not None, result.error
    assert result.fhir.requests_cut > 0

