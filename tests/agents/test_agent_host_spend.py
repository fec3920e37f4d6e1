"""What a hosted agent reports it has spent (``calls.report_spent``) reaches the harness as an
in-process agent's does: the case's usage when the attempt then fails, and ``--max-cost``.
What it reports that is not token counts is not counted (nor is anything invented)."""

from __future__ import annotations

import json

import pytest
from conftest import SMALL_SET, read_record

from pytest_groundeval.run.usage import cost_usd

SPENDERS = '''
from pytest_groundeval.run.calls import PermanentAgentError, attempt_tally, report_spent

class Spends:
    """Reports 300k input tokens of claude-sonnet-4-5 ($0.90) spent, then gives up."""
    name = "spends"
    model = "claude-sonnet-4-5"
    def run(self, prompt):
        report_spent(attempt_tally(), {"input_tokens": 300_000, "output_tokens": 0})
        raise PermanentAgentError("gave up after the model call")

class Garbles:
    """Reports something that is not token counts, then gives up."""
    name = "garbles"
    model = "claude-sonnet-4-5"
    def run(self, prompt):
        report_spent(attempt_tally(), {"input_tokens": "a lot", "output_tokens": -3})
        raise PermanentAgentError("gave up after the model call")
'''

MODES = {"agent host": (), "in-process": ("--agent-in-process",)}
PER_CASE = cost_usd("claude-sonnet-4-5", {"input_tokens": 300_000, "output_tokens": 0})


def _run(evalproject, agent: str, *args: str) -> dict:
    evalproject.makepyfile(spenders=SPENDERS)
    evalproject.runpytest_subprocess("--data-dir", "data", "--run-record", "record.json", "-p", "no:cacheprovider",
                                     "-p", "no:randomly", f"--agent=spenders:{agent}", *args)
    return read_record(evalproject)


@pytest.mark.parametrize("mode", MODES)
def test_what_a_failed_call_reported_spent_is_its_usage_and_counts_toward_the_budget(evalproject, mode):
    assert PER_CASE == pytest.approx(0.90)
    rec = _run(evalproject, "Spends", "--max-cost", "1", *MODES[mode])
    ran = [c for c in rec["cases"] if c["error"]["kind"] == "agent"]
    assert len(ran) == 2  # $0.90 spent: room for one more; then $1.80 stops the run
    assert all(c["usage"]["input_tokens"] == 300_000 and c["cost_usd"] == pytest.approx(PER_CASE) for c in ran)
    assert rec["budget"]["spent_usd"] == pytest.approx(2 * PER_CASE)
    assert rec["budget"]["stopped"] and rec["budget"]["cases_not_run"] == len(SMALL_SET) - 2
    assert {c["error"]["kind"] for c in rec["cases"] if c not in ran} == {"budget"}


@pytest.mark.parametrize("mode", MODES)
def test_what_is_not_token_counts_is_not_counted(evalproject, mode):
    rec = _run(evalproject, "Garbles", "--max-cost", "1", *MODES[mode])
    assert [c["error"]["kind"] for c in rec["cases"]] == ["agent"] * len(SMALL_SET)
    assert all(c["usage"] is None and c["cost_usd"] is None for c in rec["cases"]), json.dumps(rec["cases"][0])
