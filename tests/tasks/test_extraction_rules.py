"""Each extraction rule: a case where it fails and a case where an equivalent right answer passes."""

from __future__ import annotations

import copy
import json

import pytest
from conftest import REFS, SYNTHEA

from pytest_groundeval.tasks.datasets import CaseError
from pytest_groundeval.model import CaseResult
from pytest_groundeval.scorers.aggregate import code_set_summary, summarize_rates
from pytest_groundeval.scorers.base import bootstrap_ci, prf, wilson_ci
from pytest_groundeval.scorers.extraction import score_extraction, summarize
from pytest_groundeval.tasks.base import ParseError
from pytest_groundeval.tasks.extraction import RXNORM, active_medications, parse_answer

ASPIRIN = {"code": "243670", "display": "aspirin 81 MG Oral Tablet"}
CLOPI = {"code": "309362", "display": "Clopidogrel 75 MG Oral Tablet"}


def load(stem: str) -> dict:
    return json.loads((SYNTHEA / f"{stem}.json").read_text())


# ---------------------------------------------------------------- ground truth
def test_seed_counts_match_the_seed_readme():
    expected = {"Alena861": 0, "Clarissa466": 2, "Felicitas300": 3, "Gerda633": 5, "Chiquita638": 7, "Eilene124": 8}
    for path in SYNTHEA.glob("*.json"):
        first = path.name.split("_")[0]
        if first in expected:
            assert len(active_medications(json.loads(path.read_text()), path.name)) == expected[first], path.name


def _bundle(*requests: dict, patient: bool = True) -> dict:
    entries = [{"fullUrl": "urn:uuid:p", "resource": {"resourceType": "Patient", "id": "p"}}] if patient else []
    entries += [{"fullUrl": f"urn:uuid:r{i}", "resource": r} for i, r in enumerate(requests)]
    return {"resourceType": "Bundle", "type": "collection", "entry": entries}


def _request(status: str, *codings: dict, **extra) -> dict:
    return {"resourceType": "MedicationRequest", "status": status, "intent": "order",
            "medicationCodeableConcept": {"coding": list(codings)}, **extra}


def test_rxnorm_coding_is_chosen_by_system_not_position():
    snomed = {"system": "http://snomed.info/sct", "code": "387458008", "display": "Aspirin"}
    rx = {"system": RXNORM, **ASPIRIN}
    assert active_medications(_bundle(_request("active", snomed, rx)), "b") == [ASPIRIN]


def test_active_request_without_rxnorm_coding_is_an_error_not_a_smaller_truth():
    snomed = {"system": "http://snomed.info/sct", "code": "387458008", "display": "Aspirin"}
    with pytest.raises(CaseError, match="b.json: MedicationRequest/x: active medication has no RxNorm coding"):
        active_medications(_bundle(_request("active", snomed, id="x")), "b.json")


def test_only_active_requests_count_and_codes_are_distinct():
    rx = {"system": RXNORM, **ASPIRIN}
    b = _bundle(_request("active", rx), _request("active", rx), _request("stopped", {"system": RXNORM, **CLOPI}),
                _request("completed", {"system": RXNORM, **CLOPI}))
    assert active_medications(b, "b") == [ASPIRIN]


def test_real_stopped_and_active_fixture_keeps_the_code_once():
    stem = next(p.stem for p in SYNTHEA.glob("Devin_Bailey_*.json"))
    bundle = load(stem)
    statuses = {r["resource"]["status"] for r in bundle["entry"]
                if r["resource"]["resourceType"] == "MedicationRequest"
                and r["resource"]["medicationCodeableConcept"]["coding"][0]["code"] == "316672"}
    assert statuses == {"active", "stopped"}
    codes = [m["code"] for m in active_medications(bundle, stem)]
    assert codes.count("316672") == 1


def test_real_seed_fixture_with_medication_references_only_counts_active():
    truth = active_medications(load(REFS), REFS)
    assert len(truth) == 3 and all(m["code"] and m["display"] for m in truth)


@pytest.mark.parametrize("bundle,message", [
    ({"resourceType": "Patient"}, "not a FHIR Bundle"),
    ([1, 2], "not a FHIR Bundle"),
    (_bundle(patient=False), "has no Patient resource"),
])
def test_bad_bundles_raise_case_errors(bundle, message):
    with pytest.raises(CaseError, match=message):
        active_medications(bundle, "f.json")


# ---------------------------------------------------------------- strict reading (fhir.py)
# Each rule on the truth reader itself (the corpus in test_bad_inputs_corpus.py runs the same
# inputs through a session, where the R4B validation at load would catch many of them too):
# a wrong-typed or non-R4 input is a CaseError naming the file and the field; the equivalent
# right input gives the bundle's truth.
REFS_TRUTH = active_medications(load(REFS), REFS)


def _refs(*path_value: tuple, ended: bool = False) -> dict:
    """The REFS bundle with ``value`` set at ``path`` (keys from the first active request, or the
    first request that is not active; a leading "Bundle" / "Medication" / "Patient" starts at that
    resource, "entry" at the entry list; value ``...`` deletes)."""
    bundle = load(REFS)
    for path, value in path_value:
        value = copy.deepcopy(value)  # never a shared object that a later change mutates
        head, *rest = path
        if head == "entry":
            bundle["entry"].append(value)
            continue
        if head == "Bundle":
            target = bundle
        elif head in ("Medication", "Patient"):
            target = next(e["resource"] for e in bundle["entry"] if e["resource"]["resourceType"] == head)
        else:
            rest = list(path)
            target = next(e["resource"] for e in bundle["entry"] if e["resource"]["resourceType"] == "MedicationRequest"
                          and (e["resource"]["status"] != "active") == ended)
        for key in rest[:-1]:
            target = target[key]
        if value is ...:
            del target[rest[-1]]
        else:
            target[rest[-1]] = value
    return bundle


MED_ID = next(e["resource"]["id"] for e in load(REFS)["entry"] if e["resource"]["resourceType"] == "Medication")
MED_URL = next(e["fullUrl"] for e in load(REFS)["entry"] if e["resource"]["resourceType"] == "Medication")
MED_CODE = next(e["resource"]["medicationCodeableConcept"] for e in load(REFS)["entry"]  # the first active one's
                if e["resource"]["resourceType"] == "MedicationRequest" and e["resource"]["status"] == "active")


def _by_reference(reference, contained=None) -> tuple:
    """The first active request names its medication by ``reference``; the bundle's Medication
    (and any contained one) is that same drug, so the truth is unchanged."""
    changes = [(("medicationCodeableConcept",), ...), (("medicationReference",), {"reference": reference}),
               (("Medication", "code"), MED_CODE)]
    return (*changes, *([(("contained",), contained)] if contained is not None else []))


# name: (changes that break the rule, fragments of the error, changes of an equivalent right input)
STRICT = {
    "entry not a list": ([(("Bundle", "entry"), 5)], ["Bundle.entry is a number (5), expected a list"],
                         [(("Bundle", "type"), "collection")]),
    "entry item not an object": ([(("entry",), 5)], ["Bundle.entry[73] is a number (5), expected an object"],
                                 [(("entry",), {"fullUrl": "urn:uuid:nothing"})]),
    "resource not an object": ([(("entry",), {"resource": "Patient"})], ["Bundle.entry[73]: resource is a string"],
                               [(("entry",), {"resource": {"resourceType": "Basic", "id": "b"}})]),
    "fullUrl not a string": ([(("entry",), {"fullUrl": 7, "resource": {"resourceType": "Basic"}})],
                             ["Bundle.entry[73]: fullUrl is a number (7), expected a string"],
                             [(("entry",), {"fullUrl": "urn:uuid:7", "resource": {"resourceType": "Basic"}})]),
    "resourceType not a string": ([(("entry",), {"resource": {"resourceType": ["Basic"]}})],
                                  ["Bundle.entry[73]: resource.resourceType is a list"],
                                  [(("entry",), {"resource": {"resourceType": "Basic"}})]),
    "id not a string": ([(("Medication", "id"), [MED_ID]), *_by_reference(f"Medication/{MED_ID}")],
                        ["(Medication): id is a list"], [*_by_reference(f"Medication/{MED_ID}")]),
    "status not a string": ([(("status",), ["active"])], ["status is a list (['active']), expected a string"],
                            [(("status",), "active")]),
    "status missing": ([(("status",), ...)], ["has no status"], [(("status",), "active")]),
    "ended status not a string": ([(("status",), {"code": "stopped"})], ["status is an object"],
                                  [(("status",), "stopped")]),
    "concept not an object": ([(("medicationCodeableConcept",), [MED_CODE])],
                              ["medicationCodeableConcept is a list"], [(("medicationCodeableConcept",), MED_CODE)]),
    "coding not a list": ([(("medicationCodeableConcept", "coding"), 5)],
                          ["medicationCodeableConcept.coding is a number (5), expected a list"],
                          [(("medicationCodeableConcept", "coding"), MED_CODE["coding"])]),
    "coding item not an object": ([(("medicationCodeableConcept", "coding"), ["313782"])],
                                  ["medicationCodeableConcept.coding[0] is a string"],
                                  [(("medicationCodeableConcept", "coding"), MED_CODE["coding"])]),
    "code a number": ([(("medicationCodeableConcept", "coding", 0, "code"), 5)],
                      ["medicationCodeableConcept.coding[0].code is a number (5), expected a string"], []),
    "code a list": ([(("medicationCodeableConcept", "coding", 0, "code"), ["5"])],
                    ["medicationCodeableConcept.coding[0].code is a list (['5'])"], []),
    "display a number": ([(("medicationCodeableConcept", "coding", 0, "display"), 5)],
                         ["medicationCodeableConcept.coding[0].display is a number (5)"], []),
    "referenced code a number": ([*_by_reference(MED_URL),
                                  (("Medication", "code", "coding", 0, "code"), int(MED_CODE["coding"][0]["code"]))],
                                 ["Medication.code.coding[0].code is a number"],
                                 [*_by_reference(MED_URL)]),
    "medicationReference not an object": ([*_by_reference(MED_URL), (("medicationReference",), MED_URL)],
                                          ["medicationReference is a string"], [*_by_reference(MED_URL)]),
    "reference not a string": ([*_by_reference(5)], ["medicationReference.reference is a number (5)"],
                               [*_by_reference(MED_URL)]),
    "contained not a list": ([*_by_reference("#m", contained={"resourceType": "Medication", "id": "m", "code": MED_CODE})],
                             ["contained is an object"],
                             [*_by_reference("#m", contained=[{"resourceType": "Medication", "id": "m", "code": MED_CODE}])]),
    # not R4 (each: the R4 form of the same facts passes)
    "DSTU2 MedicationOrder": ([(("resourceType",), "MedicationOrder")],
                              ["not a FHIR R4 bundle", "(MedicationOrder) is a DSTU2 resource"], []),
    "STU3 context": ([(("encounter",), ...), (("context",), {"reference": "urn:uuid:e"})],
                     ["not a FHIR R4 bundle", "'context'", "STU3"], [(("encounter",), {"reference": "urn:uuid:e"})]),
    "STU3 context on an ended request": ([(("context",), {"reference": "urn:uuid:e"})],
                                         ["not a FHIR R4 bundle", "'context'"], []),
    "STU3 requester.agent": ([(("requester",), {"agent": {"reference": "urn:uuid:x"}})],
                             ["not a FHIR R4 bundle", "requester.agent"], [(("requester",), {"reference": "urn:uuid:x"})]),
    "R5 medication": ([(("medicationCodeableConcept",), ...), (("medication",), {"concept": MED_CODE})],
                      ["not a FHIR R4 bundle", "'medication'", "R5"], [(("medicationCodeableConcept",), MED_CODE)]),
    "STU3 Medication.isBrand": ([(("Medication", "isBrand"), True)], ["not a FHIR R4 bundle", "(Medication) has 'isBrand'"],
                                [(("Medication", "form"), {"text": "tablet"})]),
    "STU3 core profile": ([(("meta",), {"profile": ["http://hl7.org/fhir/STU3/StructureDefinition/MedicationRequest"]})],
                          ["not a FHIR R4 bundle", "claims the profile"],
                          [(("meta",), {"profile": ["http://hl7.org/fhir/StructureDefinition/MedicationRequest"]})]),
    "core profile of version 3.0.2": ([(("Patient", "meta"), {"profile": [
        "http://hl7.org/fhir/StructureDefinition/Patient|3.0.2"]})], ["not a FHIR R4 bundle", "|3.0.2"],
        [(("Patient", "meta"), {"profile": ["http://hl7.org/fhir/StructureDefinition/Patient|4.0.1",
                                            "http://hl7.org/fhir/us/core/StructureDefinition/us-core-patient|3.1.1"]})]),
    "FHIR-version tag": ([(("Bundle", "meta"), {"tag": [{"system": "http://hl7.org/fhir/FHIR-version", "code": "1.0.2"}]})],
                         ["not a FHIR R4 bundle: the Bundle is tagged FHIR version '1.0.2'"],
                         [(("Bundle", "meta"), {"tag": [{"system": "http://hl7.org/fhir/FHIR-version", "code": "4.3.0"}]})]),
    "fhirVersion hint": ([(("Bundle", "fhirVersion"), "3.0.1")], ["not a FHIR R4 bundle: the Bundle says fhirVersion"],
                         [(("Bundle", "fhirVersion"), "4.0.1")]),
}


@pytest.mark.parametrize("name", list(STRICT))
def test_a_wrong_typed_or_non_r4_bundle_is_a_case_error_naming_file_and_field(name):
    broken, fragments, _ = STRICT[name]
    ended = "ended" in name
    with pytest.raises(CaseError) as e:
        active_medications(_refs(*broken, ended=ended), "f.json")
    assert str(e.value).startswith("f.json: "), str(e.value)
    for fragment in fragments:
        assert fragment in str(e.value), str(e.value)


@pytest.mark.parametrize("name", [n for n, (_, _, right) in STRICT.items() if right])
def test_the_equivalent_right_bundle_gives_the_truth(name):
    _, _, right = STRICT[name]
    assert active_medications(_refs(*right, ended="ended" in name), "f.json") == REFS_TRUTH


def test_a_dstu2_bundle_is_not_an_empty_truth():
    """The reported defect: a Patient and an active MedicationOrder read as no medications."""
    bundle = {"resourceType": "Bundle", "type": "collection", "entry": [
        {"resource": {"resourceType": "Patient", "id": "p"}},
        {"resource": {"resourceType": "MedicationOrder", "id": "o", "status": "active",
                      "medicationCodeableConcept": {"coding": [{"system": RXNORM, **ASPIRIN}]}}}]}
    with pytest.raises(CaseError, match=r"^f\.json: not a FHIR R4 bundle: .*MedicationOrder.*DSTU2"):
        active_medications(bundle, "f.json")
    bundle["entry"][1]["resource"]["resourceType"] = "MedicationRequest"
    assert active_medications(bundle, "f.json") == [ASPIRIN]


def test_codes_are_never_stringified_into_the_truth():
    for code in (5, ["5"], 5.0, True):
        with pytest.raises(CaseError, match=r"coding\[0\]\.code is a"):
            active_medications(_bundle(_request("active", {"system": RXNORM, "code": code, "display": "x"})), "f.json")
    assert active_medications(_bundle(_request("active", {"system": RXNORM, "code": "5", "display": "x"})),
                              "f.json") == [{"code": "5", "display": "x"}]


# ---------------------------------------------------------------- R4B validation at load
def _task_with(tmp_path, bundle: dict):
    from pytest_groundeval.tasks.extraction import ExtractionTask

    (tmp_path / "b.json").write_text(json.dumps(bundle))
    task = ExtractionTask(tmp_path)
    [ref] = task.discover()
    return task, ref


def test_load_refuses_what_healthchain_cannot_read_and_names_the_issue(tmp_path):
    bundle = _refs((("status",), "finished"), ended=True)  # a request the truth does not read
    assert active_medications(bundle, "b.json") == REFS_TRUTH  # the truth reader alone would score it
    task, ref = _task_with(tmp_path, bundle)
    with pytest.raises(CaseError, match=r"^b\.json: not a valid FHIR R4B Bundle \(1 issue\): "
                                        r"Bundle\.entry\[\d+\]\.resource\.status: Value 'finished'"):
        task.load(ref)


def test_load_validates_once_and_the_baseline_reads_the_loaded_bundle(tmp_path, monkeypatch):
    import healthchain.fhir
    from fhir.resources.R4B.bundle import Bundle

    from pytest_groundeval.fhir import bundles
    from pytest_groundeval.tasks.extraction import parse_answer

    monkeypatch.setattr(bundles, "_MEMO", bundles.BundleMemo(None))  # a fresh process memo, no disk
    task, ref = _task_with(tmp_path, load(REFS))
    calls, builds = [], []
    real, real_validate = healthchain.fhir.load_bundle, Bundle.model_validate.__func__
    monkeypatch.setattr(healthchain.fhir, "load_bundle", lambda *a, **k: calls.append(a) or real(*a, **k))
    monkeypatch.setattr(Bundle, "model_validate", classmethod(lambda cls, *a, **k: builds.append(a)
                                                              or real_validate(cls, *a, **k)))
    case = task.load(ref)
    assert len(builds) == 1 and not calls and case.truth == REFS_TRUTH  # one build, not load_bundle's two
    answer = parse_answer(task.baseline(case.inputs).text)
    assert len(builds) == 1  # no second parse
    assert task.score(answer, case).passed
    # the baseline still reads a bundle given as text only (one load of its own)
    assert parse_answer(task.baseline({"bundle_json": case.inputs["bundle_json"]}).text) == answer and len(calls) == 1


# ---------------------------------------------------------------- parsing
@pytest.mark.parametrize("text", [
    '{"active_medications": [{"code": "243670", "display": "aspirin 81 MG Oral Tablet"}]}',
    'Sure!\n```json\n{"active_medications": [{"code": "243670", "display": "aspirin 81 MG Oral Tablet"}]}\n```',
    'The answer is {"active_medications": [{"code": "243670", "display": "aspirin 81 MG Oral Tablet"}]} as requested.',
])
def test_a_json_object_is_found_bare_or_fenced_anywhere(text):
    assert parse_answer(text) == [ASPIRIN]


@pytest.mark.parametrize("text,message", [
    ("no json here", "no JSON object found"),
    ('{"active_medications": []} and also {"active_medications": []}', "found 2 JSON objects"),
    ('{"medications": []}', "no 'active_medications' key"),
    ('{"active_medications": {"code": "1"}}', "is dict, expected a list"),
    ('{"active_medications": ["243670"]}', "is str, expected an object"),
    ('{"active_medications": [{"code": true, "display": "x"}]}', "code is True, expected a non-empty string"),
    ('{"active_medications": [{"code": 2436.7, "display": "x"}]}', "code is 2436.7, expected a non-empty string"),
    ('{"active_medications": [{"code": -243670, "display": "x"}]}', "code is -243670, expected a non-empty string"),
    ('{"active_medications": [{"code": "1", "display": 5}]}', "display is int"),
    ('[{"code": "1"}]', "no 'active_medications' key"),
])
def test_anything_else_is_a_parse_error(text, message):
    with pytest.raises(ParseError, match=message):
        parse_answer(text)


def test_empty_list_is_an_answer_not_an_error():
    assert parse_answer('{"active_medications": []}') == []


# ---------------------------------------------------------------- scoring
def test_exact_match_passes_with_names_case_and_space_insensitive():
    s = score_extraction([{"code": "243670", "display": "ASPIRIN  81 mg oral tablet"}, CLOPI], [ASPIRIN, CLOPI])
    assert s.passed and s.metrics["f1"] == 1.0 and s.metrics["name_accuracy"] == 1.0


def test_hallucinated_code_fails_and_is_listed():
    s = score_extraction([ASPIRIN, CLOPI], [ASPIRIN])
    assert not s.passed and s.metrics["precision"] == 0.5 and s.metrics["recall"] == 1.0
    assert s.details["hallucinated"] == ["309362"] and s.details["missed"] == []


def test_missed_code_fails_and_counts_as_wrong_name():
    s = score_extraction([ASPIRIN], [ASPIRIN, CLOPI])
    assert not s.passed and s.metrics["recall"] == 0.5 and s.metrics["precision"] == 1.0
    assert s.details["missed"] == ["309362"] and s.metrics["name_accuracy"] == 0.5


def test_all_wrong_codes_cannot_score_perfect_names():
    s = score_extraction([{"code": "1", "display": ASPIRIN["display"]}, {"code": "2", "display": CLOPI["display"]}],
                         [ASPIRIN, CLOPI])
    assert s.metrics["name_accuracy"] == 0.0 and s.metrics["f1"] == 0.0


def test_right_code_other_name_of_its_product_passes_codes_but_not_names():
    s = score_extraction([{"code": "243670", "display": "Aspirin 81 mg tablet"}], [ASPIRIN])
    assert s.passed and s.metrics["name_accuracy"] == 0.0 and s.details["wrong_names"] == ["243670"]


def test_right_code_under_a_display_of_another_strength_earns_nothing():
    s = score_extraction([{"code": "243670", "display": "aspirin 325 MG Oral Tablet"}], [ASPIRIN])
    assert not s.passed and s.metrics["tp"] == 0 and "325 mg" in s.details["wrong_displays"]["243670"]


def test_duplicates_are_reported_and_counted_once():
    s = score_extraction([ASPIRIN, ASPIRIN], [ASPIRIN])
    assert s.passed and s.details["duplicates"] == ["243670"] and s.metrics["precision"] == 1.0


def test_zero_medication_patient():
    assert score_extraction([], []).passed
    s = score_extraction([ASPIRIN], [])
    assert not s.passed and s.metrics["precision"] == 0.0 and s.metrics["f1"] == 0.0


def test_prf_conventions():
    assert prf(0, 0, 0) == (1.0, 1.0, 1.0)
    assert prf(0, 1, 0) == (0.0, 1.0, 0.0)
    assert prf(0, 0, 2) == (0.0, 0.0, 0.0)
    assert prf(1, 1, 0) == (0.5, 1.0, pytest.approx(2 / 3))


def _entry(outcome, truth, pred=None):
    score = score_extraction(pred, truth).model_dump(mode="json") if pred is not None else None
    error = {"kind": "agent", "message": "agent raised"} if outcome == "error" else None
    return CaseResult(case_id="c", task="extraction", outcome=outcome, ground_truth=truth, score=score,
                      error=error, skip_reason="skipped" if outcome == "skipped" else None)


def test_summary_counts_errors_as_zero_in_every_denominator():
    ok = _entry("passed", [ASPIRIN], [ASPIRIN])
    zero_err = _entry("error", None)
    s = summarize([ok, zero_err])
    assert s["n_cases"] == 2 and s["n_errors"] == 1
    assert s["macro_f1"] == 0.5 and s["exact_match"] == 0.5 and s["name_accuracy"] == 0.5
    assert s["micro_recall"] == 0.5 and s["fn"] == 1
    skipped = _entry("skipped", None)
    assert summarize([ok, skipped])["n_cases"] == 1 and summarize([ok, skipped])["n_skipped"] == 1


def test_micro_and_macro_differ_as_defined():
    a = _entry("passed", [ASPIRIN, CLOPI], [ASPIRIN, CLOPI])  # 2 tp
    b = _entry("failed", [ASPIRIN], [CLOPI])  # 1 fp, 1 fn
    s = summarize([a, b])
    assert s["micro_precision"] == pytest.approx(2 / 3, abs=1e-6) and s["macro_precision"] == 0.5


def test_bootstrap_ci_is_seeded_and_brackets_the_mean():
    values = [1.0] * 30 + [0.0] * 10
    ci = bootstrap_ci(values, seed=0)
    assert ci == bootstrap_ci(values, seed=0)
    assert ci[0] < 0.75 < ci[1] and 0.5 < ci[0] and ci[1] <= 1.0
    assert bootstrap_ci([], seed=0) is None
    assert bootstrap_ci([0.7], seed=0) is None  # one value: no interval
    assert bootstrap_ci([0.4] * 7) == [0.4, 0.4]


# ---------------------------------------------------------------- intervals
# Wilson score interval, z = 1.959964 (z^2 = 3.841459):
#   centre = (p + z^2/2n) / (1 + z^2/n),  half = z sqrt(p(1-p)/n + z^2/4n^2) / (1 + z^2/n)
# at p = 1 it is [n / (n + z^2), 1]; at p = 0, [0, z^2 / (n + z^2)].
def test_wilson_interval_against_hand_computed_values():
    assert wilson_ci(48, 48) == [0.9259, 1.0]  # 48 / 51.841459 = 0.925900: not [1.0, 1.0]
    assert [round(x, 3) for x in wilson_ci(48, 48)] == [0.926, 1.0]
    assert wilson_ci(0, 10) == [0.0, 0.277533]  # 3.841459 / 13.841459
    # 5/10: (0.5 + 0.192073 -/+ 1.959964 * sqrt(0.025 + 0.009604)) / 1.384146
    assert wilson_ci(5, 10) == [0.236593, 0.763407]
    assert wilson_ci(1, 2) == [0.094531, 0.905469]
    assert wilson_ci(1, 1) is None and wilson_ci(0, 1) is None and wilson_ci(0, 0) is None
    with pytest.raises(ValueError):
        wilson_ci(3, 2)


def test_pass_rates_get_wilson_f1_keeps_the_seeded_bootstrap():
    f1 = [1.0, 0.5, 0.0, 1.0, 0.8, 0.667, 1.0, 0.25]
    exact = [1.0 if v == 1.0 else 0.0 for v in f1]
    per_case = {"precision": f1, "recall": f1, "f1": f1, "exact_match": exact, "name_accuracy": f1}
    s = code_set_summary(5, 3, 2, per_case, len(f1), seed=0)
    assert s["exact_match_ci95"] == wilson_ci(3, 8) == [0.136844, 0.694258]
    assert s["macro_f1_ci95"] == bootstrap_ci(f1, seed=0)  # the bootstrap, deterministic with its seed
    assert s["macro_f1_ci95"] == code_set_summary(5, 3, 2, per_case, len(f1), seed=0)["macro_f1_ci95"]
    assert s["macro_f1_ci95"] != code_set_summary(5, 3, 2, per_case, len(f1), seed=1)["macro_f1_ci95"]
    assert s["macro_f1_ci95"][0] < s["macro_f1"] < s["macro_f1_ci95"][1]
    one = {k: v[:1] for k, v in per_case.items()}
    s1 = code_set_summary(1, 0, 0, one, 1, seed=0)
    assert s1["exact_match_ci95"] is None and s1["macro_f1_ci95"] is None  # one case: no interval
    # through the extraction scorer: exact match is Wilson, 1 of 2
    s2 = summarize([_entry("passed", [ASPIRIN], [ASPIRIN]), _entry("error", None)])
    assert s2["exact_match_ci95"] == [0.094531, 0.905469]
    assert summarize([_entry("passed", [ASPIRIN], [ASPIRIN])])["exact_match_ci95"] is None


def test_summarize_rates_wilson_for_proportions_bootstrap_otherwise():
    def result(i, passed, extra=1.0):
        return CaseResult(case_id=f"c{i}", task="t", outcome="passed" if passed else "failed",
                          score={"passed": passed, "metrics": {"pass": float(passed), "partial": extra}})

    rs = [result(i, True, 0.5 + i / 100) for i in range(48)]
    s = summarize_rates(rs, ("pass", "partial"))
    assert s["pass"] == 1.0 and s["pass_ci95"] == [0.9259, 1.0]
    assert s["partial_ci95"] == bootstrap_ci([r.metric("partial") for r in rs], seed=0)  # not a 0/1 metric
    rs = [result(i, i < 5) for i in range(10)]
    assert summarize_rates(rs, ("pass",))["pass_ci95"] == [0.236593, 0.763407]
    s1 = summarize_rates(rs[:1], ("pass",))
    assert s1["pass"] == 1.0 and s1["pass_ci95"] is None
    assert summarize_rates([], ("pass",))["pass_ci95"] is None


def test_bootstrap_ci_matches_index_resampling():
    """The multinomial draw is the same distribution as resampling indices: the interval
    agrees with a plain index bootstrap (different random streams, so within noise)."""
    import random

    values = [1.0] * 25 + [0.5] * 10 + [0.0] * 15
    n, draws = len(values), 4000
    rng = random.Random(1)
    means = sorted(sum(rng.choices(values, k=n)) / n for _ in range(draws))
    plain = [means[int(0.025 * draws)], means[int(0.975 * draws)]]
    ci = bootstrap_ci(values, n_resamples=draws, seed=1)
    assert ci[0] == pytest.approx(plain[0], abs=0.03) and ci[1] == pytest.approx(plain[1], abs=0.03)
    mean = sum(values) / n
    assert ci[0] < mean < ci[1] and ci[1] - ci[0] > 0.15


def test_a_perfect_run_has_an_honest_macro_f1_interval_not_a_certain_one():
    """168 cases all at F1 1 (the baseline on the SMART sample's other patients): the percentile
    bootstrap of identical values is [1, 1], a certainty 168 cases cannot give, next to exact
    match's Wilson [0.978, 1]. Per-case F1 all 0 or 1 is a proportion: Wilson's interval."""
    n = 168
    ones = [1.0] * n
    per_case = {"precision": ones, "recall": ones, "f1": ones, "exact_match": ones, "name_accuracy": ones}
    s = code_set_summary(300, 0, 0, per_case, n, seed=0)
    assert s["macro_f1_ci95"] == wilson_ci(n, n) == s["exact_match_ci95"]
    assert s["macro_f1_ci95"][0] < 0.98 and s["macro_f1_ci95"][1] == 1.0
    zeros = [0.0] * n
    s0 = code_set_summary(0, 5, 300, {k: zeros for k in per_case}, n, seed=0)
    assert s0["macro_f1_ci95"] == wilson_ci(0, n) and s0["macro_f1_ci95"][1] > 0.02
