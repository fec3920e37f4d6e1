"""Secrets never leave a case: a canary key the agent echoes into its answer and into an
exception is absent from the record, the journal and the terminal; so are URL credentials."""

from __future__ import annotations

import pytest
from pytest_groundeval.redact import MARK, redact_json, redact_text, secret_values

CANARY = "sk-canary-0123456789abcdef"

LEAKY = '''
import json, os
from pytest_groundeval.tasks.extraction import active_medications

class Leaky:
    """Echoes its key into every answer; raises with it (and a credentialed URL) on the
    zero-medication patient."""
    name = "leaky"
    def run(self, prompt):
        key = os.environ["MY_SERVICE_API_KEY"]
        bundle = json.loads(prompt.split("Bundle:\\n", 1)[1])
        truth = active_medications(bundle, "prompt")
        if not truth:
            raise RuntimeError(f"auth failed for key {key} at https://bob:hunter2@example.test/v1")
        return f"my key is {key}\\n" + json.dumps({"active_medications": truth})
'''


def test_the_redaction_step():
    env = {"MY_SERVICE_API_KEY": CANARY, "GITHUB_TOKEN": "ghp_abcdefgh1234", "SHORT_API_KEY": "abc",
           "LANGSMITH_API_KEY": "lsv2_pt_zzzzzzzzzzzz", "HOME": "/root"}
    assert set(secret_values(env)) == {CANARY, "ghp_abcdefgh1234", "lsv2_pt_zzzzzzzzzzzz"}
    assert redact_text(f"x {CANARY} y", env) == f"x {MARK} y"
    assert redact_text("see https://bob:hunter2@example.test/v1 now", env) == f"see https://{MARK}@example.test/v1 now"
    assert redact_text("https://example.test/v1 and /root", env) == "https://example.test/v1 and /root"
    assert redact_json(f'{{"a": "{CANARY}", "u": "http://u:p@h"}}'.encode(), env) == (
        f'{{"a": "{MARK}", "u": "http://{MARK}@h"}}'.encode())


@pytest.mark.parametrize("extra", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_a_canary_key_reaches_no_sink(evalproject, monkeypatch, extra):
    monkeypatch.setenv("MY_SERVICE_API_KEY", CANARY)
    evalproject.makepyfile(leaky=LEAKY)
    result = evalproject.runpytest_subprocess("--data-dir", "data", "--run-record", "record.json",
                                              "-p", "no:cacheprovider", "--agent=leaky:Leaky", "-x", *extra)
    # the first case (zero medications) errors: -x stops the run, so the journal is kept too
    assert result.ret in (pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.INTERRUPTED)  # xdist's -x: 2
    sinks = {"record": (evalproject.path / "record.json").read_text(),
             "journal": (evalproject.path / "record.jsonl").read_text(),
             "terminal": result.stdout.str() + result.stderr.str()}
    for name, text in sinks.items():
        assert CANARY not in text, name
        assert "hunter2" not in text, name
    assert MARK in sinks["record"] and "auth failed for key [redacted]" in sinks["record"]
    assert f"https://{MARK}@example.test/v1" in sinks["record"]
    assert "auth failed for key [redacted]" in sinks["terminal"]
