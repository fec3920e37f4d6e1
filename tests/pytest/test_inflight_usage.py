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

import pytest
from test_fault_matrix_more import KILL_ARGS, KILL_SET, MODES, _kill_project, _patient_id, _pytest

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


@pytest.mark.parametrize("mode", ["serial", "xdist"])
def test_a_killed_attempts_reported_spend_is_counted_on_resume(tmp_path, mode):
    path = _kill_project(tmp_path)
    (path / "spender.py").write_text(SPENDER)
    order = sorted(KILL_SET)
    held = order[1]  # the first case finishes and is journalled; the second is killed mid-attempt
    proc = subprocess.Popen([sys.executable, "-m", "pytest", *KILL_ARGS, *ARGS, *MODES[mode]], cwd=path,
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
    lost = usage["unfinished"]
    # serially the held case alone was unfinished; under -n a worker's prefetched next case may
    # also have been answered (paid: its one call counted) or be in its call at the kill
    k, m = lost["cases"], lost["input_tokens"] // CALL["input_tokens"]  # unfinished cases, calls reported
    assert (k, m, lost["attempts_cut"]) == (1, 1, 1) if mode == "serial" else 1 <= m <= k <= 4
    assert 1 <= lost["attempts_cut"] <= k
    assert lost == {"cases": k, "attempts_cut": lost["attempts_cut"], "input_tokens": m * CALL["input_tokens"],
                    "output_tokens": m * CALL["output_tokens"], "cost_usd": round(m * cost_usd(MODEL, CALL), 8)}
    assert (usage["input_tokens"], usage["output_tokens"]) == ((n + m) * CALL["input_tokens"],
                                                               (n + m) * CALL["output_tokens"])
    assert abs(usage["cost_usd"] - (n + m) * cost_usd(MODEL, CALL)) < 1e-6
    assert sum(c["usage"]["input_tokens"] for c in rec["cases"]) == n * CALL["input_tokens"]  # per case: as before
    assert not list(path.glob("record.jsonl.spent-*"))  # folded into the complete record


def test_unfinished_usage_adds_up_and_an_unpriced_part_leaves_its_cost_unknown():
    """What ``groundeval merge`` does with resumed shards (``usage.add_unfinished``)."""
    from pytest_groundeval.model import RunUsage, UnfinishedUsage
    from pytest_groundeval.run.usage import add_unfinished

    base = RunUsage(input_tokens=10, output_tokens=1, cost_usd=0.5, cases_priced=1, cases_unpriced=0,
                    prices_as_of="2026-01-01")
    assert add_unfinished(base, None) == base
    one = UnfinishedUsage(cases=1, attempts_cut=1, input_tokens=100, output_tokens=10, cost_usd=0.25)
    two = add_unfinished(add_unfinished(base, one), one)
    assert (two.input_tokens, two.output_tokens, two.cost_usd) == (210, 21, 1.0)
    assert two.unfinished == UnfinishedUsage(cases=2, attempts_cut=2, input_tokens=200, output_tokens=20, cost_usd=0.5)
    unpriced = add_unfinished(two, one.model_copy(update={"cost_usd": None}))
    assert unpriced.unfinished.cost_usd is None and unpriced.input_tokens == 310  # tokens counted, cost unknown
