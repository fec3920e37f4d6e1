"""A session killed (SIGKILL) while a case's agent is mid-attempt: what that attempt had
already reported spending is counted in the resumed record's ``usage`` (``store/spent.py``),
with the attempt the kill cut counted as such (its spend after its last report is unknown)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from test_fault_matrix_more import KILL_ARGS, KILL_SET, _kill_project, _patient_id, _pytest

from pytest_groundeval.run.usage import cost_usd

MODEL = "claude-sonnet-5"
CALL = {"input_tokens": 1000, "output_tokens": 100}  # what each model call of the agent costs
SPENDER = f'''
import json, os, time
from pytest_groundeval.run.calls import attempt_tally, report_spent
from pytest_groundeval.model import AgentOutput
from pytest_groundeval.tasks.extraction import active_medications

CALL = {CALL!r}

class Spender:
    """Right answers, one reported model call each; the HOLD patient's attempt reports its
    call, then blocks (until the test kills the session)."""
    name = "spender"
    model = {MODEL!r}
    def run(self, prompt):
        bundle = json.JSONDecoder().raw_decode(prompt.split("Bundle:\\n", 1)[1])[0]
        pid = next(e["resource"]["id"] for e in bundle["entry"] if e["resource"]["resourceType"] == "Patient")
        if pid == os.environ.get("HOLD"):
            report_spent(attempt_tally(), CALL)  # the first call answered and paid; the next never returns
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                time.sleep(0.01)
        return AgentOutput(text=json.dumps({{"active_medications": active_medications(bundle, "prompt")}}),
                           usage=dict(CALL), model={MODEL!r})
'''
ARGS = ("--agent=spender:Spender",)


def _spent_lines(path: Path) -> list[dict]:
    lines = []
    for f in path.glob("record.jsonl.spent-*"):
        for raw in f.read_bytes().splitlines():
            try:
                lines.append(json.loads(raw))
            except ValueError:
                continue  # a line being written
    return lines


def test_a_killed_attempts_reported_spend_is_counted_on_resume(tmp_path):
    path = _kill_project(tmp_path)
    (path / "spender.py").write_text(SPENDER)
    order = sorted(KILL_SET)
    held = order[1]  # the first case finishes and is journalled; the second is killed mid-attempt
    proc = subprocess.Popen([sys.executable, "-m", "pytest", *KILL_ARGS, *ARGS], cwd=path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            env={**os.environ, "HOLD": _patient_id(held)})
    try:
        deadline = time.monotonic() + 120  # only a broken run waits this out
        # the event: the held case's reported call is written beside the journal
        while not any(x["kind"] == "spent" and x["case"][1] == held and not x["done"] for x in _spent_lines(path)):
            assert proc.poll() is None, f"the run ended (rc {proc.returncode}) before the held call was reported"
            assert time.monotonic() < deadline, "the held call was not reported within 120 s"
            time.sleep(0.01)
        assert proc.poll() is None
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL

    resumed = _pytest(path, "--resume", "record.jsonl", *ARGS, env={"HOLD": ""})
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    rec = json.loads((path / "record.json").read_text())
    usage = rec["usage"]
    n = len(KILL_SET)  # each case's one answered call, the held one's re-run included
    assert usage["unfinished"] == {"cases": 1, "attempts_cut": 1, "input_tokens": CALL["input_tokens"],
                                   "output_tokens": CALL["output_tokens"], "cost_usd": cost_usd(MODEL, CALL)}
    assert (usage["input_tokens"], usage["output_tokens"]) == ((n + 1) * CALL["input_tokens"],
                                                               (n + 1) * CALL["output_tokens"])
    assert abs(usage["cost_usd"] - (n + 1) * cost_usd(MODEL, CALL)) < 1e-6
    assert sum(c["usage"]["input_tokens"] for c in rec["cases"]) == n * CALL["input_tokens"]  # per case: as before
    assert not list(path.glob("record.jsonl.spent-*"))  # folded into the complete record
