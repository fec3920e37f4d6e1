"""A fault matrix: agents that return the wrong kind of thing, huge or broken text, raise,
or are interrupted; serial, with --concurrency 8 and under -n 2. Every case is in the record
once, with the right outcome and error kind, and the run ends with the right exit status."""

from __future__ import annotations

import json

import pytest
from conftest import SMALL_SET, read_record

from pytest_groundeval.run.bounds import MAX_TEXT

FAULTY = '''
import json, os
from pytest_groundeval.tasks.extraction import active_medications

def _truth(prompt):
    return active_medications(json.JSONDecoder().raw_decode(prompt.split("Bundle:\\n", 1)[1])[0], "prompt")

class ReturnsNone:
    name = "returns-none"
    def run(self, prompt):
        return None

class ReturnsBytes:
    name = "returns-bytes"
    def run(self, prompt):
        return json.dumps({"active_medications": _truth(prompt)}).encode()

class Garbage:
    name = "garbage"
    def run(self, prompt):
        return "\\x00\\x01 {{{ ]]] not json \\ufffd" * 100

class Huge:
    """Five megabytes of prose around a right answer: beyond the 1 MiB an answer may be
    (bounds.py), an agent error, its first MiB kept and marked."""
    name = "huge"
    def run(self, prompt):
        return "x" * 5_000_000 + json.dumps({"active_medications": _truth(prompt)})

class RaisesDeep:
    name = "raises-deep"
    def run(self, prompt):
        return self._helper(prompt)
    def _helper(self, prompt):
        raise ValueError("model said no: " + "!" * 10_000)
'''

MATRIX = [
    ("ReturnsNone", {"errors": len(SMALL_SET)}, "error", "agent", "TypeError"),
    ("ReturnsBytes", {"errors": len(SMALL_SET)}, "error", "agent", "TypeError"),
    ("Garbage", {"failed": len(SMALL_SET)}, "failed", None, None),
    ("Huge", {"errors": len(SMALL_SET)}, "error", "agent", None),
    ("RaisesDeep", {"errors": len(SMALL_SET)}, "error", "agent", "ValueError"),
]
MODES = {"serial": (), "concurrency-8": ("--concurrency", "8"), "xdist": ("-n", "2")}


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("agent, outcomes, outcome, kind, error_class", MATRIX, ids=[m[0] for m in MATRIX])
def test_fault_matrix(evalproject, mode, agent, outcomes, outcome, kind, error_class):
    evalproject.makepyfile(faulty=FAULTY)
    result = evalproject.runpytest_subprocess("--data-dir", "data", "--run-record", "record.json",
                                              "-p", "no:cacheprovider", f"--agent=faulty:{agent}", *MODES[mode])
    result.assert_outcomes(**outcomes)
    assert result.ret == (pytest.ExitCode.OK if outcome == "passed" else pytest.ExitCode.TESTS_FAILED)
    rec = read_record(evalproject)
    assert sorted(c["case_id"] for c in rec["cases"]) == sorted(SMALL_SET)  # each once
    for c in rec["cases"]:
        assert c["outcome"] == outcome, c
        if kind is not None:
            assert c["error"]["kind"] == kind and c["error"]["error_class"] == error_class
        if agent == "RaisesDeep":  # the agent's own traceback is kept, the message truncated
            assert "in _helper" in c["error"]["traceback"] and "faulty.py" in c["error"]["traceback"]
            assert len(c["error"]["message"]) < 2200 and "more characters]" in c["error"]["message"]
        if agent == "Huge":
            assert len(c["raw_output"]) < MAX_TEXT + 100 and c["raw_output"].endswith("more characters]")
            assert "output bounds" in c["error"]["message"] and c["truncated"][0].startswith("raw_output: 500")
        if agent == "Garbage":
            assert c["score"]["reason"].startswith("parse error")
    assert not rec["completeness"]["cut_short"]


INTERRUPTING = '''
import json
from pytest_groundeval.tasks.extraction import active_medications

class Interrupts:
    """Answers the first two cases, then the user presses Ctrl-C inside the third call."""
    name = "interrupts"
    calls = 0
    def run(self, prompt):
        Interrupts.calls += 1
        if Interrupts.calls == 3:
            raise KeyboardInterrupt
        return json.dumps({"active_medications": active_medications(json.JSONDecoder().raw_decode(prompt.split("Bundle:\\n", 1)[1])[0], "p")})
'''


def test_keyboard_interrupt_inside_the_agent_keeps_what_finished_and_says_cut_short(evalproject):
    evalproject.makepyfile(interrupting=INTERRUPTING)
    result = evalproject.runpytest_subprocess("--data-dir", "data", "--run-record", "record.json",
                                              "-p", "no:cacheprovider", "--agent=interrupting:Interrupts",
                                              "--threshold", "extraction.f1=0.0")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    rec = read_record(evalproject)
    assert len(rec["cases"]) == 2 and all(c["outcome"] == "passed" for c in rec["cases"])
    assert rec["completeness"]["cut_short"] and "interrupted" in rec["completeness"]["reason"]
    assert rec["gate"]["passed"] is False
    assert (evalproject.path / "record.jsonl").exists()  # cut short: the journal is kept
    assert json.loads((evalproject.path / "record.jsonl").read_text().splitlines()[0])["kind"] == "header"
