"""groundeval in someone else's project (issue 10, item 2): inert where no eval item is
collected, thresholds from the project's config only where their task ran, a test that
merely shares a marker name or a ``case`` argument left alone, cases as one JSON list."""

from __future__ import annotations

import json

import pytest
from conftest import FIXTURES, SMALL_SET, SYNTHEA, read_record

PLAIN = '''
import pytest

@pytest.fixture
def case():
    return {"dose_mg": 400}

def test_arithmetic():
    assert 1 + 1 == 2

@pytest.mark.write
def test_my_own_write_helper(case):
    """shares the write marker and takes a case of its own: not an eval item"""
    assert case["dose_mg"] == 400

@pytest.mark.extraction
@pytest.mark.parametrize("case", [1, 2])
def test_parametrized_by_me(case):
    assert case in (1, 2)
'''

INI = '''
[pytest]
groundeval_thresholds =
    write.safety=1.0
    extraction.f1=0.99
'''


def _files(pytester: pytest.Pytester) -> list[str]:
    return sorted(str(p.relative_to(pytester.path)) for p in pytester.path.rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts and p.name not in ("stdout", "stderr"))


@pytest.mark.parametrize("extra", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_a_plain_unit_test_run_is_not_touched(pytester, extra):
    pytester.makepyfile(test_plain=PLAIN)
    pytester.makefile(".ini", pytest=INI)
    before = _files(pytester)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-W", "error", *extra)
    result.assert_outcomes(passed=4)
    assert result.ret == pytest.ExitCode.OK
    assert _files(pytester) == before  # no record, no journal, no .groundeval/runs folder
    lines = [line for line in result.stdout.lines + result.stderr.lines if not line.startswith("plugins:")]
    assert not [line for line in lines if "groundeval" in line]  # no summary, no gate, no warning


def test_ini_thresholds_apply_only_to_tasks_whose_cases_ran(evalproject):
    evalproject.makefile(".ini", pytest=INI)
    result = evalproject.runpytest_subprocess("--data-dir", "data", "--run-record", "record.json",
                                              "-p", "no:cacheprovider", "--agent=agents_under_test:Correct")
    assert result.ret == pytest.ExitCode.OK
    gate = read_record(evalproject)["gate"]
    by_metric = {t["metric"]: t for t in gate["thresholds"]}
    assert by_metric["extraction.f1"]["applied"] and by_metric["extraction.f1"]["passed"]
    assert not by_metric["write.safety"]["applied"]
    assert gate["passed"]
    result.stdout.fnmatch_lines(["*PASSED (1/1 thresholds met); not applied (no case of their task ran): write.safety*"])
    # the same ini threshold, where its task ran and missed, fails the run
    wrong = evalproject.runpytest_subprocess("--data-dir", "data", "--run-record", "wrong.json",
                                             "-p", "no:cacheprovider", "--agent=agents_under_test:Hallucinating")
    assert wrong.ret == pytest.ExitCode.TESTS_FAILED
    assert read_record(evalproject, "wrong.json")["gate"]["passed"] is False


def test_a_command_line_threshold_of_a_task_that_did_not_run_is_missed(evalproject):
    result = evalproject.runpytest_subprocess("--data-dir", "data", "--run-record", "record.json",
                                              "-p", "no:cacheprovider", "--threshold", "write.safety=1.0")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*MISSED write.safety = - < threshold 1.0 (no write case ran)*"])


def test_p_no_groundeval_turns_the_plugin_off(evalproject):
    result = evalproject.runpytest_subprocess("-p", "no:groundeval", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*fixture 'case' not found*"])
    assert not (evalproject.path / ".groundeval" / "runs").exists()


WRITE_EVAL = '''
import pytest

@pytest.mark.write
def test_write(case, agent, scorer, evaluate):
    evaluate(case, agent, scorer)
'''


def test_write_cases_as_one_json_list_score_as_the_folder_does(pytester):
    """A user's own write suite: one JSON list of cases beside their test file."""
    names = ["ibuprofen-two-tablets", "aspirin-active-daily", "ibuprofen-denied"]
    cases = [json.loads((FIXTURES / "write_cases" / f"{n}.json").read_text()) for n in names]
    pytester.makepyfile(test_my_write=WRITE_EVAL)
    (pytester.path / "my_cases.json").write_text(json.dumps(cases))
    pytester.makefile(".ini", pytest="[pytest]\ngroundeval_write_cases = my_cases.json\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--run-record", "record.json")
    folder = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--run-record", "folder.json",
                                           "--write-cases", str(FIXTURES / "write_cases"),
                                           *[a for n in names for a in ("-k", n)][:0], "-k", " or ".join(names))
    listed, full = read_record(pytester), read_record(pytester, "folder.json")
    assert sorted(c["case_id"] for c in listed["cases"]) == sorted(names)
    outcome = {c["case_id"]: (c["outcome"], c["score"]["metrics"]) for c in full["cases"]}
    assert {c["case_id"]: (c["outcome"], c["score"]["metrics"]) for c in listed["cases"]} == outcome
    assert result.ret == folder.ret


def test_the_bundled_suites_cases_are_the_default(pytester):
    """With no --data-dir and no ini key, an extraction eval runs the packaged bundles."""
    pytester.makepyfile(test_mine='''
import pytest

@pytest.mark.extraction
def test_extraction(case, agent, scorer, evaluate):
    evaluate(case, agent, scorer)
''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--co", "-q", "--disable-warnings")
    ids = {line.split("[", 1)[1].rstrip("]").encode().decode("unicode_escape")
           for line in result.stdout.lines if "test_extraction[" in line}
    assert ids == {p.name.removesuffix(".json") for p in SYNTHEA.glob("*.json")}
    assert len(ids) == 45 and set(SMALL_SET) <= ids
    assert not (pytester.path / ".groundeval" / "runs").exists()  # collecting only records nothing


BAD_USAGE = '''
import json
from pytest_groundeval.tasks.extraction import active_medications

class BadUsage:
    name = "bad-usage"
    def run(self, prompt):
        truth = active_medications(json.JSONDecoder().raw_decode(prompt.split("Bundle:\\n", 1)[1])[0], "p")
        return {"text": json.dumps({"active_medications": truth}), "usage": {"input_tokens": "n/a"}}
'''


def test_bad_agent_usage_is_dropped_with_a_warning_on_each_case_and_in_the_terminal(evalproject):
    evalproject.makepyfile(bad_usage=BAD_USAGE)
    result = evalproject.runpytest_subprocess("--data-dir", "data", "--run-record", "record.json",
                                              "-p", "no:cacheprovider", "--agent=bad_usage:BadUsage")
    assert result.ret == pytest.ExitCode.OK
    rec = read_record(evalproject)
    assert len(rec["cases"]) == len(SMALL_SET)
    for c in rec["cases"]:
        assert c["outcome"] == "passed" and c.get("usage") is None
        assert c["warnings"] and c["warnings"][0].startswith("usage dropped")
    result.stdout.fnmatch_lines([f"groundeval: {len(SMALL_SET)} cases with warnings*usage dropped*"])


MODULES_PROBE = '''
import json, sys

def pytest_unconfigure(config):
    names = sorted(m for m in sys.modules if m.split(".")[0] in ("pytest_groundeval", "pydantic", "numpy", "orjson"))
    with open("modules.json", "w") as fh:
        json.dump(names, fh)
'''

# the plugin, its package, its stash keys (pytest only), the options and the task declarations
LIGHT = {"pytest_groundeval", "pytest_groundeval.pytest", "pytest_groundeval.pytest.plugin",
         "pytest_groundeval.pytest.keys", "pytest_groundeval.pytest.options", "pytest_groundeval.tasks",
         "pytest_groundeval.tasks.source"}


def test_a_run_with_no_eval_item_imports_nothing_more_of_groundeval(pytester):
    """Start-up cost: options and markers come from the task declarations; settings, the
    evaluator, the reporter and pydantic are imported only when an eval item is collected."""
    pytester.makepyfile(test_plain=PLAIN)
    pytester.makeconftest(MODULES_PROBE)
    pytester.makefile(".ini", pytest=INI + "addopts = -p no:langsmith_plugin -p no:anyio -p no:hypothesispytest\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=4)
    imported = set(json.loads((pytester.path / "modules.json").read_text()))
    assert imported == LIGHT, imported - LIGHT
    # ... and an eval run does import it all (the probe sees it)
    pytester.makepyfile(test_evals='''
import pytest

@pytest.mark.write
def test_write(case, agent, scorer, evaluate):
    evaluate(case, agent, scorer)
''')
    pytester.runpytest_subprocess("-p", "no:cacheprovider", "-k", "aspirin-active-daily", "--run-record", "r.json")
    imported = set(json.loads((pytester.path / "modules.json").read_text()))
    assert {"pydantic", "pytest_groundeval.pytest.evaluator", "pytest_groundeval.pytest.reporter"} <= imported


@pytest.mark.parametrize("extra", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_junitxml_carries_each_case_s_outcome_and_metrics_as_properties(evalproject, extra):
    import xml.etree.ElementTree as ET

    result = evalproject.runpytest_subprocess("--data-dir", "data", "--run-record", "record.json", "-p",
                                              "no:cacheprovider", "--agent=agents_under_test:Hallucinating",
                                              "--junitxml", "out.xml", *extra)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    rec = {c["case_id"]: c for c in read_record(evalproject)["cases"]}
    cases = ET.parse(evalproject.path / "out.xml").getroot().iter("testcase")
    seen = 0
    for tc in cases:
        props = {p.get("name"): p.get("value") for p in tc.iter("property")}
        c = rec[props["groundeval.case_id"]]
        assert props["groundeval.task"] == "extraction" and props["groundeval.outcome"] == c["outcome"]
        for name, value in c["score"]["metrics"].items():
            assert float(props[f"groundeval.{name}"]) == pytest.approx(value)
        seen += 1
    assert seen == len(SMALL_SET)
