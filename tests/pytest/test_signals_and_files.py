"""Signals and files (issue 16 item 5): SIGTERM (a CI cancel) writes the record of what
finished; a journal that cannot be written mid-run stops the run cleanly (exit 3, the paths
named); two runs on one ``--run-record`` path are refused; a pytest-timeout kill is a
``timeout``; a crashed xdist worker's neighbours are not called crashed.

Every run that is signalled or killed is a fresh process in its own process group (as a CI
runner starts it). The tests wait on events (a file the agent writes when it is where the
test wants it, lines of the journal), never on wall-clock margins.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from agent_snippets import PRELUDE
from conftest import AGENTS, EVAL_FILE, SMALL_SET, SYNTHEA

FAST_INI = "[pytest]\naddopts = -p no:langsmith_plugin -p no:anyio -p no:hypothesispytest -p no:randomly\n"
ORDER = sorted(SMALL_SET)  # the run order (collection order: file names)
ARGS = ("--data-dir", "data", "--run-record", "record.json", "-p", "no:cacheprovider")
MODES = {"serial": (), "xdist": ("-n", "2")}

# An agent that answers right, except for the patient BLOCK_PATIENT: there it waits until the
# journal holds WAIT_FOR cases (bounded: under xdist its own worker may hold cases after it),
# writes READY (the test's event) and then blocks until it is interrupted.
SLOW = PRELUDE + '''
class Blocks:
    name = "blocks"
    def run(self, prompt):
        bundle = json.JSONDecoder().raw_decode(prompt.split("Bundle:\\n", 1)[1])[0]
        pid = next(e["resource"]["id"] for e in bundle["entry"] if e["resource"]["resourceType"] == "Patient")
        if pid == os.environ.get("BLOCK_PATIENT"):
            deadline = time.monotonic() + 10
            while _journaled() < int(os.environ.get("WAIT_FOR", "0")) and time.monotonic() < deadline:
                time.sleep(0.01)
            with open(os.environ["READY"], "w") as fh:
                fh.write(str(os.getpid()))
            while True:
                time.sleep(3600)
        return json.dumps({"active_medications": active_medications(bundle, "prompt")})
'''


def _patient_id(stem: str) -> str:
    bundle = json.loads((SYNTHEA / f"{stem}.json").read_text())
    return next(e["resource"]["id"] for e in bundle["entry"] if e["resource"]["resourceType"] == "Patient")


def _project(path: Path, **files: str) -> Path:
    (path / "test_evals.py").write_text(EVAL_FILE)
    (path / "agents_under_test.py").write_text(AGENTS)
    (path / "pytest.ini").write_text(FAST_INI)
    for name, text in files.items():
        (path / f"{name}.py").write_text(text)
    (path / "data").mkdir()
    for stem in SMALL_SET:
        shutil.copy(SYNTHEA / f"{stem}.json", path / "data" / f"{stem}.json")
    return path


def _cases(journal: Path) -> list[dict]:
    out = []
    for line in journal.read_text().splitlines():
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        if obj.get("kind") == "case":
            out.append(obj)
    return out


def _start(path: Path, *args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "pytest", *ARGS, *args], cwd=path, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            env={**os.environ, **(env or {})})


def _wait_for(proc: subprocess.Popen, path: Path, what: str = "the agent's ready file") -> None:
    deadline = time.monotonic() + 90  # a hang guard only: the event comes long before
    while not path.exists():
        if proc.poll() is not None:
            pytest.fail(f"the run ended (rc {proc.returncode}) before {what}: {proc.stdout.read()[-3000:]}")
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail(f"no {what} within 90 s")
        time.sleep(0.01)


def _run(path: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", *ARGS, *args], cwd=path, capture_output=True, text=True,
                          timeout=120, env={**os.environ, **(env or {})})


# ---------------------------------------------------------------- SIGTERM
@pytest.mark.parametrize("mode", list(MODES))
def test_sigterm_to_the_process_group_writes_the_record_of_what_finished(tmp_path, mode):
    path = _project(tmp_path, slow=SLOW)
    blocked = ORDER[2]  # serial: two cases finish before it, one after
    ready = path / "ready"
    env = {"BLOCK_PATIENT": _patient_id(blocked), "READY": str(ready), "JOURNAL": str(path / "record.jsonl"),
           "WAIT_FOR": "2" if mode == "serial" else "3"}
    proc = _start(path, "--agent=slow:Blocks", "--threshold", "extraction.f1=0.0", *MODES[mode], env=env)
    try:
        _wait_for(proc, ready)
        journaled = [c["case_id"] for c in _cases(path / "record.jsonl")]
        os.killpg(proc.pid, signal.SIGTERM)  # what a CI cancel sends: the controller and the workers
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out[-3000:]
    rec = json.loads((path / "record.json").read_text())
    recorded = [c["case_id"] for c in rec["cases"]]
    assert set(journaled) <= set(recorded) and blocked not in recorded, (journaled, recorded)
    if mode == "serial":
        assert recorded == ORDER[:2]
    assert all(c["outcome"] == "passed" for c in rec["cases"])
    comp = rec["completeness"]
    assert comp["cut_short"] and "terminated (SIGTERM)" in comp["reason"], comp
    assert "crash" not in comp["reason"] and comp["recorded"] == len(recorded)
    assert rec["gate"]["passed"] is False  # a cut-short run never passes a gate
    assert (path / "record.jsonl").exists()  # cut short: the journal is kept beside the record
    assert "groundeval: the run was cut short: terminated (SIGTERM)" in out


# ---------------------------------------------------------------- one run per --run-record path
def test_a_second_run_on_the_same_record_path_is_a_usage_error_until_the_first_ends(tmp_path):
    path = _project(tmp_path, slow=SLOW)
    ready = path / "ready"
    env = {"BLOCK_PATIENT": _patient_id(ORDER[1]), "READY": str(ready), "JOURNAL": str(path / "record.jsonl"),
           "WAIT_FOR": "1"}
    first = _start(path, "--agent=slow:Blocks", env=env)
    try:
        _wait_for(first, ready)  # the first run is running (one case journaled, the next in its call)
        before = (path / "record.jsonl").read_bytes()
        second = _run(path, "--agent=agents_under_test:Correct")
        assert second.returncode == pytest.ExitCode.USAGE_ERROR, second.stdout[-3000:] + second.stderr[-3000:]
        assert "/record.json: another groundeval run" in second.stderr, second.stderr  # the path as fixed at start
        assert f"pid {first.pid}" in second.stderr, second.stderr
        # and it touched nothing of the first run's
        assert (path / "record.jsonl").read_bytes() == before and not (path / "record.json").exists()
        # another path is fine meanwhile
        other = subprocess.run([sys.executable, "-m", "pytest", "--data-dir", "data", "--run-record", "other.json",
                                "-p", "no:cacheprovider", "--agent=agents_under_test:Correct"], cwd=path,
                               capture_output=True, text=True, timeout=120)
        assert other.returncode == pytest.ExitCode.OK, other.stdout[-3000:]
        os.killpg(first.pid, signal.SIGTERM)
        first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
    assert first.returncode == pytest.ExitCode.INTERRUPTED
    assert not (path / "record.jsonl.lock").exists()  # released and removed at the end
    again = _run(path, "--agent=agents_under_test:Correct")
    assert again.returncode == pytest.ExitCode.OK, again.stdout[-3000:] + again.stderr[-3000:]
    assert len(json.loads((path / "record.json").read_text())["cases"]) == len(ORDER)


def test_a_lock_left_by_a_killed_run_is_not_an_error(tmp_path):
    path = _project(tmp_path, slow=SLOW)
    ready = path / "ready"
    env = {"BLOCK_PATIENT": _patient_id(ORDER[0]), "READY": str(ready), "JOURNAL": str(path / "record.jsonl")}
    first = _start(path, "--agent=slow:Blocks", "-n", "2", env=env)
    try:
        _wait_for(first, ready)
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # no clean-up runs: the lock file stays, its flock goes
        first.wait()
    assert (path / "record.jsonl.lock").read_text().strip() == str(first.pid)
    again = _run(path, "--agent=agents_under_test:Correct")
    assert again.returncode == pytest.ExitCode.OK, again.stdout[-3000:] + again.stderr[-3000:]
    assert not (path / "record.jsonl.lock").exists()


def test_record_paths_that_share_a_journal_share_the_lock(tmp_path):
    from pytest_groundeval.store.lock import acquire

    held = acquire(tmp_path / "x.json")
    assert held is not None
    try:
        for other in ("x.json", "x.txt", "x.jsonl"):
            with pytest.raises(pytest.UsageError, match=f"pid {os.getpid()}"):
                acquire(tmp_path / other)
        distinct = acquire(tmp_path / "y.json")
        assert distinct is not None
        distinct.release()
    finally:
        held.release()
    freed = acquire(tmp_path / "x.txt")  # released: free again
    assert freed is not None
    freed.release()


# ---------------------------------------------------------------- the journal cannot be written mid-run
# The agent, called for the third case, caps the size of any file this process may write at the
# journal's current size (RLIMIT_FSIZE; Python ignores SIGXFSZ, so the write fails with EFBIG):
# the third case's journal line fails for real, in the middle of the run, and so does the record.
FILLS = '''
import json, os, resource
from pytest_groundeval.tasks.extraction import active_medications

class FillsTheDisk:
    name = "fills-the-disk"
    def run(self, prompt):
        bundle = json.JSONDecoder().raw_decode(prompt.split("Bundle:\\n", 1)[1])[0]
        pid = next(e["resource"]["id"] for e in bundle["entry"] if e["resource"]["resourceType"] == "Patient")
        if pid == os.environ["FULL_ON"]:
            size = os.path.getsize(os.environ["JOURNAL"])
            resource.setrlimit(resource.RLIMIT_FSIZE, (size + 10, resource.RLIM_INFINITY))
        return json.dumps({"active_medications": active_medications(bundle, "prompt")})
'''


def test_a_journal_write_failure_mid_run_stops_with_exit_3_and_names_both_paths(tmp_path):
    path = _project(tmp_path, fills=FILLS)
    env = {"FULL_ON": _patient_id(ORDER[2]), "JOURNAL": str(path / "record.jsonl")}
    # the agent caps this process's file size: it must run in it (--agent-in-process)
    done = _run(path, "--agent=fills:FillsTheDisk", "--agent-in-process", env=env)
    out = done.stdout + done.stderr
    assert done.returncode == pytest.ExitCode.INTERNAL_ERROR, out[-3000:]
    assert "INTERNALERROR" not in out and "Traceback" not in out, out[-3000:]
    journal, record = path / "record.jsonl", path / "record.json"  # absolute: fixed when the session started
    assert f"could not write the journal {journal}: File too large" in out, out[-3000:]
    assert f"could not write the run record {record}: File too large" in out, out[-3000:]
    assert f"the journal {journal} holds only the cases before that failed" in out, out[-3000:]
    assert journal.is_absolute() and record.is_absolute()
    assert not record.exists()
    assert [c["case_id"] for c in _cases(journal)] == ORDER[:2]  # whole lines; the torn one is skipped
    # space again: --resume runs the two cases that have no whole line
    resumed = _run(path, "--agent=fills:FillsTheDisk", "--agent-in-process", "--resume", "record.jsonl",
                   env={**env, "FULL_ON": ""})
    assert resumed.returncode == pytest.ExitCode.OK, resumed.stdout[-3000:]
    rec = json.loads(record.read_text())
    assert [c["case_id"] for c in rec["cases"]] == ORDER and not rec["completeness"]["cut_short"]
    assert sum(c["resumed_from"] is not None for c in rec["cases"]) == 2


@pytest.mark.parametrize("mode", list(MODES))
def test_a_full_disk_under_the_journal_stops_the_run_and_the_record_keeps_what_finished(evalproject, monkeypatch,
                                                                                        mode):
    """ENOSPC on the journal's third case line (every write of journal.py's after it fails too), in
    an in-process run: the run stops at once (exit 3), the record holds the cases that finished
    (the one whose line failed too: it was reported) and says why it was cut short."""
    import errno

    import pytest_groundeval.store.journal as journal_mod

    writes = []

    class FullDisk:
        def __getattr__(self, name):
            return getattr(os, name)

        @staticmethod
        def write(fd, data):
            writes.append(len(data))
            if len(writes) >= 5:  # the header, the task's specs, two cases, then the disk is full
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return os.write(fd, data)

    monkeypatch.setattr(journal_mod, "os", FullDisk())
    evalproject.makefile(".ini", pytest=FAST_INI)
    result = evalproject.runpytest("--data-dir", "data", "--run-record", "record.json", "-p", "no:cacheprovider",
                                   "--agent=agents_under_test:Correct", "--threshold", "extraction.f1=0.0",
                                   *MODES[mode])
    assert result.ret == pytest.ExitCode.INTERNAL_ERROR
    journal = evalproject.path / "record.jsonl"  # absolute: fixed when the session started
    rec = json.loads((evalproject.path / "record.json").read_text())
    assert len(rec["cases"]) == 3 and all(c["outcome"] == "passed" for c in rec["cases"])
    comp = rec["completeness"]
    assert comp["cut_short"] and comp["recorded"] == 3, comp
    assert f"stopped: could not write the journal {journal}: No space left on device" in comp["reason"], comp
    if mode == "serial":
        assert "1 selected case has no result" in comp["reason"], comp  # (issue 30 item 5: plurals)
        assert [c["case_id"] for c in rec["cases"]] == ORDER[:3]
    assert rec["gate"]["passed"] is False
    on_disk = _cases(evalproject.path / journal)  # the kept cut-short journal: what reached the disk
    assert len(on_disk) == 2 and {c["case_id"] for c in on_disk} < {c["case_id"] for c in rec["cases"]}
    result.stdout.fnmatch_lines([f"*could not write the journal {journal}: No space left on device*"])
    assert "INTERNALERROR" not in result.stdout.str()


# ---------------------------------------------------------------- a crashed worker's neighbours
# Two calls in flight on one worker (--concurrency 8 -n 2 keeps a worker's current and next item's
# calls running; xdist's load scheduling sends 4 cases to 2 workers as two runs of 2 consecutive
# cases). The first case's call is still running when the second case's call segfaults the process
# (the first time only).
BESIDE = '''
import ctypes, json, os, time
from pytest_groundeval.tasks.extraction import active_medications

def _wait(path):
    deadline = time.monotonic() + 20
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.01)

class CrashBeside:
    name = "crash-beside"
    def run(self, prompt):
        bundle = json.JSONDecoder().raw_decode(prompt.split("Bundle:\\n", 1)[1])[0]
        pid = next(e["resource"]["id"] for e in bundle["entry"] if e["resource"]["resourceType"] == "Patient")
        marks = os.environ["MARKS"]
        with open(os.path.join(marks, "calls.log"), "a") as fh:
            fh.write(pid + "\\n")
        if pid == os.environ["CRASH_PATIENT"] and not os.path.exists(os.path.join(marks, "crashed")):
            open(os.path.join(marks, "crashed"), "w").close()
            _wait(os.path.join(marks, "beside-running"))
            ctypes.string_at(0)  # SIGSEGV, on this call's thread
        if pid == os.environ["BESIDE_PATIENT"] and not os.path.exists(os.path.join(marks, "beside-running")):
            _wait(os.path.join(marks, "crashed"))
            open(os.path.join(marks, "beside-running"), "w").close()
            time.sleep(30)  # still in flight when the process dies
        return json.dumps({"active_medications": active_medications(bundle, "prompt")})
'''


def test_only_the_case_whose_call_crashed_the_worker_is_a_crash(tmp_path):
    path = _project(tmp_path, beside=BESIDE)
    beside, crasher = ORDER[0], ORDER[1]  # the worker's current item, and its next one
    env = {"MARKS": str(path), "CRASH_PATIENT": _patient_id(crasher), "BESIDE_PATIENT": _patient_id(beside)}
    # a worker's crash: the agent runs in the worker (--agent-in-process; in its agent host the
    # crash is its case's alone, tests/agents/test_agent_host.py)
    done = _run(path, "--agent=beside:CrashBeside", "--agent-in-process", "--concurrency", "8", "-n", "2", env=env)
    out = done.stdout + done.stderr
    assert (path / "crashed").exists() and (path / "beside-running").exists(), out[-3000:]
    rec = json.loads((path / "record.json").read_text())
    cases = {c["case_id"]: c for c in rec["cases"]}
    assert sorted(cases) == ORDER, out[-3000:]
    # the case beside the crash was in flight, not at fault: interrupted, to be run again
    assert cases[beside]["outcome"] == "error" and cases[beside]["error"]["kind"] == "interrupted", cases[beside]
    assert cases[beside]["error"]["not_run"] is True  # not run to the end: a pytest skip
    assert f"crashed (Fatal Python error: Segmentation fault) in the agent call for extraction:{crasher}" \
        in cases[beside]["error"]["message"]
    # the crashing case was handed to a replacement worker by xdist and ran there (it crashes once)
    assert cases[crasher]["outcome"] == "passed", cases[crasher]
    assert all(cases[c]["outcome"] == "passed" for c in ORDER[2:])
    assert not any(c["error"] and c["error"]["kind"] == "crash" for c in rec["cases"])
    comp = rec["completeness"]
    assert comp["cut_short"] and "1 case interrupted by another case's crash" in comp["reason"], comp
    assert comp["selected"] == comp["recorded"] == len(ORDER)
    assert "Segmentation fault" in done.stderr  # the worker's fault dump still reaches the terminal
    # --resume runs only the interrupted case
    (path / "calls.log").unlink()
    resumed = _run(path, "--agent=beside:CrashBeside", "--agent-in-process", "--resume", "record.json", env=env)
    assert resumed.returncode == pytest.ExitCode.OK, resumed.stdout[-3000:]
    assert (path / "calls.log").read_text().split() == [_patient_id(beside)]


ALWAYS_CRASHES = '''
import ctypes

class AlwaysCrashes:
    name = "always-crashes"
    def run(self, prompt):
        ctypes.string_at(0)
'''


def test_when_every_case_crashes_the_record_still_knows_what_was_selected(tmp_path):
    path = _project(tmp_path, always=ALWAYS_CRASHES)
    done = _run(path, "--agent=always:AlwaysCrashes", "--agent-in-process", "--concurrency", "8", "-n", "2",
                "--max-worker-restart", "2")  # workers that crash: the agent in them
    out = done.stdout + done.stderr
    rec = json.loads((path / "record.json").read_text())
    comp = rec["completeness"]
    assert comp["selected"] == len(ORDER), comp  # not "unknown"
    assert comp["cut_short"] and "a worker crashed" in comp["reason"], comp
    missing = len(ORDER) - comp["recorded"]
    assert ((f"{missing} selected case has no result" if missing == 1 else f"{missing} selected cases have no result")
            in comp["reason"]) == (missing > 0), comp
    crashed = [c for c in rec["cases"] if c["error"]["kind"] == "crash"]
    assert crashed and all("Segmentation fault" in c["error"]["message"] for c in crashed), out[-3000:]
    assert done.returncode != pytest.ExitCode.OK


# ---------------------------------------------------------------- pytest-timeout
HANGS_ON = '''
import json, os, time
from pytest_groundeval.tasks.extraction import active_medications

class HangsOn:
    """Right answers, except that the call for HANG_ON never returns (until the process ends)."""
    name = "hangs-on"
    def run(self, prompt):
        bundle = json.JSONDecoder().raw_decode(prompt.split("Bundle:\\n", 1)[1])[0]
        pid = next(e["resource"]["id"] for e in bundle["entry"] if e["resource"]["resourceType"] == "Patient")
        with open(os.environ["CALLS"], "a") as fh:
            fh.write(pid + "\\n")
        if pid == os.environ.get("HANG_ON"):
            while True:
                time.sleep(3600)
        return json.dumps({"active_medications": active_medications(bundle, "prompt")})
'''
# generous: every other case must finish well inside it on a busy machine; the hang never ends
TIMEOUT = "10"


@pytest.mark.parametrize("method", ["signal", "thread"])
@pytest.mark.parametrize("mode", list(MODES))
def test_a_pytest_timeout_kill_is_a_timeout_of_one_line_and_resume_runs_it_again(tmp_path, method, mode):
    path = _project(tmp_path, hangs=HANGS_ON)
    hung = ORDER[1]
    env = {"HANG_ON": _patient_id(hung), "CALLS": str(path / "calls.log")}
    done = _run(path, "--agent=hangs:HangsOn", "--timeout", TIMEOUT, "--timeout-method", method, *MODES[mode],
                env=env)
    out = done.stdout + done.stderr
    message = f"pytest-timeout: the test ran longer than its timeout of {TIMEOUT} s ({method} method)"
    if method == "thread" and mode == "serial":
        # pytest-timeout ends the only process (os._exit): no record; the journal holds the cases
        # before it and the timed-out case, written as the timer fired
        assert done.returncode == 1 and not (path / "record.json").exists(), out[-3000:]
        cases = _cases(path / "record.jsonl")
        assert [c["case_id"] for c in cases] == ORDER[:2], out[-3000:]
        timed_out = cases[1]
        source = "record.jsonl"
    else:
        assert done.returncode == pytest.ExitCode.TESTS_FAILED, out[-3000:]
        rec = json.loads((path / "record.json").read_text())
        cases = {c["case_id"]: c for c in rec["cases"]}
        assert sorted(cases) == ORDER, out[-3000:]
        assert all(cases[c]["outcome"] == "passed" for c in ORDER if c != hung)
        timed_out = cases[hung]
        assert "timeout" in rec["completeness"]["reason"] if rec["completeness"]["cut_short"] else True
        source = "record.json"
    assert timed_out["case_id"] == hung and timed_out["outcome"] == "error", timed_out
    assert timed_out["error"]["kind"] == "timeout", timed_out["error"]
    assert timed_out["error"]["message"].startswith(message) and "\n" not in timed_out["error"]["message"]
    assert timed_out["error"]["traceback"] is None
    # --resume runs the timed-out case again (and what never ran), nothing else
    (path / "calls.log").unlink()
    resumed = _run(path, "--agent=hangs:HangsOn", "--resume", source, env={**env, "HANG_ON": ""})
    assert resumed.returncode == pytest.ExitCode.OK, resumed.stdout[-3000:]
    rec = json.loads((path / "record.json").read_text())
    assert all(c["outcome"] == "passed" for c in rec["cases"]) and len(rec["cases"]) == len(ORDER)
    again = set((path / "calls.log").read_text().split())
    expected = {_patient_id(c) for c in (ORDER[1:] if source == "record.jsonl" else [hung])}
    assert again == expected


def test_the_lock_leaves_no_folder_behind_where_nothing_was_written(tmp_path):
    from pytest_groundeval.store.lock import acquire

    lock = acquire(tmp_path / "new" / "deeper" / "record.json")
    assert lock is not None and (tmp_path / "new" / "deeper" / "record.jsonl.lock").exists()
    lock.release()
    assert not (tmp_path / "new").exists()


def test_a_sigterm_while_the_session_finishes_does_not_stop_the_record(tmp_path):
    """Every case ran; the SIGTERM comes as the session finishes (a conftest sends it to its own
    process from sessionfinish, before the record is written): the record is written whole."""
    path = _project(tmp_path)
    (path / "conftest.py").write_text(
        "import os, signal, pytest\n\n"
        "@pytest.hookimpl(wrapper=True)\n"
        "def pytest_sessionfinish(session):\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    return (yield)\n")
    done = _run(path, "--agent=agents_under_test:Correct")
    assert done.returncode == pytest.ExitCode.OK, done.stdout[-3000:] + done.stderr[-3000:]
    rec = json.loads((path / "record.json").read_text())
    assert len(rec["cases"]) == len(ORDER) and not rec["completeness"]["cut_short"]
