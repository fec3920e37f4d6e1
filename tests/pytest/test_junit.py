"""junitxml's file says what the record says (issue 21 item 5, pytest/junit.py): an errored
case is ``<error type="groundeval.<kind>">`` (not ``<failure>``), the suite's counts follow,
and the suite carries the run's id, agent, completeness and gate as properties."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from conftest import REFS, SMALL_SET, ZERO, read_record

MIXED = f'''
import json
from pytest_groundeval.tasks.extraction import active_medications


class Mixed:
    """Raises on one patient, answers wrong on another, right on the rest."""
    name = "mixed"

    def run(self, prompt):
        bundle = json.JSONDecoder().raw_decode(prompt.split("Bundle:\\n", 1)[1])[0]
        pid = next(e["resource"]["id"] for e in bundle["entry"] if e["resource"]["resourceType"] == "Patient")
        if pid == {ZERO.split("_")[-1]!r}:
            raise ValueError("the model server went away")
        meds = active_medications(bundle, "prompt")
        if pid == {REFS.split("_")[-1]!r}:
            meds = meds[1:]
        return json.dumps({{"active_medications": meds}})
'''


def _suite(path):
    root = ET.parse(path).getroot()
    return root if root.tag == "testsuite" else root.find("testsuite")


@pytest.mark.parametrize("extra", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_an_errored_case_is_an_error_and_the_suite_says_the_run(evalproject, extra):
    evalproject.makepyfile(mixed_agent=MIXED)
    result = evalproject.runpytest_subprocess("--data-dir", "data", "--run-record", "record.json",
                                              "-p", "no:cacheprovider", "-p", "no:randomly", "--agent=mixed_agent:Mixed",
                                              "--junitxml", "junit.xml", "--threshold", "extraction.f1=0.99", *extra)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    rec = read_record(evalproject)
    outcomes = {c["case_id"]: c["outcome"] for c in rec["cases"]}
    assert outcomes[ZERO] == "error" and outcomes[REFS] == "failed"
    suite = _suite(evalproject.path / "junit.xml")
    cases = {}
    for case in suite.iter("testcase"):
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        cases[props["groundeval.case_id"]] = case
    assert set(cases) == set(SMALL_SET)
    error = cases[ZERO].find("error")
    assert error is not None and cases[ZERO].find("failure") is None
    assert error.get("type") == "groundeval.agent" and "the model server went away" in error.get("message")
    assert cases[REFS].find("failure") is not None and cases[REFS].find("error") is None
    assert (suite.get("errors"), suite.get("failures"), suite.get("tests")) == ("1", "1", str(len(SMALL_SET)))
    props = {p.get("name"): p.get("value") for p in suite.find("properties").findall("property")}
    assert props["groundeval.run_id"] == rec["run_id"] and props["groundeval.agent"] == rec["agent"]
    assert props["groundeval.recorded"] == props["groundeval.selected"] == str(len(SMALL_SET))
    assert props["groundeval.cut_short"] == "false" and props["groundeval.gate"] == "failed"


def test_a_run_without_errors_leaves_failures_as_failures(evalproject):
    result = evalproject.runpytest("--data-dir", "data", "--run-record", "record.json", "-p", "no:cacheprovider",
                                   "--agent=agents_under_test:Omitting", "--junitxml", "junit.xml")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    suite = _suite(evalproject.path / "junit.xml")
    failed = sum(c["outcome"] == "failed" for c in read_record(evalproject)["cases"])
    assert (suite.get("errors"), suite.get("failures")) == ("0", str(failed))
    props = {p.get("name"): p.get("value") for p in suite.find("properties").findall("property")}
    assert props["groundeval.gate"] == "none"
