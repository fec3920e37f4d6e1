"""Extraction answers read as an agent means them, scored so none can buy a figure (issue 15
item 7): integer codes read as their digits, duplicates reported and counted once, a missing
display is a name miss, and doNotPerform requests are not in the truth."""

from __future__ import annotations

import copy
import json

import pytest
from conftest import SYNTHEA

from pytest_groundeval.tasks.datasets import CaseError
from pytest_groundeval.fhir.hc_tools import langchain_record_tools, list_medication_requests
from pytest_groundeval.model import AgentOutput
from pytest_groundeval.scorers.extraction import score_extraction
from pytest_groundeval.tasks.extraction import RXNORM, ExtractionTask, active_medications, parse_answer

ASPIRIN = {"code": "243670", "display": "aspirin 81 MG Oral Tablet"}
CLOPI = {"code": "309362", "display": "Clopidogrel 75 MG Oral Tablet"}
BUNDLES = sorted(SYNTHEA.glob("*.json"))


def _task() -> ExtractionTask:
    return ExtractionTask(SYNTHEA)


def _scored(task, case, text):
    return task.score(task.parse(AgentOutput(text=text)), case)


# ---------------------------------------------------------------- integer codes
def test_an_integer_code_is_read_as_its_digits():
    assert parse_answer('{"active_medications": [{"code": 243670, "display": "x"}]}') == [{"code": "243670", "display": "x"}]


@pytest.mark.parametrize("path", BUNDLES, ids=lambda p: p.stem.split("_")[0])
def test_integer_codes_score_exactly_like_strings_on_every_committed_bundle(path):
    task = _task()
    case = task.load(next(r for r in task.discover() if r.path == path))
    answer = json.loads(task.baseline(case.inputs).text)
    as_ints = {"active_medications": [{**m, "code": int(m["code"])} for m in answer["active_medications"]]}
    as_strings, as_integers = _scored(task, case, json.dumps(answer)), _scored(task, case, json.dumps(as_ints))
    assert as_integers.passed == as_strings.passed
    assert as_integers.metrics == as_strings.metrics and as_integers.reason == as_strings.reason


# ---------------------------------------------------------------- duplicates
def test_a_duplicate_counts_once_and_is_named_in_the_reason():
    s = score_extraction([ASPIRIN, CLOPI, ASPIRIN], [ASPIRIN, CLOPI])
    assert s.passed and s.metrics["precision"] == 1.0 and s.metrics["tp"] == 2 and s.metrics["fp"] == 0
    assert s.details["duplicates"] == ["243670"] and "counted once: ['243670']" in s.reason
    clean = score_extraction([ASPIRIN, CLOPI], [ASPIRIN, CLOPI])
    assert clean.details["duplicates"] == [] and "more than once" not in clean.reason


def test_a_duplicate_cannot_hedge_a_name_its_first_named_entry_is_its_name():
    wrong_first = score_extraction([{"code": "243670", "display": "aspirin 325 MG Oral Tablet"}, ASPIRIN], [ASPIRIN])
    assert wrong_first.metrics["name_accuracy"] == 0.0 and wrong_first.details["wrong_names"] == ["243670"]
    unnamed_first = score_extraction([{"code": "243670"}, ASPIRIN], [ASPIRIN])
    assert unnamed_first.metrics["name_accuracy"] == 1.0


# ---------------------------------------------------------------- displays
@pytest.mark.parametrize("item", [{"code": "243670"}, {"code": "243670", "display": None},
                                  {"code": "243670", "display": ""}, {"code": "243670", "display": "  "}],
                         ids=["absent", "null", "empty", "blank"])
def test_a_missing_display_is_a_name_miss(item):
    s = score_extraction([item, CLOPI], [ASPIRIN, CLOPI])
    assert s.passed and s.metrics["name_accuracy"] == 0.5 and s.details["wrong_names"] == ["243670"]


def test_where_the_record_names_nothing_any_name_counts_and_none_does_not():
    truth = [{"code": "243670", "display": ""}]
    assert score_extraction([{"code": "243670", "display": "Aspirin 81"}], truth).metrics["name_accuracy"] == 1.0
    assert score_extraction([{"code": "243670"}], truth).metrics["name_accuracy"] == 0.0


# ---------------------------------------------------------------- doNotPerform
def _with_refusal(value):
    """A committed bundle with its first active request marked doNotPerform = value."""
    for path in BUNDLES:
        bundle = json.loads(path.read_text())
        truth = active_medications(bundle, path.name)
        if len(truth) >= 2:
            break
    bundle = copy.deepcopy(bundle)
    first = next(e["resource"] for e in bundle["entry"]
                 if e["resource"]["resourceType"] == "MedicationRequest" and e["resource"]["status"] == "active")
    first["doNotPerform"] = value
    return path, bundle, truth, first


def _code_of(request, bundle):
    concept = request.get("medicationCodeableConcept")
    if concept is None:
        ref = request["medicationReference"]["reference"]
        concept = next(e["resource"]["code"] for e in bundle["entry"]
                       if e.get("fullUrl") == ref or f"Medication/{e['resource'].get('id')}" == ref)
    return next(c["code"] for c in concept["coding"] if c["system"] == RXNORM)


def test_a_do_not_perform_request_is_not_an_active_medication(tmp_path):
    path, bundle, before, refused = _with_refusal(True)
    code = _code_of(refused, bundle)
    others = [e for e in bundle["entry"] if e["resource"]["resourceType"] == "MedicationRequest"
              and e["resource"] is not refused and e["resource"]["status"] == "active"
              and _code_of(e["resource"], bundle) == code]
    truth = active_medications(bundle, path.name)
    assert (code in {t["code"] for t in truth}) == bool(others)  # only another active request keeps it
    assert len(truth) == len(before) - (0 if others else 1)
    # the baseline (HealthChain's reader plus the doNotPerform filter) agrees
    (tmp_path / path.name).write_text(json.dumps(bundle))
    task = ExtractionTask(tmp_path)
    case = task.load(task.discover()[0])
    assert case.truth == truth
    assert _scored(task, case, task.baseline(case.inputs).text).passed
    # listing it as active is a hallucination when nothing else keeps it active
    if not others:
        answer = {"active_medications": truth + [{"code": code, "display": "x"}]}
        assert not _scored(task, case, json.dumps(answer)).passed


def test_do_not_perform_false_is_an_ordinary_request():
    path, bundle, before, _ = _with_refusal(False)
    assert active_medications(bundle, path.name) == before


@pytest.mark.parametrize("value", ["true", 1, 0, "yes"])
def test_a_wrong_typed_do_not_perform_is_a_case_error_naming_the_field(value):
    path, bundle, _, refused = _with_refusal(value)
    with pytest.raises(CaseError, match=f"{path.name}: MedicationRequest/.*doNotPerform"):
        active_medications(bundle, path.name)


def test_the_tools_show_a_do_not_perform_request_as_such():
    path, bundle, _, refused = _with_refusal(True)
    code = _code_of(refused, bundle)
    lister = langchain_record_tools(json.dumps(bundle))[0]
    for listing in (list_medication_requests(json.dumps(bundle), "active"), lister.invoke({"status": "active"})):
        marked = [m for m in listing["medication_requests"] if m.get("do_not_perform")]
        assert [m["code"] for m in marked] == [code] and marked[0]["requests"] == 1
    plain = list_medication_requests(path.read_text(), "active")
    assert not any("do_not_perform" in m for m in plain["medication_requests"])
