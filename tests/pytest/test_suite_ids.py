"""Case ids namespaced by their suite (issue 30 item 2; ``pytest_groundeval/pytest/items.py``).

A project's own write suite collected beside the bundled write suite (the README's "use it in
your own project" layout) used to give two items of each case one id: groundeval reported "N
case(s) ran again (a plugin re-ran the item)", the run cut short and the gate failed though
every case passed, and pytest's counts disagreed with the record. Each suite's cases now have
their own ids where suites share a task; a task's only suite keeps the source's ids (what
records written before namespacing hold).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import ROOT


BUNDLED_WRITE = ROOT / "evals" / "test_write.py"
CASES = ("ibuprofen-two-tablets", "aspirin-active-daily", "ibuprofen-denied")  # the baseline misses the last
OWN_SUITE = '''
import pytest


@pytest.mark.write
def test_my_write_cases(case, agent, scorer, evaluate):
    evaluate(case, agent, scorer)
'''


def _select() -> list[str]:
    return ["-k", " or ".join(CASES)]


def _run(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict]:
    # the project's rootdir, its suites named from here (this checkout's evals/ lies outside it; in
    # an installed project the bundled suites are inside, under .venv)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--rootdir", str(pytester.path),
                                           "--run-record", "record.json",
                                           "--junitxml", "junit.xml", *args)
    return result, json.loads((pytester.path / "record.json").read_text())


def test_the_bundled_suite_and_a_project_s_own_suite_of_a_task_run_side_by_side(pytester):
    (pytester.path / "evals").mkdir()
    (pytester.path / "evals" / "test_write.py").write_text(OWN_SUITE)
    result, rec = _run(pytester, str(BUNDLED_WRITE), "evals", *_select(), "--threshold", "write.schema=1.0")
    ids = sorted(c["case_id"] for c in rec["cases"])
    assert ids == sorted([*CASES, *(f"evals.test_write/{c}" for c in CASES)])  # each case once per suite
    assert "ran again" not in result.stdout.str() and not rec.get("reruns")
    assert rec["completeness"]["cut_short"] is False and rec["completeness"]["recorded"] == 6
    assert rec["gate"]["passed"] is True  # every case has its answer's schema right
    result.assert_outcomes(passed=4, failed=2)  # pytest's counts are the record's
    assert sum(c["outcome"] == "passed" for c in rec["cases"]) == 4
    junit = (pytester.path / "junit.xml").read_text()
    classnames = set(re.findall(r'classname="([^"]*)"', junit))
    assert classnames == {"groundeval.write", "evals.test_write"}


def test_a_task_s_only_suite_keeps_the_source_s_ids(pytester):
    """A project's suite alone (or a record of it from before namespacing) has the ids its
    cases file gives; compare and --resume match such records as they are."""
    (pytester.path / "evals").mkdir()
    (pytester.path / "evals" / "test_write.py").write_text(OWN_SUITE)
    result, rec = _run(pytester, "evals", *_select())
    assert sorted(c["case_id"] for c in rec["cases"]) == sorted(CASES)
    assert set(re.findall(r'classname="([^"]*)"', (pytester.path / "junit.xml").read_text())) == {"evals.test_write"}


def test_two_eval_functions_of_a_task_in_one_file_are_a_usage_error(pytester):
    pytester.makepyfile(test_two=OWN_SUITE + OWN_SUITE.replace("test_my_write_cases", "test_again"))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--co", "-q")
    assert result.ret != pytest.ExitCode.OK  # (a collection error, as for a test marked with two tasks)
    assert "both run write cases as the suite test_two" in result.stdout.str()


def test_suite_names():
    from pytest_groundeval.pytest.items import suite_of

    assert suite_of(ROOT, BUNDLED_WRITE, "write").name == "groundeval.write"
    assert suite_of(ROOT, BUNDLED_WRITE, "write").bundled is True
    own = suite_of(Path("/proj"), Path("/proj/evals/sub/test_mine.py"), "write")
    assert (own.name, own.bundled) == ("evals.sub.test_mine", False)


def test_a_record_s_case_id_finds_its_case_in_the_source():
    """merge and --resume re-derive a stored case from the data: a namespaced id names the
    suite's case; an id without a namespace (a bundled suite's, or any record from before)
    is the source's own; an id that is neither is not found."""
    from pytest_groundeval.model import CaseRef, source_ref

    refs = {i: CaseRef(task="write", case_id=i, path=Path(f"{i}.json")) for i in ("a", "b/c")}
    assert source_ref(refs, "a") is refs["a"]
    assert source_ref(refs, "b/c") is refs["b/c"]  # a source id holding a slash: itself first
    mine = source_ref(refs, "evals.test_write/a")
    assert (mine.case_id, mine.suite, mine.source_id, mine.item_id) == ("evals.test_write/a", "evals.test_write", "a", "a")
    assert source_ref(refs, "evals.test_write/zzz") is None and source_ref(refs, "zzz") is None


def test_a_crashed_item_gets_the_id_its_worker_gave_it():
    """Under xdist the controller collects nothing: a crashed item's case is namespaced by its
    file's suite only when the workers' collected node ids hold another suite of its task."""
    from pytest_groundeval.model import CaseRef
    from pytest_groundeval.pytest.items import crashed_refs

    ref = CaseRef(task="write", case_id="a", path=Path("a.json"))
    find = lambda item_id: [ref] if item_id == "a" else []  # noqa: E731
    mine = "evals/test_write.py::test_my_write_cases[a]"
    proj = Path("/proj")  # a project's own evals/ (this checkout's evals/ is the bundled suites)
    alone = crashed_refs(proj, mine, find, [mine, "evals/test_write.py::test_my_write_cases[b]"], lambda t: {"a", "b"})
    assert [(r.case_id, r.suite) for r in alone] == [("a", "evals.test_write")]
    beside = [mine, "other/test_theirs.py::test_w[a]"]  # another file with the same cases
    shared = crashed_refs(proj, mine, find, beside, lambda t: {"a", "b"})
    assert [r.case_id for r in shared] == ["evals.test_write/a"]
    bundled = crashed_refs(ROOT, "evals/test_write.py::test_write[a]", find, beside, lambda t: {"a", "b"})
    assert [(r.case_id, r.suite) for r in bundled] == [("a", "groundeval.write")]  # (this checkout's evals/ is bundled)
    assert crashed_refs(ROOT, "evals/test_write.py::test_write", find) == []  # not a parametrized item
