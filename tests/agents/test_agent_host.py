"""The agent host (agents/host.py): a ``module:Class`` agent runs in a process of its own, so
it cannot reach its case's truth, patch the harness, end the session by ending its process,
leave processes behind, or keep a CI cancel from stopping the run. Real pytest runs, real
processes; each test is one the in-process agent (``--agent-in-process``, today's behaviour
before the host) fails."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from agent_snippets import PRELUDE
from conftest import SMALL_SET, ZERO, read_record

RUN = ("--data-dir", "data", "--run-record", "record.json", "-p", "no:cacheprovider")

CHEATS = PRELUDE + '''
import gc, signal, subprocess, sys, threading

def _cases():
    from pytest_groundeval.model import Case
    found = [o for o in gc.get_objects() if isinstance(o, Case)]
    frame = sys._getframe()
    while frame is not None:
        found += [v for v in list(frame.f_locals.values()) if isinstance(v, Case)]
        frame = frame.f_back
    return found

class TruthEraser:
    """Finds its case (frames, gc) and sets its truth to [], then answers []."""
    name = "truth-eraser"
    def run(self, prompt):
        for case in _cases():
            object.__setattr__(case, "truth", [])
        return json.dumps({"active_medications": []})

class GatePatcher:
    """Replaces the reporter's gate with one that always passes, then answers []."""
    name = "gate-patcher"
    def run(self, prompt):
        import pytest_groundeval.pytest.reporter as reporter
        real = reporter.run_gate
        def passing(*args, **kwargs):
            gate = real(*args, **kwargs)
            return None if gate is None else gate.model_copy(update={"passed": True, "reason": None})
        reporter.run_gate = passing
        return json.dumps({"active_medications": []})

class Exits:
    """os._exit(0) in the call of one case (ZERO); answers the others right."""
    name = "exits"
    def run(self, prompt):
        if os.environ["CRASH_ON"] in prompt:
            os._exit(0)
        return json.dumps({"active_medications": active_medications(json.JSONDecoder().raw_decode(prompt.split("Bundle:\\n", 1)[1])[0], "p")})

class LateExit(Exits):
    """Prefetched (--concurrency 2): the call of the last case ends the process once the
    other cases are journaled, so the running case is another one's."""
    name = "late-exit"
    def run(self, prompt):
        if os.environ["CRASH_ON"] in prompt:
            while _journaled() < int(os.environ["OTHERS"]):
                threading.Event().wait(0.01)
            os._exit(0)
        return Exits.run(self, prompt)

class SegfaultBeside:
    """Under --concurrency 2: the call of one case (CRASH_ON) waits until another case's call is
    in flight (its marker), then segfaults the host; the other call waits for the crash, the
    first time only (then answers right)."""
    name = "segfault-beside"
    def run(self, prompt):
        import ctypes, pathlib
        folder = pathlib.Path(os.environ["MARKS"])
        if os.environ["CRASH_ON"] in prompt:
            if (folder / "crashed").exists():
                return Exits.run(self, prompt)
            while not (folder / "beside").exists():
                threading.Event().wait(0.01)
            (folder / "crashed").write_text("")
            ctypes.string_at(0)
        if not (folder / "crashed").exists() and not (folder / "beside").exists():
            (folder / "beside").write_text("")
            threading.Event().wait(3600)  # in flight until the host dies
        return Exits.run(self, prompt)

class Spawns:
    """Starts a sleeper in a session of its own (setsid) and a double-forked one."""
    name = "spawns"
    def run(self, prompt):
        setsid = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"], start_new_session=True)
        shell = subprocess.run(["sh", "-c", "sleep 3600 > /dev/null 2>&1 & echo $!"], capture_output=True, text=True)
        with open(os.environ["PIDS"], "a") as fh:
            fh.write(f"{setsid.pid} {shell.stdout.strip()}\\n")
        return json.dumps({"active_medications": []})

class SpawnsPerCase:
    """Declares per-case processes: each call finds the sleeper the previous call left, then
    starts one of its own in a session of its own."""
    name = "spawns-per-case"
    per_case_processes = True
    def run(self, prompt):
        path = os.environ["PIDS"]
        before = open(path).read().split() if os.path.exists(path) else []
        alive = [p for p in before if os.path.exists(f"/proc/{p}") and open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[0] not in "ZX"]
        with open(os.environ["ALIVE"], "a") as fh:
            fh.write(f"{len(before)} {len(alive)}\\n")
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"], start_new_session=True)
        with open(path, "a") as fh:
            fh.write(f"{child.pid}\\n")
        return json.dumps({"active_medications": []})

class BusyHost:
    """Answers (nothing) at once, in a host a thread of its own keeps busy (it holds the GIL but
    at Python's switch interval): each round trip waits for the GIL there, the call itself does not."""
    name = "busy-host"
    def __init__(self):
        def spin():
            while True:
                sum(range(1000))
        threading.Thread(target=spin, daemon=True).start()
    def run(self, prompt):
        return json.dumps({"active_medications": []})

class SlowButSure(BusyHost):
    """As BusyHost, but the call itself takes 5 ms: not an instant agent."""
    name = "slow-but-sure"
    def run(self, prompt):
        time.sleep(0.005)
        return super().run(prompt)

class IgnoresSigterm:
    """Ignores SIGTERM, says so on a FIFO, and hangs."""
    name = "ignores-sigterm"
    def run(self, prompt):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # (the agent's thread: the main one, as in pytest's)
        with open(os.environ["FIFO"], "w") as fh:
            fh.write(f"{os.getpid()}\\n")
        threading.Event().wait(3600)
'''


@pytest.fixture
def cheats(evalproject):
    evalproject.makepyfile(cheats=CHEATS)
    return evalproject


def _cases(pytester) -> dict[str, dict]:
    return {c["case_id"]: c for c in read_record(pytester)["cases"]}


def _dead(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        return True


def _kill(pids) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.parametrize("agent, concurrency", [("BusyHost", 1), ("SlowButSure", 8)])
def test_an_instant_agent_is_told_by_its_own_time_in_the_host_not_the_round_trip(cheats, agent, concurrency):
    """The prefetcher runs an instant agent's calls inline (threads only add GIL hand-offs): it
    tells one by how long its first calls took. A hosted agent's call is timed in its host, so
    a round trip that waits there (a busy host, the queue behind 8 calls at once) does not make
    an instant agent look slow; an agent whose call itself takes 5 ms keeps its 8 calls in flight.
    The record's ``concurrency`` says which (1: run inline)."""
    result = cheats.runpytest_subprocess(*RUN, f"--agent=cheats:{agent}", "--concurrency", "8", "--repeat", "3")
    record = read_record(cheats)
    assert len(record["cases"]) == 12 and all(c["attempts"] == 1 and c["error"] is None for c in record["cases"])
    assert record["options"]["concurrency"] == concurrency, result.stdout.str()[-2000:]


def test_an_agent_that_erases_its_truth_still_fails(cheats):
    result = cheats.runpytest_subprocess(*RUN, "--agent=cheats:TruthEraser", "--threshold", "extraction.f1=0.9")
    cases = _cases(cheats)
    assert cases[ZERO]["outcome"] == "passed"  # its truth really is []
    wrong = [c for c in cases.values() if c["case_id"] != ZERO]
    assert wrong and all(c["outcome"] == "failed" and c["ground_truth"] for c in wrong)
    assert read_record(cheats)["gate"]["passed"] is False and result.ret != 0


def test_in_process_the_agent_is_trusted_with_its_own_truth(cheats):
    """--agent-in-process gives that guarantee up (documented): the same agent passes."""
    cheats.runpytest_subprocess(*RUN, "--agent=cheats:TruthEraser", "--agent-in-process")
    assert all(c["outcome"] == "passed" for c in _cases(cheats).values())


def test_an_agent_that_patches_the_gate_cannot_pass_it(cheats):
    result = cheats.runpytest_subprocess(*RUN, "--agent=cheats:GatePatcher", "--threshold", "extraction.f1=0.9")
    gate = read_record(cheats)["gate"]
    assert gate["passed"] is False and result.ret != 0
    result.stdout.fnmatch_lines(["*gate*FAILED*"])


def test_os_exit_in_a_serial_agent_is_that_cases_crash_and_the_session_goes_on(cheats, monkeypatch):
    monkeypatch.setenv("CRASH_ON", ZERO.split("_")[0])
    result = cheats.runpytest_subprocess(*RUN, "--agent=cheats:Exits", "--threshold", "extraction.f1=0.5",
                                         "--junitxml", "junit.xml")
    cases = _cases(cheats)
    assert sorted(cases) == sorted(SMALL_SET)
    crashed = cases[ZERO]
    assert crashed["outcome"] == "error" and crashed["error"]["kind"] == "crash"
    assert "exited with status 0" in crashed["error"]["message"]
    assert all(c["outcome"] == "passed" for c in cases.values() if c is not crashed)  # a new host answered them
    assert read_record(cheats)["gate"] is not None and (cheats.path / "junit.xml").exists()
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_a_prefetched_call_that_ends_its_process_is_its_own_cases_crash(cheats, monkeypatch):
    last = sorted(SMALL_SET)[-1]
    monkeypatch.setenv("CRASH_ON", last.split("_")[0])
    monkeypatch.setenv("OTHERS", str(len(SMALL_SET) - 1))
    monkeypatch.setenv("JOURNAL", str(cheats.path / "record.jsonl"))
    result = cheats.runpytest_subprocess(*RUN, "--agent=cheats:LateExit", "--concurrency", "2")
    cases = _cases(cheats)
    assert cases[last]["error"]["kind"] == "crash"
    assert all(c["outcome"] == "passed" for k, c in cases.items() if k != last)
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_a_call_beside_the_one_that_crashed_the_host_is_run_again_not_blamed(cheats, monkeypatch, tmp_path):
    """faulthandler names the thread the fatal signal hit; its call's case is the crash, the call
    in flight beside it is interrupted and run again on a new host (it passes)."""
    monkeypatch.setenv("CRASH_ON", ZERO.split("_")[0])
    monkeypatch.setenv("MARKS", str(tmp_path))
    result = cheats.runpytest_subprocess(*RUN, "--agent=cheats:SegfaultBeside", "--concurrency", "2",
                                         "-p", "no:randomly")
    cases = _cases(cheats)
    assert (tmp_path / "beside").exists() and (tmp_path / "crashed").exists()  # both were in flight
    assert cases[ZERO]["outcome"] == "error" and cases[ZERO]["error"]["kind"] == "crash", cases[ZERO]
    assert "killed by SIGSEGV" in cases[ZERO]["error"]["message"]
    assert all(c["outcome"] == "passed" for k, c in cases.items() if k != ZERO), \
        {k: (c["outcome"], c["error"]) for k, c in cases.items()}
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_nothing_an_agent_started_outlives_the_session(cheats, monkeypatch):
    pids_file = cheats.path / "pids.txt"
    monkeypatch.setenv("PIDS", str(pids_file))
    try:
        cheats.runpytest_subprocess(*RUN, "--agent=cheats:Spawns")
        pids = [int(p) for line in pids_file.read_text().splitlines() for p in line.split()]
        assert len(pids) == 2 * len(SMALL_SET)
        assert [p for p in pids if not _dead(p)] == []
    finally:
        _kill(int(p) for p in pids_file.read_text().split()) if pids_file.exists() else None


def test_an_agent_that_declares_per_case_processes_loses_them_at_each_case_end(cheats, monkeypatch):
    pids_file, alive_file = cheats.path / "pids.txt", cheats.path / "alive.txt"
    monkeypatch.setenv("PIDS", str(pids_file))
    monkeypatch.setenv("ALIVE", str(alive_file))
    try:
        cheats.runpytest_subprocess(*RUN, "--agent=cheats:SpawnsPerCase")
        seen = [tuple(map(int, line.split())) for line in alive_file.read_text().splitlines()]
        assert seen == [(k, 0) for k in range(len(SMALL_SET))]  # each call saw none of the earlier sleepers alive
        assert [p for p in map(int, pids_file.read_text().split()) if not _dead(p)] == []
    finally:
        _kill(int(p) for p in pids_file.read_text().split()) if pids_file.exists() else None


def test_sigterm_stops_the_run_when_the_agent_ignores_it(cheats, tmp_path):
    fifo = tmp_path / "started"
    os.mkfifo(fifo)
    env = dict(os.environ, FIFO=str(fifo), PYTEST_ADDOPTS=os.environ.get("PYTEST_ADDOPTS", ""))
    proc = subprocess.Popen([sys.executable, "-m", "pytest", *RUN, "--agent=cheats:IgnoresSigterm"],
                            cwd=cheats.path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    agent_pid = None
    try:
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(reader) as fh:
            ready, _, _ = select.select([fh], [], [], 120)
            assert ready, "the agent never started"
            agent_pid = int(fh.readline())
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)  # it stops: the agent's own SIGTERM handling is not the harness's
        assert proc.returncode == pytest.ExitCode.INTERRUPTED
        assert _dead(agent_pid)
        assert read_record(cheats)["completeness"]["cut_short"]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if agent_pid is not None:
            _kill([agent_pid])
