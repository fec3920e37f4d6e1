"""An agent a conftest injects (an ``agent`` fixture) runs in an agent host too, as
``--agent=module:Class`` does (agents/host.py ``moved``): its object is moved there by
reference (its class imported there, its state pickled), or a fixture returns its spec
(``"module:Class"``). One that cannot be moved errors each case with what to do. Real pytest
runs, real host processes."""

from __future__ import annotations

import pytest
from conftest import SMALL_SET, ZERO, read_record
from test_agent_host import CHEATS

INJECTING = '''
import os, threading, pytest
from agents_under_test import Correct
from cheats import TruthEraser

class Honest(Correct):
    """Answers right; notes the process it runs in."""
    name = "honest"
    def __init__(self, tag):
        self.tag = tag  # state the host gets with the object
    def run(self, prompt):
        with open("agent_pids.txt", "a") as fh:
            fh.write(f"{os.getpid()} {self.tag}\\n")
        return super().run(prompt)

class Locked(Honest):
    """Holds a lock: its state cannot be moved."""
    def __init__(self):
        super().__init__("locked")
        self.lock = threading.Lock()

def _scope(fixture_name, config):
    return os.environ.get("SCOPE", "session")

@pytest.fixture(scope=_scope)
def agent():
    with open("fixture_pid.txt", "w") as fh:
        fh.write(str(os.getpid()))
    which = os.environ["WHICH"]
    if ":" in which:
        return which  # a spec: built in the host
    return {"honest": lambda: Honest("tagged"), "eraser": TruthEraser, "locked": Locked}[which]()
'''


@pytest.fixture
def injecting(evalproject):
    evalproject.makepyfile(cheats=CHEATS)
    evalproject.makeconftest(INJECTING)
    return evalproject


def _run(p, which: str, *args: str, scope: str = "session") -> dict:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WHICH", which)
        mp.setenv("SCOPE", scope)
        p.runpytest_subprocess("--data-dir", "data", "--run-record", "record.json", "-p", "no:cacheprovider", *args)
    return read_record(p)


def _pids(p) -> tuple[int, set[tuple[int, str]]]:
    fixture = int((p.path / "fixture_pid.txt").read_text())
    agents = {(int(pid), tag) for pid, tag in (line.split() for line in (p.path / "agent_pids.txt").read_text().splitlines())}
    (p.path / "agent_pids.txt").unlink()
    return fixture, agents


def _scores(rec: dict) -> dict:
    return {c["case_id"]: (c["outcome"], c["predicted"], c["score"]) for c in rec["cases"]}


def test_an_honest_conftest_agent_runs_in_the_host_and_scores_as_in_process(injecting):
    hosted = _run(injecting, "honest")
    fixture, agents = _pids(injecting)
    assert len(agents) == 1 and fixture not in {pid for pid, _ in agents}  # one host, not pytest's process
    assert {tag for _, tag in agents} == {"tagged"}  # its state went with it
    assert hosted["agent"] == "honest (conftest:Honest)"
    trusted = _run(injecting, "honest", "--agent-in-process")
    fixture, agents = _pids(injecting)
    assert {pid for pid, _ in agents} == {fixture}
    assert _scores(hosted) == _scores(trusted) and all(c["outcome"] == "passed" for c in hosted["cases"])
    assert trusted["agent"] == hosted["agent"]
    _run(injecting, "honest", scope="function")  # a new object each case, the same state: one host
    fixture, agents = _pids(injecting)
    assert len(agents) == 1 and fixture not in {pid for pid, _ in agents}


def test_a_conftest_agent_in_the_host_cannot_reach_its_truth(injecting):
    rec = _run(injecting, "eraser")
    cases = {c["case_id"]: c for c in rec["cases"]}
    assert cases[ZERO]["outcome"] == "passed"  # (its truth is [] indeed)
    assert all(c["outcome"] == "failed" and c["ground_truth"] for k, c in cases.items() if k != ZERO)
    trusted = _run(injecting, "eraser", "--agent-in-process")  # in pytest's process it is trusted: it can
    assert all(c["outcome"] == "passed" for c in trusted["cases"])


def test_a_conftest_agent_that_cannot_be_moved_errors_each_case_with_what_to_do(injecting):
    rec = _run(injecting, "locked")
    assert [c["error"]["kind"] for c in rec["cases"]] == ["agent"] * len(SMALL_SET)
    message = rec["cases"][0]["error"]["message"]
    assert "'agent' fixture's agent (conftest.Locked) cannot be moved to the agent host" in message
    assert "lock" in message and "--agent-in-process" in message and "'module:Class'" in message
    assert not (injecting.path / "agent_pids.txt").exists()
    trusted = _run(injecting, "locked", "--agent-in-process")
    assert all(c["outcome"] == "passed" for c in trusted["cases"])


def test_a_fixture_may_return_an_agents_spec_built_in_the_host(injecting):
    rec = _run(injecting, "agents_under_test:Correct")
    assert all(c["outcome"] == "passed" for c in rec["cases"])
    assert rec["agent"] == "correct (agents_under_test:Correct)"
