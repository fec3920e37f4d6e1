"""Fast, cheap and crash-safe runs: concurrency, retries, timeouts, journal, resume,
rescore, the model-call cache, usage and cost. All offline, through pytest itself."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import anthropic
import pytest
from conftest import SMALL_SET, ZERO, read_record

from pytest_groundeval.store.record import comparable, validate_record
from pytest_groundeval.tasks.extraction import active_medications

N = len(SMALL_SET)


def run(p: pytest.Pytester, *args: str) -> pytest.RunResult:
    return p.runpytest("--data-dir", "data", "--run-record", "record.json", "-p", "no:cacheprovider",
                       "--agent-retry-delay=0.001", *args)


def _patient_of(p: pytest.Pytester, stem: str) -> str:
    return json.loads((p.path / "data" / f"{stem}.json").read_text())["entry"][0]["resource"]["id"]


def agent_log(p: pytest.Pytester) -> list[dict]:
    path = p.path / "agent.log"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def logged(evalproject, monkeypatch):
    monkeypatch.setenv("AGENT_LOG", str(evalproject.path / "agent.log"))
    return evalproject


# ---------------------------------------------------------------- concurrency
def test_concurrent_calls_really_overlap_and_items_report_in_order(logged, monkeypatch):
    monkeypatch.setenv("SLEEP", "0.05")
    # each call waits until N calls have started: had the calls run one after another, the
    # first would wait out HOLD_LIMIT alone and end before the next started
    monkeypatch.setenv("OVERLAP", str(N))
    result = run(logged, "--agent=agents_under_test:Sleepy", "--concurrency", str(N), "-v")
    result.assert_outcomes(passed=N)
    events = agent_log(logged)
    starts = [e["t"] for e in events if e["event"] == "start"]
    ends = [e["t"] for e in events if e["event"] == "end"]
    assert len(starts) == N
    assert max(starts) < min(ends), "every call started before any finished: they ran at the same time"
    # items still report in collection order
    lines = [ln for ln in result.outlines if "::test_extraction[" in ln and "PASSED" in ln]
    assert [ln.split("[", 1)[1].split("]", 1)[0] for ln in lines] == sorted(SMALL_SET)
    assert read_record(logged)["options"]["concurrency"] == N


def test_serial_by_default_for_an_offline_agent(logged, monkeypatch):
    monkeypatch.setenv("SLEEP", "0.05")
    run(logged, "--agent=agents_under_test:Sleepy").assert_outcomes(passed=N)
    events = agent_log(logged)
    for prev_end, next_start in zip([e for e in events if e["event"] == "end"][:-1],
                                    [e for e in events if e["event"] == "start"][1:]):
        assert next_start["t"] >= prev_end["t"]
    assert read_record(logged)["options"]["concurrency"] == 1


def test_exitfirst_stops_launching_calls(logged, monkeypatch):
    import shutil

    for i in range(8):  # 12 cases in all, so "stopped" is far from "ran everything"
        shutil.copy(logged.path / "data" / f"{ZERO}.json", logged.path / "data" / f"zz-copy-{i}.json")
    monkeypatch.setenv("SLEEP", "0.01")
    monkeypatch.setenv("HALLUCINATE", "1")
    # events, not a race with the scorer: every call but the first case's is held until the
    # record exists (the session has finished, the prefetcher was stopped before it)
    monkeypatch.setenv("HOLD_UNTIL", str(logged.path / "record.json"))
    monkeypatch.setenv("HOLD_EXCEPT", _patient_of(logged, ZERO))
    pool = {t for t in threading.enumerate() if t.name.startswith("groundeval-")}
    result = run(logged, "--agent=agents_under_test:Sleepy", "--concurrency", "2", "-x")
    result.assert_outcomes(failed=1)
    for t in {t for t in threading.enumerate() if t.name[len("groundeval-"):].isdigit()} - pool:
        t.join(120)  # the stopped pool's threads end once their held calls do: no call can start later
        assert not t.is_alive(), "a call of the stopped run is still running"
    started = [e for e in agent_log(logged) if e["event"] == "start"]
    # two calls in flight, and the one that replaced the first as it finished; never the suite
    assert len(started) <= 3 < N + 8
    assert len(read_record(logged)["cases"]) == 1


def test_k_selects_which_calls_are_made(logged):
    run(logged, "--agent=agents_under_test:Sleepy", "--concurrency", "4", "-k", "Clarissa").assert_outcomes(passed=1)
    assert {e["patient"] for e in agent_log(logged)} == {"38f65650-9735-8541-322d-387417329eb2"}


def test_concurrency_under_xdist_gives_the_serial_record(logged, monkeypatch):
    monkeypatch.setenv("SLEEP", "0.05")
    serial = logged.runpytest_subprocess("--data-dir", "data", "--run-record", "serial.json",
                                         "--agent=agents_under_test:Sleepy", "-p", "no:cacheprovider")
    parallel = logged.runpytest_subprocess("--data-dir", "data", "--run-record", "parallel.json",
                                           "--agent=agents_under_test:Sleepy", "-n", "2", "--concurrency", "3",
                                           "-p", "no:cacheprovider")
    assert serial.ret == parallel.ret == 0
    assert comparable(read_record(logged, "serial.json")) == comparable(read_record(logged, "parallel.json"))
    assert len([e for e in agent_log(logged) if e["event"] == "start"]) == 2 * N  # no case called twice


# ---------------------------------------------------------------- retries and timeouts
def test_rate_limit_is_retried_honouring_retry_after_and_recorded(logged):
    run(logged, "--agent=agents_under_test:RateLimitedOnce").assert_outcomes(passed=N)
    for c in read_record(logged)["cases"]:
        assert c["outcome"] == "passed" and c["attempts"] == 2
        first = c["attempt_log"][0]
        assert first["status"] == 429 and first["transient"] and first["retry_in_s"] >= 0.05


def test_permanent_error_is_not_retried_and_is_an_error_not_a_failure(logged):
    run(logged, "--agent=agents_under_test:BadRequest").assert_outcomes(errors=N)  # pytest errors (issue 30 item 4)
    assert len(agent_log(logged)) == N  # one call per case
    rec = read_record(logged)
    for c in rec["cases"]:
        assert c["outcome"] == "error" and c["attempts"] == 1 and c["error"]["error_class"] == "_HTTPError"
        assert c["error"]["kind"] == "agent"
    assert rec["summary"]["extraction"]["n_errors"] == N


def test_per_call_timeout_ends_a_hanging_call(evalproject):
    # Hangs sleeps an hour: that the run ends at all, with two CallTimeout attempts, is the proof
    run(evalproject, "--agent=agents_under_test:Hangs", "--agent-timeout", "0.2", "--agent-retries", "1", "-k", ZERO)
    (case,) = read_record(evalproject)["cases"]
    assert case["outcome"] == "error" and case["error"]["error_class"] == "CallTimeout" and case["attempts"] == 2
    assert case["error"]["kind"] == "timeout" and "no answer within 0.2 s" in case["error"]["message"]


# ---------------------------------------------------------------- journal, resume, rescore
def test_sigkilled_run_resumes_to_the_uninterrupted_record(logged, monkeypatch):
    monkeypatch.setenv("SLEEP", "0.01")
    # the agent SIGKILLs the process it runs in: pytest's own (--agent-in-process; in its agent
    # host that is its case's crash, tests/agents/test_agent_host.py)
    base = ["--data-dir", "data", "-p", "no:cacheprovider", "--agent=agents_under_test:Sleepy", "--agent-in-process"]
    full = logged.runpytest_subprocess(*base, "--run-record", "full.json")
    assert full.ret == 0
    victim = sorted(SMALL_SET)[2]  # the third case in run order
    kill_id = json.loads((logged.path / "data" / f"{victim}.json").read_text())["entry"][0]["resource"]["id"]
    monkeypatch.setenv("KILL_ON", kill_id)
    killed = logged.runpytest_subprocess(*base, "--run-record", "killed.json")
    assert killed.ret == -9 or killed.ret == 137 or not (logged.path / "killed.json").exists()
    journal = logged.path / "killed.jsonl"
    finished = [x for x in map(json.loads, journal.read_text().splitlines()) if x["kind"] == "case"]
    assert [c["case_id"] for c in finished] == sorted(SMALL_SET)[:2]  # nothing finished was lost
    monkeypatch.delenv("KILL_ON")
    (logged.path / "agent.log").unlink()
    resumed = logged.runpytest_subprocess(*base, "--run-record", "resumed.json", "--resume", str(journal))
    assert resumed.ret == 0
    called = {e["patient"] for e in agent_log(logged) if e["event"] == "start"}
    assert len(called) == N - 2  # only the unfinished cases were run
    a, b = read_record(logged, "full.json"), read_record(logged, "resumed.json")
    assert comparable(a) == comparable(b)
    assert b["options"]["resumed_from"] == json.loads(journal.read_text().splitlines()[0])["run_id"]


def test_resume_refuses_another_agent(evalproject):
    run(evalproject).assert_outcomes(passed=N)
    result = run(evalproject, "--agent=agents_under_test:Correct", "--resume", "record.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*that run used agent 'baseline'*"])


def test_resume_last_reruns_changed_cases(evalproject):
    result = evalproject.runpytest("--data-dir", "data", "-p", "no:cacheprovider", "--agent=agents_under_test:Correct")
    result.assert_outcomes(passed=N)
    bundle_path = evalproject.path / "data" / f"{ZERO}.json"
    bundle_path.write_text(bundle_path.read_text() + "\n")  # same data, new content hash
    result = evalproject.runpytest("--data-dir", "data", "-p", "no:cacheprovider", "--agent=agents_under_test:Correct",
                                   "--resume", "last", "--run-record", "again.json")
    result.assert_outcomes(passed=N)
    cases = {c["case_id"]: c for c in read_record(evalproject, "again.json")["cases"]}
    assert cases[ZERO]["resumed_from"] is None  # content changed: it was run again
    assert sum(c["resumed_from"] is not None for c in cases.values()) == N - 1


MIXED = '''
import json, os
from agents_under_test import _log, _patient, _truth

class Mixed:
    """Right, except: FAIL_ON's patient gets a wrong answer (a scored failure), RAISE_ON's an
    API error (a retryable agent error), NOT_JSON_ON's prose (a parse failure)."""
    name = "mixed"

    def run(self, prompt):
        pid = _patient(prompt)
        _log("call", patient=pid)
        if os.environ.get("RAISE_ON") and os.environ["RAISE_ON"] in pid:
            raise ConnectionError("upstream API unavailable")
        if os.environ.get("NOT_JSON_ON") and os.environ["NOT_JSON_ON"] in pid:
            return "The patient takes lisinopril."
        meds = _truth(prompt)
        if os.environ.get("FAIL_ON") and os.environ["FAIL_ON"] in pid:
            meds = meds + [{"code": "198440", "display": "Acetaminophen 500 MG Oral Tablet"}]
        return json.dumps({"active_medications": meds})
'''


@pytest.fixture
def mixed(logged, monkeypatch):
    """A run of the Mixed agent: one case failed, one errored (agent error, retryable), one
    unparsable (failed), the rest passed; the agent log emptied after it."""
    logged.makepyfile(mixed_agent=MIXED)
    stems = sorted(SMALL_SET)
    ids = {role: _patient_of(logged, stem) for role, stem in zip(("fail", "raise", "prose"), stems[1:])}
    monkeypatch.setenv("FAIL_ON", ids["fail"])
    monkeypatch.setenv("RAISE_ON", ids["raise"])
    monkeypatch.setenv("NOT_JSON_ON", ids["prose"])
    result = run(logged, "--agent=mixed_agent:Mixed", "--agent-retries", "1")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    cases = {c["case_id"]: c for c in read_record(logged)["cases"]}
    by_role = {role: cases[stem] for role, stem in zip(("pass", "fail", "raise", "prose"), stems)}
    assert by_role["pass"]["outcome"] == "passed" and by_role["fail"]["outcome"] == "failed"
    assert by_role["raise"]["outcome"] == "error" and by_role["raise"]["error"]["kind"] == "agent"
    assert by_role["prose"]["outcome"] == "failed" and by_role["prose"]["score"]["reason"].startswith("parse error")
    (logged.path / "agent.log").unlink()
    return logged, ids, dict(zip(("pass", "fail", "raise", "prose"), stems))


def test_resume_keeps_finished_failures_and_runs_retryable_errors_again(mixed, monkeypatch):
    """Failed cases (wrong, unparsable) are finished: --resume keeps them without a call; the
    case that errored for a retryable reason (the API) is called again, and passes now."""
    project, ids, stems = mixed
    monkeypatch.delenv("RAISE_ON")  # the API is back
    result = run(project, "--agent=mixed_agent:Mixed", "--agent-retries", "1", "--resume", "record.json",
                 "--run-record", "resumed.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # the kept failures still fail
    assert [e["patient"] for e in agent_log(project)] == [ids["raise"]]  # one call: the errored case's
    first = {c["case_id"]: c for c in read_record(project)["cases"]}
    cases = {c["case_id"]: c for c in read_record(project, "resumed.json")["cases"]}
    for role in ("pass", "fail", "prose"):
        c = cases[stems[role]]
        assert c["resumed_from"] == read_record(project)["run_id"], role
        assert {k: v for k, v in c.items() if k != "resumed_from"} == \
            {k: v for k, v in first[stems[role]].items() if k != "resumed_from"}, role
    again = cases[stems["raise"]]
    assert again["outcome"] == "passed" and again["resumed_from"] is None and again["error"] is None


def test_resume_runs_a_finished_failure_again_when_its_case_changed(mixed, monkeypatch):
    """The same rule with the content hash: a failed case whose file changed is run again."""
    project, ids, stems = mixed
    path = project.path / "data" / f"{stems['fail']}.json"
    path.write_text(path.read_text() + "\n")  # same data, new content hash
    run(project, "--agent=mixed_agent:Mixed", "--agent-retries", "1", "--resume", "record.json",
        "--run-record", "resumed.json")
    assert {e["patient"] for e in agent_log(project)} == {ids["fail"], ids["raise"]}  # (raise: still failing)
    cases = {c["case_id"]: c for c in read_record(project, "resumed.json")["cases"]}
    assert cases[stems["fail"]]["resumed_from"] is None and cases[stems["fail"]]["outcome"] == "failed"
    assert cases[stems["prose"]]["resumed_from"] is not None


def test_rescore_of_failed_and_errored_cases_makes_no_call(mixed, monkeypatch):
    """--rescore scores the stored answers again: the wrong and the unparsable answer fail as
    before; the errored case has no answer to score and is kept as it was. No call at all."""
    project, ids, stems = mixed
    monkeypatch.delenv("RAISE_ON")  # a call now would pass: none is made
    result = project.runpytest("--data-dir", "data", "-p", "no:cacheprovider", "--agent=mixed_agent:Mixed",
                               "--rescore", "record.json", "--run-record", "rescored.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert agent_log(project) == []
    first = {c["case_id"]: c for c in read_record(project)["cases"]}
    cases = {c["case_id"]: c for c in read_record(project, "rescored.json")["cases"]}
    assert all(c["rescored_from"] == read_record(project)["run_id"] for c in cases.values())
    for role, outcome in (("pass", "passed"), ("fail", "failed"), ("prose", "failed"), ("raise", "error")):
        c = cases[stems[role]]
        assert c["outcome"] == outcome, role
        assert c["score"] == first[stems[role]]["score"] and c["raw_output"] == first[stems[role]]["raw_output"], role
    assert cases[stems["raise"]]["error"] == first[stems["raise"]]["error"]


def test_rescore_makes_no_agent_call(logged):
    run(logged, "--agent=agents_under_test:Sleepy").assert_outcomes(passed=N)
    (logged.path / "agent.log").unlink()
    first = read_record(logged)
    result = logged.runpytest("--data-dir", "data", "-p", "no:cacheprovider", "--agent=agents_under_test:Sleepy",
                              "--rescore", "record.json", "--run-record", "rescored.json")
    result.assert_outcomes(passed=N)
    assert agent_log(logged) == []
    again = read_record(logged, "rescored.json")
    assert again["options"]["rescored_from"] == first["run_id"]
    assert [c["raw_output"] for c in again["cases"]] == [c["raw_output"] for c in first["cases"]]
    assert validate_record(again) == []


def test_a_record_from_before_declared_metrics_is_rescored_as_its_refusal_says(logged):
    """compare and report refuse a record whose summary declares no specs and say to
    ``--rescore`` it: that rescore reads its cases (only) and writes a record that declares."""
    run(logged, "--agent=agents_under_test:Sleepy").assert_outcomes(passed=N)
    (logged.path / "agent.log").unlink()
    old = read_record(logged)
    for summary in old["summary"].values():
        del summary["specs"]
    (logged.path / "old.json").write_text(json.dumps(old))
    result = logged.runpytest("--data-dir", "data", "-p", "no:cacheprovider", "--agent=agents_under_test:Sleepy",
                              "--rescore", "old.json", "--run-record", "rescored.json")
    result.assert_outcomes(passed=N)
    assert agent_log(logged) == []
    again = read_record(logged, "rescored.json")
    assert again["options"]["rescored_from"] == old["run_id"]
    assert again["summary"]["extraction"]["specs"]["micro_f1"]["kind"] == "prf"
    assert validate_record(again) == []


def test_rescore_applies_the_current_scorer(evalproject):
    run(evalproject, "--agent=agents_under_test:WrongKey").assert_outcomes(failed=N)
    # a "scorer fix": a conftest that accepts the wrong key by injecting another scorer
    evalproject.makeconftest('''
import json, pytest
from pytest_groundeval.scorers.extraction import score_extraction

@pytest.fixture
def scorer():
    return lambda prediction, case: score_extraction(prediction, case.truth)
''')
    result = evalproject.runpytest("--data-dir", "data", "-p", "no:cacheprovider", "--rescore", "record.json",
                                   "--agent=claude", "--run-record", "rescored.json")  # no key needed: no call
    assert result.ret == 1  # still parse failures: the stored answers have the wrong key
    for c in read_record(evalproject, "rescored.json")["cases"]:
        assert c["outcome"] == "failed" and c["score"]["reason"].startswith("parse error") and c["rescored_from"]


# ---------------------------------------------------------------- model-call cache, usage, cost
class FakeMessages:
    calls = 0

    def create(self, model, max_tokens, messages):
        FakeMessages.calls += 1
        content = messages[0]["content"]  # the prompt, or its text blocks (prompt caching's breakpoints)
        prompt = content if isinstance(content, str) else "".join(b["text"] for b in content)
        truth = active_medications(json.JSONDecoder().raw_decode(prompt.split("Bundle:\n", 1)[1])[0], "prompt")
        text = json.dumps({"active_medications": truth})
        return SimpleNamespace(content=[SimpleNamespace(type="text", text=text)], model=model,
                               usage=SimpleNamespace(input_tokens=len(prompt) // 4, output_tokens=40))


class FakeAnthropic:
    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.messages = FakeMessages()


@pytest.fixture
def fake_claude(evalproject, monkeypatch):
    monkeypatch.setattr(anthropic, "Anthropic", FakeAnthropic)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-SECRET-never-stored")
    FakeMessages.calls = 0
    return evalproject


def test_cache_readwrite_then_a_rerun_makes_zero_calls(fake_claude):
    args = ("--agent=claude", "--model-cache", "readwrite", "--model-cache-dir", "cache")
    run(fake_claude, *args).assert_outcomes(passed=N)
    assert FakeMessages.calls == N
    first = read_record(fake_claude)
    assert first["usage"]["input_tokens"] > 0 and first["usage"]["cost_usd"] > 0
    run(fake_claude, *args).assert_outcomes(passed=N)
    assert FakeMessages.calls == N  # the second run was served entirely from the cache
    second = read_record(fake_claude)
    assert second["usage"]["input_tokens"] == 0 and second["usage"]["cost_usd"] == 0
    assert [c["raw_output"] for c in second["cases"]] == [c["raw_output"] for c in first["cases"]]
    stored = "".join(p.read_text() for p in (fake_claude.path / "cache").rglob("*.json"))
    assert len(list((fake_claude.path / "cache").rglob("*.json"))) == N
    assert "SECRET" not in stored and "sk-test" not in stored


def test_strict_cache_miss_is_an_error_naming_the_component(fake_claude):
    run(fake_claude, "--agent=claude", "--model-cache", "strict", "--model-cache-dir", "cache").assert_outcomes(errors=N)
    for c in read_record(fake_claude)["cases"]:
        assert c["outcome"] == "error" and c["error"]["error_class"] == "CacheMiss" and "is empty" in c["error"]["message"]
        assert c["attempts"] == 1  # a miss is permanent: not retried
    assert FakeMessages.calls == 0
    run(fake_claude, "--agent=claude", "--model-cache", "write", "--model-cache-dir", "cache").assert_outcomes(passed=N)
    result = run(fake_claude, "--agent=claude", "--model", "claude-sonnet-4-5", "--model-cache", "strict",
                 "--model-cache-dir", "cache")
    result.assert_outcomes(errors=N)
    for c in read_record(fake_claude)["cases"]:
        assert "closest stored entry differs in: model" in c["error"]["message"]


def test_the_cache_key_includes_the_endpoint(fake_claude, monkeypatch):
    run(fake_claude, "--agent=claude", "--model-cache", "write", "--model-cache-dir", "cache").assert_outcomes(passed=N)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/proxy")  # another server: not its answers
    result = run(fake_claude, "--agent=claude", "--model-cache", "strict", "--model-cache-dir", "cache")
    result.assert_outcomes(errors=N)
    for c in read_record(fake_claude)["cases"]:
        assert "closest stored entry differs in: params" in c["error"]["message"]


def test_strict_cache_needs_no_api_key(fake_claude, monkeypatch):
    run(fake_claude, "--agent=claude", "--model-cache", "write", "--model-cache-dir", "cache")
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    run(fake_claude, "--agent=claude", "--model-cache", "strict", "--model-cache-dir", "cache").assert_outcomes(passed=N)


def test_usage_and_cost_per_case_and_run(fake_claude):
    run(fake_claude, "--agent=claude").assert_outcomes(passed=N)
    rec = read_record(fake_claude)
    for c in rec["cases"]:
        u = c["usage"]
        assert u["output_tokens"] == 40
        assert c["cost_usd"] == pytest.approx(u["input_tokens"] * 5e-6 + 40 * 25e-6)
    assert rec["usage"]["cost_usd"] == pytest.approx(sum(c["cost_usd"] for c in rec["cases"]), abs=1e-6)
    assert rec["usage"]["prices_as_of"]


def test_max_cost_stops_launching_calls_and_says_so(fake_claude):
    result = run(fake_claude, "--agent=claude", "--max-cost", "0.000001", "--concurrency", "1",
                 "--threshold", "extraction.f1=0.0")
    result.assert_outcomes(passed=1, skipped=N - 1)  # not run (errors of kind budget): pytest skips (issue 30 item 4)
    assert FakeMessages.calls == 1
    rec = read_record(fake_claude)
    assert rec["budget"]["stopped"] and rec["budget"]["cases_not_run"] == N - 1
    assert rec["gate"]["passed"] is False and "max-cost" in rec["gate"]["reason"]
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    not_run = [c for c in rec["cases"] if c["outcome"] == "error"]
    assert len(not_run) == N - 1
    assert all(c["error"]["kind"] == "budget" and "--max-cost" in c["error"]["message"] for c in not_run)
    # not run is not "not selected": those cases stay in every denominator
    assert rec["summary"]["extraction"]["n_cases"] == N and rec["summary"]["extraction"]["n_errors"] == N - 1


def test_ctrl_c_abandons_calls_in_flight_and_keeps_finished_cases(logged, monkeypatch):
    import os
    import signal

    monkeypatch.setenv("SLEEP", "0.05")
    slow = sorted(SMALL_SET)[2]
    monkeypatch.setenv("SLOW_ON", json.loads((logged.path / "data" / f"{slow}.json").read_text())["entry"][0]["resource"]["id"])
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "--data-dir", "data", "-p", "no:cacheprovider", "--run-record", "rec.json",
         "--agent=agents_under_test:Sleepy", "--concurrency", "2"],
        cwd=logged.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    journal = logged.path / "rec.jsonl"
    deadline = time.monotonic() + 120  # only ends a broken run; start-up alone takes seconds under load
    while time.monotonic() < deadline:  # wait until the two cases before the slow one are journaled
        if journal.exists() and len(journal.read_text().splitlines()) >= 3:
            break
        time.sleep(0.05)
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    # the slow call sleeps an hour (HANG_S): had it been waited for, this would time out
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out[-2000:]
    rec = json.loads((logged.path / "rec.json").read_text())
    finished = [c["case_id"] for c in rec["cases"]]
    assert finished[:2] == sorted(SMALL_SET)[:2] and slow not in finished
    assert os.path.exists(journal)


# ---------------------------------------------------------------- the one reuse rule (store/resume.py)
def _stored(outcome: str, kind: str | None = None, content_hash: str = "sha256:a"):
    from pytest_groundeval.model import CaseResult

    fields = {"score": {"passed": outcome == "passed"}} if outcome in ("passed", "failed") else \
        {"error": {"kind": kind, "message": "m"}}
    return CaseResult(case_id="c", task="t", outcome=outcome, content_hash=content_hash, **fields)


@pytest.mark.parametrize("outcome,kind,called", [
    ("passed", None, False), ("failed", None, False), ("error", "case", False), ("error", "internal", False),
    ("error", "agent", True), ("error", "timeout", True), ("error", "budget", True), ("error", "crash", True),
    ("error", "interrupted", True),
])
def test_the_one_rule_for_whether_a_case_needs_a_call(outcome, kind, called):
    """The evaluator's plan and runner.reuse both ask store.resume: finished cases (a verdict,
    or an error another call would not change) stand on --resume while their content is the
    same; a changed case, a retryable error and a case the stored run lacks are called; --rescore
    never calls."""
    from pytest_groundeval.store.resume import needs_call, stands

    old = _stored(outcome, kind)
    assert needs_call("resume", old, "sha256:a") is called
    assert stands(old, "sha256:a") is not called
    assert needs_call("resume", old, "sha256:b") is True  # the case changed since
    assert needs_call("resume", old, None) is True  # it cannot be loaded now: it is run (and says why)
    assert needs_call("resume", None, "sha256:a") is True
    assert needs_call("rescore", old, "sha256:b") is False and needs_call("run", old, "sha256:a") is True
