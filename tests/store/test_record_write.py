"""The run record is streamed into its file one case at a time (``store.write``: ``record_chunks``),
and the bytes are exactly those of ``record_bytes`` over the whole record: the file equals
the indented dump of its own content, for passing, failing and errored cases, an empty
answer, a secret the agent echoes (redacted in every piece), under xdist too. And a case's
data travels on its report only until every hook has read it."""

from __future__ import annotations

import orjson
import pytest
from conftest import SMALL_SET

from pytest_groundeval.model import RunRecord
from pytest_groundeval.store.files import record_bytes
from pytest_groundeval.store.redact import MARK

SECRET = "sk-ant-api03-" + "Q" * 40

ECHO = f'''
import json, os


class Echo:
    name = "echo"

    def run(self, prompt):
        if "Alena861" in prompt:
            raise RuntimeError("boom " + os.environ["ANTHROPIC_API_KEY"])
        return "key " + os.environ["ANTHROPIC_API_KEY"] + " " + json.dumps({{"active_medications": []}})
'''


def _same_bytes(path) -> dict:
    blob = path.read_bytes()
    record = orjson.loads(blob)
    assert record_bytes(RunRecord.model_validate(record)) == blob  # what writing the whole record at once gives
    return record


@pytest.mark.parametrize("extra", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_the_streamed_record_is_the_whole_record_dump(evalproject, monkeypatch, extra):
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    evalproject.makepyfile(echo_agent=ECHO)
    result = evalproject.runpytest("--data-dir", "data", "--run-record", "record.json", "-p", "no:cacheprovider",
                                   "--agent=echo_agent:Echo", *extra)
    assert result.ret == 1
    record = _same_bytes(evalproject.path / "record.json")
    assert len(record["cases"]) == len(SMALL_SET)
    assert {c["outcome"] for c in record["cases"]} >= {"error"}
    text = (evalproject.path / "record.json").read_text()
    assert SECRET not in text and MARK in text


def test_a_passing_run_and_one_case(evalproject):
    result = evalproject.runpytest("--data-dir", "data", "--run-record", "record.json", "-p", "no:cacheprovider",
                                   "--agent=agents_under_test:Correct", "-k", SMALL_SET[0][:12])
    result.assert_outcomes(passed=1)
    assert len(_same_bytes(evalproject.path / "record.json")["cases"]) == 1


REPORT_PROBE = '''
import pytest

seen = []


@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report):
    if getattr(report, "groundeval", None) is not None:
        seen.append(report)


def pytest_terminal_summary(terminalreporter):
    kept = sum(1 for r in seen if "groundeval" in r.__dict__)
    terminalreporter.write_line(f"probe: {len(seen)} case reports seen, {kept} still carry their data")
'''


def test_a_case_travels_on_its_report_only_until_every_hook_read_it(evalproject):
    evalproject.makeconftest(REPORT_PROBE)
    result = evalproject.runpytest("--data-dir", "data", "--run-record", "record.json", "-p", "no:cacheprovider",
                                   "--agent=agents_under_test:Correct")
    result.assert_outcomes(passed=len(SMALL_SET))
    result.stdout.fnmatch_lines([f"probe: {len(SMALL_SET)} case reports seen, 0 still carry their data"])
