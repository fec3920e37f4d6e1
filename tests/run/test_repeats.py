"""--repeat N (issue 9, item 4): N items per case, each its own result; per case pass rate,
pass^k and pass@k; per task the mean pass rate, the pass^k / pass@k shares and the flaky
share, with thresholds on them; the repeat is part of the model-call cache key."""

from __future__ import annotations

import json

import pytest
from conftest import SMALL_SET, ZERO, read_record

from pytest_groundeval.store.record import comparable

FLAKY = '''
import json
from pytest_groundeval.run.calls import current_repeat
from pytest_groundeval.tasks.extraction import active_medications

class Flaky:
    """Right every time, except on repeat 3 of the patient with no medications (a test
    double that knows its repeat, so the flakiness is the same however the items run)."""
    name = "flaky"
    def run(self, prompt):
        bundle = json.JSONDecoder().raw_decode(prompt.split("Bundle:\\n", 1)[1])[0]
        truth = active_medications(bundle, "prompt")
        if not truth and current_repeat() == 3:
            truth = [{"code": "1049630", "display": "made up"}]
        return json.dumps({"active_medications": truth})
'''


def _run(project, *args):
    project.makepyfile(flaky=FLAKY)
    return project.runpytest_subprocess("--data-dir", "data", "-p", "no:cacheprovider", "--agent=flaky:Flaky",
                                        "--repeat", "3", *args)


@pytest.mark.parametrize("extra", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_repeat_3_with_a_flaky_agent_reports_the_flaky_share_and_pass_hat_3(evalproject, extra):
    result = _run(evalproject, "--run-record", "record.json", "-v", *extra)
    result.assert_outcomes(passed=3 * len(SMALL_SET) - 1, failed=1)
    failed = [line for line in result.outlines if "FAILED" in line and "::test_extraction[" in line]
    assert failed and all(f"[{ZERO}[r3]]" in line for line in failed)
    rec = read_record(evalproject)
    assert sorted((c["case_id"], c["repeat"]) for c in rec["cases"]) == sorted(
        (cid, k) for cid in SMALL_SET for k in (1, 2, 3))
    s = rec["summary"]["extraction"]
    assert s["repeats"] == 3
    assert s["flaky"] == 0.25 and s["pass_hat_k"] == 0.75 and s["pass_at_k"] == 1.0
    assert s["pass_rate"] == pytest.approx((3 + 2 / 3) / 4, abs=1e-6)
    # the repeats declare their figures in the record: flaky lower-is-better, one value per case
    repeat_specs = {k: v for k, v in s["specs"].items() if v.get("source") == "repeats"}
    assert set(repeat_specs) == {"repeats", "pass_rate", "pass_hat_k", "pass_at_k", "flaky",
                                 "pass_hat_1", "pass_hat_2", "pass_hat_3"}
    # tau-bench's pass^k for k = 1..3: the flaky case (2 of 3) adds C(2,k)/C(3,k): 2/3, 1/3, 0
    assert s["pass_hat_1"] == pytest.approx((3 + 2 / 3) / 4, abs=1e-6) == s["pass_rate"]
    assert s["pass_hat_2"] == pytest.approx((3 + 1 / 3) / 4, abs=1e-6)
    assert s["pass_hat_3"] == s["pass_hat_k"] == 0.75 and len(s["pass_hat_2_ci95"]) == 2
    assert repeat_specs["flaky"]["higher_is_better"] is False and repeat_specs["flaky"]["kind"] == "rate"
    assert repeat_specs["pass_rate"]["kind"] == "mean" and repeat_specs["repeats"]["kind"] == "count"
    per = rec["repeats"]["extraction"]
    assert per["repeats"] == 3 and per["flaky_cases"] == [ZERO]
    assert per["per_case"][ZERO] == {"runs": 3, "passed": 2, "pass_rate": pytest.approx(2 / 3, abs=1e-6),
                                     "pass_hat_k": False, "pass_at_k": True, "flaky": True}
    assert all(c["pass_hat_k"] and c["runs"] == 3 for cid, c in per["per_case"].items() if cid != ZERO)
    assert s["n_cases"] == 12  # the task's own figures are over every result
    result.stdout.fnmatch_lines(["*3 repeats per case; flaky: " + ZERO, "*pass_hat_k*0.750*", "*flaky*0.250*"])


def test_serial_and_xdist_repeats_give_the_same_record(evalproject):
    _run(evalproject, "--run-record", "serial.json")
    _run(evalproject, "--run-record", "parallel.json", "-n", "2")
    assert comparable(read_record(evalproject, "serial.json")) == comparable(read_record(evalproject, "parallel.json"))


def test_thresholds_name_the_repeat_figures_and_flaky_is_a_maximum(evalproject):
    ok = _run(evalproject, "--run-record", "ok.json", "--threshold", "extraction.pass_hat_k=0.7",
              "--threshold", "extraction.flaky=0.25")
    assert ok.ret == pytest.ExitCode.OK
    missed = _run(evalproject, "--run-record", "missed.json", "--threshold", "extraction.flaky=0.2")
    assert missed.ret == pytest.ExitCode.TESTS_FAILED
    missed.stdout.fnmatch_lines(["*MISSED extraction.flaky = 0.250 > threshold 0.2*"])
    gate = read_record(evalproject, "missed.json")["gate"]
    assert not gate["passed"] and gate["thresholds"][0]["value"] == 0.25


def test_a_threshold_on_pass_hat_k_exists_for_each_k_up_to_the_repeats(evalproject):
    ok = _run(evalproject, "--run-record", "ok.json", "--threshold", "extraction.pass_hat_2=0.8")
    assert ok.ret == pytest.ExitCode.OK
    missed = _run(evalproject, "--run-record", "missed.json", "--threshold", "extraction.pass_hat_2=0.9")
    missed.stdout.fnmatch_lines(["*MISSED extraction.pass_hat_2 = 0.833 < threshold 0.9*"])
    beyond = _run(evalproject, "--threshold", "extraction.pass_hat_4=0.5")
    assert beyond.ret == pytest.ExitCode.USAGE_ERROR
    beyond.stderr.fnmatch_lines(["*unknown metric 'pass_hat_4' for extraction*"])


def test_pass_hat_is_tau_bench_s_unbiased_estimator():
    """pass^k of a case with n results, c passed: C(c, k) / C(n, k) (tau-bench, section 5),
    against values worked by hand, and the mean over cases with the fewest results' K."""
    from pytest_groundeval.model import CaseResult
    from pytest_groundeval.run.repeats import pass_hat, repeat_summary

    assert pass_hat(4, 2, 1) == 0.5 and pass_hat(4, 2, 2) == pytest.approx(1 / 6) and pass_hat(4, 2, 3) == 0.0
    assert pass_hat(4, 4, 4) == 1.0 and pass_hat(4, 3, 2) == pytest.approx(3 / 6) and pass_hat(2, 2, 3) is None

    def results(case, outcomes):
        return [CaseResult(case_id=case, task="t", outcome=o, repeat=i + 1, content_hash="h",
                           score={"passed": o == "passed", "metrics": {}, "reason": o})
                for i, o in enumerate(outcomes)]

    s = repeat_summary(results("a", ["passed", "failed", "passed", "failed"]) + results("b", ["passed"] * 3))
    assert [key for key in s if key.startswith("pass_hat_") and not key.endswith("_ci95")] == \
        ["pass_hat_k", "pass_hat_1", "pass_hat_2", "pass_hat_3"]  # K = 3: case b has 3 results
    assert s["pass_hat_1"] == pytest.approx((0.5 + 1) / 2, abs=1e-6)
    assert s["pass_hat_2"] == pytest.approx((1 / 6 + 1) / 2, abs=1e-6)
    assert s["pass_hat_3"] == pytest.approx((0 + 1) / 2, abs=1e-6)

    # every case passing every repeat: not the bootstrap's certain [1, 1] but Wilson's interval
    from pytest_groundeval.scorers.base import wilson_ci

    perfect = repeat_summary([r for case in "abcdefghij" for r in results(case, ["passed"] * 3)])
    assert perfect["pass_rate"] == 1.0 and perfect["pass_rate_ci95"] == wilson_ci(10, 10)
    assert perfect["pass_hat_3_ci95"] == wilson_ci(10, 10) and perfect["pass_rate_ci95"][0] < 0.75


def test_a_cut_short_repeated_run_resumes_to_every_repeat_once(evalproject):
    cut = _run(evalproject, "--run-record", "record.json", "--maxfail", "1")
    assert cut.ret == pytest.ExitCode.TESTS_FAILED
    first = read_record(evalproject)
    assert first["completeness"]["cut_short"]
    done = _run(evalproject, "--run-record", "resumed.json", "--resume", "record.json")
    rec = read_record(evalproject, "resumed.json")
    keys = [(c["case_id"], c["repeat"]) for c in rec["cases"]]
    assert len(keys) == len(set(keys)) == 3 * len(SMALL_SET)
    assert sum(c.get("resumed_from") is not None for c in rec["cases"]) == len(first["cases"])
    assert not rec["completeness"]["cut_short"] and done.ret == pytest.ExitCode.TESTS_FAILED


def test_the_repeat_is_part_of_the_model_call_cache_key(tmp_path):
    from pytest_groundeval.run.cache import ModelCache
    from pytest_groundeval.run.calls import repeat_of

    cache = ModelCache(tmp_path, "readwrite")

    def key(repeat):
        with repeat_of(repeat):
            return cache.key(cache.components(agent="a", model="m", params={}, messages=[{"role": "user"}]))

    assert len({key(None), key(1), key(2), key(3)}) == 4
    assert key(2) == key(2)
    # without --repeat the key is the one it always was (existing caches stay valid)
    assert "repeat" not in cache.components(agent="a", model="m", params={}, messages=[])


def test_repeat_values_that_mean_nothing_are_usage_errors(evalproject):
    for bad in ("0", "-1", "1001"):
        result = evalproject.runpytest_subprocess("--data-dir", "data", "--repeat", bad, "-p", "no:cacheprovider")
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines(["*--repeat*must be between 1 and 1000*"])


def test_repeated_shards_merge_to_the_unsharded_repeated_run(evalproject):
    """--repeat with --groundeval-shard: a case's repeats stay in one shard; the merge keeps each
    repeat once and equals the unsharded run."""
    from pytest_groundeval.cli import main

    _run(evalproject, "--run-record", "full.json")
    for k in (1, 2):
        _run(evalproject, "--run-record", f"shard-{k}.json", "--groundeval-shard", f"{k}/2")
    shards = [read_record(evalproject, f"shard-{k}.json") for k in (1, 2)]
    assert all(len({c["repeat"] for c in s["cases"] if c["case_id"] == cid}) == 3
               for s in shards for cid in {c["case_id"] for c in s["cases"]})
    code = main(["merge", str(evalproject.path / "shard-1.json"), str(evalproject.path / "shard-2.json"),
                 "-o", str(evalproject.path / "merged.json")])
    assert code == 1  # the flaky repeat fails, as in the unsharded run
    merged, full = read_record(evalproject, "merged.json"), read_record(evalproject, "full.json")
    diff = {k: (merged["summary"]["extraction"].get(k), v) for k, v in full["summary"]["extraction"].items()
            if merged["summary"]["extraction"].get(k) != v}
    assert diff == {}
    assert comparable(merged) == comparable(full)
    assert merged["repeats"] == full["repeats"]
