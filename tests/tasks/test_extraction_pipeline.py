"""The extraction slice end to end, offline, through pytest itself (pytester)."""

from __future__ import annotations

import gzip
import json
import os

import pytest
from conftest import REFS, SMALL_SET, STOPPED_ACTIVE, ZERO, read_record

from pytest_groundeval.store.record import comparable, validate_record


def run(p: pytest.Pytester, *args: str) -> pytest.RunResult:
    return p.runpytest("--data-dir", "data", "--run-record", "record.json", "-p", "no:cacheprovider",
                       "--agent-retry-delay=0.001", *args)


def cases_by_id(record: dict) -> dict[str, dict]:
    return {c["case_id"]: c for c in record["cases"]}


def test_baseline_agent_passes_everything_and_writes_a_valid_record(evalproject):
    result = run(evalproject)
    result.assert_outcomes(passed=len(SMALL_SET))
    rec = read_record(evalproject)
    assert validate_record(rec) == []
    s = rec["summary"]["extraction"]
    assert (s["n_cases"], s["n_passed"], s["n_errors"]) == (len(SMALL_SET), len(SMALL_SET), 0)
    assert s["micro_f1"] == 1.0 and s["exact_match"] == 1.0 and s["name_accuracy"] == 1.0
    assert rec["agent"] == "baseline" and rec["gate"] is None
    assert [c["case_id"] for c in rec["cases"]] == sorted(SMALL_SET)
    result.stdout.fnmatch_lines(["*groundeval summary*", "extraction: 4 cases, 4 passed, 0 failed, 0 errors",
                                 "*micro_f1*1.000*", "run record: *record.json"])


def test_scripted_correct_and_fenced_agents_pass(evalproject):
    for agent in ("Correct", "Fenced"):
        run(evalproject, f"--agent=agents_under_test:{agent}").assert_outcomes(passed=len(SMALL_SET))
        rec = read_record(evalproject)
        # named as the agent names itself, with its class; the record also keeps what was asked
        assert rec["agent"] == f"{agent.lower()} (agents_under_test:{agent})"
        assert rec["requested"] == {"agent": f"agents_under_test:{agent}", "model": None}
        assert {c["agent"] for c in rec["cases"]} == {rec["agent"]}


def test_hallucinating_agent_fails_zero_medication_case_with_precision_zero(evalproject):
    result = run(evalproject, "--agent=agents_under_test:Hallucinating")
    result.assert_outcomes(failed=len(SMALL_SET))
    rec = read_record(evalproject)
    zero = cases_by_id(rec)[ZERO]
    assert zero["ground_truth"] == []
    assert zero["outcome"] == "failed"
    assert zero["score"]["metrics"]["precision"] == 0.0
    assert zero["score"]["details"]["hallucinated"] == ["198440"]
    s = rec["summary"]["extraction"]
    assert s["micro_recall"] == 1.0 and s["micro_precision"] < 1.0 and s["exact_match"] == 0.0
    # pytest's one line for it (issue 30 item 4), the reason as its message (cut to the width)
    result.stdout.fnmatch_lines([f"FAILED test_evals.py::test_extraction?{ZERO}?*"])


def test_omitting_agent_loses_recall_not_precision(evalproject):
    run(evalproject, "--agent=agents_under_test:Omitting")
    rec = read_record(evalproject)
    s = rec["summary"]["extraction"]
    assert s["micro_precision"] == 1.0 and s["micro_recall"] < 1.0
    refs = cases_by_id(rec)[REFS]
    assert refs["outcome"] == "failed" and len(refs["score"]["details"]["missed"]) == 1
    # the zero-medication patient: omitting from nothing is still exactly right
    assert cases_by_id(rec)[ZERO]["outcome"] == "passed"


@pytest.mark.parametrize("agent,fragment", [
    ("WrongKey", "no 'active_medications' key"),
    ("NotJson", "no JSON object found"),
])
def test_unparseable_answers_are_failures_with_raw_output_kept(evalproject, agent, fragment):
    run(evalproject, f"--agent=agents_under_test:{agent}").assert_outcomes(failed=len(SMALL_SET))
    rec = read_record(evalproject)
    for c in rec["cases"]:
        # a parse failure is a scored failure (every metric 0, the reason), not an error
        assert c["outcome"] == "failed" and c["error"] is None
        assert c["score"]["reason"].startswith("parse error:") and fragment in c["score"]["reason"]
        assert fragment in c["score"]["details"]["parse_error"]
        assert c["raw_output"] and c["predicted"] is None
        m = c["score"]["metrics"]
        assert m["f1"] == m["precision"] == m["recall"] == m["exact_match"] == m["name_accuracy"] == 0.0
    s = rec["summary"]["extraction"]
    assert s["micro_f1"] == 0.0 and s["n_failed"] == len(SMALL_SET) and s["n_errors"] == 0


def test_raising_agent_is_an_error_counted_in_every_denominator(evalproject):
    result = run(evalproject, "--agent=agents_under_test:Raising")
    result.assert_outcomes(errors=len(SMALL_SET))  # pytest's word too (issue 30 item 4)
    rec = read_record(evalproject)
    assert validate_record(rec) == []
    for c in rec["cases"]:
        assert c["outcome"] == "error" and "ConnectionError: upstream API unavailable" in c["error"]["message"]
        # a connection error is transient: retried (default 4 retries), then recorded as such
        assert c["attempts"] == 5 and c["error"]["error_class"] == "ConnectionError" and c["error"]["kind"] == "agent"
    s = rec["summary"]["extraction"]
    assert s["n_errors"] == s["n_cases"] == len(SMALL_SET)
    assert s["micro_f1"] == s["macro_f1"] == s["exact_match"] == s["name_accuracy"] == 0.0
    # the zero-medication case errored too: it still counts (as one missed item), not as perfect
    assert s["fn"] >= len(SMALL_SET)


def test_usage_reported_by_agent_is_recorded(evalproject):
    run(evalproject, "--agent=agents_under_test:WithUsage").assert_outcomes(passed=len(SMALL_SET))
    for c in read_record(evalproject)["cases"]:
        assert c["usage"]["output_tokens"] == 7 and c["usage"]["input_tokens"] > 100


def test_bad_files_error_with_name_and_reason_while_others_run(evalproject):
    data = evalproject.path / "data"
    (data / "corrupt.json").write_text('{"resourceType": "Bundle", "entry": [')
    (data / "patient-only.json").write_text(json.dumps({"resourceType": "Patient", "id": "x"}))
    (data / "no-patient.json.gz").write_bytes(gzip.compress(json.dumps(
        {"resourceType": "Bundle", "type": "collection", "entry": []}).encode()))
    (data / "bad-gzip.json.gz").write_bytes(b"not gzip at all")
    result = run(evalproject)
    result.assert_outcomes(passed=len(SMALL_SET), errors=4)  # errored cases: pytest errors (issue 30 item 4)
    cases = cases_by_id(read_record(evalproject))
    expected = {
        "corrupt": "corrupt.json: not valid JSON",
        "patient-only": "patient-only.json: not a FHIR Bundle (resourceType='Patient')",
        "no-patient": "no-patient.json.gz: the Bundle has no Patient resource",
        "bad-gzip": "bad-gzip.json.gz: not a valid gzip file",
    }
    for cid, message in expected.items():
        assert cases[cid]["outcome"] == "error" and cases[cid]["error"]["kind"] == "case"
        assert message in cases[cid]["error"]["message"], cases[cid]["error"]
    # pytest's one line for it: an error, with its reason (issue 30 item 4; cut to the terminal's width)
    result.stdout.fnmatch_lines(["ERROR test_evals.py::test_extraction?corrupt? - corrupt.json: not*"])


def _activate_referenced_request(bundle: dict) -> dict:
    """Real seed bundle, one ``completed`` request that names its drug by medicationReference
    turned ``active`` (no committed fixture has an *active* medicationReference)."""
    for e in bundle["entry"]:
        r = e["resource"]
        if r["resourceType"] == "MedicationRequest" and "medicationReference" in r:
            r["status"] = "active"
            return r
    raise AssertionError("fixture has no medicationReference")


def _medication(bundle: dict, ref: str) -> dict:
    return next(e for e in bundle["entry"] if e.get("fullUrl") == ref)["resource"]


@pytest.mark.parametrize("form", ["urn:uuid", "Medication/id", "contained"])
def test_active_medication_reference_is_resolved_inside_the_bundle(evalproject, form):
    data = evalproject.path / "data"
    bundle = json.loads((data / f"{REFS}.json").read_text())
    request = _activate_referenced_request(bundle)
    urn = request["medicationReference"]["reference"]
    med = _medication(bundle, urn)
    if form == "Medication/id":
        request["medicationReference"]["reference"] = f"Medication/{med['id']}"
    elif form == "contained":
        bundle["entry"] = [e for e in bundle["entry"] if e.get("fullUrl") != urn]
        request["contained"] = [dict(med, id="med1")]
        request["medicationReference"]["reference"] = "#med1"
    (data / f"{REFS}.json").write_text(json.dumps(bundle))
    run(evalproject, "--agent=agents_under_test:Correct")
    case = cases_by_id(read_record(evalproject))[REFS]
    rx = next(c for c in med["code"]["coding"] if c["system"].endswith("rxnorm"))
    assert {"code": rx["code"], "display": rx["display"]} in case["ground_truth"]
    assert len(case["ground_truth"]) == 4  # the seed README's 3 active codes + this one
    assert case["outcome"] == "passed"


def test_unresolvable_medication_reference_errors_the_case(evalproject):
    data = evalproject.path / "data"
    bundle = json.loads((data / f"{REFS}.json").read_text())
    _activate_referenced_request(bundle)
    bundle["entry"] = [e for e in bundle["entry"] if e["resource"]["resourceType"] != "Medication"]
    (data / f"{REFS}.json").write_text(json.dumps(bundle))
    run(evalproject)
    case = cases_by_id(read_record(evalproject))[REFS]
    assert case["outcome"] == "error"
    assert case["error"]["kind"] == "case"
    assert "medicationReference" in case["error"]["message"] and "cannot be resolved" in case["error"]["message"]
    assert f"{REFS}.json" in case["error"]["message"]
    assert case["ground_truth"] is None  # never a silently smaller truth


def test_items_have_stable_ids_and_select_with_k_and_m(evalproject):
    result = evalproject.runpytest("--data-dir", "data", "--collect-only", "-q")
    result.stdout.fnmatch_lines([f"test_evals.py::test_extraction[[]{stem}[]]" for stem in sorted(SMALL_SET)])
    run(evalproject, "-k", "Felicitas").assert_outcomes(passed=1)
    assert [c["case_id"] for c in read_record(evalproject)["cases"]] == [REFS]
    run(evalproject, "-m", "extraction").assert_outcomes(passed=len(SMALL_SET))
    run(evalproject, "-m", "not extraction").assert_outcomes(deselected=len(SMALL_SET))


def test_maxfail_and_junitxml_behave_as_in_any_suite(evalproject):
    result = run(evalproject, "--agent=agents_under_test:Hallucinating", "-x", "--junitxml=junit.xml")
    result.assert_outcomes(failed=1)
    assert len(read_record(evalproject)["cases"]) == 1
    assert "testcase" in (evalproject.path / "junit.xml").read_text()


def test_collection_does_not_read_bundles(evalproject):
    data = evalproject.path / "data"
    for i in range(3):
        (data / f"garbage-{i}.json").write_text("this is not json")
    result = evalproject.runpytest("--data-dir", "data", "--collect-only", "-q")
    assert result.ret == 0
    result.stdout.fnmatch_lines([f"*{len(SMALL_SET) + 3} tests collected*"])


def test_missing_data_dir_is_a_clear_usage_error(evalproject):
    result = evalproject.runpytest("--data-dir", "nowhere")
    assert result.ret == pytest.ExitCode.INTERRUPTED  # a collection error, before any case runs
    # the refusal names the setting that gave the path and what it is relative to
    result.stdout.fnmatch_lines(["*extraction cases folder not found: *nowhere "
                                 "[[]given by --data-dir, relative to the current folder *]"])
    evalproject.makeini("[pytest]\ngroundeval_data_dir = elsewhere\n")
    result = evalproject.runpytest()
    result.stdout.fnmatch_lines(["*extraction cases folder not found: *elsewhere "
                                 "[[]given by the ini key groundeval_data_dir, relative to the rootdir *]"])


def test_live_agent_without_key_fails_at_start_and_never_falls_back(evalproject, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    result = run(evalproject, "--agent=claude")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--agent=claude calls a live model and needs ANTHROPIC_API_KEY*"])
    assert not (evalproject.path / "record.json").exists()


def test_an_agent_that_cannot_be_built_is_one_usage_error_at_start(evalproject):
    result = run(evalproject, "--agent=no_such_module:Agent")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert err.count("cannot import module 'no_such_module'") == 1 and len(err.splitlines()) < 5
    assert not (evalproject.path / "record.json").exists()


def test_gate_decides_exit_status(evalproject):
    # thresholds met: exit 0 even though a case failed
    result = run(evalproject, "--agent=agents_under_test:Omitting", "--threshold", "extraction.precision=1.0",
                 "--threshold", "extraction.exact_match=0.2")
    assert result.ret == 0
    gate = read_record(evalproject)["gate"]
    assert gate["passed"] and [t["key"] for t in gate["thresholds"]] == ["micro_precision", "exact_match"]
    # one threshold missed: non-zero, one line naming it
    result = run(evalproject, "--agent=agents_under_test:Hallucinating", "--threshold", "extraction.f1=0.9",
                 "--threshold", "extraction.recall=1.0")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["groundeval gate: MISSED extraction.f1 = 0.* < threshold 0.9",
                                 "groundeval gate: FAILED (1/2 thresholds met)"])
    assert "MISSED extraction.recall" not in result.stdout.str()
    gate = read_record(evalproject)["gate"]
    assert not gate["passed"] and [t["passed"] for t in gate["thresholds"]] == [False, True]


def test_gate_from_ini(evalproject):
    evalproject.makeini("[pytest]\ngroundeval_thresholds =\n    extraction.f1=0.99\n")
    assert run(evalproject).ret == 0
    assert run(evalproject, "--agent=agents_under_test:Hallucinating").ret == pytest.ExitCode.TESTS_FAILED


@pytest.mark.parametrize("threshold,message", [
    ("extraction.f2=0.5", "unknown metric 'f2' for extraction"),
    ("extractoin.f1=0.5", "unknown task 'extractoin'"),
    ("extraction.f1", "expected TASK.METRIC=VALUE"),
    ("extraction.f1=high", "'high' is not a number"),
])
def test_bad_threshold_is_a_usage_error_at_start(evalproject, threshold, message):
    result = run(evalproject, "--threshold", threshold)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{message}*"])


def test_gate_with_no_case_of_its_task_is_missed(evalproject):
    result = run(evalproject, "-k", "nothing_matches", "--threshold", "extraction.f1=0.5")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*MISSED extraction.f1 = - < threshold 0.5 (no extraction case ran)*"])


def test_xdist_gives_the_same_record_as_serial(evalproject):
    serial = evalproject.runpytest_subprocess("--data-dir", "data", "--run-record", "serial.json",
                                              "--agent=agents_under_test:Hallucinating", "-p", "no:cacheprovider")
    parallel = evalproject.runpytest_subprocess("--data-dir", "data", "--run-record", "parallel.json",
                                                "--agent=agents_under_test:Hallucinating", "-n", "2",
                                                "-p", "no:cacheprovider")
    assert serial.ret == parallel.ret == pytest.ExitCode.TESTS_FAILED
    a, b = read_record(evalproject, "serial.json"), read_record(evalproject, "parallel.json")
    assert len(b["cases"]) == len(SMALL_SET)
    assert comparable(a) == comparable(b)
    assert b["options"]["numprocesses"] == 2 and validate_record(b) == []


def test_default_record_path_is_groundeval_runs_run_id(evalproject):
    result = evalproject.runpytest("--data-dir", "data", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=len(SMALL_SET))
    files = list((evalproject.path / ".groundeval" / "runs").glob("*.json"))  # (issue 30 item 5: was runs/)
    assert len(files) == 1
    rec = json.loads(files[0].read_text())
    assert files[0].stem == rec["run_id"] and validate_record(rec) == []
    assert not [p for p in os.listdir(evalproject.path / ".groundeval" / "runs") if p.endswith(".tmp")]


def test_stopped_and_active_code_counts_once_as_active(evalproject):
    run(evalproject, "--agent=agents_under_test:Correct")
    case = cases_by_id(read_record(evalproject))[STOPPED_ACTIVE]
    assert "316672" in {m["code"] for m in case["ground_truth"]}


def test_healthchain_reader_disagrees_when_rxnorm_is_not_the_first_coding(evalproject):
    """A recorded finding (FRICTION.md): HealthChain's CodedEntry.code is coding[0]. With a
    SNOMED coding first, the baseline agent (HealthChain's reader) reports the SNOMED code
    while the ground truth keeps RxNorm. Neither side is bent to agree: the case fails."""
    data = evalproject.path / "data"
    bundle = json.loads((data / f"{REFS}.json").read_text())
    for e in bundle["entry"]:
        r = e["resource"]
        if r["resourceType"] == "MedicationRequest" and r["status"] == "active" and "medicationCodeableConcept" in r:
            r["medicationCodeableConcept"]["coding"].insert(
                0, {"system": "http://snomed.info/sct", "code": "387517004", "display": "Paracetamol"})
            break
    (data / f"{REFS}.json").write_text(json.dumps(bundle))
    run(evalproject)
    case = cases_by_id(read_record(evalproject))[REFS]
    assert case["outcome"] == "failed"
    assert case["score"]["details"]["hallucinated"] == ["387517004"]
    assert "387517004" not in {m["code"] for m in case["ground_truth"]}
