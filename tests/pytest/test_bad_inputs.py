"""Bad option values and unusable case sources: one clear usage error at start, naming the
value or the place; files that cannot be read error their own case, never vanish."""

from __future__ import annotations

import json
import os

import pytest
from conftest import SMALL_SET, read_record

from pytest_groundeval.run.calls import CallPolicy


def _start(p: pytest.Pytester, *args: str) -> pytest.RunResult:
    return p.runpytest("--data-dir", "data", "--run-record", "record.json", "-p", "no:cacheprovider", *args)


@pytest.mark.parametrize("args, message", [
    (("--threshold", "extraction.f1=1.5"), "not a rate between 0 and 1"),
    (("--threshold", "extraction.f1=nan"), "not a rate between 0 and 1"),
    (("--threshold", "extraction.f1=-inf"), "not a rate between 0 and 1"),
    (("--threshold", "extraction.f1=95"), "95% is 0.95"),
    (("--concurrency", "0"), "--concurrency 0: must be between 1 and 256"),
    (("--concurrency", "-1"), "--concurrency -1"),
    (("--concurrency", "100000"), "--concurrency 100000"),
    (("--max-cost", "-1"), "--max-cost -1.0: must be a positive number of USD"),
    (("--max-cost", "0"), "--max-cost 0.0"),
    (("--max-cost", "nan"), "--max-cost nan"),
    (("--agent-timeout", "0"), "--agent-timeout 0.0: must be a positive number"),
    (("--agent-retries", "-2"), "--agent-retries -2"),
    (("--agent-max-retry-after", "-1"), "--agent-max-retry-after -1.0"),
])
def test_meaningless_option_values_are_usage_errors(evalproject, args, message):
    result = _start(evalproject, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()
    assert not (evalproject.path / "record.json").exists()


def test_sensible_edge_values_are_accepted(evalproject):
    _start(evalproject, "--threshold", "extraction.f1=1.0", "--threshold", "extraction.exact_match=0",
           "--concurrency", "1", "--agent-retries", "0", "--agent=agents_under_test:Correct").assert_outcomes(
        passed=len(SMALL_SET))


def test_an_empty_case_folder_is_an_error_naming_it(evalproject):
    empty = evalproject.mkdir("empty")
    (empty / "README.txt").write_text("not a case")
    result = evalproject.runpytest("--data-dir", "empty", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.INTERRUPTED  # a collection error, before any case runs
    assert not (evalproject.path / ".groundeval" / "runs").exists()
    result.stdout.fnmatch_lines(["*no extraction case files (*.json.gz or *.json) in *empty*"])


def test_an_empty_write_cases_file_is_an_error_naming_it(pytester):
    pytester.makepyfile(test_w="import pytest\n\n@pytest.mark.write\ndef test_w(case, agent, scorer, evaluate):\n"
                               "    evaluate(case, agent, scorer)\n")
    (pytester.path / "cases.json").write_text(json.dumps({"cases": []}))
    result = pytester.runpytest("--write-cases", "cases.json", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*cases.json: no write cases in it*"])
    (pytester.path / "cases.json").write_text(json.dumps({"cases": 5}))
    result = pytester.runpytest("--write-cases", "cases.json", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*cases.json: expected a JSON list of write cases (objects with a case_id), not int*"])
    (pytester.path / "cases.json").write_text("[]")
    result = pytester.runpytest("--write-cases", "cases.json", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*cases.json: no write cases in it*"])


def test_dangling_links_and_link_loops_error_their_own_case(evalproject):
    data = evalproject.path / "data"
    os.symlink(data / "gone.json", data / "dangling.json")
    os.symlink(data / "loop-b.json", data / "loop-a.json")
    os.symlink(data / "loop-a.json", data / "loop-b.json")
    result = _start(evalproject, "--agent=agents_under_test:Correct")
    result.assert_outcomes(passed=len(SMALL_SET), errors=3)  # errored cases: pytest errors (issue 30 item 4)
    cases = {c["case_id"]: c for c in read_record(evalproject)["cases"]}
    for cid in ("dangling", "loop-a", "loop-b"):
        assert cases[cid]["outcome"] == "error" and cases[cid]["error"]["kind"] == "case"
        assert f"{cid}.json: cannot read file" in cases[cid]["error"]["message"]


def test_retry_after_is_capped():
    policy = CallPolicy(max_retry_after=60.0, base_delay=0.0)
    assert policy.delay(1, 3600.0) == 60.0
    assert policy.delay(1, 2.5) == 2.5
    assert CallPolicy(max_retry_after=5.0, base_delay=0.0).delay(3, 3600.0) == 5.0


SURROGATES = '''
import json
from pytest_groundeval.tasks.extraction import active_medications

class Surrogate:
    """Right codes, but text no UTF-8 encoder accepts: a lone surrogate in prose and in a display."""
    name = "surrogate"
    def run(self, prompt):
        meds = active_medications(json.JSONDecoder().raw_decode(prompt.split("Bundle:\\n", 1)[1])[0], "prompt")
        meds = [dict(m, display=m["display"] + "\\ud800") for m in meds]
        return "Here \\udc80 you go: " + json.dumps({"active_medications": meds}, ensure_ascii=False)
'''


@pytest.mark.parametrize("extra", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_text_json_cannot_encode_is_stored_escaped_and_the_run_goes_on(evalproject, extra):
    evalproject.makepyfile(surrogate_agent=SURROGATES)
    result = _start(evalproject, "--agent=surrogate_agent:Surrogate", *extra)
    result.assert_outcomes(passed=len(SMALL_SET))  # the codes are right: the scores stand
    rec = read_record(evalproject)
    assert len(rec["cases"]) == len(SMALL_SET)
    for c in rec["cases"]:
        assert c["raw_output"].startswith("Here \\udc80 you go: ")
        assert all(p["display"].endswith("\\ud800") for p in c["predicted"])
    assert not (evalproject.path / "record.jsonl").exists()  # complete: folded into the record


def test_a_record_folder_that_cannot_be_written_is_a_usage_error_before_any_call(evalproject):
    """Found out before the first (paid) call, not after all of them (issue 29): exit 4, naming
    the path; never 1, the "cases failed" code. (A record that cannot be written at the end:
    tests/pytest/test_signals_and_files.py.)"""
    (evalproject.path / "blocker").write_text("a file where the record's folder should be")
    result = evalproject.runpytest("--data-dir", "data", "--run-record", "blocker/record.json",
                                   "-p", "no:cacheprovider", "--agent=agents_under_test:Correct")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "could not open the journal" in err and "blocker/record.jsonl" in err and "nothing was run" in err
    assert "passed" not in result.stdout.str()


# ---------------------------------------------------------------- the per-case deadline
def test_a_case_deadline_bounds_all_attempts_together(monkeypatch):
    import time
    from types import SimpleNamespace

    from pytest_groundeval.run import calls as calls_module
    from pytest_groundeval.run.calls import AgentCallError, CallTimeout, TransientAgentError, call_with_policy

    # a fake clock for the retries: the waits are counted, not slept, so no load can stretch them
    clock = SimpleNamespace(now=1000.0)

    def sleep(seconds):
        clock.now += seconds

    monkeypatch.setattr(calls_module, "time", SimpleNamespace(monotonic=lambda: clock.now, time=time.time,
                                                              sleep=sleep))
    calls = []

    def always_rate_limited():
        calls.append(clock.now)
        raise TransientAgentError("429", retry_after=0.3)

    policy = CallPolicy(timeout=5.0, max_attempts=50, base_delay=0.0, case_deadline=1.0, sleep=sleep)
    started = clock.now
    with pytest.raises(AgentCallError) as info:
        call_with_policy(always_rate_limited, policy)
    assert isinstance(info.value.last, CallTimeout) and "case deadline of 1 s" in str(info.value.last)
    # at 0, 0.3, 0.6 and 0.9 s; a fifth would start at 1.2 s, past the deadline: 50 attempts x 0.3 s would be 15 s
    assert [round(t - started, 6) for t in calls] == [0.0, 0.3, 0.6, 0.9]
    assert clock.now - started < 1.0  # it gave up without waiting for the retry it could not make
    monkeypatch.undo()

    def slow():
        time.sleep(3600)  # only a timeout ends it

    with pytest.raises(AgentCallError) as info:  # one attempt is cut at the deadline, not at --agent-timeout
        call_with_policy(slow, CallPolicy(timeout=60.0, max_attempts=3, base_delay=0.0, case_deadline=0.5))
    assert "case deadline of 0.5 s reached" in str(info.value.last)
    [attempt] = info.value.attempts
    # cut at the 0.5 s deadline: without it, only the 60 s timeout would have ended the call (a
    # margin of 59.5 s; the cut took 0.5 s when measured at load 10 on 2 cores)
    assert 0.5 - 0.01 <= attempt["duration_s"] < 60.0, attempt


def test_a_case_deadline_is_a_timeout_error_in_the_record(evalproject):
    result = _start(evalproject, "--agent=agents_under_test:Hangs", "--agent-timeout", "30", "--case-deadline", "0.3",
                    "-k", "Alena")
    result.assert_outcomes(errors=1)  # a timeout is an errored case: a pytest error (issue 30 item 4)
    [case] = read_record(evalproject)["cases"]
    assert case["error"]["kind"] == "timeout" and "case deadline of 0.3 s" in case["error"]["message"]


# ---------------------------------------------------------------- a corpus of bad case files
def test_a_corpus_of_bad_bundles_errors_each_case_with_its_file_and_reason(evalproject):
    import gzip
    import shutil

    from conftest import SYNTHEA, ZERO

    data = evalproject.path / "data"
    good = (SYNTHEA / f"{ZERO}.json").read_bytes()
    corpus = {
        "empty": (b"", "empty.json: the file is empty"),
        "truncated": (good[: len(good) // 2], "truncated.json: not valid JSON"),
        "array": (b"[1, 2, 3]", "array.json: not a FHIR Bundle (resourceType='list')"),
        "no-entries": (json.dumps({"resourceType": "Bundle", "type": "collection"}).encode(),
                       "no-entries.json: the Bundle has no Patient resource"),
        "latin1": ('{"resourceType": "Bundle", "entry": [{"resource": {"resourceType": "Patient", "name": "Jos\\u00e9"}}]}'
                   .encode("utf-8").replace(b"\\u00e9", "é".encode("latin-1")),
                   "latin1.json: not UTF-8 text (byte 0xe9"),
    }
    for stem, (raw, _) in corpus.items():
        (data / f"{stem}.json").write_bytes(raw)
    (data / "bad-gzip.json.gz").write_bytes(b"not gzip at all")
    (data / "bom.json").write_bytes(b"\xef\xbb\xbf" + good)  # a byte-order mark is fine: it runs
    (data / "gzipped-bom.json.gz").write_bytes(gzip.compress(b"\xef\xbb\xbf" + good))
    shutil.copy(SYNTHEA / f"{ZERO}.json", data / "copy.json")
    result = _start(evalproject, "--agent=agents_under_test:Correct")
    result.assert_outcomes(passed=len(SMALL_SET) + 3, errors=len(corpus) + 1)
    cases = {c["case_id"]: c for c in read_record(evalproject)["cases"]}
    for stem, (_, message) in corpus.items():
        assert cases[stem]["error"]["kind"] == "case" and message in cases[stem]["error"]["message"], cases[stem]
    assert "bad-gzip.json.gz: not a valid gzip file" in cases["bad-gzip"]["error"]["message"]
    assert cases["bom"]["outcome"] == cases["gzipped-bom"]["outcome"] == "passed"


def test_every_file_the_harness_writes_has_one_mode(tmp_path):
    """Record, journal and cache entries: 0600 whatever the umask, also over an existing file."""
    import os
    import stat

    from pytest_groundeval.run.cache import ModelCache
    from pytest_groundeval.store.journal import JournalWriter as Journal
    from pytest_groundeval.store.record import FILE_MODE, write_json_atomic

    old = os.umask(0o022)
    try:
        journal_path = tmp_path / "run.jsonl"
        journal_path.write_text("an older run\n")
        journal_path.chmod(0o644)
        Journal(journal_path, {"run_id": "r"}).close()
        write_json_atomic(tmp_path / "run.json", b"{}")
        cache = ModelCache(tmp_path / "cache", "readwrite")
        cache.put({"agent": "a"}, {"text": "x"})
        written = [journal_path, tmp_path / "run.json", *(tmp_path / "cache").glob("*/*.json")]
    finally:
        os.umask(old)
    assert len(written) == 3
    assert FILE_MODE == 0o600
    assert {stat.S_IMODE(p.stat().st_mode) for p in written} == {FILE_MODE}
