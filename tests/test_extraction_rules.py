"""Each extraction rule: a case where it fails and a case where an equivalent right answer passes."""

from __future__ import annotations

import json

import pytest
from conftest import REFS, SYNTHEA

from pytest_groundeval.datasets import CaseError
from pytest_groundeval.model import CaseResult
from pytest_groundeval.scorers.base import bootstrap_ci, prf
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
    ('{"active_medications": [{"code": 243670, "display": "x"}]}', "code is 243670, expected a non-empty string"),
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


def test_right_code_wrong_name_passes_codes_but_not_names():
    s = score_extraction([{"code": "243670", "display": "aspirin 325 MG Oral Tablet"}], [ASPIRIN])
    assert s.passed and s.metrics["name_accuracy"] == 0.0 and s.details["wrong_names"] == ["243670"]


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
    score = score_extraction(pred, truth).to_dict() if pred is not None else None
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
    assert bootstrap_ci([0.4] * 7) == [0.4, 0.4]


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
