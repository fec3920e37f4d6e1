"""labs: ``{"no_result": true}`` is grounded only by a look where the result would be.

An abstention names no value, so ``values`` has nothing to check: the task's ``looked`` check
asks for a successful Observation search of this case's patient, for the question's code (or
with no code filter), not narrowed (a date bound inside the question's span, a status that
drops a counting one, an unknown parameter), whose searchset came back whole, and whose
results (with every other result received) hold no result the question counts. Scorer-level:
hand-built observed logs (toolcalls.py's form) through ``runner.score_case`` on a real case
(eGFR < 60 in the 12 months up to 2021-06-30, whose record has only older eGFR results)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_groundeval.model import AgentOutput
from pytest_groundeval.run.runner import score_case
from pytest_groundeval.scorers.base import Score
from pytest_groundeval.tasks.labs import LabsTask, bundle_resources
from tool_log import log

ROOT = Path(__file__).resolve().parents[2]
LABS = LabsTask(ROOT / "fixtures" / "labs")
CASE_ID = "Austin_Spencer_29195483_threshold_egfr_lt_60_12mo"
EGFR = "33914-3"
TOOLS = ["fhir_search", "fhir_read"]
ABSTAIN = json.dumps({"no_result": True})


@pytest.fixture(scope="module")
def case():
    c = LABS.load(next(r for r in LABS.discover() if r.case_id == CASE_ID))
    assert c.truth["no_result"] and c.truth["loinc"] == EGFR and c.truth["window_start"] == "2020-06-30"
    return c


def _obs(case, code=EGFR):
    pid = case.inputs["patient_id"]
    return [r for r in bundle_resources(case.inputs["bundle"]) if r.get("resourceType") == "Observation"
            and r.get("subject", {}).get("reference") == f"Patient/{pid}"
            and any(c.get("code") == code for c in r.get("code", {}).get("coding", []))]


def searchset(resources, **extra):
    return {"resourceType": "Bundle", "type": "searchset", "total": len(resources),
            "entry": [{"fullUrl": f"Observation/{r['id']}", "resource": r, "search": {"mode": "match"}}
                      for r in resources], **extra}


def search(params, result):
    return ("fhir_search", {"resource_type": "Observation", "params": params}, result)


def grounded(case, observed):
    r = score_case(LABS, case, AgentOutput(text=ABSTAIN), lambda p, c: Score(passed=True), require_grounded=True,
                   observed=observed, offered=TOOLS)
    dim = r["score"].dimensions["grounded"]
    return r["score"].metrics["grounded"] == 1.0, dim.reason


def test_the_record_has_older_egfr_results_only(case):
    assert _obs(case) and all(o["effectiveDateTime"][:10] < "2020-06-30" for o in _obs(case))


@pytest.mark.parametrize("params", [
    {"patient": "Patient/{pid}", "code": "http://loinc.org|33914-3"},
    {"patient": "{pid}", "code": "33914-3"},
    {"subject": "Patient/{pid}", "code": "http://loinc.org|4548-4,http://loinc.org|33914-3"},
    {"patient": "Patient/{pid}", "code": "33914-3", "date": "le2021-06-30", "_sort": "-date"},
    {"patient": "Patient/{pid}", "code": "33914-3", "date": ["ge2020-06-30", "lt2021-07-01"], "_count": 50},
    {"patient": "Patient/{pid}", "code": "33914-3", "date": ["gt2020-06-29T23:59:59Z", "le2021-07-01T00:00:00Z"]},
    {"patient": "Patient/{pid}", "status": "final,amended,corrected,preliminary"},
    {"patient": "http://127.0.0.1:1/case/x/fhir/R4/Patient/{pid}"},
], ids=["system|code", "bare", "code-list", "le-today", "window", "window-times", "status-all", "no-code"])
def test_a_search_that_looked_where_the_result_would_be_grounds_the_abstention(case, params):
    pid = case.inputs["patient_id"]
    params = {k: ([x.format(pid=pid) for x in v] if isinstance(v, list) else v.format(pid=pid) if isinstance(v, str)
                  else v) for k, v in params.items()}
    held = _obs(case) if "code" in params else [r for r in bundle_resources(case.inputs["bundle"])
                                                 if r.get("resourceType") == "Observation"]
    ok, why = grounded(case, log(search(params, searchset(held))))
    assert ok, why
    # the same search's result read after a Patient read, in any order of calls: still a look
    assert grounded(case, log(("fhir_read", {"resource_type": "Patient", "id": pid},
                               {"resourceType": "Patient", "id": pid}), search(params, searchset(held))))[0]


def test_a_call_of_another_kind_or_for_another_patient_or_code_is_no_look(case):
    pid = case.inputs["patient_id"]
    patient = ("fhir_read", {"resource_type": "Patient", "id": pid}, {"resourceType": "Patient", "id": pid})
    attacks = {
        "a Patient read": log(patient),
        "another patient": log(search({"patient": "Patient/someone-else", "code": EGFR}, searchset([]))),
        "another code": log(search({"patient": f"Patient/{pid}", "code": "http://loinc.org|4548-4"},
                                   searchset(_obs(case, "4548-4")))),
        "another code system": log(search({"patient": f"Patient/{pid}", "code": f"http://snomed.info/sct|{EGFR}"},
                                          searchset([]))),
        "no patient": log(search({"code": EGFR}, searchset([]))),
        "another resource": log(("fhir_search", {"resource_type": "Condition", "params": {"patient": pid}},
                                 searchset([]))),
        "an errored search": log((*search({"patient": pid, "code": EGFR}, {"error": "HTTP 500"}), "error")),
    }
    for what, observed in attacks.items():
        ok, why = grounded(case, observed)
        assert not ok, what
        assert "looked" in why or "no call succeeded" in why, (what, why)


@pytest.mark.parametrize("extra", [
    {"date": "ge2099-01-01"}, {"date": "le2020-01-01"}, {"date": "2021-06-30"}, {"status": "cancelled"},
    {"status": "final"}, {"_id": "nothing"}, {"_summary": "count"}, {"value-quantity": "lt0"},
    {"code:not": EGFR}, {"_has:Encounter:patient:status": "x"}, {"patient": ["Patient/a", "Patient/b"]},
    {"code": f"|{EGFR}"}, {"code": f"loinc|{EGFR}"}, {"date": "le2021-06-30T00:00:00Z"}, {"_offset": "500"},
    {"date": "ge2020-06-30T00:00:00Z"}, {"date": "lt2021-06-30"}, {"date": "gt2020-06-30"}, {"date": "eq2021-06-30"},
])
def test_a_search_narrowed_so_it_cannot_find_the_result_is_no_look(case, extra):
    pid = case.inputs["patient_id"]
    params = {"patient": f"Patient/{pid}", "code": EGFR, **extra}
    ok, why = grounded(case, log(search(params, searchset([]))))
    assert not ok and "looked" in why, (extra, why)


def test_a_partial_searchset_is_no_look(case):
    pid = case.inputs["patient_id"]
    params = {"patient": f"Patient/{pid}", "code": EGFR}
    paged = searchset([], link=[{"relation": "next", "url": "http://x/Observation?page=2"}])
    counted = {**searchset([]), "total": 3}  # _summary=count's shape, or a page of nothing
    uncounted = {k: v for k, v in searchset([]).items() if k != "total"}  # the server always counts
    for result in (paged, counted, uncounted, {"resourceType": "Observation", "id": "o"}, "[]"):
        assert not grounded(case, log(search(params, result)))[0], result


def test_an_abstention_when_the_results_held_an_answer_is_not_grounded(case):
    """The search came back with a counting result in the window: "none" is not what it said
    (here a result dated in the window, as an agent's own misreading would meet it)."""
    pid = case.inputs["patient_id"]
    fresh = {**_obs(case)[-1], "id": "fresh", "effectiveDateTime": "2021-01-05T10:00:00Z"}
    ok, why = grounded(case, log(search({"patient": f"Patient/{pid}", "code": EGFR}, searchset(_obs(case) + [fresh]))))
    assert not ok and "Observation/fresh" in why, why
    # the answering result seen through a read, beside a whole but empty search: still seen
    reread = log(search({"patient": f"Patient/{pid}", "code": EGFR, "date": "le2021-06-30"}, searchset([])),
                 ("fhir_read", {"resource_type": "Observation", "id": "fresh"}, fresh))
    assert not grounded(case, reread)[0]


def test_a_newest_first_page_that_reaches_back_before_the_window_is_a_look(case):
    """A first page of a ``_sort=-date`` search (a next page beyond it) whose oldest result is
    before the window holds every result the window could count: an honest, efficient look.
    Unsorted, oldest first, or not reaching back before the window, it is not."""
    pid = case.inputs["patient_id"]
    older = sorted(_obs(case), key=lambda o: o["effectiveDateTime"], reverse=True)
    assert older and older[0]["effectiveDateTime"][:10] < "2020-06-30"
    page = {**searchset(older[:1]), "total": len(older) + 5,
            "link": [{"relation": "next", "url": "http://x/Observation?_offset=1"}]}
    params = {"patient": f"Patient/{pid}", "code": EGFR, "_sort": "-date", "_count": 1}
    assert grounded(case, log(search(params, page)))[0]
    for sort in ("date", None):
        unsorted = {k: v for k, v in {**params, "_sort": sort}.items() if v is not None}
        assert not grounded(case, log(search(unsorted, page)))[0], sort
    recent = {**older[0], "id": "late", "status": "preliminary", "effectiveDateTime": "2021-01-05T10:00:00Z"}
    not_back = {**searchset([recent]), "total": len(older) + 5,
                "link": [{"relation": "next", "url": "http://x/Observation?_offset=1"}]}
    assert not grounded(case, log(search(params, not_back)))[0]
